"""On a machine with a CUDA GPU: the model's kernel times against real ones (skipped without CUDA).

These are the checks only a GPU can give: a large BF16 GEMM and a streaming add, timed with CUDA
events, against the estimate for this GPU's catalog entry.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _local_spec():  # type: ignore[no-untyped-def]
    from whichgpu.hardware.catalog import load_catalog

    return load_catalog().get(torch.cuda.get_device_name(0))


def _time(fn, iters: int = 20) -> float:  # type: ignore[no-untyped-def]
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / iters / 1e3


def test_large_bf16_gemm_within_25_percent() -> None:
    """The model prices tensor work at the clock the card holds under sustained load (its power
    model), so the GEMM is timed after 10 s of the same GEMMs. A cool card's first burst runs at
    full clock: on the H100 SXM lent on 2026-11-25, 1.39 ms cool against 1.60 ms at its 700 W cap
    and 1.86 ms predicted (data/gpu_probes/README.md)."""
    import time

    from tests.unit.test_perf import matmul, trace_of

    from whichgpu.perf import estimate

    n = 8192
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    start = time.perf_counter()
    while time.perf_counter() - start < 10.0:
        for _ in range(20):
            x @ x
        torch.cuda.synchronize()
    measured = _time(lambda: x @ x)
    predicted = estimate(trace_of(matmul(n, n, n)), _local_spec()).top_ops[0].seconds
    assert predicted == pytest.approx(measured, rel=0.25)


def test_streaming_add_within_25_percent() -> None:
    from tests.unit.test_perf import trace_of

    from whichgpu.perf import estimate
    from whichgpu.workload.trace import Op

    n = 1 << 28
    a, b = torch.empty(n, device="cuda"), torch.empty(n, device="cuda")
    measured = _time(lambda: a + b)
    op = Op("aten.add", "pointwise", "forward", "", "fp32", float(n), 8.0 * n, 4.0 * n)
    predicted = estimate(trace_of(op, precision="fp32"), _local_spec()).top_ops[0].seconds
    assert predicted == pytest.approx(measured, rel=0.25)
