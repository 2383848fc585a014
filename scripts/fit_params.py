"""Fit the performance model's generic parameters on the dev validation corpus.

    python scripts/fit_params.py --data tests/data [--write] [--only NAME,...] [--rounds N]

What is fitted: the generic physical parameters of src/whichgpu/perf/params.toml (per kernel
class, memory technology, launch path) and the numeric fields of the engine profiles that
their sources mark as fitted (hardware/engines/*.toml: host time per op and per step, the
speed of dequantising GEMMs). Never a per-model, per-GPU or per-row constant. Bounds are
physical priors. Fields tied to another engine's (a generated Python wrapper launches kernels
as eager PyTorch does) follow it.

Objective, over the rows that have a value and are not excluded (measure/exclusions.toml),
with e = ln(predicted / measured) in speed terms (latency rows: measured / predicted):
    for each corpus (throughput format, external format):
        median|e| + p90|e| + 0.5 * |median e|
    + the sum over GPUs with >= 7 rows of max(0, |median e| - ln 1.08)
    + 5 * how far each corpus's median / p90 absolute percentage error lies past its CI bound
The GPU term keeps a card from being predicted consistently fast or slow.

Method: coordinate descent in log space with shrinking steps (deterministic, no extra
dependencies); a trial value re-predicts only the rows the parameter moves (found once by
perturbing it). With --write, params.toml and the engine files get the fitted values and
params.toml's [fit] section records the run.
"""

from __future__ import annotations

import argparse
import datetime
import math
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from whichgpu.errors import WhichGPUError
from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.engine import ENGINES_DIR, Engine, load_engines
from whichgpu.measure.corpus import read_measurements
from whichgpu.measure.jobs import Job, row_job
from whichgpu.measure.predict import predict
from whichgpu.measure.validate import load_exclusions
from whichgpu.perf.params import PARAMS_FILE, PerfParams, load_params
from whichgpu.workload.api import get_trace

# name -> (low, high): physical priors.
FITTED: dict[str, tuple[float, float]] = {
    # Large GEMMs reach 60-90% of the dense peak (measured: A100 87%, H100 80%, B200 78%;
    # shared/validation/kernels.csv); FP32 SGEMM on CUDA cores similar.
    "mm_ceiling": (0.60, 0.90),
    "fp32_ceiling": (0.60, 0.95),
    "tf32_factor": (0.40, 1.00),
    "conv_factor": (0.50, 1.00),
    "direct_conv_factor": (0.05, 1.00),
    "direct_conv_bwd_factor": (0.05, 1.00),
    "attention_factor": (0.30, 1.00),
    "k_half": (4.0, 256.0),
    # Unaligned FP16 GEMMs: per SM and clock, between the FP32 lanes' rate (128-256) and the
    # tensor cores' (1,024-4,096 dense FP16 on Ampere/Hopper).
    "misaligned_flops_per_sm_clock": (128.0, 4096.0),
    # Large streaming kernels reach 80-95% of DRAM spec (STREAM-like copies on HBM and GDDR).
    "mem_ceiling_hbm": (0.80, 0.95),
    "mem_ceiling_gddr": (0.80, 0.95),
    "mem_ramp_us": (0.3, 10.0),
    "l2_speedup": (1.0, 4.0),
    "kernel_latency_us": (1.0, 8.0),
    "graph_kernel_us": (0.3, 4.0),
    "nchw_transpose_passes": (0.0, 4.0),
    "nchw_bwd_passes": (0.0, 4.0),
    "winograd_speedup": (1.0, 2.25),
    # GPU Boost runs GeForce/workstation cards 0-12% above their rated boost clock.
    "consumer_clock": (1.00, 1.12),
    # Watts per dense FP16 tensor TFLOP/s at the rated clock, per die family: a card exactly at
    # its TDP needs TDP / peak (V100 300 W / 125, A100 400 / 312, H100 700 / 989).
    "w_per_tflops_volta": (1.0, 8.0),
    "w_per_tflops_turing": (1.0, 12.0),
    "w_per_tflops_ga100": (0.5, 4.0),
    "w_per_tflops_ga10x": (1.0, 8.0),
    "w_per_tflops_ada": (0.4, 4.0),
    "w_per_tflops_hopper": (0.4, 4.0),
    "ddp_overlap": (0.0, 1.0),
    "dp_jitter": (0.0, 0.2),
    "tp_collective_us": (3.0, 60.0),
}
ENGINE_FITTED: dict[str, tuple[float, float]] = {
    "pytorch.host_op_us": (3.0, 60.0),
    "pytorch.host_view_us": (0.5, 15.0),
    "pytorch.step_host_ms_train": (0.0, 15.0),
    "pytorch.step_host_ms_infer": (0.0, 10.0),
    "torch-compile-graphs.step_host_ms_infer": (0.0, 3.0),
    "gpt-fast.quantized_bandwidth": (0.3, 1.0),
    "tensorrt-llm-0.6.host_op_us": (0.5, 10.0),
    "tensorrt-llm-0.6.step_host_ms_infer": (0.0, 3.0),
    "llama.cpp.host_op_us": (0.5, 15.0),
    "llama.cpp.step_host_ms_infer": (0.0, 5.0),
    "llama.cpp.quantized_bandwidth": (0.3, 1.0),
}
# engine field -> the fitted engine field it follows
TIES: dict[str, str] = {
    "torch-compile.host_op_us": "pytorch.host_op_us",
    "torch-compile.step_host_ms_train": "pytorch.step_host_ms_train",
    "torch-compile.step_host_ms_infer": "pytorch.step_host_ms_infer",
    "torch-compile-graphs.step_host_ms_train": "pytorch.step_host_ms_train",
    "gpt-fast.step_host_ms_train": "pytorch.step_host_ms_train",
    "gpt-fast.step_host_ms_infer": "torch-compile-graphs.step_host_ms_infer",
    "vllm.step_host_ms_infer": "torch-compile-graphs.step_host_ms_infer",
    "xla.step_host_ms_train": "pytorch.step_host_ms_train",
    "xla.step_host_ms_infer": "pytorch.step_host_ms_infer",
    "tensorrt-llm.host_op_us": "tensorrt-llm-0.6.host_op_us",
    "tensorrt-llm.step_host_ms_infer": "tensorrt-llm-0.6.step_host_ms_infer",
}
P90_WEIGHT = 1.0
# The CI bounds (median, p90 absolute percentage error as fractions) the fit must stay inside,
# kept with a margin: a hinge penalty grows past them.
BOUNDS = {"throughput": (0.140, 0.390), "external": (0.14, 0.38)}
HINGE = 5.0
GPU_WEIGHT = 1.0
GPU_MIN_ROWS = 7
GPU_TOLERANCE = math.log(1.08)

State = tuple[PerfParams, dict[str, float]]  # params, engine values "id.field" -> value


def engines_of(values: dict[str, float]) -> dict[str, Engine]:
    out: dict[str, Engine] = {}
    merged = dict(values)
    for dst, src in TIES.items():
        if src in merged:
            merged[dst] = merged[src]
    for e in load_engines():
        upd = {k.rsplit(".", 1)[1]: v for k, v in merged.items() if k.rsplit(".", 1)[0] == e.id}
        out[e.id] = replace(e, **upd) if upd else e
    return out


def engine_values() -> dict[str, float]:
    engs = {e.id: e for e in load_engines()}
    return {k: float(getattr(engs[k.rsplit(".", 1)[0]], k.rsplit(".", 1)[1])) for k in ENGINE_FITTED}


class Fitter:
    def __init__(self, jobs: list[Job], trace_of: Any) -> None:
        self.jobs = jobs
        self.trace_of = trace_of
        self.sign = [-1.0 if j.direction == "-" else 1.0 for j in jobs]
        self.fmt = ["throughput" if j.m.metric == "throughput" else "external" for j in jobs]
        self.gpu = [j.gpu.id for j in jobs]

    def errors(self, state: State, rows: list[int] | None = None, base: list[float] | None = None) -> list[float]:
        params, values = state
        engs = engines_of(values)
        out = list(base) if base is not None else [0.0] * len(self.jobs)
        for i in (range(len(self.jobs)) if rows is None else rows):
            j = self.jobs[i]
            p = predict(j, self.trace_of, params, engs)
            out[i] = self.sign[i] * math.log(p.value / (j.measured or 1.0))
        return out

    def objective(self, e: list[float]) -> tuple[float, dict[str, float]]:
        parts: dict[str, float] = {}
        total = 0.0
        for fmt in ("throughput", "external"):  # each corpus has its own bounds
            idx = [i for i, f in enumerate(self.fmt) if f == fmt]
            if not idx:
                continue
            v = [e[i] for i in idx]
            a = sorted(abs(x) for x in v)
            med, p90 = _pct(a, 0.5), _pct(a, 0.9)
            signed = _pct(sorted(v), 0.5)
            parts[f"{fmt}_median"], parts[f"{fmt}_p90"], parts[f"{fmt}_signed"] = med, p90, signed
            total += med + P90_WEIGHT * p90 + 0.5 * abs(signed)
            # The CI bounds are on the absolute percentage error in each row's unit: stay inside.
            ape = sorted(abs(math.exp(-e[i] if self.sign[i] < 0 else e[i]) - 1.0) for i in idx)
            bmed, bp90 = BOUNDS[fmt]
            total += HINGE * (max(0.0, _pct(ape, 0.5) - bmed) + max(0.0, _pct(ape, 0.9) - bp90))
        by: dict[str, list[float]] = {}
        for x, g in zip(e, self.gpu):
            by.setdefault(g, []).append(x)
        pen = [max(0.0, abs(_pct(sorted(v), 0.5)) - GPU_TOLERANCE) for v in by.values() if len(v) >= GPU_MIN_ROWS]
        parts["gpu_bias"] = sum(pen)
        total += GPU_WEIGHT * parts["gpu_bias"]
        return total, parts


def _pct(s: list[float], q: float) -> float:
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _with(state: State, name: str, value: float) -> State:
    params, values = state
    if name in ENGINE_FITTED:
        return params, {**values, name: value}
    return params.with_values(**{name: value}), values


def _get(state: State, name: str) -> float:
    params, values = state
    return values[name] if name in ENGINE_FITTED else float(getattr(params, name))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", action="append", default=None, help="CSV file or directory (repeatable)")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated parameter names to fit (default: all)")
    ap.add_argument("--min-step", type=float, default=1.02)
    ap.add_argument("--start-step", type=float, default=1.6)
    args = ap.parse_args()

    rows = read_measurements(args.data or ["tests/data"])
    excl = load_exclusions()
    cat = load_catalog()
    traces: dict[Any, Any] = {}

    def trace_of(spec: Any) -> Any:
        if spec not in traces:
            traces[spec] = get_trace(spec)
        return traces[spec]

    jobs: list[Job] = []
    for m in rows:
        if m.row_id in excl:
            continue
        try:
            job = row_job(m, cat)
            if job.measured is None or job.kind == "fits":
                continue
            predict(job, trace_of)
            jobs.append(job)
        except (WhichGPUError, ValueError) as e:
            print(f"skip {m.row_id}: {e}", file=sys.stderr)
    fitter = Fitter(jobs, trace_of)
    names = [n for n in (*FITTED, *ENGINE_FITTED) if not args.only or n in args.only.split(",")]
    bounds = {**FITTED, **ENGINE_FITTED}
    state: State = (load_params(), engine_values())
    t0 = time.time()
    e = fitter.errors(state)
    best, parts = fitter.objective(e)
    print(f"{len(jobs)} rows, {len(traces)} traces; one full evaluation {time.time() - t0:.1f} s", file=sys.stderr)
    print(f"start: J={best:.4f} " + _fmt(parts), file=sys.stderr)
    # Which rows each parameter moves (perturb once).
    affected: dict[str, list[int]] = {}
    for name in names:
        cur = _get(state, name)
        lo, hi = bounds[name]
        trial = cur * 1.1 if cur * 1.1 <= hi else cur / 1.1
        if trial == cur:
            trial = lo + (hi - lo) * 0.5
        moved = fitter.errors(_with(state, name, trial))
        affected[name] = [i for i, (a, b) in enumerate(zip(e, moved)) if abs(a - b) > 1e-12]
        print(f"  {name}: moves {len(affected[name])} rows", file=sys.stderr)
    step = args.start_step
    evals = 0
    while step > args.min_step:
        improved = True
        while improved:
            improved = False
            for name in names:
                if not affected[name]:
                    continue
                lo, hi = bounds[name]
                cur = _get(state, name)
                for f in (step, 1 / step):
                    val = min(hi, max(lo, cur * f if cur > 0 else lo + (hi - lo) * 0.02))
                    if val == cur:
                        continue
                    cand = _with(state, name, val)
                    ce = fitter.errors(cand, affected[name], e)
                    j, cparts = fitter.objective(ce)
                    evals += 1
                    if j < best - 1e-6:
                        best, parts, state, e = j, cparts, cand, ce
                        improved = True
                        print(f"  {name}={val:.4g}  J={best:.4f} {_fmt(parts)}  ({evals} evals, "
                              f"{time.time() - t0:.0f} s)", file=sys.stderr)
                        break
        step = math.sqrt(step)
        print(f"step {step:.4f}: " + ", ".join(f"{n}={_get(state, n):.4g}" for n in names), file=sys.stderr)
    print(f"done: J={best:.4f} {_fmt(parts)}", file=sys.stderr)
    for n in names:
        print(f"{n} = {_get(state, n):.6g}")
    if args.write:
        write(state, len(jobs), best, parts, args.data or ["tests/data"])


def _fmt(parts: dict[str, float]) -> str:
    def pc(x: float) -> str:
        return f"{100 * (math.exp(x) - 1):+.1f}%"

    return ", ".join(f"{k} {pc(v)}" if k.endswith("signed") or k == "gpu_bias" else f"{k} {100 * (math.exp(v) - 1):.1f}%"
                     for k, v in parts.items())


def write(state: State, n: int, j: float, parts: dict[str, float], data: list[str]) -> None:
    params, values = state
    text = Path(PARAMS_FILE).read_text()
    head, _, rest = text.partition("[fit]")
    out = [head.rstrip() + "\n", "[fit]",
           f'source = "scripts/fit_params.py on {", ".join(data)}, {datetime.date.today().isoformat()}"',
           f'objective = "per corpus median|e| + p90|e| + 0.5 |signed median| (+ hinge past the CI bounds), + GPU bias = {j:.4f}"',
           f'scores = "{_fmt(parts)} (as exp(|e|) - 1 of e = ln(pred / meas); whichgpu validate gives the APE)"',
           f"rows = {n}", ""]
    in_params = False
    for line in rest.splitlines():
        if line.startswith("[params]"):
            in_params = True
            out.append(line)
            continue
        if in_params and "=" in line and not line.lstrip().startswith("#"):
            key = line.split("=", 1)[0].strip()
            if hasattr(params, key):
                out.append(f"{key} = {getattr(params, key):.6g}")
                continue
        if in_params:
            out.append(line)
    Path(PARAMS_FILE).write_text("\n".join(out) + "\n")
    merged = dict(values)
    for dst, src in TIES.items():
        merged[dst] = merged[src]
    by_engine: dict[str, dict[str, float]] = {}
    for k, v in merged.items():
        eid, field = k.rsplit(".", 1)
        by_engine.setdefault(eid, {})[field] = v
    for path in sorted(ENGINES_DIR.glob("*.toml")):
        t = path.read_text()
        eid = re.search(r'^id = "([^"]+)"', t, re.M)
        if not eid or eid.group(1) not in by_engine:
            continue
        for field, v in by_engine[eid.group(1)].items():
            t = re.sub(rf"^{field} = .*$", f"{field} = {v:.4g}", t, count=1, flags=re.M)
        path.write_text(t)
    print(f"wrote {PARAMS_FILE} and the engine files", file=sys.stderr)


if __name__ == "__main__":
    main()
