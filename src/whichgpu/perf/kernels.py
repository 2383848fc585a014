"""Time of one kernel: roofline of compute and memory, each with its own efficiency.

GEMM efficiency comes from tiling: the output is cut into tiles, tiles run in waves over the
SMs, so a GEMM wastes the padding of partial tiles and the idle SMs of a partial last wave
(wave quantization), and a short K cannot amortise each tile's prologue/epilogue. The library
picks the tile (and split-K) that runs fastest, as cuBLAS's heuristics do. Memory-bound
kernels reach less bandwidth when small (latency-bound), and data that fits in L2 is cheaper.
"""

from __future__ import annotations

import math

from whichgpu.perf.device import Device

# (tile M, tile N, relative per-SM efficiency of the tile shape). Larger tiles reuse operands
# more and run closer to peak; small tiles exist for small problems (M=16 is the tensor-core
# MMA minimum). Relative figures follow CUTLASS's profiler tables for Ampere (order of magnitude).
TILES: tuple[tuple[int, int, float], ...] = (
    (256, 128, 1.00), (128, 256, 1.00), (128, 128, 0.94), (128, 64, 0.85), (64, 128, 0.85),
    (64, 64, 0.70), (32, 128, 0.62), (128, 32, 0.62), (16, 128, 0.50), (128, 16, 0.50),
)


def gemm_utilization(b: int, m: int, n: int, k: int, sms: int) -> float:
    """Best fraction of the SMs' peak that tiles and waves allow for a (b x) m x n x k GEMM."""
    best = 0.0
    work = b * m * n
    for tm, tn, te in TILES:
        tiles = b * math.ceil(m / tm) * math.ceil(n / tn)
        split = 1
        if tiles < sms and k >= 1024:
            # split-K: more CTAs over K when the output has too few tiles to fill the GPU
            split = max(1, min(sms // tiles, k // 512))
        waves = math.ceil(tiles * split / sms)
        util = work * split / (waves * sms * tm * tn)
        e = util * te * (0.9 if split > 1 else 1.0)
        if e > best:
            best = e
    return min(best, 1.0)


VECTOR_BYTES = 16  # the widest load of a GEMM tile (128 bits): rows must start on it
ELEMENT_BYTES = {"tf32": 4, "fp16": 2, "bf16": 2, "fp16acc16": 2, "fp8": 1, "int8": 1}


def vector_elements(dtype: str) -> int | None:
    """Elements of `dtype` in one 16-byte vector load (None: a path without tensor-core tiles)."""
    size = ELEMENT_BYTES.get(dtype)
    return VECTOR_BYTES // size if size else None


def unaligned_dims(mm: tuple[int, int, int, int], dtype: str, backward: bool) -> tuple[int, ...]:
    """The row lengths of a tensor-core GEMM's operands that are not whole 16-byte vectors.

    Forward, A (m x k) and B (k x n) are stored with rows of k and n elements, and the output
    with rows of n; m (the tokens) is never a row length. The backward GEMMs multiply transposed
    views of the same tensors, so each of m, n and k is some operand's row length there (the
    weight gradient's m is the weight's output dimension, the input gradient's k likewise)."""
    per_vector = vector_elements(dtype)
    if per_vector is None:
        return ()
    _, m, n, k = mm
    dims = (m, n, k) if backward else (n, k)
    return tuple(sorted({d for d in dims if d % per_vector}))


def k_efficiency(k: int, k_half: float) -> float:
    return k / (k + k_half)


def matmul_time(flops: float, mm: tuple[int, int, int, int] | None, dtype: str, dev: Device,
                factor: float = 1.0, sparse: bool = False, sequential: bool = False,
                narrow: bool = False) -> tuple[float, float, str]:
    """(seconds, efficiency vs the path's peak, path dtype) of tensor-core/GEMM math; `narrow`:
    the GEMM has `unaligned_dims`, its rate capped per SM and clock."""
    rate = dev.rate(dtype)
    if mm is None:
        eff = rate.ceiling * factor
    else:
        b, m, n, k = mm
        if sequential:
            b = 1  # one GEMM per time step, steps run one after another
        util = gemm_utilization(max(b, 1), max(m, 1), max(n, 1), max(k, 1), dev.sms)
        eff = rate.ceiling * factor * util * k_efficiency(max(k, 1), dev.params.k_half)
    peak = rate.flops
    if sparse and dev.spec.sparsity_2to4:
        peak *= dev.params.sparse_speedup
    if narrow and rate.dtype != "fp32" and dev.light_clock_hz > 0:
        cap = dev.params.misaligned_flops_per_sm_clock * dev.sms * dev.light_clock_hz
        eff = min(eff, cap / peak)
    eff = max(eff, 1e-4)
    return flops / (peak * eff), eff, rate.dtype


def vector_time(flops: float, dev: Device) -> float:
    """Math on the CUDA cores (elementwise, reductions): rarely the bound."""
    return flops / (dev.vector_flops * 0.5) if flops > 0 else 0.0


def memory_time(nbytes: float, dev: Device) -> float:
    if nbytes <= 0:
        return 0.0
    p = dev.params
    bw = dev.bw * dev.mem_ceiling * nbytes / (nbytes + dev.mem_half_bytes)
    hit = min(1.0, 0.5 * dev.l2 / nbytes) if dev.l2 > 0 else 0.0
    return nbytes * (1.0 - hit) / bw + nbytes * hit / (bw * p.l2_speedup)
