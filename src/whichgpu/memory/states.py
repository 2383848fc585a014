"""Model states: weights, gradients, FP32 master weights, optimizer states, and how ZeRO / FSDP
shard them over N GPUs. Plain numbers in, bytes out.

Per trainable parameter, with optimizer state bytes ``s`` (4 for FP32 states):

| optimizer  | states                        | bytes / parameter                          |
|------------|-------------------------------|--------------------------------------------|
| adam/adamw | exp_avg, exp_avg_sq           | 2 s                                        |
| lamb       | exp_avg, exp_avg_sq           | 2 s                                        |
| rmsprop    | square_avg, momentum_buffer   | 2 s                                        |
| sgd        | momentum_buffer               | s                                          |
| adafactor  | factored second moment        | s (r + c) per r x c matrix, ~ s 2 sqrt(n)  |
| *-8bit     | two 8-bit states (bitsandbytes)| 2 (1 + 4 / 2048): blockwise FP32 absmax   |

16-bit parameters trained with an optimizer keep FP32 master weights and FP32 states when
``master_weights`` is on (apex O2, DeepSpeed, Megatron), and the update runs on an FP32 copy of
the gradients, as DeepSpeed counts them (stage_1_and_2.py, estimate_zero2_model_states_mem_needs:
"18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit").
Under amp-* precisions the parameters are FP32 already and *are* the master weights.

Sharding over N GPUs (ZeRO, Rajbhandari et al. 2020; PyTorch FSDP):

| sharding             | weights | 16-bit grads | master, FP32 grads, states |
|----------------------|---------|--------------|----------------------------|
| ddp                  | 1       | 1            | 1                          |
| zero1                | 1       | 1            | 1/N                        |
| zero2, fsdp-grad-op  | 1       | 1/N          | 1/N                        |
| zero3, fsdp-full     | 1/N     | 1/N (*)      | 1/N                        |

(*) with FP32 master weights ZeRO-3 keeps no 16-bit gradient partition: reduce-scatter writes into
the FP32 gradient partition (DeepSpeed stage3.py's estimate counts 18 B/param: 2 + 4 + 4 + 8).

ZeRO-3 / FSDP full sharding also holds one unit's parameters all-gathered in their compute
dtype and its unsharded gradients until they are reduce-scattered (DeepSpeed:
largest_layer_memory = 4 * largest_layer_params: 2-byte gathered params + 2-byte grads).
Optimizer offload (ZeRO-Offload, FSDP CPU offload) moves master weights, FP32 gradients and
states to CPU RAM; under ZeRO-2/3 the gradient partitions stream to the CPU as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from whichgpu.errors import InputError, UnknownNameError
from whichgpu.parallel.plan import FULL_SHARD, GRAD_SHARD, SHARDINGS
from whichgpu.workload.optim import FUSED, N_STATES, PLANS

# bitsandbytes 8-bit optimizers (Dettmers et al. 2022, "8-bit Optimizers via Block-wise
# Quantization"): each state is stored in 8 bits with one FP32 absmax per block of 2048 values.
# (Tensors under 4096 elements keep 32-bit states: biases, norms; a negligible share.)
BNB_BLOCK = 2048
EIGHT_BIT_STATE_BYTES = 1.0 + 4.0 / BNB_BLOCK
FP32 = 4.0


@dataclass(frozen=True)
class OptimizerInfo:
    name: str  # sgd | adam | adamw | lamb | rmsprop | adafactor | none
    impl: str  # foreach | fused | forloop
    eight_bit: bool


def parse_optimizer(text: str) -> OptimizerInfo:
    """The trace's optimizer field ("adamw/foreach", "adamw-8bit/fused", "none")."""
    name, _, impl = text.partition("/")
    eight = name.endswith("-8bit")
    name = name.removesuffix("-8bit")
    if name not in N_STATES:
        raise UnknownNameError("optimizer", name, N_STATES)
    return OptimizerInfo(name, impl or "foreach", eight)


def state_count(name: str) -> int:
    """Full-size optimizer states per parameter (Adafactor's factored states are counted apart)."""
    return N_STATES[name]


def state_bytes_per_value(opt: OptimizerInfo, param_elem_bytes: float, master_weights: bool,
                          state_bits: int | None) -> float:
    """Bytes of one optimizer-state value."""
    if state_bits is not None:
        if state_bits not in (8, 16, 32):
            raise InputError(f"optimizer state bits must be 8, 16 or 32, got {state_bits}")
        return EIGHT_BIT_STATE_BYTES if state_bits == 8 else state_bits / 8
    if opt.eight_bit:
        return EIGHT_BIT_STATE_BYTES
    if param_elem_bytes < FP32 and not master_weights:
        return param_elem_bytes  # torch.optim creates states like the (16-bit) parameter
    return FP32


def optimizer_state_bytes(opt: OptimizerInfo, trainable: float, value_bytes: float,
                          tensor_numels: tuple[float, ...] = ()) -> float:
    """Bytes of all optimizer states for `trainable` parameters (unsharded)."""
    if opt.name == "adafactor":
        # Factored second moment: a row and a column vector per matrix; without the shapes we
        # take each tensor as square (r + c = 2 sqrt(n), exact for square matrices).
        numels = tensor_numels or (trainable,)
        return value_bytes * sum(2.0 * math.sqrt(n) for n in numels)
    return state_count(opt.name) * value_bytes * trainable


def optimizer_temp_bytes(opt: OptimizerInfo, trainable: float) -> float:
    """Transient bytes of the optimizer step: PyTorch's foreach Adam/AdamW/RMSprop compute
    ``denom = _foreach_sqrt(exp_avg_sq)`` for all parameters at once (a full FP32 copy of a
    state); apex FusedLAMB writes the update to a temporary. Fused kernels need none."""
    if opt.name == "none" or opt.eight_bit:  # bitsandbytes' 8-bit optimizers are fused kernels
        return 0.0
    if opt.impl == "fused" or opt.name == "lamb":
        steps = [w for _n, _r, w, _f in FUSED.get(opt.name, [])]
    else:
        steps = [w for _n, _d, _r, w, _f in PLANS.get(opt.name, [])]
    return FP32 * trainable if any("t" in w for w in steps) else 0.0


@dataclass(frozen=True)
class ModelStates:
    """Per-GPU model states, in bytes. `*_host` are in CPU RAM (offload)."""

    weights: float
    grads: float  # all gradients of the step (16-bit or parameter dtype), per GPU
    master: float
    fp32_grads: float
    states: float
    gathered: float  # ZeRO-3/FSDP transient: one unit gathered + its unsharded gradients
    host: float  # offloaded to CPU RAM

    @property
    def gpu_total(self) -> float:
        return self.weights + self.grads + self.master + self.fp32_grads + self.states + self.gathered


def shard_factors(sharding: str, gpus: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer-side) fraction held per GPU."""
    if sharding not in SHARDINGS:
        raise UnknownNameError("sharding", sharding, SHARDINGS)
    n = float(gpus)
    w = 1.0 / n if sharding in FULL_SHARD else 1.0
    g = 1.0 / n if sharding in GRAD_SHARD else 1.0
    o = 1.0 if sharding == "ddp" else 1.0 / n
    return w, g, o


def model_states(*, weight_bytes: float, trainable: float, grad_elem_bytes: float, master: bool,
                 state_bytes: float, sharding: str, gpus: int, offload: bool,
                 unit_params: float = 0.0, gather_elem_bytes: float = 2.0) -> ModelStates:
    """Per-GPU model states.

    weight_bytes: all parameters as stored (full model); trainable: trainable parameter count;
    grad_elem_bytes: bytes per gradient value (the trainable parameters' dtype); master: FP32
    master weights and an FP32 gradient copy exist (16-bit parameters); state_bytes: all
    optimizer states, unsharded; unit_params: parameters of the largest unit gathered at once
    under ZeRO-3/FSDP full sharding; gather_elem_bytes: their compute-dtype bytes.
    """
    fw, fg, fo = shard_factors(sharding, gpus)
    grads = trainable * grad_elem_bytes
    if master and sharding in FULL_SHARD:
        # ZeRO-3 reduce-scatters each unit's 16-bit gradients straight into the FP32 gradient
        # partition: no 16-bit partition is kept (stage3.py: "18 = 16b for fp32 (4b params, 4b
        # grads, 4b momentum, 4b variance) + 2b for fp16 params"); the unit's unsharded 16-bit
        # gradients are part of `gathered`.
        grads = 0.0
    master_b = FP32 * trainable if master else 0.0
    fp32g = FP32 * trainable if master else 0.0
    host = 0.0
    if offload:
        host = (master_b + fp32g + state_bytes) * fo
        master_b = fp32g = state_bytes = 0.0
        if sharding in GRAD_SHARD:
            host += grads * fg
            grads = 0.0
    gathered = unit_params * (gather_elem_bytes + grad_elem_bytes) if sharding in FULL_SHARD else 0.0
    return ModelStates(weights=weight_bytes * fw, grads=grads * fg, master=master_b * fo, fp32_grads=fp32g * fo,
                       states=state_bytes * fo, gathered=gathered, host=host)
