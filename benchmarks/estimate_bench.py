"""Estimate speed: one cached trace across the whole catalog.

    python benchmarks/estimate_bench.py

Target (performance issue): under 0.5 s for the catalog. Measured in-process after the trace
is loaded from the cache; the first call includes loading the catalog and parameters.
"""

from __future__ import annotations

import time

from whichgpu.hardware.catalog import load_catalog
from whichgpu.parallel.plan import Plan
from whichgpu.perf import estimate
from whichgpu.workload.api import get_trace
from whichgpu.workload.spec import WorkloadSpec

CASES = [
    ("llama-2-7b train b1 s4096", WorkloadSpec("llama-2-7b", batch_size=1, seq_len=4096)),
    ("resnet50 train b256", WorkloadSpec("resnet50-v1.5", batch_size=256, precision="amp-fp16")),
    ("sd-unet train b8", WorkloadSpec("sd-unet", batch_size=8)),
]


def main() -> None:
    for label, spec in CASES:
        get_trace(spec)  # make sure it is cached
        t = time.perf_counter()
        trace = get_trace(spec)
        load = time.perf_counter() - t
        cat = load_catalog()
        for engine in ("pytorch", "torch-compile"):
            t = time.perf_counter()
            for g in cat:
                estimate(trace, g, Plan(engine=engine))
            dt = time.perf_counter() - t
            print(f"{label:28s} {engine:13s} {len(cat)} GPUs: {dt:.3f} s "
                  f"({1e3 * dt / len(cat):.1f} ms/GPU; trace load {load:.3f} s, {len(trace.ops)} ops)")


if __name__ == "__main__":
    main()
