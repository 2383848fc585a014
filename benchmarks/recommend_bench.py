"""Recommend speed: a full `whichgpu recommend` across the catalog, cold and warm.

    python benchmarks/recommend_bench.py [--repeat N]

Target (recommend issue): at most 5 s cold for Llama-3-8B LoRA fine-tuning across the catalog,
where cold = a new process and an empty trace cache (the traces of every precision the catalog's
cards need are captured on the meta device). Warm = the same command again, traces cached.
Each case runs in its own process, as a user runs it; the figure is the wall time of the process.
A command that loaded torch ends with os._exit (cli.main), skipping the interpreter's teardown
of torch (0.5-0.8 s); the timed process includes everything else. The machine's speed varies
(shared CPUs), so the run also times a fresh process importing torch (with its teardown), a cost
every cold capture pays: "ours" = cold minus that baseline. (The first meta-device capture in a
process also imports sympy, through PyTorch's shape checks: about 0.5 s of "ours".)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = [
    ("llama-3-8b LoRA, seq 2048, all GPUs, counts 1-8",
     ["llama-3-8b", "--finetune", "lora", "--checkpointing", "full", "--seq-len", "2048", "-b", "1"]),
    ("default preset (llm-finetune)", []),
]


def run(args: list[str], cache: str) -> tuple[float, dict[str, object]]:
    env = dict(os.environ, WHICHGPU_CACHE_DIR=cache)
    env.pop("WHICHGPU_CATALOG", None)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "whichgpu", "recommend", *args, "--json"], env=env,
                         capture_output=True, text=True, check=True)
    dt = time.perf_counter() - t
    return dt, json.loads(out.stdout)


def baseline() -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1, help="cold runs per case (the best is reported too)")
    opts = ap.parse_args()
    for label, args in CASES:
        colds = []
        bases = []
        for _ in range(opts.repeat):
            with tempfile.TemporaryDirectory(prefix="whichgpu-bench-") as cache:
                bases.append(baseline())
                cold, doc = run(args, cache)
                warm, _ = run(args, cache)
                colds.append(cold)
        rows = doc["rows"]
        configs = doc["configurations"]
        rejected = doc["cannot_run"]
        assert isinstance(rows, list) and isinstance(configs, list) and isinstance(rejected, list)
        ours = min(c - b for c, b in zip(colds, bases))
        print(f"{label:48s} cold {min(colds):5.2f} s best, {statistics.median(colds):.2f} s median "
              f"(runs: {', '.join(f'{c:.2f}' for c in colds)}), "
              f"warm {warm:5.2f} s, import torch {min(bases):.2f} s, ours {ours:.2f} s; "
              f"{len(rows)} GPUs run it, {len(configs)} configurations, {len(rejected)} cannot; target cold <= 5 s")


if __name__ == "__main__":
    main()
