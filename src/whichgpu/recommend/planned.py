"""Runs laid out by the parallel planner: an LLM training job on n GPUs where the data-parallel,
ZeRO and FSDP layouts do not fit (recommend/search.py), laid out with tensor, pipeline, context
or expert parallelism (parallel/fallback.py). Torch-free.

A `PlannedRun` answers what a traced `Run` answers (throughput, step, memory per GPU, precision)
from the planner's `Result` for the best layout at that count, with the layout it stands for.
Its trace is the workload's own, for the model's facts (parameters, coverage), not for the step.
The planner has no error band of the single-GPU validation (it is scored on published
multi-GPU runs by `whichgpu validate-plan`).
"""

from __future__ import annotations

from dataclasses import dataclass

from whichgpu.errors import WhichGPUError
from whichgpu.hardware.spec import GpuSpec
from whichgpu.parallel.fallback import attention_of, decoder, quick_best, why_not
from whichgpu.parallel.plan import Plan
from whichgpu.parallel.planner import Job, Result
from whichgpu.parallel.search import label
from whichgpu.perf.bands import Band
from whichgpu.recommend.request import Request, Workload
from whichgpu.recommend.search import Layout, Tracer, traces_for
from whichgpu.workload.trace import Trace

# Exposed time per step by kind in the planner's split, as the bound of a traced step names it.
BOUNDS = {"compute": ("compute",), "communication": ("tp", "cp", "ep", "pp_p2p", "dp"),
          "pipeline-bubble": ("bubble",), "memory": ("optimizer",), "overhead": ("overhead",)}


@dataclass
class PlannedRun:
    """One workload on n GPUs of one kind, laid out by the parallel planner."""

    workload: Workload
    layout: Layout  # the planner's plan (tp, pp, ..., dp), the worst rank's peak, the planner's capacity
    result: Result
    job: Job
    gpu: GpuSpec
    precision: str
    precision_reason: str
    trace: Trace  # the workload's trace at its batch: the model's facts, not the step

    @property
    def tokens_per_s(self) -> float:
        return self.result.tokens_per_s

    @property
    def samples_per_s(self) -> float:
        return self.result.tokens_per_s / self.job.seq_len

    @property
    def throughput(self) -> float:
        """In the workload's unit, all GPUs together."""
        return self.tokens_per_s if self.workload.tokens else self.samples_per_s * self.workload.unit_scale

    @property
    def step_s(self) -> float:
        """One optimizer step of the global batch."""
        return self.result.step_s

    @property
    def label(self) -> str:
        return label(self.result.plan)

    @property
    def bound(self) -> str:
        """Where most of the step goes: compute, communication, pipeline-bubble, memory or overhead."""
        split = self.result.split
        return max(BOUNDS, key=lambda k: sum(split.get(x, 0.0) for x in BOUNDS[k]))

    @property
    def traces(self) -> tuple[Trace, ...]:
        return (self.trace,)

    @property
    def band(self) -> Band | None:
        return None

    @property
    def outside(self) -> tuple[str, ...]:
        return ()

    @property
    def validated(self) -> bool:
        return False


def planned_run(tracer: Tracer, req: Request, w: Workload, gpu: GpuSpec, prec: str, why: str,
                n: int) -> PlannedRun | None:
    """The planner's best layout of `w` on `n` GPUs of `gpu` (the batch per GPU times n sequences
    per optimizer step), or None when it does not apply or nothing fits. One GPU is left to the
    data-parallel search: the planner would only add recomputation there."""
    job = _job(req, w, gpu, prec, n)
    if job is None:
        return None
    try:
        r = quick_best(job, Plan(engine=req.engine, step_host_ms=req.step_host_ms), req.power_limit_w)
    except WhichGPUError:  # a precision or a card the planner cannot model
        return None
    if r is None:
        return None
    trace = traces_for(tracer, w, prec, w.spec.batch_size or 1)[0]
    return PlannedRun(w, Layout(r.plan, r.peak_memory_bytes, gpu.usable_memory_bytes), r, job, gpu, prec, why, trace)


def applies(req: Request, w: Workload) -> bool:
    """Whether the planner lays out `w`: full LLM training (AdamW) of a decoder it can express."""
    s = w.spec
    if not req.model_parallel or w.serving or not s.seq_len:
        return False
    return not why_not(s.task, s.finetune, s.optimizer or "", s.phase) and not isinstance(decoder(s.model), str)


def _job(req: Request, w: Workload, gpu: GpuSpec, prec: str, n: int) -> Job | None:
    if n < 2 or not applies(req, w):
        return None
    s = w.spec
    dec = decoder(s.model)
    if isinstance(dec, str) or s.seq_len is None:
        return None
    system = req.system_for(gpu)
    if n > system.gpus_per_node and system.scaleout is None:
        return None
    return Job(dec[0], dec[1], gpu, system, n, (s.batch_size or 1) * n, s.seq_len, prec, attention_of(s.options, gpu))
