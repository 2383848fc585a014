"""Timing of the SLO rate search of `whichgpu serve` (no assertions).

Run: ``python benchmarks/bench_serving_slo.py [--repeat N]``. Llama-3.1-8B on one H100 SXM5
(DGX H100), vLLM defaults (8,192-token budget, 1,024 sequences, gpu_memory_utilization 0.9),
1,000-token prompts and answers; SLOs TTFT P90 <= 500 ms and TPOT P90 <= 20 ms. One search is
what the command does for them: the saturation ceiling (a closed loop at the largest concurrency
the KV cache holds), the lone-request floor, then the bracket narrowed by Poisson probes
(serving/slo.py). Prints the median wall time of ``--repeat`` searches with the answer and the
number of probes; also the time of one probe. Target (issue 13): at most 3 s per search.
"""

from __future__ import annotations

import argparse
import statistics
import time

from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.system import load_systems, resolve_system
from whichgpu.serving import SchedulerConfig, fixed_lengths, vllm_batch_defaults
from whichgpu.serving.model import Setup, build
from whichgpu.serving.slo import (
    Slo,
    SloSearch,
    idle_run,
    poisson_runner,
    probe_requests,
    saturation_rate,
    search_max_rate,
)

INPUT_LEN = OUTPUT_LEN = 1000


def one_search(slo: Slo) -> tuple[SloSearch, int]:
    gpu = load_catalog(None).get("h100-sxm5-80gb")
    sm = build(Setup("llama-3.1-8b", gpu, resolve_system(gpu, None, load_systems(None))))
    mbt, mns = vllm_batch_defaults(int(gpu.usable_memory_bytes), gpu.name)
    cap = sm.capacity(max_seq_len=INPUT_LEN + OUTPUT_LEN, max_num_batched_tokens=mbt, max_num_seqs=mns)
    cfg = SchedulerConfig.from_capacity(cap, max_num_seqs=mns, max_num_batched_tokens=mbt,
                                        cpu_overhead_s=sm.cpu_overhead_s)
    conc = max(1, min(mns, int(cap.max_concurrency)))
    n = probe_requests(conc)
    reqs = fixed_lengths(INPUT_LEN, OUTPUT_LEN, n)
    ceiling = saturation_rate(reqs, sm.step_time, cfg, conc).requests_per_s
    res = search_max_rate(poisson_runner(reqs, sm.step_time, cfg, seed=0), slo, ceiling,
                          idle=idle_run(reqs, sm.step_time, cfg))
    return res, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    repeat = ap.parse_args().repeat
    print(f"Llama-3.1-8B, 1 x H100 SXM5, vLLM defaults, {INPUT_LEN} prompt + {OUTPUT_LEN} answer tokens")
    print(f"{'SLO':36} {'median s':>9} {'min s':>7} {'probes':>7} {'requests/probe':>15} {'max rate/s':>11}")
    for slo in (Slo(ttft_s=0.5, tpot_s=0.02), Slo(ttft_s=0.2, tpot_s=0.015), Slo(tpot_s=0.05, percentile=99)):
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            res, n = one_search(slo)
            times.append(time.perf_counter() - t0)
        name = ", ".join(f"{k} P{slo.percentile} <= {v * 1e3:g} ms" for k, v in (("TTFT", slo.ttft_s),
                                                                                 ("TPOT", slo.tpot_s)) if v)
        rate = "none" if res.max_rate_per_s is None else f"{res.max_rate_per_s:.3f}" + (" cap" if res.capped else "")
        print(f"{name:36} {statistics.median(times):9.3f} {min(times):7.3f} {len(res.probes):7d} {n:15d} {rate:>11}")


if __name__ == "__main__":
    main()
