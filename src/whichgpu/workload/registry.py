"""The op registry: every op name the capture engine knows, registered once. Torch-free.

An op is registered either with a formula (a thin adapter decorated with ``@register``, which
unpacks an aten call and returns a `Cost`: `costs.py` for aten ops, `ops.py` and the zoo's
custom ops for theirs) or, when it has no formula of its own, here, with its category and FLOPs
per element (``register("view", ..., category="view")``). The category of an op is stated in
exactly one place: its adapter's `Cost` or its registration. Registering a name twice raises.

Ops registered under no name fall back to rules: optimizer kernels by prefix, pointwise ops by
aten tag; anything else is *unmodelled* (FLOPs unknown, bytes counted, reported in coverage).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


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
    # Share of each tensor input (in argument order) the kernel reads, when not all of it: a
    # sliding window reads the keys in reach, a grouped GEMM the weights of experts with rows.
    read_share: tuple[float, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


Handler = Callable[[Sequence[Any], dict[str, Any], Any], Cost]


@dataclass(frozen=True)
class OpKind:
    """What the registry knows about one op name."""

    category: str  # trace category of an op without a formula; "" when its formula's Cost names it
    formula: Handler | None = None  # adapter from the aten call to its Cost
    flops_per_element: float = 0.0  # no formula: FLOPs per output element (reductions: per input)


REGISTRY: dict[str, OpKind] = {}


def register(*names: str, category: str = "", flops_per_element: float = 0.0) -> Callable[[Handler], Handler]:
    """Register op names, each once: a name registered twice raises ValueError.

    Names are aten overload packets ('aten.mm'), overloads ('aten.mm.default'), custom ops
    ('whichgpu.attention'), or bare names ('view'), which match the op in the aten and prims
    namespaces alike ('aten.view', 'prims.view'); 'aten.view' and 'view' are the same name.
    With ``category``, the names are ops without a formula, registered by the call itself.
    Without, the call decorates the adapter that computes the ops' `Cost`.
    """
    if category:
        for n in names:
            _add(n, OpKind(category, None, float(flops_per_element)))
        return _no_formula

    def deco(fn: Handler) -> Handler:
        for n in names:
            _add(n, OpKind("", fn))
        return fn

    return deco


def _add(name: str, kind: OpKind) -> None:
    bare = name.removeprefix("aten.")
    clash = next((k for k in (name, bare, "aten." + bare) if k in REGISTRY), None)
    if clash is not None:
        raise ValueError(f"op {name!r} is registered twice (first as {clash!r}): one registration per op")
    REGISTRY[name] = kind


def _no_formula(fn: Handler) -> Handler:
    raise TypeError(f"{fn.__name__}: an op registered with a category has no formula; "
                    "a formula names its category in its Cost")


OPTIMIZER_PREFIXES = ("_foreach_", "_fused_", "_amp_")
_OPTIMIZER_KERNEL = OpKind("optimizer", None, 2.0)  # multi-tensor apply: ~2 FLOPs per element
_POINTWISE = OpKind("pointwise", None, 1.0)


def kind_of(full: str, packet: str, is_pointwise: bool) -> OpKind | None:
    """The registry's entry for an aten call: by overload, then packet, then bare name. Ops
    registered under no name: optimizer kernels by prefix (`OPTIMIZER_PREFIXES`), then pointwise
    ops (an in-place variant of a registered pointwise op, 'mul_' of 'mul', or an op with aten's
    pointwise tag). None: not modelled."""
    base = packet.split(".", 1)[-1] if packet.startswith(("aten.", "prims.")) else packet
    for key in (full, packet, base):
        kind = REGISTRY.get(key)
        if kind is not None:
            return kind
    if base.startswith(OPTIMIZER_PREFIXES):
        return _OPTIMIZER_KERNEL
    root = REGISTRY.get(base.rstrip("_"))
    if root is not None and root.category == "pointwise":
        return root
    return _POINTWISE if is_pointwise else None


# --------------------------------------------------------------------------------------------
# Ops without a formula of their own
# --------------------------------------------------------------------------------------------

# Metadata only: no kernel, no memory traffic.
register(
    "view", "_unsafe_view", "reshape", "_reshape_alias", "t", "transpose", "permute", "expand",
    "unsqueeze", "squeeze", "slice", "select", "detach", "alias", "as_strided", "split",
    "split_with_sizes", "unsafe_split", "unsafe_split_with_sizes", "unsafe_chunk", "unbind", "chunk", "narrow", "diagonal", "unflatten", "lift_fresh",
    "view_as_real", "view_as_complex", "_nested_view_from_buffer", "numpy_T", "expand_as",
    "unfold", "movedim", "lift", "set_", "resize_", "_local_scalar_dense", "is_same_size",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "_to_copy_meta",
    "profiler._record_function_enter_new", "profiler._record_function_exit",
    "_record_function_enter_new", "_record_function_exit", "_has_compatible_shallow_copy_type",
    "empty_strided", "empty", "new_empty", "empty_like", "new_empty_strided",
    "_assert_async", "_assert_scalar", "_functional_assert_async", "copy_meta",
    category="view")

# Writes its output without reading anything.
register(
    "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "fill", "fill_", "zero_",
    "new_zeros", "new_ones", "new_full", "scalar_tensor", "arange", "linspace", "eye",
    "masked_fill_", "rand", "randn", "randint", "normal_", "uniform_", "bernoulli_", "rand_like",
    "randn_like", "bernoulli",
    category="memset")

# Data movement without math.
register(
    "_to_copy", "copy_", "clone", "cat", "stack", "constant_pad_nd", "contiguous",
    "slice_scatter", "select_scatter", "diagonal_scatter", "as_strided_scatter",
    "repeat", "flip", "roll", "tril", "triu", "slice_backward", "select_backward", "_copy_from",
    "_copy_from_and_resize", "reflection_pad2d", "replication_pad2d", "upsample_nearest2d",
    "upsample_nearest2d_backward", "col2im", "im2col", "pixel_shuffle", "repeat_interleave",
    "masked_scatter", "unfold_backward", "expand_copy", "permute_copy",
    "narrow_copy", "split_with_sizes_copy", "_reshape_copy", "index_select_backward",
    category="copy")

# ~1 FLOP per input element.
register(
    "sum", "mean", "amax", "amin", "max", "min", "var", "std", "var_mean", "std_mean", "norm",
    "linalg_vector_norm", "prod", "argmax", "argmin", "cumsum", "cumprod", "logsumexp", "topk",
    "sort", "all", "any", "count_nonzero", "_foreach_norm", "aminmax", "median", "kthvalue",
    "nansum", "logcumsumexp", "max_pool2d_with_indices", "max_pool2d_with_indices_backward",
    "avg_pool2d", "avg_pool2d_backward", "adaptive_avg_pool2d", "_adaptive_avg_pool2d",
    "_adaptive_avg_pool2d_backward", "max_pool3d_with_indices", "avg_pool3d", "adaptive_max_pool2d",
    "adaptive_max_pool2d_backward",
    category="reduction", flops_per_element=1)

# ~4 FLOPs per output element.
register(
    "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward",
    "mse_loss", "mse_loss_backward", "binary_cross_entropy", "binary_cross_entropy_backward",
    "binary_cross_entropy_with_logits", "smooth_l1_loss", "smooth_l1_loss_backward", "huber_loss",
    "huber_loss_backward", "l1_loss", "soft_margin_loss", "kl_div", "cross_entropy_loss",
    category="loss", flops_per_element=4)

# Gathers and scatters without an adapter below (those with one name their category there).
register(
    "_embedding_bag", "embedding_backward", "scatter_reduce", "masked_select", "nonzero",
    "gather_backward", "index_fill",
    category="embedding")

# Pointwise FLOPs per output element (ops with aten's pointwise tag and not listed: 1; in-place
# variants, 'mul_', as their op). Transcendentals cost more SFU/ALU work; the figures are rough
# instruction counts and only matter for the rare compute-bound pointwise op.
register("reciprocal", "threshold_backward", "where", "div", "mul", "add", "sub", "neg", "relu",
         "abs", "sign", "maximum", "minimum", category="pointwise", flops_per_element=1)
register("rsqrt", "sqrt", "leaky_relu", "native_dropout_backward", "addcmul", "addcdiv", "clamp",
         category="pointwise", flops_per_element=2)
register("hardsigmoid", "sigmoid_backward", "tanh_backward", "native_dropout", "lerp",
         category="pointwise", flops_per_element=3)
register("exp", "exp2", "expm1", "log", "log1p", "log2", "sin", "cos", "pow", "hardswish", "elu",
         category="pointwise", flops_per_element=4)
register("sigmoid", category="pointwise", flops_per_element=5)
register("tanh", "silu", category="pointwise", flops_per_element=6)
register("erf", "softplus", category="pointwise", flops_per_element=8)
register("silu_backward", "softplus_backward", category="pointwise", flops_per_element=9)
register("gelu", "erfinv", category="pointwise", flops_per_element=10)
register("mish", category="pointwise", flops_per_element=12)
register("gelu_backward", category="pointwise", flops_per_element=14)
