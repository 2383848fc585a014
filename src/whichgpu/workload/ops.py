"""Custom ops the capture engine routes to, so that traces show the kernels a GPU runs.

`whichgpu::attention` stands for the fused attention kernel PyTorch picks on CUDA
(FlashAttention for FP16/BF16, memory-efficient attention for FP32 or with a mask): one kernel
reading Q, K, V (and the mask) and writing O and the log-sum-exp. It supports GQA/MQA natively
(K/V with fewer heads are not expanded), as flash kernels do, and the variants FlashAttention
runs inside the kernel: a causal sliding window (only the keys in reach are computed and read),
logit soft-capping and per-head attention sinks; and multi-head latent attention's absorbed
form (V a slice of K's memory, read once). `whichgpu::grouped_mm` is the routed experts' grouped
GEMM (vLLM's fused_moe, CUTLASS grouped GEMM), reading the weights of the experts that receive
rows. `whichgpu::all_reduce` and `whichgpu::all_gather` are the collectives of a
tensor-parallel group (NCCL or an engine's own), recorded with the group size so the performance
model can price them on the system's links. These ops only ever run on ``meta`` tensors: their
fake implementations give shapes, their costs live here and in `costs.py`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from whichgpu.workload.costs import Cost, mm_flops, register, sdpa_backward_flops, sdpa_flops
from whichgpu.workload.flops import attention_pairs, softcap_flops


def meta_op(name: str) -> Callable[[Callable[..., Any]], Any]:
    """Define the custom op `name` ("whichgpu::...") from its shape function: the decorated
    function is the op's fake (meta) implementation, and its signature the op's schema. These ops
    only ever run on meta tensors, so the real kernel raises."""

    def define(fake: Callable[..., Any]) -> Any:
        @functools.wraps(fake)
        def kernel(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"{name} only runs on the meta device")

        op = torch.library.custom_op(name, mutates_args=())(kernel)
        op.register_fake(fake)
        return op

    return define


@meta_op("whichgpu::attention")
def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, window: int = 0,
              softcap: float = 0.0, sinks: Tensor | None = None) -> tuple[Tensor, Tensor]:
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
    return out, lse


@meta_op("whichgpu::attention_backward")
def attention_backward(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                       mask: Tensor | None, causal: bool, window: int = 0, softcap: float = 0.0,
                       sinks: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    dsinks = torch.empty_like(sinks) if sinks is not None else q.new_empty((0,))
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dsinks


def _setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    q, k, v, mask, causal, window, softcap, sinks = inputs
    ctx.save_for_backward(q, k, v, output[0], output[1])
    ctx.mask, ctx.causal, ctx.window, ctx.softcap, ctx.sinks = mask, causal, window, softcap, sinks
    ctx.set_materialize_grads(False)


def _backward(ctx: Any, grad_out: Tensor, grad_lse: Tensor | None) -> tuple[Any, ...]:
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv, dsinks = torch.ops.whichgpu.attention_backward(grad_out, q, k, v, out, lse, ctx.mask, ctx.causal,
                                                               ctx.window, ctx.softcap, ctx.sinks)
    return dq, dk, dv, None, None, None, None, (dsinks if ctx.sinks is not None else None)


attention.register_autograd(_backward, setup_context=_setup)


def _dims(q: Tensor, k: Tensor, v: Tensor) -> tuple[int, int, int, int, int, int]:
    b = int(torch.Size(q.shape[:-3]).numel()) if q.dim() > 3 else 1
    return b, int(q.shape[-3]), int(q.shape[-2]), int(k.shape[-2]), int(q.shape[-1]), int(v.shape[-1])


def _latent(k: Tensor, v: Tensor) -> bool:
    """V is a slice of K's storage: multi-head latent attention run in its absorbed form (DeepSeek's
    FlashMLA, vLLM/SGLang decode): one cached latent serves as key and value."""
    return bool(k.untyped_storage()._cdata == v.untyped_storage()._cdata)


def _kind(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> str:
    # PyTorch's CUDA SDPA dispatch: flash for fp16/bf16 without an arbitrary mask and head_dim <= 256,
    # memory-efficient attention otherwise (fp32, or an additive/boolean mask). The latent form of
    # MLA (head_dim 576) runs in its own flash-style kernel (FlashMLA).
    if q.dtype in (torch.float16, torch.bfloat16) and mask is None and (q.shape[-1] <= 256 or _latent(k, v)):
        return "flash"
    return "mem-efficient"


def _kv_group(h: int, k: Tensor) -> int:
    """Query heads per K/V head (1 without GQA/MQA)."""
    kv = int(k.shape[-3]) if k.dim() >= 3 else h
    return h // kv if kv and h % kv == 0 else 1


def _group_tag(h: int, k: Tensor) -> tuple[str, ...]:
    """gqa=N: N query heads share each K/V head (engines that do not share the K/V reads in
    decode pay N times the cache traffic: perf/estimate.py)."""
    rep = _kv_group(h, k)
    return (f"gqa={rep}",) if rep > 1 else ()


def _gemm_view(b: int, h: int, sq: int, sk: int, d: int, k: Tensor) -> tuple[int, int, int, int]:
    """The GEMM shape a fused kernel tiles: with GQA/MQA the query heads sharing a K/V head are
    stacked into the M dimension (FlashAttention-2, FlashDecoding, TensorRT-LLM XQA), so a decode
    step (one query) is not a GEMM with M = 1 per head."""
    rep = _kv_group(h, k)
    return (b * (h // rep), sq * rep, sk, d)


def _attention_cost(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, window: int,
                    softcap: float, sinks: Tensor | None, backward: bool) -> Cost:
    b, h, sq, sk, d, dv = _dims(q, k, v)
    latent = _latent(k, v)
    variant = ((f"window={window}",) if window and causal else ()) + (("softcap",) if softcap else ()) \
        + (("sinks",) if sinks is not None else ()) + (("mla",) if latent else ())
    tags = (_kind(q, k, v, mask),) + (("causal",) if causal else ()) + variant
    win = window if causal else 0
    pairs = attention_pairs(sq, sk, causal, win)
    # A sliding window reads only the keys some query of the block can see; the latent form of
    # MLA reads its values inside the keys it has read.
    seen = min(1.0, (win + sq - 1) / sk) if win and sk else 1.0
    mm = _gemm_view(b, h, sq, max(1, round(sk * seen)), d, k)
    share = (seen, 0.0 if latent else seen)
    cap = softcap_flops(b, h, pairs, backward) if softcap else 0.0
    if backward:
        # FlashAttention-2 backward: a preprocess kernel (dO.O row sums), the main kernel, and a dQ
        # conversion kernel. Inputs: dO, Q, K, V, ...
        flops = sdpa_backward_flops(b, h, sq, sk, d, dv, causal, win) + cap
        return Cost(flops, "attention", mm=mm, kernels=3, matmul_dtype_from=1, tags=tags, read_share=(1.0, 1.0, *share))
    flops = sdpa_flops(b, h, sq, sk, d, dv, causal, win) + cap
    return Cost(flops, "attention", mm=mm, matmul_dtype_from=0, tags=(*tags, *_group_tag(h, k)),
                read_share=(1.0, *share))


@register("whichgpu.attention")
def _attention_forward_cost(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    q, k, v, mask, causal = args[:5]
    window, softcap, sinks = _variant(args, kwargs, 5)
    return _attention_cost(q, k, v, mask, bool(causal), window, softcap, sinks, backward=False)


@register("whichgpu.attention_backward")
def _attention_backward_cost(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    _grad, q, k, v, _out, _lse, mask, causal = args[:8]
    window, softcap, sinks = _variant(args, kwargs, 8)
    return _attention_cost(q, k, v, mask, bool(causal), window, softcap, sinks, backward=True)


def _variant(args: Sequence[Any], kwargs: dict[str, Any], at: int) -> tuple[int, float, Tensor | None]:
    """(window, softcap, sinks) of an attention call: positional from `at`, else keywords."""
    rest = list(args[at:]) + [None] * 3
    window = rest[0] if rest[0] is not None else kwargs.get("window", 0)
    softcap = rest[1] if rest[1] is not None else kwargs.get("softcap", 0.0)
    sinks = rest[2] if rest[2] is not None else kwargs.get("sinks")
    return int(window or 0), float(softcap or 0.0), sinks


# --------------------------------------------------------------------------------------------
# Mixture-of-experts grouped GEMM
# --------------------------------------------------------------------------------------------

@meta_op("whichgpu::grouped_mm")
def grouped_mm(x: Tensor, w: Tensor, touched: int, padded: int) -> Tensor:
    """Rows of `x` (R, K) grouped by expert (rows of one expert contiguous), times that expert's
    weight `w` (E, N, K), as a grouped GEMM (CUTLASS grouped GEMM, vLLM's fused_moe, torch's
    _grouped_mm): out (R, N). `touched`: experts that receive rows (their weights are read);
    `padded`: rows that are capacity padding (computed, not routed tokens)."""
    return x.new_empty((x.shape[0], w.shape[1]))


@meta_op("whichgpu::grouped_mm_backward")
def grouped_mm_backward(grad: Tensor, x: Tensor, w: Tensor, touched: int, padded: int) -> tuple[Tensor, Tensor]:
    """Data gradient (R, K) = grad (R, N) x w_e, and weight gradient (E, N, K) = grad_e^T x_e."""
    return torch.empty_like(x), torch.empty_like(w)


def _gm_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, w, touched, padded = inputs
    ctx.save_for_backward(x, w)
    ctx.touched, ctx.padded = touched, padded


def _gm_backward(ctx: Any, grad: Tensor) -> tuple[Any, ...]:
    x, w = ctx.saved_tensors
    dx, dw = torch.ops.whichgpu.grouped_mm_backward(grad, x, w, ctx.touched, ctx.padded)
    return dx, dw, None, None


grouped_mm.register_autograd(_gm_backward, setup_context=_gm_setup)


def _grouped_cost(x: Tensor, w: Tensor, touched: int, backward: bool) -> Cost:
    rows, k = int(x.shape[0]), int(x.shape[1])
    experts, n = int(w.shape[0]), int(w.shape[1])
    touched = max(1, min(touched, experts, rows))
    # The weights of experts that receive no row are not read (decode: a few of many experts).
    share = touched / experts
    mm = (touched, max(1, -(-rows // touched)), n, k)
    tags = (f"experts={experts}", f"touched={touched}")
    if backward:
        # dX = dY W_e (R x N x K per expert) and dW_e = dY_e^T X_e (N x R_e x K): twice the forward.
        # Inputs: dY, X, W.
        return Cost(2.0 * mm_flops(rows, n, k), "matmul", mm=mm, kernels=2, matmul_dtype_from=1,
                    read_share=(1.0, 1.0, share), tags=("wgrad+dgrad", *tags))
    return Cost(mm_flops(rows, n, k), "matmul", mm=mm, matmul_dtype_from=0, read_share=(1.0, share), tags=tags)


@register("whichgpu.grouped_mm")
def _grouped_forward_cost(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    return _grouped_cost(args[0], args[1], int(args[2]), backward=False)


@register("whichgpu.grouped_mm_backward")
def _grouped_backward_cost(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    return _grouped_cost(args[1], args[2], int(args[3]), backward=True)


@meta_op("whichgpu::all_reduce")
def all_reduce(x: Tensor, group: int) -> Tensor:
    return torch.empty_like(x)


@meta_op("whichgpu::all_gather")
def all_gather(x: Tensor, group: int, dim: int) -> Tensor:
    shape = list(x.shape)
    shape[dim] *= group
    return x.new_empty(shape)


@register("whichgpu.all_reduce")
def _all_reduce_cost(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # The message is the tensor; the time is the collective's (parallel/comm.py), not a memory pass.
    x, group = args[0], int(args[1])
    n = float(x.numel() * x.element_size())
    return Cost(0.0, "comm", bytes_read=n, bytes_written=n, tags=("all_reduce", f"group={group}"))


@register("whichgpu.all_gather")
def _all_gather_cost(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    x, group = args[0], int(args[1])
    n = float(x.numel() * x.element_size())
    return Cost(0.0, "comm", bytes_read=n, bytes_written=n * group, tags=("all_gather", f"group={group}"))
