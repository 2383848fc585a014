"""FLOP formulas, registered next to their ops (one registry, as torch's flop_counter does).

Pure math functions take plain numbers and shapes; thin adapters (decorated with
``@register``) unpack an aten call. An adapter returns a `Cost`; bytes default to "each input
tensor read once, each output written once" (computed by the capture engine) unless the adapter
overrides them (views read nothing; embeddings read only the rows they gather; ...).

Ops with no adapter fall back to: views (no kernel, no bytes), pointwise by aten tag (FLOPs per
output element), and otherwise *unmodelled* (FLOPs unknown, bytes counted, reported in coverage).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Shape = Sequence[int]


@dataclass
class Cost:
    flops: float
    category: str
    mm: tuple[int, int, int, int] | None = None  # (batch, M, N, K)
    kernels: float = 1.0
    bytes_read: float | None = None  # None: generic (inputs read once)
    bytes_written: float | None = None  # None: generic (outputs written once)
    tags: tuple[str, ...] = ()
    matmul_dtype_from: int | None = None  # index of the arg whose dtype sets the compute dtype
    extra: dict[str, Any] = field(default_factory=dict)


Handler = Callable[[Sequence[Any], dict[str, Any], Any], Cost]
REGISTRY: dict[str, Handler] = {}


def register(*names: str) -> Callable[[Handler], Handler]:
    """Register an adapter for aten overload packets ('aten.mm') or overloads ('aten.mm.default')."""

    def deco(fn: Handler) -> Handler:
        for n in names:
            REGISTRY[n] = fn
        return fn

    return deco


def numel(shape: Shape) -> int:
    return math.prod(shape) if len(shape) else 1


# --------------------------------------------------------------------------------------------
# Pure math
# --------------------------------------------------------------------------------------------

def mm_flops(m: int, n: int, k: int, batch: int = 1) -> float:
    """(m x k) @ (k x n): m*n*k multiply-adds = 2*m*n*k FLOPs."""
    return 2.0 * batch * m * n * k


def conv_flops(x_shape: Shape, w_shape: Shape, out_shape: Shape, transposed: bool = False) -> float:
    """2 * (output elements) * (input channels per group) * (kernel elements).

    For a transposed conv the roles of input and output swap: FLOPs = 2 * (input elements) *
    (out channels per group) * kernel elements. Weight layout (Cout, Cin/groups, *k) for normal
    and (Cin, Cout/groups, *k) for transposed convs, as torch stores them.
    """
    kernel = numel(w_shape[2:])
    if transposed:
        return 2.0 * numel(x_shape) * w_shape[1] * kernel
    return 2.0 * numel(out_shape) * w_shape[1] * kernel


def conv_gemm(x_shape: Shape, w_shape: Shape, out_shape: Shape, groups: int, transposed: bool) -> tuple[int, int, int, int]:
    """Implicit-GEMM view of a conv: batch=groups, M=N*spatial_out, N=Cout/g, K=Cin/g*kernel."""
    kernel = numel(w_shape[2:])
    if transposed:
        m = numel(x_shape) // max(x_shape[1], 1)
        return (groups, m, w_shape[1], (x_shape[1] // groups) * kernel)
    m = numel(out_shape) // max(out_shape[1], 1)
    return (groups, m, out_shape[1] // groups, w_shape[1] * kernel)


def attention_pairs(sq: int, sk: int, causal: bool) -> float:
    """Number of (query, key) pairs a block-skipping kernel computes.

    Causal with sq == sk: sq*(sq+1)/2. Causal with a KV cache (sq < sk, queries are the last sq
    positions): each query i sees sk - sq + i + 1 keys.
    """
    if not causal:
        return float(sq) * sk
    if sq >= sk:
        return sk * (sk + 1) / 2.0 + (sq - sk) * sk
    return sq * (sk - sq) + sq * (sq + 1) / 2.0


def sdpa_flops(b: int, h: int, sq: int, sk: int, d: int, dv: int, causal: bool) -> float:
    """Forward attention: S = Q K^T (2*d per pair) and O = P V (2*dv per pair).

    Softmax adds ~5 FLOPs per pair on the CUDA cores; counted here too because fused kernels
    do it (and it is small next to the matmuls for d >= 64).
    """
    pairs = attention_pairs(sq, sk, causal)
    return b * h * pairs * (2.0 * d + 2.0 * dv + 5.0)


def sdpa_backward_flops(b: int, h: int, sq: int, sk: int, d: int, dv: int, causal: bool) -> float:
    """Flash-style backward: recompute S = QK^T (2d), dV = P^T dO (2dv), dP = dO V^T (2dv),
    dQ = dS K (2d), dK = dS^T Q (2d): 2.5x the forward matmul FLOPs (FlashAttention-2 paper §3.2)."""
    pairs = attention_pairs(sq, sk, causal)
    return b * h * pairs * (6.0 * d + 4.0 * dv + 8.0)


def rnn_cell_flops(batch: int, input_size: int, hidden: int, gates: int) -> float:
    """One time step of an LSTM (gates=4) / GRU (gates=3): two GEMMs plus gate math."""
    return mm_flops(batch, gates * hidden, input_size + hidden) + 10.0 * batch * hidden


# FLOPs per output element of pointwise ops (default 1). Transcendentals cost more SFU/ALU work;
# the figures are rough instruction counts and only matter for the rare compute-bound pointwise op.
POINTWISE_FLOPS: dict[str, float] = {
    "exp": 4, "exp2": 4, "expm1": 4, "log": 4, "log1p": 4, "log2": 4, "tanh": 6, "sigmoid": 5,
    "gelu": 10, "gelu_backward": 14, "silu": 6, "silu_backward": 9, "erf": 8, "erfinv": 10,
    "sin": 4, "cos": 4, "pow": 4, "rsqrt": 2, "sqrt": 2, "reciprocal": 1, "softplus": 8,
    "mish": 12, "hardswish": 4, "hardsigmoid": 3, "elu": 4, "leaky_relu": 2, "sigmoid_backward": 3,
    "tanh_backward": 3, "threshold_backward": 1, "native_dropout": 3, "native_dropout_backward": 2,
    "addcmul": 2, "addcdiv": 2, "lerp": 3, "where": 1, "clamp": 2, "div": 1, "mul": 1, "add": 1,
    "sub": 1, "neg": 1, "relu": 1, "abs": 1, "sign": 1, "maximum": 1, "minimum": 1,
}

VIEW_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "t", "transpose", "permute", "expand",
    "unsqueeze", "squeeze", "slice", "select", "detach", "alias", "as_strided", "split",
    "split_with_sizes", "unbind", "chunk", "narrow", "diagonal", "unflatten", "lift_fresh",
    "view_as_real", "view_as_complex", "_nested_view_from_buffer", "numpy_T", "expand_as",
    "unfold", "movedim", "lift", "set_", "resize_", "_local_scalar_dense", "is_same_size",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "_to_copy_meta",
    "profiler._record_function_enter_new", "profiler._record_function_exit",
    "_record_function_enter_new", "_record_function_exit", "_has_compatible_shallow_copy_type",
    "empty_strided", "empty", "new_empty", "empty_like", "new_empty_strided",
    "_assert_async", "_assert_scalar", "_functional_assert_async", "copy_meta",
})

MEMSET_OPS = frozenset({
    "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "fill", "fill_", "zero_",
    "new_zeros", "new_ones", "new_full", "scalar_tensor", "arange", "linspace", "eye",
    "masked_fill_", "rand", "randn", "randint", "normal_", "uniform_", "bernoulli_", "rand_like",
    "randn_like", "bernoulli",
})

COPY_OPS = frozenset({
    "_to_copy", "copy_", "clone", "cat", "stack", "constant_pad_nd", "contiguous", "index_copy",
    "index_copy_", "slice_scatter", "select_scatter", "diagonal_scatter", "as_strided_scatter",
    "repeat", "flip", "roll", "tril", "triu", "slice_backward", "select_backward", "_copy_from",
    "_copy_from_and_resize", "reflection_pad2d", "replication_pad2d", "upsample_nearest2d",
    "upsample_nearest2d_backward", "col2im", "im2col", "pixel_shuffle", "repeat_interleave",
    "masked_scatter", "unfold_backward", "expand_copy", "permute_copy", "_unsafe_index",
    "narrow_copy", "split_with_sizes_copy", "_reshape_copy", "index_select_backward",
})

REDUCTION_OPS = frozenset({
    "sum", "mean", "amax", "amin", "max", "min", "var", "std", "var_mean", "std_mean", "norm",
    "linalg_vector_norm", "prod", "argmax", "argmin", "cumsum", "cumprod", "logsumexp", "topk",
    "sort", "all", "any", "count_nonzero", "_foreach_norm", "aminmax", "median", "kthvalue",
    "nansum", "logcumsumexp", "max_pool2d_with_indices", "max_pool2d_with_indices_backward",
    "avg_pool2d", "avg_pool2d_backward", "adaptive_avg_pool2d", "_adaptive_avg_pool2d",
    "_adaptive_avg_pool2d_backward", "max_pool3d_with_indices", "avg_pool3d", "adaptive_max_pool2d",
    "adaptive_max_pool2d_backward",
})

LOSS_OPS = frozenset({
    "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward",
    "mse_loss", "mse_loss_backward", "binary_cross_entropy", "binary_cross_entropy_backward",
    "binary_cross_entropy_with_logits", "smooth_l1_loss", "smooth_l1_loss_backward", "huber_loss",
    "huber_loss_backward", "l1_loss", "soft_margin_loss", "kl_div", "cross_entropy_loss",
})

EMBEDDING_OPS = frozenset({
    "embedding", "embedding_dense_backward", "index_select", "gather", "scatter", "scatter_add",
    "scatter_add_", "scatter_", "index", "index_put", "index_put_", "index_add", "index_add_",
    "_embedding_bag", "embedding_backward", "take", "scatter_reduce", "_index_put_impl_",
    "masked_select", "nonzero", "_unsafe_index_put", "gather_backward",
})


# --------------------------------------------------------------------------------------------
# Adapters
# --------------------------------------------------------------------------------------------

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


@register("aten._scaled_dot_product_flash_attention")
def _flash(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    q, k, v = args[0], args[1], args[2]
    causal = bool(args[4]) if len(args) > 4 else bool(kwargs.get("is_causal", False))
    b, h, sq, sk, d, dv = _attn_dims(q, k, v)
    return Cost(sdpa_flops(b, h, sq, sk, d, dv, causal), "attention",
                mm=(b * h, sq, sk, d), matmul_dtype_from=0, tags=("flash",) + (("causal",) if causal else ()))


@register("aten._scaled_dot_product_efficient_attention")
def _eff(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    q, k, v = args[0], args[1], args[2]
    causal = bool(args[5]) if len(args) > 5 else bool(kwargs.get("is_causal", False))
    b, h, sq, sk, d, dv = _attn_dims(q, k, v)
    return Cost(sdpa_flops(b, h, sq, sk, d, dv, causal), "attention",
                mm=(b * h, sq, sk, d), matmul_dtype_from=0, tags=("mem-efficient",) + (("causal",) if causal else ()))


@register("aten._scaled_dot_product_flash_attention_backward")
def _flash_bwd(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # (grad_out, q, k, v, out, logsumexp, cum_q, cum_k, max_q, max_k, dropout_p, is_causal, ...)
    q, k, v = args[1], args[2], args[3]
    causal = bool(args[11])
    b, h, sq, sk, d, dv = _attn_dims(q, k, v)
    return Cost(sdpa_backward_flops(b, h, sq, sk, d, dv, causal), "attention",
                mm=(b * h, sq, sk, d), kernels=3, matmul_dtype_from=1,
                tags=("flash",) + (("causal",) if causal else ()))


@register("aten._scaled_dot_product_efficient_attention_backward")
def _eff_bwd(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # (grad_out, q, k, v, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p,
    #  grad_input_mask, is_causal, scale)
    q, k, v = args[1], args[2], args[3]
    causal = bool(args[11]) if len(args) > 11 else False
    b, h, sq, sk, d, dv = _attn_dims(q, k, v)
    return Cost(sdpa_backward_flops(b, h, sq, sk, d, dv, causal), "attention",
                mm=(b * h, sq, sk, d), kernels=2, matmul_dtype_from=1,
                tags=("mem-efficient",) + (("causal",) if causal else ()))


@register("aten.native_layer_norm", "aten.native_group_norm", "aten._fused_rms_norm",
          "aten._native_batch_norm_legit_no_training", "aten._batch_norm_no_update")
def _norm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # Mean, variance, normalise, scale and shift: ~8 FLOPs per element. Layer/group norms keep a
    # row in registers (one read of x); inference batch norm uses stored statistics.
    n = numel(_shape(args[0]))
    return Cost(8.0 * n, "norm")


@register("aten.native_batch_norm", "aten._native_batch_norm_legit", "aten._native_batch_norm_legit_functional",
          "aten.cudnn_batch_norm", "aten._batch_norm_with_update")
def _batch_norm_train(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # Training batch norm reduces over N*H*W per channel before it can normalise: cuDNN /
    # PyTorch read x twice (statistics pass, then normalise pass) and write y once.
    x = args[0]
    training = bool(args[5]) if len(args) > 5 and isinstance(args[5], bool) else True
    xb = float(x.numel() * x.element_size())
    ob = float(out[0].numel() * out[0].element_size()) if isinstance(out, (tuple, list)) else xb
    n = numel(_shape(x))
    return Cost(8.0 * n, "norm", kernels=2.0 if training else 1.0,
                bytes_read=(2.0 if training else 1.0) * xb, bytes_written=ob)


@register("aten.native_layer_norm_backward", "aten.native_group_norm_backward",
          "aten._fused_rms_norm_backward")
def _norm_bwd(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    n = numel(_shape(args[0]))
    return Cost(14.0 * n, "norm", kernels=2)


@register("aten.native_batch_norm_backward", "aten.cudnn_batch_norm_backward", "aten.batch_norm_backward")
def _batch_norm_bwd(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # Reduce dy and dy*x_hat per channel (one pass over dy and x), then form dx (a second pass
    # over both), write dx.
    dy, x = args[0], args[1]
    b = float(dy.numel() * dy.element_size() + x.numel() * x.element_size())
    n = numel(_shape(dy))
    return Cost(14.0 * n, "norm", kernels=2, bytes_read=2.0 * b, bytes_written=float(x.numel() * x.element_size()))


@register("aten._softmax", "aten._log_softmax", "aten._safe_softmax", "aten.softmax")
def _softmax(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # max, subtract, exp, sum, divide: ~7 FLOPs per element
    return Cost(7.0 * numel(_shape(args[0])), "softmax")


@register("aten._softmax_backward_data", "aten._log_softmax_backward_data")
def _softmax_bwd(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    return Cost(4.0 * numel(_shape(args[0])), "softmax")


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


def fallback_category(packet: str, is_pointwise: bool) -> tuple[str, float, bool]:
    """(category, flops-per-output-element, modelled) for ops without an adapter."""
    base = packet.split(".", 1)[-1] if packet.startswith(("aten.", "prims.")) else packet
    root = base.rstrip("_") if base not in ("fill_", "zero_", "copy_") else base
    if base in VIEW_OPS or packet in VIEW_OPS:
        return "view", 0.0, True
    if base in MEMSET_OPS:
        return "memset", 0.0, True
    if base in COPY_OPS:
        return "copy", 0.0, True
    if base in REDUCTION_OPS:
        return "reduction", 1.0, True
    if base in LOSS_OPS:
        return "loss", 4.0, True
    if base in EMBEDDING_OPS:
        return "embedding", 0.0, True
    if base.startswith("_foreach_") or base.startswith("_fused_") or base.startswith("_amp_"):
        return "optimizer", 2.0, True
    if is_pointwise or root in POINTWISE_FLOPS:
        return "pointwise", POINTWISE_FLOPS.get(root, POINTWISE_FLOPS.get(base, 1.0)), True
    return "other", 0.0, False


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
            if a.dtype in (_long(), _int()):
                idx_bytes += a.numel() * a.element_size()
            else:
                src_bytes = max(src_bytes, float(a.numel() * a.element_size()))
    accumulate = "add" in str(kwargs.get("reduce", "")) or any(x is True for x in args[3:4])
    return Cost(src_bytes / max(args[0].element_size(), 1), "embedding",
                bytes_read=src_bytes * (2 if accumulate else 1) + idx_bytes, bytes_written=src_bytes)


def _long() -> Any:
    import torch

    return torch.long


def _int() -> Any:
    import torch

    return torch.int32
