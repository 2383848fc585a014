"""Fit the performance model's generic parameters on the dev validation set.

    python scripts/fit_params.py --data ../shared/validation/throughput.csv [--write]

Objective: median(|ln(pred/meas)|) + 0.5 * p90(|ln(pred/meas)|) over every scored row.
Method: coordinate descent in log space with shrinking steps (deterministic, no extra
dependencies), within physical bounds. Only the parameters in FITTED are fitted; the others keep
their documented values (NCCL efficiency is measured; 2:4 speed-up has no dev rows).
Writes src/whichgpu/perf/params.toml (values + fit metadata) with --write.
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
import time
from pathlib import Path

from whichgpu.hardware.catalog import load_catalog
from whichgpu.measure.validate import predicted_value, read_rows, row_job
from whichgpu.perf.estimate import estimate
from whichgpu.perf.params import PARAMS_FILE, PerfParams, load_params
from whichgpu.workload.api import get_trace

# name -> (low, high)
FITTED: dict[str, tuple[float, float]] = {
    # Bounds are physical priors: what a GPU kernel or a training loop can plausibly do.
    "mm_ceiling": (0.50, 0.95),
    "fp32_ceiling": (0.50, 0.95),
    "tf32_factor": (0.40, 1.00),
    "conv_factor": (0.40, 1.00),
    "direct_conv_factor": (0.05, 1.00),
    "attention_factor": (0.30, 1.00),
    "k_half": (4.0, 256.0),
    "mem_ceiling": (0.60, 0.95),
    "mem_half_bytes": (1e5, 2e7),
    "l2_speedup": (1.0, 4.0),
    "kernel_latency_us": (1.0, 8.0),
    "cpu_op_us": (3.0, 60.0),
    "cpu_view_us": (0.5, 10.0),
    "train_step_ms": (0.0, 10.0),
    "infer_step_ms": (0.0, 10.0),
    "ddp_overlap": (0.0, 1.0),
    "dp_jitter": (0.0, 0.2),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/validation/throughput.csv")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--min-step", type=float, default=1.02)
    args = ap.parse_args()

    rows = read_rows(args.data)
    cat = load_catalog()
    jobs = []
    traces = {}
    for r in rows:
        try:
            job = row_job(r, cat)
            if job.measured is None:
                continue
            if job.spec not in traces:
                traces[job.spec] = get_trace(job.spec)
            jobs.append(job)
        except Exception as e:  # unmodelled rows are not fitted
            print(f"skip: {r['model']} {r['gpu']}: {e}", file=sys.stderr)
    # Identical (trace, gpu, plan) rows share one prediction.
    uniq: dict[tuple[object, ...], list[float]] = {}
    for j in jobs:
        uniq.setdefault((j.spec, j.gpu.id, j.plan, j.unit), []).append(j.measured or 0.0)
    gpus = {g.id: g for g in cat}
    print(f"{len(jobs)} scored rows, {len(uniq)} distinct predictions, {len(traces)} traces", file=sys.stderr)

    def objective(p: PerfParams) -> tuple[float, float, float]:
        errs: list[float] = []
        for (spec, gid, plan, unit), meas in uniq.items():
            tr = traces[spec]
            est = estimate(tr, gpus[gid], plan, p, top=0)
            pred = predicted_value(tr, est.samples_per_s, est.tokens_per_s, unit)
            errs.extend(abs(math.log(pred / m)) for m in meas)
        errs.sort()
        med = errs[len(errs) // 2]
        p90 = errs[int(0.9 * (len(errs) - 1))]
        return med + 0.5 * p90, med, p90

    p = load_params()
    best, med, p90 = objective(p)
    print(f"start: J={best:.4f} median|ln|={med:.4f} p90|ln|={p90:.4f}", file=sys.stderr)
    step = 1.6
    t0 = time.time()
    evals = 0
    while step > args.min_step:
        improved = True
        while improved:
            improved = False
            for name, (lo, hi) in FITTED.items():
                cur = getattr(p, name)
                for f in (step, 1 / step):
                    val = min(hi, max(lo, cur * f if cur > 0 else lo + (hi - lo) * 0.01))
                    if val == cur:
                        continue
                    cand = p.with_values(**{name: val})
                    j, m, q = objective(cand)
                    evals += 1
                    if j < best - 1e-6:
                        best, med, p90, p = j, m, q, cand
                        improved = True
                        print(f"  {name}={val:.4g}  J={best:.4f} median|ln|={med:.4f} p90|ln|={p90:.4f}"
                              f"  ({evals} evals, {time.time() - t0:.0f}s)", file=sys.stderr)
                        break
        step = math.sqrt(step)
        print("params: " + ", ".join(f"{k}={v:.4g}" for k, v in p.as_dict().items()), file=sys.stderr)
    print(f"done: J={best:.4f}, median APE ~{100 * (math.exp(med) - 1):.1f}%, p90 ~{100 * (math.exp(p90) - 1):.1f}%",
          file=sys.stderr)
    for k, v in p.as_dict().items():
        print(f"{k} = {v:.6g}")
    if args.write:
        write(p, len(jobs), best, med, p90, args.data)


def write(p: PerfParams, n: int, j: float, med: float, p90: float, data: str) -> None:
    text = Path(PARAMS_FILE).read_text()
    head, _, rest = text.partition("[fit]")
    lines = rest.splitlines()
    out = [head.rstrip() + "\n", "[fit]",
           f'source = "scripts/fit_params.py on {Path(data).name}, {datetime.date.today().isoformat()}"',
           f'objective = "median|ln(pred/meas)| + 0.5 * p90|ln(pred/meas)| = {j:.4f} (median {med:.4f}, p90 {p90:.4f})"',
           f"rows = {n}", ""]
    in_params = False
    for line in lines:
        if line.startswith("[params]"):
            in_params = True
            out.append(line)
            continue
        if in_params and "=" in line and not line.lstrip().startswith("#"):
            key = line.split("=", 1)[0].strip()
            if hasattr(p, key):
                out.append(f"{key} = {getattr(p, key):.6g}")
                continue
        if in_params:
            out.append(line)
    Path(PARAMS_FILE).write_text("\n".join(out) + "\n")
    print(f"wrote {PARAMS_FILE}", file=sys.stderr)


if __name__ == "__main__":
    main()
