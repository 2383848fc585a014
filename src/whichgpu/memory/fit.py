"""The largest batch that fits, and what would make a configuration fit.

Both need traces of variants of the workload (another batch, checkpointing, precision, LoRA, a
shorter sequence). This module stays torch-free: the caller passes ``trace_for(**changes)``,
which returns the trace of the workload with those fields changed (``WorkloadSpec`` field names:
batch_size, seq_len, context, precision, optimizer_impl, checkpointing, finetune), or None when
the change does not apply. Changes of the plan alone (8-bit optimizer states, sharding over more
GPUs, offload) reuse the trace.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from whichgpu.errors import CaptureError, WhichGPUError
from whichgpu.hardware.spec import GpuSpec
from whichgpu.hardware.system import System
from whichgpu.memory.estimate import MemoryEstimate, memory_estimate
from whichgpu.memory.search import fewest, line_aim
from whichgpu.memory.states import parse_optimizer
from whichgpu.parallel.plan import Plan, Sharding
from whichgpu.units import GB
from whichgpu.workload.spec import FixedBatchError
from whichgpu.workload.trace import Trace

if TYPE_CHECKING:
    from whichgpu.parallel.fallback import Layouts

TraceFor = Callable[..., "Trace | None"]
MAX_BATCH = 1 << 20
MAX_GPUS = 4096


@dataclass(frozen=True)
class BatchSearch:
    """Largest batch per GPU that fits (0: not even batch 1), its estimate, and the batches tried."""

    max_batch: int
    estimate: MemoryEstimate | None
    tried: tuple[tuple[int, float], ...]  # (batch, total bytes per GPU), in the order evaluated
    capped: bool = False  # the search stopped at MAX_BATCH
    fixed: bool = False  # the workload builds one batch (a factory without batch_size): not searched
    note: str = ""  # why the batch was not searched, in words


@dataclass(frozen=True)
class Suggestion:
    """One change, alone, to the configuration as given."""

    change: str  # what to change, in words
    changes: tuple[tuple[str, Any], ...]  # (WorkloadSpec or Plan field, value) that make the change
    total_bytes: float  # per GPU with this change alone
    saves_bytes: float  # versus the configuration as given
    fits: bool
    gpus: int = 1
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"change": self.change, "changes": dict(self.changes), "total_bytes": self.total_bytes,
                "total_gb": self.total_bytes / GB, "saves_bytes": self.saves_bytes, "saves_gb": self.saves_bytes / GB,
                "fits": self.fits, "gpus": self.gpus, "note": self.note}


@dataclass(frozen=True)
class FitReport:
    estimate: MemoryEstimate
    batch: BatchSearch | None
    suggestions: tuple[Suggestion, ...]
    suggestions_batch: int = 0  # the batch the suggestions were evaluated at (0: none made)
    finetune: str = "full"  # as the trace was captured ("lora (rank 16, 224 layers)")
    checkpointing: str = "none"
    parallel: Layouts | None = None  # the parallel planner's layouts when it does not fit (None: not asked)

    @property
    def never_fits(self) -> bool:
        """Not even batch 1 fits as configured."""
        return self.batch is not None and self.batch.max_batch == 0

    def to_dict(self) -> dict[str, Any]:
        d = self.estimate.to_dict()
        b = self.batch
        d["max_batch"] = None if b is None else {
            "batch_size": b.max_batch, "total_bytes": b.estimate.total_bytes if b.estimate else None,
            "headroom_bytes": b.estimate.headroom_bytes if b.estimate else None, "capped": b.capped,
            "fixed": b.fixed, "note": b.note or None,
            "tried": [{"batch_size": n, "total_bytes": t} for n, t in b.tried]}
        d["suggestions_batch_size"] = self.suggestions_batch or None
        d["suggestions"] = [s.to_dict() for s in self.suggestions]
        p = self.parallel
        d["parallel_layouts"] = None if p is None or p.job is None else p.to_list()
        d["parallel_layouts_note"] = (p.note if p is not None else
                                      "fits as given: no parallel layout searched" if self.estimate.fits else None)
        d["parallel_layouts_command"] = p.command or None if p is not None else None
        return d


# ---- largest batch ----------------------------------------------------------------------------

def max_batch(trace_for: TraceFor, gpu: GpuSpec, plan: Plan,
              known: dict[int, MemoryEstimate] | None = None, limit: int = MAX_BATCH, system: System | None = None) -> BatchSearch:
    """Largest batch that fits: grow the batch (at most x64 a step) until one does not fit, then
    close the bracket.

    Memory is close to affine in the batch, so each step aims where the line through the two
    largest batches tried so far reaches capacity (doubling where the line is flat; the x64 cap
    bounds a line fitted on an almost flat stretch); inside the bracket the same line
    is tried with its neighbour, falling back to bisection. An affine workload needs a handful of
    estimates. `known` seeds the search with estimates already made.
    """
    cache: dict[int, MemoryEstimate] = dict(known or {})
    order: list[tuple[int, float]] = [(b, e.total_bytes) for b, e in cache.items()]

    def est(b: int) -> MemoryEstimate:
        if b not in cache:
            t = trace_for(batch_size=b)
            if t is None:
                raise WhichGPUError("the batch size of this workload cannot be changed")
            cache[b] = memory_estimate(t, gpu, plan, system)
            order.append((b, cache[b].total_bytes))
        return cache[b]

    def result(lo: int, capped: bool = False) -> BatchSearch:
        return BatchSearch(lo, cache.get(lo) if lo else None, tuple(order), capped)

    def aim(b1: int, b2: int) -> int | None:
        """Batch where the line through (b1, m1), (b2, m2) reaches capacity."""
        return line_aim(b1, est(b1).total_bytes, b2, est(b2).total_bytes, est(b1).capacity_bytes)

    # The smallest batch the model can run (batch norm needs two values per channel, ...).
    start = None
    for b in (1, 2, 4, 8):
        try:
            est(b)
            start = b
            break
        except CaptureError:
            continue
    if start is None:
        raise WhichGPUError("the largest-batch search could not trace this model at batch 1, 2, 4 or 8")
    first = est(start)
    if not first.fits:
        return result(0)
    cap = first.capacity_bytes
    lo = max(b for b, e in cache.items() if e.total_bytes <= cap)
    above = [b for b, e in cache.items() if e.total_bytes > cap and b > lo]
    hi: int | None = min(above) if above else None
    prev = 1
    while hi is None:  # grow
        if lo >= limit:
            return result(lo, capped=True)
        below = max((b for b in cache if b < lo and cache[b].fits), default=prev)
        g = aim(below, lo) if below != lo else None
        cand = min(max(g if g is not None else 2 * lo, lo + 1), 64 * lo, limit)
        if est(cand).fits:
            prev, lo = lo, cand
        else:
            hi = cand
    rounds = 0
    while hi - lo > 1:  # close: the line between the bracket ends, then its neighbour
        g = aim(lo, hi) if rounds < 3 else None
        rounds += 1
        mid = min(max(g, lo + 1), hi - 1) if g is not None else (lo + hi) // 2
        if est(mid).fits:
            lo = mid
            if mid + 1 < hi and not est(mid + 1).fits:
                hi = mid + 1
        else:
            hi = mid
            if mid - 1 > lo and est(mid - 1).fits:
                lo = mid - 1
    return result(lo)


# ---- suggestions -------------------------------------------------------------------------------

def _try(trace_for: TraceFor, **changes: Any) -> Trace | None:
    try:
        return trace_for(**changes)
    except WhichGPUError:
        return None


def _suggest(base: MemoryEstimate, e: MemoryEstimate | None, change: str, changes: dict[str, Any], gpus: int = 1,
             note: str = "") -> Suggestion | None:
    if e is None:
        return None
    return Suggestion(change, tuple(changes.items()), e.total_bytes, base.total_bytes - e.total_bytes, e.fits, gpus,
                      note)


def _gpus_needed(trace: Trace, gpu: GpuSpec, plan: Plan, sharding: Sharding, system: System | None = None) -> tuple[int, MemoryEstimate]:
    """Fewest GPUs (doubling, then bisection) with which `sharding` fits; MAX_GPUS if none."""
    def est(n: int) -> MemoryEstimate:
        return memory_estimate(trace, gpu, replace(plan, dp=n, sharding=sharding), system)

    n = fewest(lambda k: est(k).fits, plan.dp, MAX_GPUS)
    return (n, est(n)) if n is not None else (MAX_GPUS, est(MAX_GPUS))


def _largest(trace_for: TraceFor, gpu: GpuSpec, plan: Plan, field: str, current: int,
             unit: int, system: System | None = None) -> tuple[int, MemoryEstimate] | None:
    """Largest multiple of `unit` below `current` for `field` (seq_len, context) that fits."""
    cache: dict[int, MemoryEstimate | None] = {}

    def est(n: int) -> MemoryEstimate | None:
        if n not in cache:
            t = _try(trace_for, **{field: n})
            cache[n] = memory_estimate(t, gpu, plan, system) if t is not None else None
        return cache[n]

    lo, hi = 0, (current - 1) // unit + 1  # in units; hi * unit >= current does not fit
    first = est(unit)
    if first is None or not first.fits:
        return None
    lo = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        e = est(mid * unit)
        if e is not None and e.fits:
            lo = mid
        else:
            hi = mid
    best = est(lo * unit)
    return (lo * unit, best) if best is not None else None


def suggestions(trace: Trace, gpu: GpuSpec, plan: Plan, trace_for: TraceFor, base: MemoryEstimate,
                batch: BatchSearch | None = None, system: System | None = None) -> tuple[Suggestion, ...]:
    """Changes that each, alone, reduce the per-GPU peak, with what they save and whether they fit."""
    out: list[Suggestion | None] = []

    def est(t: Trace | None, p: Plan = plan) -> MemoryEstimate | None:
        if t is None:
            return None
        try:
            return memory_estimate(t, gpu, p, system)
        except WhichGPUError:
            return None

    if trace.task == "train":
        order = ("none", "selective", "full")
        current = trace.checkpointing if trace.checkpointing in order else "none"
        for mode in order[order.index(current) + 1:]:
            out.append(_suggest(base, est(_try(trace_for, checkpointing=mode)), f"activation checkpointing ({mode})",
                                {"checkpointing": mode}, note="recomputes the blocks' forward in backward"
                                if mode == "full" else "recomputes elementwise ops, keeps GEMM outputs"))
        if trace.precision in ("fp32", "tf32"):
            p16 = "amp-bf16" if gpu.supports("bf16") is not False else "amp-fp16"
            out.append(_suggest(base, est(_try(trace_for, precision=p16)), f"16-bit activations ({p16})",
                                {"precision": p16}))
        elif trace.precision in ("amp-bf16", "amp-fp16"):
            p16 = trace.precision.removeprefix("amp-")
            e = est(_try(trace_for, precision=p16))
            if e is not None and e.total_bytes < base.total_bytes:
                out.append(_suggest(base, e, f"16-bit parameters ({p16}, FP32 master weights)", {"precision": p16}))
        opt = parse_optimizer(trace.optimizer)
        if opt.name in ("adam", "adamw") and not opt.eight_bit and plan.optimizer_state_bits != 8:
            out.append(_suggest(base, est(trace, replace(plan, optimizer_state_bits=8)), "8-bit optimizer states "
                                "(bitsandbytes AdamW8bit)", {"optimizer_state_bits": 8}))
        if base.optimizer_temporaries.bytes > 0 and opt.impl != "fused":
            out.append(_suggest(base, est(_try(trace_for, optimizer_impl="fused")), "fused optimizer step "
                                "(no foreach temporaries)", {"optimizer_impl": "fused"}))
        full: Sharding = "fsdp-full" if plan.sharding.startswith("fsdp") else "zero3"
        if plan.sharding != full or not base.fits:
            n, e = _gpus_needed(trace, gpu, plan, full, system)
            if e.fits:  # (when activations alone exceed the GPU, no number of GPUs helps)
                label = "FSDP full sharding" if full == "fsdp-full" else "ZeRO-3"
                out.append(_suggest(base, e, f"{label} over {n} GPUs", {"sharding": full, "dp": n}, gpus=n,
                                    note="model states sharded; activations stay per GPU"))
        if not plan.offload_optimizer and opt.name != "none":
            shard = plan.sharding if plan.sharding != "ddp" else "zero2"
            out.append(_suggest(base, est(trace, replace(plan, sharding=shard, offload="optimizer")),
                                "optimizer states in CPU RAM (ZeRO-Offload)",
                                {"sharding": shard, "offload": "optimizer"}, gpus=plan.dp))
        ft = (trace.finetune or "full").split()[0]
        if ft == "full":
            for mode in ("lora", "qlora"):
                out.append(_suggest(base, est(_try(trace_for, finetune=mode)),
                                    f"{'QLoRA' if mode == 'qlora' else 'LoRA'} fine-tuning",
                                    {"finetune": mode}, note="adapters on every linear layer but the head"
                                    + (", 4-bit NF4 base" if mode == "qlora" else "")))
    else:
        if trace.precision not in ("int8", "int4"):
            for p in ("int8", "int4"):
                out.append(_suggest(base, est(_try(trace_for, precision=p)), f"{p} weights (weight-only quantization)",
                                    {"precision": p}))
        elif trace.precision == "int8":
            out.append(_suggest(base, est(_try(trace_for, precision="int4")), "int4 weights", {"precision": "int4"}))
    # shorter sequence / context
    if trace.phase == "decode" and trace.context:
        found = _largest(trace_for, gpu, plan, "context", trace.context, 64 if trace.context >= 256 else 8, system)
        if found:
            out.append(_suggest(base, found[1], f"context {found[0]}", {"context": found[0]}))
    elif trace.seq_len and trace.seq_len > 1:
        found = _largest(trace_for, gpu, plan, "seq_len", trace.seq_len, 64 if trace.seq_len >= 256 else 8, system)
        if found:
            out.append(_suggest(base, found[1], f"sequence length {found[0]}", {"seq_len": found[0]}))
    if batch is not None and 0 < batch.max_batch < trace.batch_size and batch.estimate is not None:
        accum = math.ceil(trace.batch_size / batch.max_batch)
        out.append(_suggest(base, batch.estimate, f"batch size {batch.max_batch}", {"batch_size": batch.max_batch},
                            note=f"gradient accumulation x{accum} keeps the effective batch"
                            if trace.task == "train" else ""))
    found_s = [s for s in out if s is not None and s.saves_bytes > 0]
    return tuple(sorted(found_s, key=lambda s: (not s.fits, s.gpus, -s.saves_bytes)))


def _combined(trace: Trace, gpu: GpuSpec, plan: Plan, trace_for: TraceFor,
              base: MemoryEstimate, system: System | None = None) -> Suggestion | None:
    """When no single change fits a training step: full checkpointing plus full sharding."""
    t = trace if trace.checkpointing == "full" else _try(trace_for, checkpointing="full")
    if t is None:
        return None
    full: Sharding = "fsdp-full" if plan.sharding.startswith("fsdp") else "zero3"
    n, e = _gpus_needed(t, gpu, plan, full, system)
    if not e.fits:
        return None
    label = "FSDP full sharding" if full == "fsdp-full" else "ZeRO-3"
    return Suggestion(f"activation checkpointing (full) + {label} over {n} GPUs",
                      (("checkpointing", "full"), ("sharding", full), ("dp", n)), e.total_bytes,
                      base.total_bytes - e.total_bytes, True, n)


def fit(trace: Trace, gpu: GpuSpec, plan: Plan, trace_for: TraceFor, search_batch: bool = True,
        suggest: bool | None = None, system: System | None = None) -> FitReport:
    """The estimate as given, the largest batch that fits and, when it does not fit, what would.

    When not even batch 1 fits, the suggestions are made for batch 1; when no single change is
    enough for a training step, checkpointing plus full sharding is tried together.
    """
    base = memory_estimate(trace, gpu, plan, system)
    batch = None
    if search_batch:
        try:
            batch = max_batch(trace_for, gpu, plan, known={trace.batch_size: base}, system=system)
        except FixedBatchError as e:
            batch = fixed_batch(trace, base, e.batch)
            base = replace(base, notes=(*base.notes, batch.note))
    want = (not base.fits) if suggest is None else suggest
    if not want:
        return FitReport(base, batch, (), 0, trace.finetune, trace.checkpointing)
    t, b0 = trace, base
    if batch is not None and batch.max_batch == 0 and trace.batch_size > 1:
        t1 = _try(trace_for, batch_size=1)
        if t1 is not None:
            t, b0 = t1, memory_estimate(t1, gpu, plan, system)
    sugg = list(suggestions(t, gpu, plan, trace_for if t is trace else _rebatch(trace_for, 1), b0, batch, system))
    if t.task == "train" and not any(x.fits for x in sugg):
        c = _combined(t, gpu, plan, trace_for if t is trace else _rebatch(trace_for, 1), b0, system)
        if c is not None:
            sugg.insert(0, c)
    return FitReport(base, batch, tuple(sugg), t.batch_size, trace.finetune, trace.checkpointing)


def fixed_batch(trace: Trace, base: MemoryEstimate, batch: int) -> BatchSearch:
    """The "search" of a workload that builds one batch (`batch`, the trace's): that batch if it
    fits, else 0."""
    note = (f"the batch is fixed at {batch} by the model (a factory without a batch_size parameter), "
            "so the largest batch that fits was not searched")
    fits = base.fits
    return BatchSearch(batch if fits else 0, base if fits else None, ((trace.batch_size, base.total_bytes),),
                       fixed=True, note=note)


def _rebatch(trace_for: TraceFor, batch: int) -> TraceFor:
    """trace_for with the batch pinned (unless a change names another)."""
    def f(**changes: Any) -> Trace | None:
        return trace_for(**{"batch_size": batch, **changes})
    return f
