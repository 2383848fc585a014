"""Optimizer-step kernels, synthesised from the parameter list (torch-free).

The step is not traced through torch.optim: fused optimizers have no meta kernels, LAMB is not
in torch, and repeated blocks would need expanding. Instead each optimizer's kernel sequence is
written out from its PyTorch (or apex) implementation, with exact bytes per element:

* ``foreach`` (PyTorch default on CUDA): one multi-tensor kernel series per `_foreach_*` call;
* ``fused``: one multi-tensor kernel series for the whole update (`_fused_adamw_`, apex FusedLAMB);
* ``forloop``: one kernel per parameter per elementwise op.

Multi-tensor kernels process 65,536-element chunks, up to 320 blocks and a depth-dependent number
of tensors per launch (PyTorch ATen/native/cuda/MultiTensorApply.cuh: depth_to_max_tensors =
{110, 64, 48, 36, 30}).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from whichgpu.errors import UnknownNameError
from whichgpu.workload.trace import Op

CHUNK = 65536
MAX_BLOCKS = 320
MAX_TENSORS = {1: 110, 2: 64, 3: 48, 4: 36, 5: 30}

OPTIMIZERS = ("sgd", "adamw", "adam", "lamb", "rmsprop", "adafactor", "none")
IMPLS = ("foreach", "fused", "forloop")


@dataclass(frozen=True)
class ParamGroup:
    """Trainable parameters with the same dtype (sizes already include block repetition)."""

    numels: tuple[int, ...]
    elem_bytes: float  # bytes per parameter element as stored
    grad_bytes: float  # bytes per gradient element


@dataclass(frozen=True)
class OptimizerSpec:
    name: str
    impl: str = "foreach"
    state_bytes: float = 4.0  # bytes per element of each optimizer state (FP32 moments by default)


# (kernel name, depth, reads: states of "p","g","m","v","t" per element, writes)
_Step = tuple[str, int, tuple[str, ...], tuple[str, ...], float]


def _squared_average(avg: str, decay: str) -> list[_Step]:
    """The moving average of the squared gradient and its square root, the denominator of the
    update: the same three foreach calls in _multi_tensor_adamw (exp_avg_sq, beta2) and
    _multi_tensor_rmsprop (square_avg, alpha)."""
    return [
        (f"_foreach_mul_({avg}, {decay})", 1, ("v",), ("v",), 1),
        (f"_foreach_addcmul_({avg}, grad, grad, 1-{decay})", 2, ("v", "g"), ("v",), 3),
        (f"_foreach_sqrt({avg})", 2, ("v",), ("t",), 2),
    ]


# FLOPs per element are rough (a handful per element): optimizer steps are memory-bound.
PLANS: dict[str, list[_Step]] = {
    # torch.optim.SGD (_multi_tensor_sgd) with momentum and weight decay
    "sgd": [
        ("_foreach_add_(grad, param, alpha=wd)", 2, ("g", "p"), ("g",), 2),
        ("_foreach_mul_(buf, momentum)", 1, ("m",), ("m",), 1),
        ("_foreach_add_(buf, grad)", 2, ("m", "g"), ("m",), 1),
        ("_foreach_add_(param, buf, alpha=-lr)", 2, ("p", "m"), ("p",), 2),
    ],
    # torch.optim.AdamW (_multi_tensor_adamw); Adam is the same without the decoupled decay
    "adamw": [
        ("_foreach_mul_(param, 1-lr*wd)", 1, ("p",), ("p",), 1),
        ("_foreach_lerp_(exp_avg, grad, 1-beta1)", 2, ("m", "g"), ("m",), 3),
        *_squared_average("exp_avg_sq", "beta2"),
        ("_foreach_div_(denom, bias_correction2_sqrt)", 1, ("t",), ("t",), 1),
        ("_foreach_add_(denom, eps)", 1, ("t",), ("t",), 1),
        ("_foreach_addcdiv_(param, exp_avg, denom, -step_size)", 3, ("p", "m", "t"), ("p",), 3),
    ],
    "rmsprop": [
        *_squared_average("square_avg", "alpha"),
        ("_foreach_add_(avg, eps)", 1, ("t",), ("t",), 1),
        ("_foreach_mul_(buf, momentum)", 1, ("m",), ("m",), 1),
        ("_foreach_addcdiv_(buf, grad, avg)", 3, ("m", "g", "t"), ("m",), 2),
        ("_foreach_add_(param, buf, alpha=-lr)", 2, ("p", "m"), ("p",), 2),
    ],
    # Adafactor (factored second moment): row/col statistics are tiny; the update reads p, g.
    "adafactor": [
        ("adafactor_stats(grad**2 row/col means)", 1, ("g",), (), 3),
        ("adafactor_update(param)", 2, ("p", "g"), ("p",), 6),
    ],
}
PLANS["adam"] = PLANS["adamw"][1:]

# Fused single-pass kernels: (name, reads, writes, flops/elem)
FUSED: dict[str, list[tuple[str, tuple[str, ...], tuple[str, ...], float]]] = {
    "adamw": [("_fused_adamw_", ("p", "g", "m", "v"), ("p", "m", "v"), 12)],
    "adam": [("_fused_adam_", ("p", "g", "m", "v"), ("p", "m", "v"), 11)],
    "sgd": [("_fused_sgd_", ("p", "g", "m"), ("p", "m"), 5)],
    # apex FusedLAMB (used by NVIDIA's BERT): a global grad-norm pass, stage 1 (moments and
    # the update, written to a temporary), per-tensor norms of param and update, stage 2.
    "lamb": [
        ("multi_tensor_l2norm(grads)", ("g",), (), 2),
        ("multi_tensor_lamb_stage1", ("p", "g", "m", "v"), ("m", "v", "t"), 14),
        ("multi_tensor_l2norm(param, update)", ("p", "t"), (), 4),
        ("multi_tensor_lamb_stage2", ("p", "t"), ("p",), 3),
    ],
    "rmsprop": [("_fused_rmsprop_", ("p", "g", "m", "v"), ("p", "m", "v"), 9)],
    "adafactor": [("adafactor_update(fused)", ("p", "g"), ("p",), 9)],
}

N_STATES = {"sgd": 1, "adamw": 2, "adam": 2, "lamb": 2, "rmsprop": 2, "adafactor": 0, "none": 0}


def resolve_optimizer(name: str, impl: str = "foreach") -> OptimizerSpec:
    n = name.strip().lower().replace("_", "-")
    alias = {"sgd-momentum": "sgd", "momentum": "sgd", "adam-w": "adamw", "fusedlamb": "lamb",
             "fused-lamb": "lamb", "rms-prop": "rmsprop", "adamw-8bit": "adamw", "adam8bit": "adamw",
             "adamw8bit": "adamw", "8bit-adam": "adamw", "8bit-adamw": "adamw", "paged-adamw-8bit": "adamw"}
    eight_bit = "8" in n
    n = alias.get(n, n)
    if n not in OPTIMIZERS:
        raise UnknownNameError("optimizer", name, (*OPTIMIZERS, "adamw-8bit"))
    if impl not in IMPLS:
        raise UnknownNameError("optimizer implementation", impl, IMPLS)
    if n == "lamb":
        impl = "fused"  # LAMB exists only as a fused (apex / DeepSpeed) kernel in practice
    return OptimizerSpec(n, impl, 1.0 if eight_bit else 4.0)


def _launches(numels: Sequence[int], depth: int) -> int:
    if not numels:
        return 0
    chunks = sum(math.ceil(n / CHUNK) for n in numels)
    return max(math.ceil(len(numels) / MAX_TENSORS[min(max(depth, 1), 5)]), math.ceil(chunks / MAX_BLOCKS))


def optimizer_ops(spec: OptimizerSpec, groups: Sequence[ParamGroup], loss_scaling: bool = False) -> list[Op]:
    """The optimizer-phase kernels of one step (plus AMP gradient unscaling if asked)."""
    ops: list[Op] = []
    numels = [n for g in groups for n in g.numels]
    total = float(sum(numels))
    if not numels:
        return ops

    def nbytes(kind: str, g: ParamGroup, n: float) -> float:
        per = {"p": g.elem_bytes, "g": g.grad_bytes, "m": spec.state_bytes, "v": spec.state_bytes,
               "t": 4.0}[kind]
        return per * n

    if loss_scaling:
        # GradScaler.unscale_: _amp_foreach_non_finite_check_and_unscale_ reads and writes every
        # gradient; _amp_update_scale_ is a one-element kernel.
        rd = sum(g.grad_bytes * sum(g.numels) for g in groups)
        ops.append(Op("_amp_foreach_non_finite_check_and_unscale_", "optimizer", "optimizer", "", "fp32",
                      total, rd, rd, 1, float(_launches(numels, 1)), True, None, False, True, "", ("amp",)))
        ops.append(Op("_amp_update_scale_", "optimizer", "optimizer", "", "fp32", 4.0, 16.0, 8.0, 1, 1.0,
                      True, None, False, False, "", ("amp",)))
    if spec.name == "none":
        return ops
    if spec.impl == "fused" or spec.name == "lamb":
        for name, reads, writes, fl in FUSED[spec.name]:
            rd = sum(nbytes(k, g, sum(g.numels)) for g in groups for k in reads)
            wr = sum(nbytes(k, g, sum(g.numels)) for g in groups for k in writes)
            ops.append(Op(name, "optimizer", "optimizer", "", "fp32", fl * total, rd, wr, 1,
                          float(_launches(numels, len(set(reads) | set(writes)))), True, None, False,
                          False, "", (spec.name, "fused")))
        return ops
    for name, depth, reads, writes, fl in PLANS[spec.name]:
        rd = sum(nbytes(k, g, sum(g.numels)) for g in groups for k in reads)
        wr = sum(nbytes(k, g, sum(g.numels)) for g in groups for k in writes)
        kernels = float(len(numels)) if spec.impl == "forloop" else float(_launches(numels, depth))
        ops.append(Op(name, "optimizer", "optimizer", "", "fp32", fl * total, rd, wr, 1, kernels, True,
                      None, False, spec.impl == "forloop", "", (spec.name, spec.impl)))
    return ops
