"""FLOP formulas of aten ops, registered next to their ops (as torch's flop_counter does).

Each adapter (decorated with ``@register``, see `registry.py`) unpacks an aten call and returns
a `Cost` from the pure math in `flops.py`. Bytes default to "each input tensor read once, each
output written once" (computed by the capture engine) unless the adapter overrides them (views
read nothing; embeddings read only the rows they gather; ...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from whichgpu.workload.flops import (
    Shape,
    conv_flops,
    conv_gemm,
    mm_flops,
    norm_backward_flops,
    norm_flops,
    numel,
    sdpa_backward_flops,
    sdpa_flops,
    softmax_backward_flops,
    softmax_flops,
)
from whichgpu.workload.registry import Cost, register

# Imported from here by the custom ops' modules (ops.py, finetune.py, the zoo's vision ops).
__all__ = ["Cost", "mm_flops", "register", "sdpa_backward_flops", "sdpa_flops"]


def _shape(t: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in t.shape)


@register("aten.mm")
def _mm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    (m, k), (_, n) = _shape(args[0]), _shape(args[1])
    return Cost(mm_flops(m, n, k), "matmul", mm=(1, m, n, k), matmul_dtype_from=0)


@register("aten.addmm")
def _addmm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    (m, k), (_, n) = _shape(args[1]), _shape(args[2])
    # The bias add is fused into the GEMM epilogue (cuBLASLt); its m*n adds are not counted
    # (as torch's FlopCounterMode does), so GEMM FLOPs stay 2*m*n*k.
    return Cost(mm_flops(m, n, k), "matmul", mm=(1, m, n, k), matmul_dtype_from=1)


@register("aten.bmm")
def _bmm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    (b, m, k), (_, _, n) = _shape(args[0]), _shape(args[1])
    return Cost(mm_flops(m, n, k, b), "matmul", mm=(b, m, n, k), matmul_dtype_from=0)


@register("aten.baddbmm")
def _baddbmm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    (b, m, k), (_, _, n) = _shape(args[1]), _shape(args[2])
    return Cost(mm_flops(m, n, k, b), "matmul", mm=(b, m, n, k), matmul_dtype_from=1)


@register("aten.mv", "aten.addmv")
def _mv(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    mat = args[0] if len(_shape(args[0])) == 2 else args[1]
    m, k = _shape(mat)
    return Cost(mm_flops(m, 1, k), "matmul", mm=(1, m, 1, k), matmul_dtype_from=0)


@register("aten.dot", "aten.vdot")
def _dot(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    k = numel(_shape(args[0]))
    return Cost(2.0 * k, "reduction")


@register("aten._scaled_mm")
def _scaled_mm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    (m, k), (_, n) = _shape(args[0]), _shape(args[1])
    return Cost(mm_flops(m, n, k), "matmul", mm=(1, m, n, k), matmul_dtype_from=0)


@register("aten._grouped_mm")
def _grouped_mm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    """torch._grouped_mm(mat_a, mat_b, offs): G GEMMs whose rows (or contraction) are split by
    `offs`. FLOPs do not depend on how the rows are split: 2 x rows x N x K in total. The GEMM
    shape assumes the rows are spread evenly over the groups (balanced routing)."""
    a, b = _shape(args[0]), _shape(args[1])
    if len(a) == 2 and len(b) == 3:  # (M, K) x (G, K, N) -> (M, N): an MoE forward
        g, m, k, n = b[0], a[0], a[1], b[2]
        flops, mm = mm_flops(m, n, k), (g, max(1, m // max(g, 1)), n, k)
    elif len(a) == 3 and len(b) == 2:  # (G, M, K) x (K, N_total) -> (M, N_total)
        g, m, k, n = a[0], a[1], a[2], b[1]
        flops, mm = mm_flops(m, n, k), (g, m, max(1, n // max(g, 1)), k)
    elif len(a) == 2 and len(b) == 2:  # (K, M_total) x (M_total, N) -> (G, K, N): a weight gradient
        osh = _shape(out)
        g, k, m, n = osh[0], a[0], a[1], b[1]
        flops, mm = mm_flops(k, n, m), (g, k, n, max(1, m // max(g, 1)))
    else:  # (G, M, K) x (G, K, N): batched
        g, m, k, n = a[0], a[1], a[2], b[2]
        flops, mm = mm_flops(m, n, k, g), (g, m, n, k)
    return Cost(flops, "matmul", mm=mm, matmul_dtype_from=0, tags=(f"experts={g}",))


def _conv_args(args: Sequence[Any]) -> tuple[Any, Any, bool, int]:
    # convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    return args[0], args[1], bool(args[6]), int(args[8])


def _layout(x: Any) -> tuple[str, ...]:
    """Activation layout of a 4-D conv input: tensor-core convolutions want NHWC; NCHW inputs
    make cuDNN transpose around the kernel (the perf model charges that traffic)."""
    import torch

    if x.dim() != 4:
        return ()
    return ("nhwc",) if x.is_contiguous(memory_format=torch.channels_last) and x.shape[1] > 1 else ("nchw",)


def _winograd(ws: Shape, stride: Any, groups: int, transposed: bool) -> tuple[str, ...]:
    """3x3 stride-1 dense convolutions: cuDNN can run them as Winograd transforms, which do
    fewer multiplications than the direct FLOP count (F(2x2, 3x3): 2.25x fewer; Lavin & Gray,
    'Fast Algorithms for Convolutional Neural Networks', CVPR 2016). Tagged here; the
    performance model decides where cuDNN uses them."""
    strides = tuple(int(s) for s in stride) if isinstance(stride, (list, tuple)) else (int(stride),)
    if len(ws) == 4 and tuple(ws[2:]) == (3, 3) and all(s == 1 for s in strides) and groups == 1 and not transposed:
        return ("k3s1",)
    return ()


@register("aten.convolution", "aten._convolution")
def _conv(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    x, w, transposed, groups = _conv_args(args)
    xs, ws, os_ = _shape(x), _shape(w), _shape(out)
    return Cost(conv_flops(xs, ws, os_, transposed), "conv",
                mm=conv_gemm(xs, ws, os_, groups, transposed), matmul_dtype_from=0,
                tags=(*_layout(x), *_winograd(ws, args[3], groups, transposed)))


@register("aten.convolution_backward")
def _conv_bwd(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # convolution_backward(grad_out, input, weight, bias_sizes, stride, padding, dilation,
    #                      transposed, output_padding, groups, output_mask)
    grad_out, x, w = args[0], args[1], args[2]
    transposed, groups, mask = bool(args[7]), int(args[9]), list(args[10])
    xs, ws, gs = _shape(x), _shape(w), _shape(grad_out)
    fwd = conv_flops(xs, ws, gs, transposed)
    flops = fwd * (int(bool(mask[0])) + int(bool(mask[1])))
    if len(mask) > 2 and mask[2]:
        flops += numel(gs)
    g = conv_gemm(xs, ws, gs, groups, transposed)
    kernels = float(max(1, int(bool(mask[0])) + int(bool(mask[1]))) + (1 if len(mask) > 2 and mask[2] else 0))
    return Cost(flops, "conv", mm=g, kernels=kernels, matmul_dtype_from=1,
                tags=("wgrad+dgrad", *_layout(x), *_winograd(ws, args[4], groups, transposed)))


def _attn_dims(q: Any, k: Any, v: Any) -> tuple[int, int, int, int, int, int]:
    qs, ks, vs = _shape(q), _shape(k), _shape(v)
    b = numel(qs[:-3]) if len(qs) > 3 else 1
    h, sq, d = qs[-3], qs[-2], qs[-1]
    sk, dv = ks[-2], vs[-1]
    return b, h, sq, sk, d, dv


# The fused attention kernels: (op, tag, backward, index of is_causal, kernels). Forward
# arguments are (q, k, v, ...) with is_causal at index 4 (flash) or 5 (mem-efficient); backward
# arguments are (grad_out, q, k, v, ...) with is_causal at index 11 in both (flash:
# out, logsumexp, cum_q, cum_k, max_q, max_k, dropout_p, is_causal; mem-efficient: attn_bias,
# out, logsumexp, philox_seed, philox_offset, dropout_p, grad_input_mask, is_causal).
_FUSED_ATTENTION = (
    ("aten._scaled_dot_product_flash_attention", "flash", False, 4, 1),
    ("aten._scaled_dot_product_efficient_attention", "mem-efficient", False, 5, 1),
    ("aten._scaled_dot_product_flash_attention_backward", "flash", True, 11, 3),
    ("aten._scaled_dot_product_efficient_attention_backward", "mem-efficient", True, 11, 2),
)


def _fused_attention(tag: str, backward: bool, causal_at: int, kernels: int) -> Callable[..., Cost]:
    """The cost adapter of one fused attention kernel (see _FUSED_ATTENTION)."""
    first = 1 if backward else 0  # q, k, v follow the output gradient in backward

    def cost(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
        q, k, v = args[first], args[first + 1], args[first + 2]
        causal = bool(args[causal_at]) if len(args) > causal_at else bool(kwargs.get("is_causal", False))
        b, h, sq, sk, d, dv = _attn_dims(q, k, v)
        flops = (sdpa_backward_flops if backward else sdpa_flops)(b, h, sq, sk, d, dv, causal)
        return Cost(flops, "attention", mm=(b * h, sq, sk, d), kernels=kernels, matmul_dtype_from=first,
                    tags=(tag,) + (("causal",) if causal else ()))

    return cost


for _op, _tag, _bwd, _causal_at, _kernels in _FUSED_ATTENTION:
    register(_op)(_fused_attention(_tag, _bwd, _causal_at, _kernels))


@register("aten.native_layer_norm", "aten.native_group_norm", "aten._fused_rms_norm",
          "aten._native_batch_norm_legit_no_training", "aten._batch_norm_no_update")
def _norm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # Layer/group norms keep a row in registers (one read of x); inference batch norm uses
    # stored statistics.
    return Cost(norm_flops(numel(_shape(args[0]))), "norm")


@register("aten.native_batch_norm", "aten._native_batch_norm_legit", "aten._native_batch_norm_legit_functional",
          "aten.cudnn_batch_norm", "aten._batch_norm_with_update")
def _batch_norm_train(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # Training batch norm reduces over N*H*W per channel before it can normalise: cuDNN /
    # PyTorch read x twice (statistics pass, then normalise pass) and write y once.
    x = args[0]
    training = bool(args[5]) if len(args) > 5 and isinstance(args[5], bool) else True
    xb = float(x.numel() * x.element_size())
    ob = float(out[0].numel() * out[0].element_size()) if isinstance(out, (tuple, list)) else xb
    return Cost(norm_flops(numel(_shape(x))), "norm", kernels=2.0 if training else 1.0,
                bytes_read=(2.0 if training else 1.0) * xb, bytes_written=ob)


@register("aten.native_layer_norm_backward", "aten.native_group_norm_backward",
          "aten._fused_rms_norm_backward")
def _norm_bwd(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    return Cost(norm_backward_flops(numel(_shape(args[0]))), "norm", kernels=2)


@register("aten.native_batch_norm_backward", "aten.cudnn_batch_norm_backward", "aten.batch_norm_backward")
def _batch_norm_bwd(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # Reduce dy and dy*x_hat per channel (one pass over dy and x), then form dx (a second pass
    # over both), write dx.
    dy, x = args[0], args[1]
    b = float(dy.numel() * dy.element_size() + x.numel() * x.element_size())
    return Cost(norm_backward_flops(numel(_shape(dy))), "norm", kernels=2, bytes_read=2.0 * b,
                bytes_written=float(x.numel() * x.element_size()))


@register("aten._softmax", "aten._log_softmax", "aten._safe_softmax", "aten.softmax")
def _softmax(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    return Cost(softmax_flops(numel(_shape(args[0]))), "softmax")


@register("aten._softmax_backward_data", "aten._log_softmax_backward_data")
def _softmax_bwd(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    return Cost(softmax_backward_flops(numel(_shape(args[0]))), "softmax")


@register("aten.embedding")
def _embedding(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # Reads only the gathered rows (and the indices), not the whole table.
    w, idx = args[0], args[1]
    rows = numel(_shape(idx))
    row_bytes = _shape(w)[-1] * w.element_size()
    return Cost(0.0, "embedding", bytes_read=rows * row_bytes + rows * idx.element_size(),
                bytes_written=float(out.numel() * out.element_size()))


@register("aten.embedding_dense_backward")
def _embedding_bwd(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # Scatter-add of grad rows into a zeroed table: write the table, read grads and indices.
    grad, idx = args[0], args[1]
    gbytes = grad.numel() * grad.element_size()
    return Cost(float(grad.numel()), "embedding",
                bytes_read=float(gbytes + idx.numel() * idx.element_size()),
                bytes_written=float(out.numel() * out.element_size() + gbytes), kernels=2)


@register("aten.index_select", "aten.gather", "aten.index", "aten._unsafe_index", "aten.take")
def _gather(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # Reads as many source elements as it writes (plus the indices).
    idx_bytes = 0.0
    for a in list(args[1:]) + (list(args[2]) if len(args) > 2 and isinstance(args[2], (list, tuple)) else []):
        if hasattr(a, "element_size") and hasattr(a, "numel"):
            idx_bytes += a.numel() * a.element_size()
    ob = float(out.numel() * out.element_size())
    return Cost(0.0, "embedding", bytes_read=ob + idx_bytes, bytes_written=ob)


@register("aten.index_copy", "aten.index_copy_", "aten.index_put", "aten.index_put_",
          "aten._index_put_impl_", "aten.scatter", "aten.scatter_", "aten.index_add",
          "aten.index_add_", "aten.scatter_add", "aten.scatter_add_", "aten._unsafe_index_put")
def _scatter(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # Writes (or accumulates into) only the indexed slice: read the source values and indices,
    # write as many elements as the source holds (read them too when accumulating).
    src_bytes = 0.0
    idx_bytes = 0.0
    for a in list(args[1:]) + [v for v in (args[2] if len(args) > 2 and isinstance(args[2], (list, tuple)) else [])]:
        if hasattr(a, "element_size") and hasattr(a, "numel"):
            if _is_index(a):
                idx_bytes += a.numel() * a.element_size()
            else:
                src_bytes = max(src_bytes, float(a.numel() * a.element_size()))
    accumulate = "add" in str(kwargs.get("reduce", "")) or any(x is True for x in args[3:4])
    return Cost(src_bytes / max(args[0].element_size(), 1), "embedding",
                bytes_read=src_bytes * (2 if accumulate else 1) + idx_bytes, bytes_written=src_bytes)


def _is_index(t: Any) -> bool:
    import torch

    return t.dtype in (torch.long, torch.int32)
