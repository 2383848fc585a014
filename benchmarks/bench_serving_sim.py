"""Timings of the serving scheduler simulation (no assertions).

Run: ``python benchmarks/bench_serving_sim.py [--repeat N]``. Simulates 2,000 requests of 1,000
prompt and ~1,000 answer tokens (answers drawn from 900-1,100) on a vLLM-like engine (256
sequences, 2,048-token budget, 16-token blocks) with an analytic step time (8 ms + 20 us a token +
2 ns per cached position a decode reads + attention pairs of prefill), closed loop at several
concurrencies and Poisson at several rates (and a TensorRT-LLM-like engine, one of 8 attention-DP
groups, with and without its attention-DP balancing), and prints the median wall time of ``--repeat`` runs
with what each run simulated. Then the same requests with the performance model's step time, as
``whichgpu serve`` runs them: Llama-3.1-8B under vLLM's defaults on one H100 SXM5 (25,594 KV
blocks) and on one L4 (2,321 blocks: about 18 requests fit, so most are preempted at least once),
each run with a new step model (empty memo tables, as a new command starts). Target (issue 13):
at most 0.5 s per 2,000-request simulation.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.system import load_systems, resolve_system
from whichgpu.serving import (
    AffineStepTime,
    ClosedLoop,
    Poisson,
    RequestLengths,
    SchedulerConfig,
    Workload,
    simulate,
    vllm_batch_defaults,
)
from whichgpu.serving.batch import StepTime
from whichgpu.serving.model import Setup, build

N = 2000
STEP = AffineStepTime(base_s=8e-3, per_token_s=20e-6, per_context_s=2e-9, per_attention_pair_s=1e-12)


def _lengths(seed: int = 0) -> RequestLengths:
    rng = np.random.default_rng(seed)
    return RequestLengths(np.full(N, 1000), rng.integers(900, 1101, N))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    repeat = ap.parse_args().repeat
    lengths = _lengths()
    cases: list[tuple[str, Workload, SchedulerConfig]] = []
    roomy = SchedulerConfig(num_blocks=200_000, max_num_seqs=256, max_num_batched_tokens=2048)
    tight = SchedulerConfig(num_blocks=8_000, max_num_seqs=256, max_num_batched_tokens=2048)
    for c in (1, 16, 64, 256):
        cases.append((f"closed C={c}", Workload(lengths, ClosedLoop(c)), roomy))
    cases.append(("closed C=256 tight KV", Workload(lengths, ClosedLoop(256)), tight))
    for rate in (1.0, 5.0, 20.0):
        cases.append((f"poisson {rate:g}/s", Workload(lengths, Poisson(rate, seed=1)), roomy))
    cases.append(("poisson 20/s tight KV", Workload(lengths, Poisson(20.0, seed=1)), tight))
    # TensorRT-LLM-like (whole prompts, no eviction), one of 8 attention-DP groups, without and with
    # its attention-DP balancing (timeout_iters 50, batching_wait_iters 10): held steps go one at a time
    trt = SchedulerConfig(num_blocks=200_000, max_num_seqs=256, max_num_batched_tokens=4096, no_evict=True,
                          chunked_prefill=False, adp_groups=8)
    for name, cfg in (("trt C=32", trt), ("trt C=32 adp balance", replace(trt, adp_balance=(50, 10)))):
        cases.append((name, Workload(lengths, ClosedLoop(32)), cfg))
    print("analytic step time (8 ms + 20 us a token + 2 ns per cached position read)")
    _header()
    for name, wl, cfg in cases:
        _time(name, wl, lambda: STEP, cfg, repeat)
    print("\nperformance model: Llama-3.1-8B, vLLM defaults, bf16")
    _header()
    for gpu_id, label in (("h100-sxm5-80gb", "H100"), ("l4", "L4")):
        make, cfg = _real(gpu_id)
        for name, arrival in (("closed C=64", ClosedLoop(64)), ("poisson 5/s", Poisson(5.0, seed=1)),
                              ("poisson 50/s", Poisson(50.0, seed=1))):
            _time(f"{label} {name}", Workload(lengths, arrival), make, cfg, repeat)


def _real(gpu_id: str) -> tuple[Callable[[], StepTime], SchedulerConfig]:
    """A fresh step model for ``gpu_id`` (a callable: one per run) and vLLM's default scheduler."""
    gpu = load_catalog(None).get(gpu_id)
    setup = Setup("llama-3.1-8b", gpu, resolve_system(gpu, None, load_systems(None)))
    sm = build(setup)
    mbt, mns = vllm_batch_defaults(int(gpu.usable_memory_bytes), gpu.name)
    cap = sm.capacity(max_seq_len=2100, max_num_batched_tokens=mbt, max_num_seqs=mns)
    cfg = SchedulerConfig.from_capacity(cap, max_num_seqs=mns, max_num_batched_tokens=mbt,
                                        cpu_overhead_s=sm.cpu_overhead_s)
    return (lambda: build(setup).step_time), cfg


def _header() -> None:
    print(f"{'case':24} {'median s':>9} {'min s':>7} {'steps':>9} {'preempt':>8} {'req/s':>7} "
          f"{'TTFT p50 ms':>12} {'TPOT p50 ms':>12}")


def _time(name: str, wl: Workload, step: Callable[[], StepTime], cfg: SchedulerConfig, repeat: int) -> None:
    times = []
    for _ in range(repeat):
        st = step()
        t0 = time.perf_counter()
        r = simulate(wl, st, cfg)
        times.append(time.perf_counter() - t0)
    print(f"{name:24} {statistics.median(times):9.3f} {min(times):7.3f} {r.steps:9d} {r.preemptions:8d} "
          f"{r.requests_per_s:7.2f} {r.ttft.p50 * 1e3:12.1f} {r.tpot.p50 * 1e3:12.2f}", flush=True)


if __name__ == "__main__":
    main()
