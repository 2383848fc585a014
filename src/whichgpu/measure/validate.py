"""Score predictions against published measurements (``whichgpu validate``).

Reads one or more CSV files (``measure/corpus.py``: the throughput format and the external
format), turns each row into a prediction (``measure/jobs.py``, ``measure/predict.py``) and
scores the rows that have a value:

* ``error_pct``: absolute percentage error in the row's own unit, |pred - meas| / meas;
* ``signed_pct``: positive when the prediction is faster than measured (more throughput, less
  latency) or, for memory and sizes, larger: 100 (pred / meas - 1), or 100 (meas / pred - 1) for
  latencies;
* ``fits`` rows (out-of-memory labels) are scored as right or wrong, not in the error figures.

Rows listed in ``measure/exclusions.toml`` (shown to be inconsistent within their own source)
are scored and shown, but left out of the bound figures (``bounded``); the report lists them with
the reason. A row that cannot be modelled is reported with the reason, never dropped.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whichgpu.errors import InputError, WhichGPUError
from whichgpu.hardware.catalog import Catalog, read_toml
from whichgpu.hardware.system import System
from whichgpu.measure.corpus import Measurement, read_measurements
from whichgpu.measure.jobs import METRICS, row_job
from whichgpu.measure.predict import predict
from whichgpu.workload.spec import WorkloadSpec
from whichgpu.workload.trace import Trace

EXCLUSIONS_FILE = Path(__file__).with_name("exclusions.toml")


@dataclass
class RowResult:
    index: int
    status: str  # "ok" | "unmodelled"
    predicted: float | None
    measured: float | None
    error_pct: float | None
    reason: str
    model: str
    gpu: str
    precision: str
    task: str
    gpu_count: int
    batch: str
    file: str = ""
    row_id: str = ""
    source: str = ""
    metric: str = ""
    unit: str = ""
    engine: str = ""
    signed_pct: float | None = None
    excluded: str = ""  # reason the row is left out of the bound figures ("" = bounded)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def bounded(self) -> bool:
        return self.status == "ok" and self.error_pct is not None and not self.excluded

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "status": self.status, "predicted": self.predicted,
                "measured": self.measured, "error_pct": self.error_pct, "signed_pct": self.signed_pct,
                "reason": self.reason, "excluded": self.excluded or None, "file": self.file,
                "row_id": self.row_id, "source": self.source, "metric": self.metric, "unit": self.unit,
                "engine": self.engine, "model": self.model, "gpu": self.gpu, "precision": self.precision,
                "task": self.task, "gpu_count": self.gpu_count, "batch_size_per_gpu": self.batch, **self.extra}


@dataclass
class Validation:
    rows: list[RowResult]
    summary: dict[str, Any]


def load_exclusions(path: Path | None = None) -> dict[str, str]:
    """row_id -> reason, from measure/exclusions.toml."""
    p = path or EXCLUSIONS_FILE
    if not p.is_file():
        return {}
    raw = read_toml(p)
    return {str(e["row_id"]): str(e["reason"]) for e in raw.get("exclude", [])}


def percentile(v: list[float], q: float) -> float | None:
    """The `q` quantile of `v` by linear interpolation; None (never NaN) when `v` is empty."""
    if not v:
        return None
    s = sorted(v)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def stats(rows: Iterable[RowResult]) -> dict[str, float | None]:
    """Row count, median and p90 absolute error and median signed error (None without rows)."""
    rs = list(rows)
    ape = [r.error_pct for r in rs if r.error_pct is not None]
    sg = [r.signed_pct for r in rs if r.signed_pct is not None]
    return {"rows": len(ape), "median_ape": percentile(ape, 0.5), "p90_ape": percentile(ape, 0.9),
            "signed_median": percentile(sg, 0.5)}


def _spearman(xs: list[float], ys: list[float]) -> float:
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2.0
            i = j + 1
        return r

    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return num / den if den else 0.0


def fmt_of(r: RowResult) -> str:
    return "throughput" if r.metric == "throughput" else "external"


GROUPS: dict[str, Callable[[RowResult], str]] = {
    "by_format": fmt_of,
    "by_source": lambda r: r.source,
    "by_file": lambda r: r.file,
    "by_metric": lambda r: r.metric,
    "by_engine": lambda r: r.engine,
    "by_gpu": lambda r: str(r.extra.get("gpu_id") or r.gpu),
    "by_model": lambda r: r.model,
    "by_precision": lambda r: r.precision,
    "by_task": lambda r: r.task,
}


def summarize(results: list[RowResult]) -> dict[str, Any]:
    """The scores of a run. A figure with nothing to score (no bounded rows, no group of one
    configuration on >= 3 GPUs, no fits rows) is None, never NaN: the summary is strict JSON."""
    scored = [r for r in results if r.status == "ok" and r.error_pct is not None]
    bounded = [r for r in scored if not r.excluded]
    out: dict[str, Any] = {}
    n = len(results)
    modelled = sum(1 for r in results if r.status == "ok")
    out.update(rows=n, modelled=modelled, modelled_fraction=modelled / n if n else 0.0, scored=len(scored))
    whole = stats(bounded)
    out.update(median_ape=whole["median_ape"], p90_ape=whole["p90_ape"], signed_median=whole["signed_median"],
               bounded=len(bounded))
    out["all_scored"] = stats(scored)
    out["mean_log_error"] = (sum(abs(math.log((r.predicted or 1) / (r.measured or 1))) for r in bounded)
                             / len(bounded)) if bounded else None
    for name, key in GROUPS.items():
        g: dict[str, list[RowResult]] = defaultdict(list)
        for r in bounded:
            g[key(r)].append(r)
        out[name] = {k: stats(v) for k, v in sorted(g.items())}
    # GPU rank correlation within groups of like-for-like rows measured on >= 3 GPUs.
    groups: dict[tuple[Any, ...], dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for r in bounded:
        gkey = (r.source, r.metric, r.model, r.task, r.precision, r.batch, r.engine, r.gpu_count,
                r.extra.get("size", ""), r.extra.get("setting", ""))
        groups[gkey][str(r.extra.get("gpu_id") or r.gpu)].append((r.predicted or 0.0, r.measured or 0.0))
    rhos = []
    for gpus in groups.values():
        if len(gpus) >= 3:
            pred = [sum(p for p, _ in v) / len(v) for v in gpus.values()]
            meas = [sum(m for _, m in v) / len(v) for v in gpus.values()]
            rhos.append(_spearman(pred, meas))
    out["rank_groups"] = len(rhos)
    out["rank_correlation"] = sum(rhos) / len(rhos) if rhos else None  # None: no group, never NaN
    fits = [r for r in results if r.status == "ok" and r.metric == "fits" and r.measured is not None]
    right = sum(1 for r in fits if r.predicted == r.measured)
    out["fits"] = {"rows": len(fits), "correct": right, "accuracy": right / len(fits) if fits else None}
    out["excluded"] = [{"row_id": r.row_id, "file": r.file, "reason": r.excluded} for r in scored if r.excluded]
    out["unmodelled_reasons"] = dict(sorted(_reasons(results).items(), key=lambda kv: -kv[1]))
    return out


def _reasons(results: list[RowResult]) -> dict[str, int]:
    c: dict[str, int] = defaultdict(int)
    for r in results:
        if r.status != "ok":
            c[r.reason] += 1
    return c


def _errors(pred: float, meas: float, direction: str) -> tuple[float, float]:
    if not (math.isfinite(pred) and pred > 0):  # a row's reason, not a division by zero or a NaN score
        raise WhichGPUError(f"the prediction is {pred!r}, not a positive number; the row cannot be scored")
    ape = abs(pred - meas) / meas * 100.0
    signed = (meas / pred - 1.0) * 100.0 if direction == "-" else (pred / meas - 1.0) * 100.0
    return ape, signed


def read_rows(path: str) -> list[Measurement]:
    """The measurements of one file or directory (kept for callers of the one-file API)."""
    return read_measurements([path])


def run(rows: Iterable[Measurement], catalog: Catalog, params: Any = None,
        trace_of: Callable[[WorkloadSpec], Trace] | None = None,
        progress: Callable[[int, int], None] | None = None,
        exclusions: dict[str, str] | None = None, system: System | None = None) -> Validation:
    """Predict every row; score those with a value. `system` replaces the default system of the
    rows on its GPU (every row for a generic chassis)."""
    from whichgpu.workload.api import get_trace

    get = trace_of or get_trace
    excl = load_exclusions() if exclusions is None else exclusions
    rows = list(rows)
    failed: dict[WorkloadSpec, str] = {}

    def traced(spec: WorkloadSpec) -> Trace:
        if spec in failed:
            raise WhichGPUError(failed[spec])
        try:
            return get(spec)
        except WhichGPUError as e:
            failed[spec] = str(e)
            raise

    results: list[RowResult] = []
    for i, m in enumerate(rows):
        if progress:
            progress(i, len(rows))
        count = int(m.gpu_count) if m.gpu_count.isdigit() else 1
        base: dict[str, Any] = dict(model=m.model, gpu=m.gpu, precision=m.precision, task=m.task, gpu_count=count,
                                    batch=m.batch, file=m.file, row_id=m.row_id, source=m.source, metric=m.metric,
                                    unit=m.unit)
        extra: dict[str, Any] = {"size": m.size or m.seq_len or m.image_size,
                                 "setting": ";".join(f"{k}={v}" for k, v in m.settings)}
        try:
            job = row_job(m, catalog, system)
            p = predict(job, traced, params)
            ape = signed = None
            if job.measured is not None and job.kind != "fits":
                ape, signed = _errors(p.value, job.measured, job.direction)
            extra.update(bound=p.bound, gpu_id=job.gpu.id, step_s=p.step_s, kind=job.kind, **p.details,
                         band_kind=BAND_KINDS.get(job.kind, job.spec.task), family=_family(job.spec.model),
                         architecture=job.gpu.architecture, policy=job.spec.precision, policy_task=job.spec.task)
            results.append(RowResult(i, "ok", p.value, job.measured, ape, "", engine=job.engine, signed_pct=signed,
                                     excluded=excl.get(m.row_id, "") if ape is not None else "", extra=extra, **base))
        except (WhichGPUError, ValueError) as e:
            results.append(RowResult(i, "unmodelled", None, _maybe_float(m.value), None, str(e), extra=extra,
                                     **base))
    return Validation(results, summarize(results))


# A row's kind of step, as the error bands classify it (perf/bands.py).
BAND_KINDS = {"prefill": "prefill", "ttft": "prefill", "decode": "decode", "serve": "serve", "memory": "memory",
              "weights": "weights", "fits": "fits"}


def _family(model: str) -> str:
    from whichgpu.workload.zoo import get_entry

    try:
        return get_entry(model).family
    except WhichGPUError:
        return "other"


def _maybe_float(s: str) -> float | None:
    try:
        x = float(s)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


__all__ = ["METRICS", "InputError", "RowResult", "Validation", "load_exclusions", "percentile", "read_rows", "run",
           "stats", "summarize"]
