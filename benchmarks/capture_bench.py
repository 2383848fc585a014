"""Capture speed: cold (no cache) and cached trace loads on this machine.

    python benchmarks/capture_bench.py

Cold = a fresh trace cache, measured in-process after the Python modules are imported (the
one-off import cost of torch is printed separately). Cached = loading the stored trace, which
imports no torch. Targets from the capture issue: Llama-2-7B training step (batch 1, seq 4096)
cold <= 3 s, Llama-3-405B cold <= 5 s, cached < 0.3 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

CASES = [
    ("llama-2-7b", dict(batch_size=1, seq_len=4096, precision="amp-bf16")),
    ("llama-3-405b", dict(batch_size=1, seq_len=4096, precision="amp-bf16")),
    ("mixtral-8x7b", dict(batch_size=1, seq_len=4096, precision="amp-bf16")),
    ("resnet50-v1.5", dict(batch_size=256, precision="amp-fp16")),
    ("bert-large-squad", dict(batch_size=32, seq_len=384, precision="amp-fp16")),
]

CACHED = """
import sys, time
t0 = time.perf_counter()
from whichgpu.workload.api import get_trace
from whichgpu.workload.spec import WorkloadSpec
t1 = time.perf_counter()
tr = get_trace(WorkloadSpec({model!r}, **{kw!r}))
t2 = time.perf_counter()
assert "torch" not in sys.modules, "a cache hit must not import torch"
print(f"{{t1 - t0:.3f}} {{t2 - t1:.3f}} {{len(tr.ops)}}")
"""


def main() -> None:
    cache = tempfile.mkdtemp(prefix="whichgpu-bench-")
    os.environ["WHICHGPU_CACHE_DIR"] = cache
    t = time.perf_counter()
    import torch  # noqa: F401

    t_torch = time.perf_counter() - t
    t = time.perf_counter()
    import whichgpu.workload.capture  # noqa: F401
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.spec import WorkloadSpec
    t_mods = time.perf_counter() - t
    print(f"imports: torch {t_torch:.2f} s, whichgpu capture modules {t_mods:.2f} s (one-off per process)")
    print(f"{'model':18s} {'cold capture':>13s} {'ops':>6s} {'cached load':>12s} {'(+imports)':>11s}")
    for model, kw in CASES:
        t = time.perf_counter()
        tr = get_trace(WorkloadSpec(model, **kw))
        cold = time.perf_counter() - t
        out = subprocess.run([sys.executable, "-c", CACHED.format(model=model, kw=kw)], capture_output=True,
                             text=True, env={**os.environ}, check=True).stdout.split()
        imp, load = float(out[0]), float(out[1])
        print(f"{model:18s} {cold:12.2f}s {len(tr.ops):6d} {load:11.3f}s {imp:10.3f}s")


if __name__ == "__main__":
    main()
