"""How a workload fits on n GPUs of one kind: the sharding, then the micro-batch.

For n GPUs: DDP; then ZeRO-2 (= FSDP SHARD_GRAD_OP); then ZeRO-3 (= FSDP FULL_SHARD). When none
fits at the requested per-GPU batch B, smaller micro-batches b (divisors of B) with B / b
gradient-accumulation steps keep the batch per optimizer step; inference just runs a smaller
batch. Memory is close to affine in the batch, so the micro-batch is aimed at with the line
through (1, need(1)) and (B, need(B)) and then checked, which keeps the traces captured few.

Traces and memory estimates are cached: an estimate depends on the GPU only through the cuBLAS
workspace (by architecture) and the capacity, so it is computed once per (trace, plan, workspace)
and rebound to each card (a test checks it against memory_estimate).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from whichgpu.errors import BatchTooSmallError
from whichgpu.hardware.spec import GpuSpec
from whichgpu.memory.allowances import cublas_workspace_bytes, workspace
from whichgpu.memory.estimate import (
    MemoryEstimate,
    capacity_bytes,
    memory_confidence,
    memory_estimate,
)
from whichgpu.memory.lines import MemoryLine, gb
from whichgpu.memory.search import line_aim
from whichgpu.parallel.plan import Plan
from whichgpu.predict import traces_of
from whichgpu.recommend.request import Workload
from whichgpu.workload.spec import FixedBatchError, WorkloadSpec
from whichgpu.workload.trace import Trace

TraceFor = Callable[[WorkloadSpec], Trace]
TRAIN_SHARDINGS: tuple[str, ...] = ("ddp", "zero2", "zero3")


@dataclass(frozen=True)
class Layout:
    """A plan for the workload on n GPUs and the memory it needs per GPU."""

    plan: Plan  # data-parallel degree, sharding (inference: ddp = full replicas), micro-batch, accumulation
    need_bytes: float  # peak memory per GPU (the larger of prefill and decode when serving)
    capacity_bytes: float

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.capacity_bytes

    @property
    def gpus(self) -> int:
        return self.plan.gpus

    @property
    def sharding(self) -> str:
        return self.plan.sharding

    @property
    def micro_batch(self) -> int:
        return self.plan.micro_batch or 1

    @property
    def grad_accum(self) -> int:
        return self.plan.grad_accum


class Tracer:
    """Traces by spec and memory totals by (trace, plan, workspace class), captured once."""

    def __init__(self, trace_for: TraceFor) -> None:
        self._trace_for = trace_for
        self._traces: dict[WorkloadSpec, Trace] = {}
        self._estimates: dict[tuple[int, Plan, float], MemoryEstimate] = {}
        self.captures = 0

    def trace(self, spec: WorkloadSpec) -> Trace:
        t = self._traces.get(spec)
        if t is None:
            t = self._trace_for(spec)
            self._traces[spec] = t
            self.captures += 1
        return t

    def memory(self, trace: Trace, gpu: GpuSpec, plan: Plan) -> MemoryEstimate:
        """memory_estimate(trace, gpu, plan), computed once per workspace class and rebound to `gpu`."""
        key = (id(trace), plan, cublas_workspace_bytes(gpu))
        e = self._estimates.get(key)
        if e is None:
            e = memory_estimate(trace, gpu, plan)
            self._estimates[key] = e
        if e.gpu_id == gpu.id:
            return e
        cap = capacity_bytes(gpu)
        ws_bytes, ws_text = workspace(gpu, trace)  # (the same bytes: that is the cache key)
        band, outside = memory_confidence(trace, gpu)
        return replace(e, gpu_id=gpu.id, gpu_name=gpu.name, capacity_bytes=cap, workspace=MemoryLine(ws_bytes, ws_text),
                       band=band, outside=outside,
                       assumptions={**e.assumptions, "capacity": f"{gpu.usable_memory_text} = {gb(cap)}"})

    def need(self, trace: Trace, gpu: GpuSpec, plan: Plan) -> float:
        key = (id(trace), plan, cublas_workspace_bytes(gpu))
        e = self._estimates.get(key)
        return (e if e is not None else self.memory(trace, gpu, plan)).total_bytes


def traces_for(tracer: Tracer, w: Workload, precision: str, batch: int, **changes: object) -> tuple[Trace, ...]:
    """The traces of one step (serving: prefill then decode at the full context)."""
    spec = replace(w.spec, precision=precision, batch_size=batch, **changes)  # type: ignore[arg-type]
    return traces_of(spec, tracer.trace, w.serving)


def _divisors_below(b: int) -> list[int]:
    return sorted((d for d in range(1, b) if b % d == 0), reverse=True)


def layout_plan(w: Workload, gpus: int, sharding: str, micro_batch: int, accum: int) -> Plan:
    """The plan of one layout: data parallel over `gpus` (inference: replicas)."""
    if w.spec.task != "train":
        return Plan(dp=gpus, micro_batch=micro_batch)
    return Plan(dp=gpus, sharding=sharding, micro_batch=micro_batch, grad_accum=accum)  # type: ignore[arg-type]


def _try(tracer: Tracer, w: Workload, gpu: GpuSpec, precision: str, gpus: int, mb: int, shardings: tuple[str, ...],
         changes: dict[str, object]) -> list[Layout]:
    """One layout per sharding, in order, stopping at the first that fits."""
    batch = w.spec.batch_size or 1
    accum = max(1, batch // mb) if w.spec.task == "train" else 1
    traces = traces_for(tracer, w, precision, mb, **changes)
    cap = capacity_bytes(gpu)
    out = []
    for sh in shardings:
        plan = layout_plan(w, gpus, sh, mb, accum)
        need = max(tracer.need(t, gpu, plan) for t in traces)
        out.append(Layout(plan, need, cap))
        if need <= cap:
            break
    return out


def fit_layout(tracer: Tracer, w: Workload, gpu: GpuSpec, precision: str, gpus: int,
               **changes: object) -> tuple[Layout | None, Layout]:
    """(the first layout that fits or None, the attempt with the least memory per GPU)."""
    train = w.spec.task == "train"
    shardings = TRAIN_SHARDINGS if train and gpus > 1 else ("ddp",)
    batch = w.spec.batch_size or 1
    tried = _try(tracer, w, gpu, precision, gpus, batch, shardings, changes)
    best = min(tried, key=lambda x: x.need_bytes)
    if tried[-1].fits:
        return tried[-1], best
    smaller = _divisors_below(batch)
    if not smaller:
        return None, best
    try:
        ones = _try(tracer, w, gpu, precision, gpus, 1, shardings, changes)
    except (FixedBatchError, BatchTooSmallError):  # one batch only, or batch norm cannot train on one sample
        return None, best
    one = min(ones, key=lambda x: x.need_bytes)
    best = min(best, one, key=lambda x: x.need_bytes)
    if not ones[-1].fits:
        return None, best
    # aim: the line through (1, need(1)) and (B, need(B)) for the sharding that fits at 1
    sh = ones[-1].sharding
    at_b = next((x for x in tried if x.sharding == sh), tried[-1])
    aimed = line_aim(1, ones[-1].need_bytes, batch, at_b.need_bytes, ones[-1].capacity_bytes)
    aim = aimed if aimed is not None else batch - 1
    for mb in [d for d in smaller if d <= aim] + [1]:
        if mb == 1:
            return ones[-1], best
        got = _try(tracer, w, gpu, precision, gpus, mb, shardings, changes)  # (the batch varies: see above)
        if got[-1].fits:
            return got[-1], best
    return ones[-1], best  # pragma: no cover (mb = 1 ends the loop)
