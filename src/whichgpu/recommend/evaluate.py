"""One GPU kind against the request: its precision, the counts its power allows, the layout that
fits at each count, the predicted step, or why it cannot run the job."""

from __future__ import annotations

from dataclasses import dataclass, field

from whichgpu.errors import BatchTooSmallError, WhichGPUError
from whichgpu.hardware.spec import GpuSpec
from whichgpu.memory.search import doubling
from whichgpu.parallel.plan import LABELS
from whichgpu.perf.auto import resolve_precision
from whichgpu.perf.bands import Band
from whichgpu.predict import Prediction, predict
from whichgpu.recommend.planned import PlannedRun, applies, planned_run
from whichgpu.recommend.request import Request, Workload
from whichgpu.recommend.search import Layout, Tracer, fit_layout, layout_plan, traces_for
from whichgpu.units import GB
from whichgpu.workload.spec import FixedBatchError
from whichgpu.workload.trace import Trace

MAX_SUGGESTED_GPUS = 64
TRANSFORMER_FAMILIES = ("decoder", "encoder", "seq2seq", "vit")


@dataclass
class Run:
    """One workload on n GPUs of one kind, data parallel (ZeRO, FSDP): how it is laid out and how
    fast its traced step goes. (A layout of the parallel planner is a PlannedRun: recommend/planned.py.)"""

    workload: Workload
    layout: Layout
    pred: Prediction

    @property
    def step_s(self) -> float:
        return self.pred.est.step_s

    @property
    def precision(self) -> str:
        return self.pred.precision

    @property
    def precision_reason(self) -> str:
        return self.pred.precision_reason

    @property
    def gpu(self) -> GpuSpec:
        return self.pred.gpu

    @property
    def trace(self) -> Trace:
        return self.pred.trace

    @property
    def traces(self) -> tuple[Trace, ...]:
        """The traced steps (serving: prefill, then decode)."""
        return tuple(t for t in (self.pred.prefill_trace, self.pred.trace) if t is not None)

    @property
    def label(self) -> str:
        return f"DP{self.layout.gpus}" if self.layout.gpus > 1 else "1 GPU"

    @property
    def bound(self) -> str:
        return self.pred.est.bound

    @property
    def band(self) -> Band | None:
        return self.pred.est.band

    @property
    def outside(self) -> tuple[str, ...]:
        return self.pred.est.outside

    @property
    def validated(self) -> bool:
        return not self.pred.est.outside

    @property
    def samples_per_s(self) -> float:
        return self.pred.est.samples_per_s

    @property
    def tokens_per_s(self) -> float:
        return self.pred.est.tokens_per_s

    @property
    def throughput(self) -> float:
        """In the workload's unit, all GPUs together."""
        if self.workload.tokens:
            return self.pred.est.tokens_per_s
        return self.pred.est.samples_per_s * self.workload.unit_scale


@dataclass(frozen=True)
class Blocker:
    """Why a GPU cannot run the job (or is left out), in words."""

    kind: str  # precision | memory | power | min-memory
    text: str
    attempt: Layout | None = None
    suggestion: str = ""


AnyRun = Run | PlannedRun


@dataclass
class GpuResult:
    gpu: GpuSpec
    runs: dict[int, list[AnyRun]] = field(default_factory=dict)  # count -> one run per workload
    blockers: list[Blocker] = field(default_factory=list)
    power_capped_counts: tuple[int, ...] = ()  # counts left out by --max-power-w


def card_watts(gpu: GpuSpec, power_limit_w: float | None) -> float | None:
    """What one card draws while working: its TDP, or the power limit when lower."""
    if gpu.tdp_w is None:
        return power_limit_w
    return min(gpu.tdp_w, power_limit_w) if power_limit_w else gpu.tdp_w


def choose_precision(gpu: GpuSpec, w: Workload, requested: str) -> tuple[str | None, str]:
    """(precision or None when the card cannot run it, reason)."""
    return resolve_precision(gpu, w.spec.task, requested)


def _estimate(tracer: Tracer, req: Request, w: Workload, gpu: GpuSpec, prec: str, why: str, lay: Layout) -> Run:
    plan = lay.plan.with_(engine=req.engine, power_limit_w=req.power_limit_w, precision=prec,
                          step_host_ms=req.step_host_ms)
    pred = predict(w.spec, gpu, plan, req.system_for(gpu), tracer.trace, serving=w.serving, precision_reason=why,
                   memory=False, top=3)
    return Run(w, lay, pred)


def evaluate_gpu(tracer: Tracer, req: Request, gpu: GpuSpec) -> GpuResult:
    res = GpuResult(gpu)
    if req.min_memory_gb is not None and gpu.memory_gb < req.min_memory_gb:
        if req.memory_rule:
            text = (f"{gpu.memory_gb:g} GB is below the rule of thumb of {req.min_memory_gb:g} GB ({req.memory_rule}; "
                    "--min-memory-gb 0 evaluates it)")
        else:
            text = f"{gpu.memory_gb:g} GB is below --min-memory-gb {req.min_memory_gb:g}"
        res.blockers.append(Blocker("min-memory", text))
        return res
    counts = req.counts()
    watts = card_watts(gpu, req.power_limit_w)
    if req.max_power_w is not None:
        if watts is None:
            res.blockers.append(Blocker("power", "TDP unknown: cannot check --max-power-w"))
            return res
        allowed = tuple(n for n in counts if n * watts <= req.max_power_w)
        res.power_capped_counts = tuple(n for n in counts if n not in allowed)
        if not allowed:
            res.blockers.append(Blocker("power", f"one card draws {watts:g} W, over --max-power-w "
                                        f"{req.max_power_w:g}"))
            return res
        counts = allowed
    per_count: dict[int, list[AnyRun]] = {n: [] for n in counts}
    for w in req.workloads:
        prec, why = choose_precision(gpu, w, w.spec.precision)
        if prec is None:
            res.blockers.append(Blocker("precision", why))
            return res
        best: Layout | None = None
        fitted = False
        for n in counts:
            lay, attempt = fit_layout(tracer, w, gpu, prec, n)
            if best is None or attempt.need_bytes < best.need_bytes:
                best = attempt
            if lay is not None:
                fitted = True
                if n in per_count:
                    per_count[n].append(_estimate(tracer, req, w, gpu, prec, why, lay))
                continue
            if n not in per_count and fitted:  # (another workload of the mix does not run at n)
                continue
            planned = planned_run(tracer, req, w, gpu, prec, why, n)  # tensor/pipeline parallel, LLM training
            if planned is None:
                per_count.pop(n, None)
                continue
            fitted = True
            if n in per_count:
                per_count[n].append(planned)
        if not fitted and best is not None:
            sugg = suggest(tracer, w, gpu, prec, counts[-1])
            text = no_fit_text(w, best, sugg) + _planner_tried(req, w, counts[-1])
            res.blockers.append(Blocker("memory", f"{w.label}: {text}" if len(req.workloads) > 1 else text, best, sugg))
            return res
    res.runs = {n: runs for n, runs in per_count.items() if len(runs) == len(req.workloads)}
    if not res.runs:  # each workload fits at some count, but no count fits them all
        res.blockers.append(Blocker("memory", "no GPU count fits every workload of the mix"))
    return res


def _planner_tried(req: Request, w: Workload, most: int) -> str:
    """The blocker's words when the parallel planner was asked too and found nothing."""
    if most < 2 or not applies(req, w):
        return ""
    return f"; no tensor/pipeline-parallel layout fits on up to {most} GPUs either"


def no_fit_text(w: Workload, at: Layout, suggestion: str) -> str:
    how = []
    if at.gpus > 1:
        how.append(f"{LABELS.get(at.sharding, at.sharding)} over {at.gpus} GPUs")
    if at.micro_batch < (w.spec.batch_size or 1):
        how.append(f"{'micro-batch' if w.spec.task == 'train' else 'batch'} {at.micro_batch}")
    where = f" ({', '.join(how)})" if how else ""
    text = f"does not fit: needs {at.need_bytes / GB:.1f} GB{where}, has {at.capacity_bytes / GB:.1f} GB"
    return text + (f"; {suggestion}" if suggestion else "")


# Upper bounds of what a change can save, as fractions of memory lines (None: no useful bound):
# checkpointing frees activations; NF4 stores 16-bit weights in 4.127 bits (QLoRA paper, section 3);
# int8 / int4 weights halve / quarter 16-bit weights.
Bound = tuple[tuple[str, float], ...]
Touches = Bound | None
CHECKPOINT: Bound = (("activations", 1.0), ("fragmentation", 1.0))
NF4: Bound = (("weights", 0.75), ("fragmentation", 1.0))


def suggest(tracer: Tracer, w: Workload, gpu: GpuSpec, prec: str, max_gpus: int) -> str:
    """The first change that makes the workload fit, least disruptive first: on one card, full
    activation checkpointing, LoRA, QLoRA (transformers), int8 or int4 weights (inference); then
    more cards with ZeRO (training). '' when none does. A change that cannot fit even with its
    largest possible saving is not traced."""
    train = w.spec.task == "train"
    variants: list[tuple[str, str, dict[str, object], Touches]] = []  # (label, precision, changes, bound)
    if train:
        if w.spec.checkpointing != "full":
            variants.append(("full activation checkpointing", prec, {"checkpointing": "full"}, CHECKPOINT))
        if w.family in TRANSFORMER_FAMILIES:  # (the capture stores the frozen base in 16 bits, as PEFT does)
            full = w.spec.finetune == "full"
            if full:
                variants.append(("LoRA", prec, {"finetune": "lora"}, None))
            if w.spec.finetune != "qlora":
                variants.append(("QLoRA", prec, {"finetune": "qlora"}, None if full else NF4))
                if w.spec.checkpointing != "full":
                    variants.append(("QLoRA and full activation checkpointing", prec,
                                     {"finetune": "qlora", "checkpointing": "full"},
                                     None if full else (*NF4, ("activations", 1.0))))
    elif prec not in ("int8", "int4") and gpu.supports("fp16") is not False:
        variants += [("int8 weights", "int8", {}, (("weights", 0.5),)), ("int4 weights", "int4", {}, (("weights", 0.75),))]
    for label, p, changes, touches in variants:
        if touches is not None and _hopeless(tracer, w, gpu, prec, touches):
            continue
        try:
            lay, _ = fit_layout(tracer, w, gpu, p, 1, **changes)
        except WhichGPUError:  # a variant the model cannot take (e.g. LoRA without linear layers)
            continue
        if lay is not None:
            return f"fits with {label}"
    if train:
        layouts: dict[int, Layout | None] = {}

        def fits(n: int) -> bool:
            layouts[n] = fit_layout(tracer, w, gpu, prec, n)[0]
            return layouts[n] is not None

        n = doubling(fits, max_gpus * 2, MAX_SUGGESTED_GPUS)
        lay = layouts.get(n) if n is not None else None
        if n is not None and lay is not None:
            return f"fits on {n} GPUs with {LABELS.get(lay.sharding, lay.sharding)} (--max-gpus {n})"
    return ""


def _hopeless(tracer: Tracer, w: Workload, gpu: GpuSpec, prec: str, touches: tuple[tuple[str, float], ...]) -> bool:
    """True when a change cannot make one card fit at micro-batch 1 even if it saved the most it
    can (`touches`: fractions of memory lines)."""
    batch = w.spec.batch_size or 1
    plan = layout_plan(w, 1, "ddp", 1, batch if w.spec.task == "train" else 1)
    try:
        traces = traces_for(tracer, w, prec, 1)
    except FixedBatchError:  # a factory that builds one batch only: its floor is at that batch
        plan, traces = layout_plan(w, 1, "ddp", batch, 1), traces_for(tracer, w, prec, batch)
    except BatchTooSmallError as small:  # batch norm cannot train on one sample: the floor is the smallest batch that can
        plan, traces = layout_plan(w, 1, "ddp", small.min_batch, 1), traces_for(tracer, w, prec, small.min_batch)
    frac = dict(touches)
    for e in (tracer.memory(t, gpu, plan) for t in traces):
        floor = e.total_bytes - sum(v.bytes * frac.get(k, 0.0) for k, v in e.lines())
        if floor <= e.capacity_bytes:
            return False
    return True
