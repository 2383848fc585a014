"""Score predictions against published measurements (``whichgpu validate``).

Input: a CSV in the format of shared/validation/throughput.csv. Each row becomes a workload
(zoo model by its validation name, task, precision, batch, size), a GPU (catalog name) and a
plan (data-parallel GPU count). Predicted throughput is in the row's unit, over all GPUs.

Mapping choices (documented, generic):
* precision: "AMP", "AMP/FP16" -> the reference scripts' mixed precision for training (autocast,
  or an FP16 model with FP32 master weights where they use apex O2 / fairseq --fp16: the zoo
  entry's reference_mixed_precision), fp16 for inference; "FP16" likewise;
  "TF32" and "FP32 (TF32 likely active)" -> tf32; "FP32" -> fp32.
* blank batch -> the zoo entry's default batch for the precision (from the reference configs).
* node size: the GPU's scale-up domain when larger than 8 (16 for DGX-2), else 8; network between nodes: 100 Gb/s EDR per GPU
  for Volta-era systems, 200 Gb/s HDR for later ones (the DGX generations' fabrics).
* gradient accumulation where the reference training setup uses it (the zoo entry's
  accumulated batch, e.g. BERT pretraining), so the optimizer step and all-reduce are amortised.
* memory format and NCCL peer-to-peer as the reference harness ran them: NVIDIA's ConvNets use
  channels-last with AMP (the zoo entry's channels_last_precisions); Lambda's scripts pass no
  memory format (NCHW) and set NCCL_P2P_DISABLE=1.
* "TensorFlow1 (+XLA)" rows are modelled with fusion (compile); other TensorFlow rows as eager.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from whichgpu.errors import InputError, WhichGPUError
from whichgpu.hardware.catalog import Catalog
from whichgpu.hardware.spec import GpuSpec
from whichgpu.perf.plan import Plan
from whichgpu.workload.spec import WorkloadSpec
from whichgpu.workload.trace import Trace

REQUIRED = ("model", "task", "gpu", "gpu_count", "precision", "batch_size_per_gpu",
            "seq_len_or_image_size", "metric_unit", "value")
UNITS = ("images/s", "sequences/s", "tokens/s", "samples/s")


@dataclass
class Job:
    spec: WorkloadSpec
    gpu: GpuSpec
    plan: Plan
    unit: str
    measured: float | None


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
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "status": self.status, "predicted": self.predicted,
                "measured": self.measured, "error_pct": self.error_pct, "reason": self.reason,
                "model": self.model, "gpu": self.gpu, "precision": self.precision, "task": self.task,
                "gpu_count": self.gpu_count, "batch_size_per_gpu": self.batch, **self.extra}


def read_rows(path: str) -> list[dict[str, str]]:
    try:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
            if missing:
                raise InputError(f"{path}: missing column(s) {', '.join(missing)}; expected the columns of "
                                 "shared/validation/throughput.csv: " + ", ".join(REQUIRED))
            return list(reader)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None
    except csv.Error as e:
        raise InputError(f"{path}: malformed CSV ({e})") from None


def map_precision(p: str, task: str) -> str:
    k = p.strip().lower()
    if k in ("amp", "amp/fp16", "mixed"):
        return "amp-fp16"
    if k == "fp16":
        return "amp-fp16" if task == "train" else "fp16"
    if k in ("tf32", "fp32 (tf32 likely active)"):
        return "tf32"
    if k == "fp32":
        return "fp32"
    if k in ("bf16", "amp-bf16", "amp/bf16"):
        return "amp-bf16"
    if k == "fp8":
        return "fp8"
    raise InputError(f"unknown precision {p!r}; expected AMP, AMP/FP16, FP16, TF32, FP32, BF16 or FP8")


def row_job(row: dict[str, str], catalog: Catalog) -> Job:
    from whichgpu.workload.zoo import get_entry

    entry = get_entry(row["model"])
    task = row["task"].strip().lower()
    if task not in ("train", "infer"):
        raise InputError(f"task must be train or infer, got {row['task']!r}")
    if task == "infer" and entry.infer_benchmark:
        raise WhichGPUError(f"{entry.title} inference is measured as {entry.infer_benchmark}; the zoo traces "
                            "one forward pass, so autoregressive generation is not modelled")
    gpu = catalog.get(row["gpu"])
    prec = map_precision(row["precision"], task)
    if prec == "amp-fp16" and task == "train":
        prec = entry.reference_mixed_precision
    n = int(row["gpu_count"] or 1)
    if n < 1:
        raise InputError(f"gpu_count must be >= 1, got {n}")
    b = int(row["batch_size_per_gpu"]) if row["batch_size_per_gpu"].strip() else None
    size = int(row["seq_len_or_image_size"]) if row["seq_len_or_image_size"].strip() else None
    seq = size if entry.input_kind == "tokens" else None
    img = size if entry.input_kind == "image" else None
    unit = row["metric_unit"].strip()
    if unit not in UNITS:
        raise InputError(f"metric_unit must be one of {', '.join(UNITS)}, got {unit!r}")
    val = row["value"].strip()
    measured = float(val) if val else None
    per_node = max(8, gpu.scaleup_domain_gpus or 8)
    network = "ib-edr-100" if gpu.architecture == "volta" else "ib-hdr-200"
    compile_ = "xla" in row.get("framework", "").lower()
    # Lambda's harness (lambdal/deeplearning-benchmark pytorch/scripts/benchmark_pytorch.sh and
    # config_v1/*.sh) runs NVIDIA's scripts without --memory-format and with NCCL_P2P_DISABLE=1.
    lambda_harness = "lambdal" in row.get("source_repo", "").lower()
    options: tuple[tuple[str, object], ...] = ()
    if entry.input_kind == "image" and prec in entry.channels_last_precisions and not lambda_harness:
        options = (("memory_format", "channels_last"),)
    spec = WorkloadSpec(model=entry.id, task=task, batch_size=b, seq_len=seq, image_size=img, precision=prec,
                        options=options)
    accum = entry.grad_accum(b or entry.default_batch(prec), size) if task == "train" else 1
    plan = Plan(gpus=n, gpus_per_node=per_node, network=network, compile=compile_, grad_accum=accum,
                p2p=not lambda_harness)
    return Job(spec, gpu, plan, unit, measured)


def predicted_value(trace: Trace, est_samples: float, est_tokens: float, unit: str) -> float:
    if unit == "tokens/s":
        if not trace.tokens:
            raise InputError(f"{trace.model} does not count tokens; the row asks for tokens/s")
        return est_tokens
    return est_samples


@dataclass
class Validation:
    rows: list[RowResult]
    summary: dict[str, Any]


def _ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas * 100.0


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


def percentile(v: list[float], q: float) -> float:
    if not v:
        return math.nan
    s = sorted(v)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(results: list[RowResult]) -> dict[str, Any]:
    scored = [r for r in results if r.status == "ok" and r.error_pct is not None]
    errs = [r.error_pct for r in scored if r.error_pct is not None]

    def group(key: Callable[[RowResult], str]) -> dict[str, dict[str, float]]:
        g: dict[str, list[float]] = defaultdict(list)
        for r in scored:
            g[key(r)].append(r.error_pct or 0.0)
        return {k: {"rows": len(v), "median_ape": percentile(v, 0.5), "p90_ape": percentile(v, 0.9)}
                for k, v in sorted(g.items())}

    # GPU rank correlation within groups of like-for-like rows with >= 3 GPUs.
    groups: dict[tuple[Any, ...], dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for r in scored:
        key = (r.model, r.task, r.precision, r.batch, r.extra.get("size", ""), r.gpu_count)
        groups[key][r.gpu].append((r.predicted or 0.0, r.measured or 0.0))
    rhos = []
    for gpus in groups.values():
        if len(gpus) >= 3:
            pred = [sum(p for p, _ in v) / len(v) for v in gpus.values()]
            meas = [sum(m for _, m in v) / len(v) for v in gpus.values()]
            rhos.append(_spearman(pred, meas))
    n = len(results)
    modelled = sum(1 for r in results if r.status == "ok")
    return {
        "rows": n,
        "modelled": modelled,
        "modelled_fraction": modelled / n if n else 0.0,
        "scored": len(scored),
        "median_ape": percentile(errs, 0.5),
        "p90_ape": percentile(errs, 0.9),
        "mean_log_error": (sum(abs(math.log((r.predicted or 1) / (r.measured or 1))) for r in scored) / len(scored)) if scored else math.nan,
        "rank_groups": len(rhos),
        "rank_correlation": sum(rhos) / len(rhos) if rhos else math.nan,
        "by_model": group(lambda r: r.model),
        "by_gpu": group(lambda r: r.gpu),
        "by_precision": group(lambda r: r.precision),
        "by_task": group(lambda r: r.task),
    }


def run(rows: Iterable[dict[str, str]], catalog: Catalog, params: Any = None,
        trace_of: Callable[[WorkloadSpec], Trace] | None = None,
        progress: Callable[[int, int], None] | None = None) -> Validation:
    """Predict every row; score those with a value."""
    from whichgpu.perf.estimate import estimate
    from whichgpu.workload.api import get_trace

    get = trace_of or get_trace
    rows = list(rows)
    results: list[RowResult] = []
    failed: dict[Any, str] = {}
    for i, row in enumerate(rows):
        if progress:
            progress(i, len(rows))
        count = int(row.get("gpu_count") or 1) if (row.get("gpu_count") or "1").isdigit() else 1
        base: dict[str, Any] = dict(model=row.get("model", ""), gpu=row.get("gpu", ""),
                                    precision=row.get("precision", ""), task=row.get("task", ""),
                                    gpu_count=count, batch=row.get("batch_size_per_gpu", ""))
        try:
            job = row_job(row, catalog)
            key = job.spec
            if key in failed:
                raise WhichGPUError(failed[key])
            try:
                trace = get(job.spec)
            except WhichGPUError as e:
                failed[key] = str(e)
                raise
            est = estimate(trace, job.gpu, job.plan, params)
            pred = predicted_value(trace, est.samples_per_s, est.tokens_per_s, job.unit)
            err = _ape(pred, job.measured) if job.measured else None
            results.append(RowResult(i, "ok", pred, job.measured, err, "", **base,
                                     extra={"size": row.get("seq_len_or_image_size", ""), "bound": est.bound,
                                            "gpu_id": job.gpu.id, "step_s": est.step_s}))
        except (WhichGPUError, ValueError) as e:
            val = row.get("value", "").strip()
            results.append(RowResult(i, "unmodelled", None, float(val) if _isfloat(val) else None, None,
                                     str(e), **base))
    return Validation(results, summarize(results))


def _isfloat(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False
