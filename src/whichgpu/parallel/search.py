"""Search of parallel layouts: every valid split of the GPUs into tensor, pipeline, context, expert
and data parallelism, with the micro-batch, virtual stages, schedule, sharding and recomputation;
degrees the user fixed stay fixed. Torch-free.

Layouts that cannot run (a degree that does not divide the heads, the layers, the batch) are
skipped; the ones that run are evaluated (planner.evaluate) and ranked by step time or by cost
(GPU-hours per step are the same for every layout of one job, so cost ranks as time does unless
the objective includes the idle GPUs of a smaller layout: it does not here). Layouts that do not
fit in memory are kept aside with their reason.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field

from whichgpu.errors import InputError
from whichgpu.memory.states import shard_factors
from whichgpu.parallel.comm import on_scaleup
from whichgpu.parallel.plan import Plan
from whichgpu.parallel.planner import (
    Context,
    Job,
    Result,
    Scored,
    check_layout,
    divisors,
    score,
    stages_fit,
)

MICRO_BATCHES = (1, 2, 4, 8, 16)
# GPipe is not searched unless asked: it has 1F1B's bubble and holds every micro-batch's activations
# (dominated); zb-h2 trades twice 1F1B's activations for its bubble and is searched when asked.
SCHEDULES_SEARCHED = ("1f1b", "interleaved-1f1b", "zb-h1", "zb-v")
SHARDINGS_SEARCHED = ("zero1", "ddp", "fsdp-full")
RECOMPUTES_SEARCHED = ("none", "selective", "full")
MAX_TP = 64  # and the system's scale-up domain
MAX_PP = 64  # and the model's layers
MAX_CP = 16
CP_MIN_TOKENS = 2048  # context parallelism pays off for long sequences: at least this many tokens per rank


@dataclass(frozen=True)
class Fixed:
    """Degrees and choices the user fixed (None: searched)."""

    tp: int | None = None
    pp: int | None = None
    vp: int | None = None
    cp: int | None = None
    ep: int | None = None
    etp: int | None = None
    micro_batch: int | None = None
    sharding: str | None = None
    recompute: str | None = None
    schedule: str | None = None
    sequence_parallel: bool | None = None
    tp_comm_overlap: bool | None = None  # None: with sequence parallelism (Megatron's requirement) over NVLink


@dataclass
class SearchResult:
    best: list[Result]
    not_fitting: list[Result]
    evaluated: int
    skipped: dict[str, int] = field(default_factory=dict)
    rules: str = ""
    """`split_rules` of the search (why it may have found no split at all)."""
    simulated: int = 0
    """Of the `evaluated` layouts, those timed in full (their schedule simulated with their pass
    times): the others' lower bound could not reach the top (`planner.score`; every layout's
    memory and fit are computed in full either way)."""
    states_floor: StatesFloor | None = None
    """Where every layout was skipped for memory: the least of their model states per GPU."""

    def no_split(self) -> str:
        """Why nothing was evaluated when nothing was skipped either: the rules no split met."""
        return f"no split of the degrees exists: {self.rules}" if self.rules else "no valid split of the degrees"

    def why_none(self) -> str:
        """Why no layout fits: the closest layout's reason; else, where the model states alone
        exceed the GPU in every layout, the least of them against the GPU's memory; else the
        splits that were rejected, or the rules no split met."""
        if self.not_fitting:
            return self.not_fitting[0].reason
        if self.evaluated == 0 and self.states_floor is not None:
            return self.states_floor.text()
        if self.skipped:
            parts = ", ".join(f"{n} by {k}" for k, n in sorted(self.skipped.items()))
            return f"no valid split of the degrees ({parts} rejected)"
        return self.no_split()


@dataclass(frozen=True)
class StatesFloor:
    """The model states (weights, gradients, optimizer states) of the layout that needs the least
    of them per GPU, where every layout needs more than the GPU has."""

    plan: Plan
    per_gpu_bytes: float
    total_bytes: float  # the model states of the whole model, unsharded
    capacity_bytes: float  # one GPU's usable memory

    def text(self) -> str:
        fewest = math.ceil(self.total_bytes / self.capacity_bytes)
        return (f"the model states alone (weights, gradients, optimizer states: {self.total_bytes / 1e9:,.0f} GB in all) "
                f"exceed the GPU's memory in every layout; the least, {label(self.plan)} ({self.plan.sharding}), "
                f"needs {self.per_gpu_bytes / 1e9:,.1f} GB per GPU of {self.capacity_bytes / 1e9:,.1f} GB usable: "
                f"at least {fewest:,} of these GPUs hold them, before activations")


def label(plan: Plan) -> str:
    """A layout in Megatron's words: "TP8+SP PP2x4 CP2 EP8 DP4" (PP2x4: 4 virtual stages a rank;
    ETP1 where the experts are not split with tp)."""
    parts = [f"TP{plan.tp}" + ("+SP" if plan.sequence_parallel else ""),
             f"PP{plan.pp}" + (f"x{plan.vp}" if plan.vp > 1 else "")]
    if plan.cp > 1:
        parts.append(f"CP{plan.cp}")
    if plan.ep > 1:
        parts.append(f"EP{plan.ep}")
    if plan.etp is not None and plan.etp != plan.tp:
        parts.append(f"ETP{plan.etp}")
    parts.append(f"DP{plan.dp}")
    return " ".join(parts)


def _pow2_upto(n: int) -> list[int]:
    out, d = [], 1
    while d <= n:
        out.append(d)
        d *= 2
    return out


def _domain(job: Job) -> int:
    return job.system.scaleup.domain_gpus if job.system.scaleup is not None else job.system.gpus_per_node


def split_rules(job: Job, fixed: Fixed) -> str:
    """The rules `candidates` splits the GPUs by, in words (why no split may exist)."""
    tp = (f"tp {fixed.tp}" if fixed.tp else
          f"tp a power of two up to {min(job.gpus, _domain(job), MAX_TP)} (the scale-up domain)")
    pp = f"pp {fixed.pp}" if fixed.pp else f"pp up to {min(job.args.layers, MAX_PP)} (the layers)"
    cp = (f"cp {fixed.cp}" if fixed.cp else
          f"cp a power of two up to {MAX_CP} leaving at least {CP_MIN_TOKENS:,} of the {job.seq_len:,} tokens per rank")
    mb = (f"micro-batch {fixed.micro_batch}" if fixed.micro_batch else
          f"a micro-batch of {', '.join(map(str, MICRO_BATCHES))}")
    return (f"{job.gpus} GPUs = {tp} x {pp} x {cp} x data parallel, where data parallel x {mb} must divide the "
            f"global batch {job.global_batch}")


def candidates(job: Job, fixed: Fixed, base: Plan) -> Iterator[Plan]:
    """Every layout to try (not yet checked for divisibility): `split_rules` in words."""
    a = job.args
    g = job.gpus
    tps = [fixed.tp] if fixed.tp else [t for t in _pow2_upto(min(g, _domain(job), MAX_TP)) if g % t == 0]
    pps = [fixed.pp] if fixed.pp else [p for p in divisors(g) if p <= a.layers and p <= MAX_PP]
    cps = [fixed.cp] if fixed.cp else [c for c in _pow2_upto(min(g, MAX_CP)) if g % c == 0 and
                                       (c == 1 or job.seq_len // c >= CP_MIN_TOKENS)]
    eps = [fixed.ep] if fixed.ep else ([e for e in _pow2_upto(min(g, a.experts)) if a.experts % e == 0]
                                        if a.experts else [1])
    mbs = [fixed.micro_batch] if fixed.micro_batch else list(MICRO_BATCHES)
    shardings = [fixed.sharding] if fixed.sharding else list(SHARDINGS_SEARCHED)
    recomputes = [fixed.recompute] if fixed.recompute else list(RECOMPUTES_SEARCHED)
    for tp in tps:
        # Transformer Engine's comm+GEMM overlap (userbuffers) maps its peers' memory over NVLink: on by
        # default where the tensor-parallel group shares the scale-up link, not over PCIe
        overlap_ok = on_scaleup(job.system, tp)
        for pp in pps:
            for cp in cps:
                if g % (tp * pp * cp):
                    continue
                dp = g // (tp * pp * cp)
                # expert tensor parallelism: with tp > 1 the experts are searched whole, expert parallelism
                # folded over the tensor-parallel ranks (etp 1, MoE parallel folding, as Megatron-Bridge's
                # MoE recipes run); --etp fixes another split (tp's is Megatron's default)
                etps: list[int | None] = ([None if fixed.etp == tp else fixed.etp] if fixed.etp
                                          else [1] if a.experts and tp > 1 else [None])
                for ep, etp in ((e, t) for e in eps for t in etps):
                    if (tp * dp * cp) % (ep * (etp or tp)):
                        continue
                    for mb in mbs:
                        if job.global_batch % (mb * dp):
                            continue
                        m = job.global_batch // (mb * dp)
                        for sched, vp in _schedules(fixed, pp, m, a.layers):
                            for sh in shardings:
                                if sh != "ddp" and dp == 1:
                                    continue
                                if pp > 1 and sh in ("zero3", "fsdp-full", "fsdp-hybrid"):
                                    continue  # Megatron does not combine pipelining with full sharding
                                for rc in recomputes:
                                    sp = bool((fixed.sequence_parallel if fixed.sequence_parallel is not None
                                               else True) and tp > 1)
                                    ov = fixed.tp_comm_overlap if fixed.tp_comm_overlap is not None else sp and overlap_ok
                                    yield base.with_(tp=tp, pp=pp, vp=vp, cp=cp, ep=ep, etp=etp, dp=dp,
                                                     micro_batch=mb,
                                                     grad_accum=m, schedule=sched, sharding=sh, recompute=rc,
                                                     sequence_parallel=sp, tp_comm_overlap=bool(ov and tp > 1))


def _schedules(fixed: Fixed, pp: int, m: int, layers: int) -> Iterator[tuple[str, int]]:
    if pp == 1:
        if fixed.schedule in (None, "1f1b"):
            yield "1f1b", 1
        return
    names = [fixed.schedule] if fixed.schedule else list(SCHEDULES_SEARCHED)
    for s in names:
        if s == "interleaved-1f1b":
            if m % pp:
                continue
            # even chunks, counting the embedding and the loss as a layer each where that evens them
            # (Llama-3.1-405B's 126 layers over pp 16 x vp 8, as NeMo runs it; planner.split_layers)
            vps = [fixed.vp] if fixed.vp else [v for v in range(2, 9)
                                               if layers % (pp * v) == 0 or (layers + 2) % (pp * v) == 0]
            for v in vps:
                if v >= 2 and stages_fit(layers, pp * v):
                    yield s, v
        elif s == "zb-v":
            if (fixed.vp in (None, 2)) and 2 * pp <= layers:
                yield s, 2
        elif fixed.vp in (None, 1):
            yield s, 1


def search(job: Job, fixed: Fixed, base: Plan | None = None, top: int = 5, objective: str = "time",
           ctx: Context | None = None, distinct: Callable[[Plan], Hashable] | None = None) -> SearchResult:
    """The `top` fastest layouts that fit, and the best of those that do not (with reasons).
    ``distinct``: keep only the fastest layout of each value it gives (the fastest of each split of
    the degrees, say), the `top` fastest of those."""
    if objective not in ("time", "cost"):
        raise InputError(f"objective must be 'time' or 'cost', got {objective!r}", field="objective")
    ctx = ctx or Context.make(job)
    base = base or Plan()
    fits: list[Scored] = []
    nofit: list[Scored] = []
    skipped: dict[str, int] = {}
    total = float(job.args.params()[0])
    capacity = job.gpu.usable_memory_bytes
    least: tuple[float, Plan] | None = None
    for plan in candidates(job, fixed, base):
        try:
            check_layout(job, plan)
        except InputError as e:
            key = (e.field or "layout")
            skipped[key] = skipped.get(key, 0) + 1
            continue
        states = _states_floor(ctx, plan, total)
        if states > capacity:
            skipped["memory"] = skipped.get("memory", 0) + 1  # the model states alone exceed the GPU
            if least is None or states < least[0]:
                least = (states, plan)
            continue
        sc = score(ctx, plan)
        (fits if sc.fits else nofit).append(sc)
    best, timed = _fastest(fits, top, distinct)
    closest, timed_nofit = _closest_scored(nofit, top)
    floor = None
    if least is not None:
        whole = total * (ctx.param_bytes + ctx.grad_bytes + ctx.optimizer_bytes)
        floor = StatesFloor(least[1], least[0], whole, capacity)
    return SearchResult(best, closest, len(fits) + len(nofit), skipped, split_rules(job, fixed),
                        simulated=timed + timed_nofit, states_floor=floor)


def _fastest(fits: list[Scored], top: int, distinct: Callable[[Plan], Hashable] | None = None
             ) -> tuple[list[Result], int]:
    """The `top` fastest of `fits` (ties in the order searched; with `distinct`, the fastest of each
    of its values, the `top` fastest of those) and how many schedules that took simulating: in
    order of their lower bounds, until the next bound exceeds the `top`-th step time found (branch
    and bound: exactly what a full evaluation of each layout would rank first)."""
    if top <= 0:
        return [], 0
    order = sorted(range(len(fits)), key=lambda i: fits[i].lower_s)
    kept: dict[Hashable, tuple[float, int, Result]] = {}  # the fastest of each key: (step, index, result)
    heap: list[tuple[float, int, Hashable]] = []  # the best `top` keys, as (-step, -index): worst on top
    timed = 0
    for i in order:
        if len(heap) == top and fits[i].lower_s * (1.0 - 1e-9) > -heap[0][0]:
            break  # this bound and every later one exceed the top-th step time
        r = fits[i].finish(False)
        timed += 1
        key: Hashable = distinct(r.plan) if distinct is not None else i
        old = kept.get(key)
        if old is not None and (old[0], old[1]) <= (r.step_s, i):
            continue
        kept[key] = (r.step_s, i, r)
        if old is not None:  # a kept key improved (rare): the best `top` keys again, from scratch
            heap = [(-s, -j, k) for s, j, k in heapq.nsmallest(top, ((s, j, k) for k, (s, j, _) in kept.items()))]
            heapq.heapify(heap)
            continue
        item = (-r.step_s, -i, key)
        if len(heap) < top:
            heapq.heappush(heap, item)
        elif item[:2] > heap[0][:2]:
            heapq.heapreplace(heap, item)
    best = sorted((kept[k] for _, _, k in heap), key=lambda t: (t[0], t[1]))
    return [r for _, _, r in best], timed


def _closest_scored(nofit: list[Scored], top: int) -> tuple[list[Result], int]:
    """`_closest` of the layouts that do not fit, simulating only those it may pick: every layout
    whose memory is at most that of the `top`-th distinct choice by memory (its key holds the
    memory, so a layout that needs more can never come before it)."""
    if top <= 0 or not nofit:
        return [], 0
    keys: set[tuple[object, ...]] = set()
    limit = None
    for sc in sorted(nofit, key=lambda sc: sc.peak_memory_bytes):
        keys.add(_nofit_key(sc.plan, sc.peak_memory_bytes))
        if len(keys) == top:
            limit = sc.peak_memory_bytes
            break
    chosen = [sc.finish(False) for sc in nofit if limit is None or sc.peak_memory_bytes <= limit]
    return _closest(chosen, top), len(chosen)


def _nofit_key(p: Plan, peak: float) -> tuple[object, ...]:
    return (p.tp, p.pp, p.vp, p.cp, p.ep, p.dp, p.micro_batch, p.grad_accum, p.sharding, peak)


def _closest(nofit: list[Result], top: int) -> list[Result]:
    """The `top` layouts that do not fit, least memory first; of those that differ only in a choice
    that leaves their memory as it is (selective recomputation under flash attention, which keeps
    no score matrix to drop; a schedule with the same in-flight micro-batches), the fastest alone:
    the others tell nothing more about what would make the layout fit."""
    out: list[Result] = []
    seen: set[tuple[object, ...]] = set()
    for r in sorted(nofit, key=lambda r: (r.peak_memory_bytes, r.step_s)):
        key = _nofit_key(r.plan, r.peak_memory_bytes)
        if key in seen:
            continue
        seen.add(key)
        out.append(r)
        if len(out) == top:
            break
    return out


def _states_floor(ctx: Context, plan: Plan, total: float) -> float:
    """A lower bound of one rank's model states (weights, gradients, optimizer states under the
    sharding; experts spread over ep): a layout above the GPU's memory on this alone is skipped
    without simulating its schedule."""
    share = total / (plan.tp * plan.pp * max(1, plan.ep))
    shard = plan.shard_gpus(ctx.job.system.gpus_per_node) if plan.sharding == "fsdp-hybrid" else plan.dp
    fw, fg, fo = shard_factors(plan.sharding, shard)
    return share * (ctx.param_bytes * fw + ctx.grad_bytes * fg + ctx.optimizer_bytes * fo)
