"""Custom ops the capture engine routes to, so that traces show the kernels a GPU runs.

`whichgpu::attention` stands for the fused attention kernel PyTorch picks on CUDA
(FlashAttention for FP16/BF16, memory-efficient attention for FP32 or with a mask): one kernel
reading Q, K, V (and the mask) and writing O and the log-sum-exp. It supports GQA/MQA natively
(K/V with fewer heads are not expanded), as flash kernels do. `whichgpu::all_reduce` and
`whichgpu::all_gather` are the collectives of a tensor-parallel group (NCCL or an engine's
own), recorded with the group size so the performance model can price them on the system's
links. These ops only ever run on ``meta`` tensors: their fake implementations give shapes,
their costs live here and in `costs.py`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from whichgpu.workload.costs import Cost, register, sdpa_backward_flops, sdpa_flops


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
def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> tuple[Tensor, Tensor]:
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
    return out, lse


@meta_op("whichgpu::attention_backward")
def attention_backward(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                       mask: Tensor | None, causal: bool) -> tuple[Tensor, Tensor, Tensor]:
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    q, k, v, mask, causal = inputs
    ctx.save_for_backward(q, k, v, output[0], output[1])
    ctx.mask = mask
    ctx.causal = causal
    ctx.set_materialize_grads(False)


def _backward(ctx: Any, grad_out: Tensor, grad_lse: Tensor | None) -> tuple[Any, ...]:
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.whichgpu.attention_backward(grad_out, q, k, v, out, lse, ctx.mask, ctx.causal)
    return dq, dk, dv, None, None


attention.register_autograd(_backward, setup_context=_setup)


def _dims(q: Tensor, k: Tensor, v: Tensor) -> tuple[int, int, int, int, int, int]:
    b = int(torch.Size(q.shape[:-3]).numel()) if q.dim() > 3 else 1
    return b, int(q.shape[-3]), int(q.shape[-2]), int(k.shape[-2]), int(q.shape[-1]), int(v.shape[-1])


def _kind(q: Tensor, mask: Tensor | None) -> str:
    # PyTorch's CUDA SDPA dispatch: flash for fp16/bf16 without an arbitrary mask and head_dim <= 256,
    # memory-efficient attention otherwise (fp32, or an additive/boolean mask).
    if q.dtype in (torch.float16, torch.bfloat16) and mask is None and q.shape[-1] <= 256:
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


def _attention_cost(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, backward: bool) -> Cost:
    b, h, sq, sk, d, dv = _dims(q, k, v)
    tags = (_kind(q, mask),) + (("causal",) if causal else ())
    mm = _gemm_view(b, h, sq, sk, d, k)
    if backward:
        # FlashAttention-2 backward: a preprocess kernel (dO.O row sums), the main kernel, and a dQ
        # conversion kernel.
        return Cost(sdpa_backward_flops(b, h, sq, sk, d, dv, causal), "attention", mm=mm, kernels=3,
                    matmul_dtype_from=1, tags=tags)
    return Cost(sdpa_flops(b, h, sq, sk, d, dv, causal), "attention", mm=mm, matmul_dtype_from=0,
                tags=(*tags, *_group_tag(h, k)))


@register("whichgpu.attention")
def _attention_forward_cost(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    q, k, v, mask, causal = args[:5]
    return _attention_cost(q, k, v, mask, bool(causal), backward=False)


@register("whichgpu.attention_backward")
def _attention_backward_cost(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    _grad, q, k, v, _out, _lse, mask, causal = args[:8]
    return _attention_cost(q, k, v, mask, bool(causal), backward=True)


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
