"""Apply a precision policy during capture, above autograd.

Autocast has no dispatch key for the ``meta`` device, so this TorchFunctionMode emulates
CUDA autocast's op lists (PyTorch docs, "Automatic Mixed Precision", CUDA op-specific
behaviour): ops on the low-precision list get their floating inputs cast to FP16/BF16, ops on
the FP32 list to FP32. The casts are real ops, recorded by autograd, so the trace holds their
kernels forward and backward, as on a GPU. Casts of parameters are cached for the forward pass
as autocast's weight cache does.

It also routes two functions to the kernels CUDA would run, since on CPU/meta PyTorch would
decompose them: ``F.scaled_dot_product_attention`` to the fused `whichgpu::attention` op (not
matmuls + softmax), and ``F.dropout`` to ``native_dropout`` (one kernel writing a 1-byte mask,
not bernoulli_ + mul + div with a full-width mask).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from whichgpu.workload.precision import Precision

# CUDA autocast "ops that can autocast to float16/bfloat16".
LOW_PRECISION = frozenset({
    "__matmul__", "__rmatmul__", "matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "addr",
    "mv", "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "chain_matmul", "multi_dot", "prelu", "einsum", "lstm", "gru", "rnn_tanh",
    "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell", "_convolution",
    "convolution", "nf4_linear",
})
# CUDA autocast "ops that autocast to float32".
FP32 = frozenset({
    "__pow__", "__rdiv__", "__rpow__", "__rtruediv__", "acos", "asin", "binary_cross_entropy_with_logits",
    "cosh", "cosine_embedding_loss", "cdist", "cosine_similarity", "cross_entropy", "cumprod", "cumsum",
    "dist", "erfinv", "exp", "expm1", "group_norm", "hinge_embedding_loss", "kl_div", "l1_loss",
    "layer_norm", "log", "log_softmax", "log10", "log1p", "log2", "margin_ranking_loss", "mse_loss",
    "multilabel_margin_loss", "multi_margin_loss", "nll_loss", "norm", "normalize", "pdist",
    "poisson_nll_loss", "pow", "prod", "reciprocal", "rsqrt", "sinh", "smooth_l1_loss",
    "soft_margin_loss", "softmax", "softmin", "softplus", "sum", "renorm", "tan",
    "triplet_margin_loss", "huber_loss", "rms_norm",
})
# Ops that run in the widest input type.
PROMOTE = frozenset({"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sample",
                     "index_put", "scatter_add", "tensordot", "cat", "stack"})

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


class PolicyMode(TorchFunctionMode):
    """Emulated autocast + fused-attention routing for one capture."""

    def __init__(self, precision: Precision) -> None:
        super().__init__()
        self.low: torch.dtype | None = getattr(torch, precision.autocast) if precision.autocast else None
        self._cache: dict[int, torch.Tensor] = {}
        self.enabled = True

    def clear_cache(self) -> None:
        self._cache.clear()

    def _cast(self, x: Any, dtype: torch.dtype) -> Any:
        if not isinstance(x, torch.Tensor) or x.dtype not in _FLOATS or x.dtype == dtype:
            return x
        if x.is_leaf and x.requires_grad:
            key = id(x)
            hit = self._cache.get(key)
            if hit is None or hit.dtype != dtype:
                hit = x.to(dtype)
                self._cache[key] = hit
            return hit
        return x.to(dtype)

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if not self.enabled:
            return func(*args, **kwargs)
        if func is F.scaled_dot_product_attention:
            return self._sdpa(*args, **kwargs)
        if func is F.dropout or func is torch.dropout:
            return self._dropout(*args, **kwargs)
        low = self.low
        if low is not None and func in _low_precision_custom_ops():
            # whichgpu's fused attention and grouped expert GEMM: their tensor inputs (not the
            # attention sinks, which the kernel reads in FP32) run in the low-precision type.
            n = 3 if func is torch.ops.whichgpu.attention else 2
            args = tuple(self._cast(a, low) if i < n else a for i, a in enumerate(args))
            return func(*args, **kwargs)
        if low is not None:
            name = getattr(func, "__name__", "")
            if name in LOW_PRECISION:
                args, kwargs = tree_map(lambda a: self._cast(a, low), (args, kwargs))
            elif name in FP32:
                args, kwargs = tree_map(lambda a: self._cast(a, torch.float32), (args, kwargs))
            elif name in PROMOTE:
                dts = [a.dtype for a in _tensors(args) if a.dtype in _FLOATS]
                if dts:
                    widest = max(dts, key=lambda d: (torch.finfo(d).bits, d == torch.float32))
                    args, kwargs = tree_map(lambda a: self._cast(a, widest), (args, kwargs))
        return func(*args, **kwargs)

    def _dropout(self, input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
        # at::dropout picks the fused kernel on CUDA (is_fused_kernel_acceptable); mirror it.
        if not training or p == 0.0:
            return input
        if p >= 1.0:
            return input * 0.0
        out, _mask = torch.native_dropout(input, p, True)
        return out

    def _sdpa(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
              scale: float | None = None, enable_gqa: bool = False) -> torch.Tensor:
        if self.low is not None:
            query, key, value = (self._cast(t, self.low) for t in (query, key, value))
        if attn_mask is not None and attn_mask.dtype in _FLOATS and attn_mask.dtype != query.dtype:
            attn_mask = attn_mask.to(query.dtype)
        out, _lse = torch.ops.whichgpu.attention(query, key, value, attn_mask, bool(is_causal))
        return out  # type: ignore[no-any-return]


def _low_precision_custom_ops() -> tuple[Any, ...]:
    import whichgpu.workload.ops  # noqa: F401  (defines the ops)

    return (torch.ops.whichgpu.attention, torch.ops.whichgpu.grouped_mm)


def _tensors(tree: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    tree_map(lambda a: out.append(a) if isinstance(a, torch.Tensor) else None, tree)
    return out
