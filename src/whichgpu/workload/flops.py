"""FLOP formulas as pure math: plain numbers and shapes in, FLOPs out. Torch-free.

The thin adapters that unpack an aten call and pick one of these live in `costs.py`, next to
their registration (as torch's ``flop_counter.py`` separates ``conv_flop_count`` from its
adapter). Golden numbers for every formula: ``tests/unit/test_flop_formulas.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Shape = Sequence[int]


def numel(shape: Shape) -> int:
    return math.prod(shape) if len(shape) else 1


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


def _clipped_sum(lo: int, hi: int, cap: int) -> float:
    """sum(min(n, cap) for n in lo..hi), in closed form (0 when hi < lo)."""
    if hi < lo:
        return 0.0
    top = min(hi, cap)
    below = (lo + top) * (top - lo + 1) / 2.0 if top >= lo else 0.0
    return below + max(0, hi - max(lo - 1, cap)) * float(cap)


def attention_pairs(sq: int, sk: int, causal: bool, window: int = 0) -> float:
    """Number of (query, key) pairs a block-skipping kernel computes.

    Causal with sq == sk: sq*(sq+1)/2. Causal with a KV cache (sq < sk, queries are the last sq
    positions): each query i sees sk - sq + i + 1 keys. A causal sliding window of `window`
    positions (Mistral, Gemma-2/3, gpt-oss local layers) caps each query's keys at `window`
    (FlashAttention's window_size skips the blocks outside it). Not causal: every pair (a window
    is only modelled on causal attention).
    """
    if not causal:
        return float(sq) * sk
    if sq > sk:  # more queries than keys: as many keys as the first sk queries see, then all of them
        head = _clipped_sum(1, sk, window) if window else sk * (sk + 1) / 2.0
        return head + (sq - sk) * float(min(sk, window) if window else sk)
    # Query i (0-based) sits at position sk - sq + i and sees that many keys plus itself.
    return _clipped_sum(sk - sq + 1, sk, window) if window else sq * (sk - sq) + sq * (sq + 1) / 2.0


def sdpa_flops(b: int, h: int, sq: int, sk: int, d: int, dv: int, causal: bool, window: int = 0) -> float:
    """Forward attention: S = Q K^T (2*d per pair) and O = P V (2*dv per pair).

    Softmax adds ~5 FLOPs per pair on the CUDA cores; counted here too because fused kernels
    do it (and it is small next to the matmuls for d >= 64).
    """
    pairs = attention_pairs(sq, sk, causal, window)
    return b * h * pairs * (2.0 * d + 2.0 * dv + 5.0)


def sdpa_backward_flops(b: int, h: int, sq: int, sk: int, d: int, dv: int, causal: bool, window: int = 0) -> float:
    """Flash-style backward: recompute S = QK^T (2d), dV = P^T dO (2dv), dP = dO V^T (2dv),
    dQ = dS K (2d), dK = dS^T Q (2d): 2.5x the forward matmul FLOPs (FlashAttention-2 paper §3.2)."""
    pairs = attention_pairs(sq, sk, causal, window)
    return b * h * pairs * (6.0 * d + 4.0 * dv + 8.0)


def softcap_flops(b: int, h: int, pairs: float, backward: bool) -> float:
    """Logit soft-capping, s -> c * tanh(s / c) (Gemma-2): a divide, a tanh (~6 instructions) and a
    multiply per pair forward (8 FLOPs); the backward recomputes it and applies 1 - tanh^2 (12)."""
    return b * h * pairs * (12.0 if backward else 8.0)


def rnn_cell_flops(batch: int, input_size: int, hidden: int, gates: int) -> float:
    """One time step of an LSTM (gates=4) / GRU (gates=3): two GEMMs plus gate math."""
    return mm_flops(batch, gates * hidden, input_size + hidden) + 10.0 * batch * hidden


def norm_flops(elements: int) -> float:
    """Layer/group/RMS/batch norm forward: mean, variance, normalise, scale and shift, ~8 FLOPs
    per element (an instruction count, not a measured figure)."""
    return 8.0 * elements


def norm_backward_flops(elements: int) -> float:
    """Norm backward: the two row reductions (sum dy, sum dy*x_hat) and dx, ~14 FLOPs per element."""
    return 14.0 * elements


def softmax_flops(elements: int) -> float:
    """Softmax / log-softmax forward: max, subtract, exp, sum, divide, ~7 FLOPs per element."""
    return 7.0 * elements


def softmax_backward_flops(elements: int) -> float:
    """Softmax backward: dx = y * (dy - sum(dy * y)), ~4 FLOPs per element."""
    return 4.0 * elements


def model_flops_per_token(params: int) -> float:
    """6N rule of thumb for reference (Kaplan et al. 2020): FLOPs per token of training."""
    return 6.0 * params if params > 0 else math.nan
