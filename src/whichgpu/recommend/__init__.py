"""Which GPU, how many, bought or rented: every catalog GPU x count x the layout that fits,
ranked by the user's objective, each row with its reason in words. Torch-free: traces come
from the caller's ``trace_for(spec)``."""

from __future__ import annotations

from dataclasses import replace

from whichgpu.errors import InputError, WhichGPUError
from whichgpu.hardware.catalog import Catalog
from whichgpu.hardware.spec import GpuSpec
from whichgpu.memory.estimate import MemoryEstimate
from whichgpu.recommend.evaluate import GpuResult, Run, card_watts, evaluate_gpu
from whichgpu.recommend.picks import FreeTier, make_picks
from whichgpu.recommend.presets import GUIDE
from whichgpu.recommend.prices import resolve_prices
from whichgpu.recommend.rank import Config, best_per_gpu, price_config, rank, set_speeds
from whichgpu.recommend.reasons import (
    POWER_SOURCE,
    bound_text,
    form_factor_text,
    layout_text,
    planned_text,
    power_text,
    precision_text,
)
from whichgpu.recommend.request import Job, Request, Workload
from whichgpu.recommend.result import SCHEMA, Recommendation, Rejected
from whichgpu.recommend.search import TraceFor, Tracer, traces_for

__all__ = ["SCHEMA", "Job", "Recommendation", "Request", "TraceFor", "Workload", "recommend"]


def check_constraints(req: Request, gpus: list[GpuSpec]) -> None:
    """Constraints no GPU can meet are errors before any work."""
    if not gpus:
        raise InputError("no GPU to evaluate: the GPUs asked for are none of the catalog's", field="gpu_ids")
    if req.min_memory_gb is not None:
        big = max(gpus, key=lambda g: g.memory_gb)
        if big.memory_gb < req.min_memory_gb:
            raise InputError(f"no GPU has {req.min_memory_gb:g} GB of memory; the largest, {big.name}, has "
                             f"{big.memory_gb:g} GB", field="min_memory_gb")
    if req.max_power_w is not None:
        powered = [(w, g) for g in gpus if (w := card_watts(g, req.power_limit_w)) is not None]
        if powered:
            w, g = min(powered, key=lambda x: x[0])
            if w > req.max_power_w:
                raise InputError(f"no GPU draws {req.max_power_w:g} W or less; the lowest-power card, {g.name}, "
                                 f"draws {w:g} W", field="max_power_w")


def config_reasons(c: Config, req: Request) -> list[str]:
    out = []
    mix = len(c.runs) > 1
    for r in c.runs:
        if isinstance(r, Run):
            bits = [bound_text(r, c.gpu), layout_text(r, c.min_count), precision_text(r)]
        else:
            bits = [planned_text(r, c.min_count), precision_text(r)]
        text = "; ".join(b for b in bits if b)
        out.append(f"{r.workload.label}: {text}" if mix else text)
    pw = power_text(c.gpu, req.power_limit_w)
    if pw:
        out.append(pw)
    q = c.prices.rent if req.cost.mode == "rent" else c.prices.buy
    ff = form_factor_text(c.gpu) if req.cost.mode == "buy" and q.usd is not None else ""
    if ff:
        out.append(ff)
    if q.usd is None:
        out.append("no rental price" if req.cost.mode == "rent" else "no purchase price")
    elif q.stale:
        out.append(f"price from {q.date or 'an unknown date'}: over a year old")
    if c.within_budget is False:
        out.append("over budget")
    return out


def memory_of(c: Config, tracer: Tracer) -> MemoryEstimate | None:
    """The memory breakdown of the configuration's first workload (serving: the larger of
    prefill and decode); None for a layout of the parallel planner (its JSON run carries the
    planner's breakdown of the worst rank)."""
    r = c.runs[0]
    if not isinstance(r, Run):
        return None
    lay = r.layout
    plan = lay.plan
    ests = [tracer.memory(t, c.gpu, plan) for t in traces_for(tracer, r.workload, r.pred.precision, lay.micro_batch)]
    return max(ests, key=lambda e: e.total_bytes)


def assumptions(req: Request, rows: list[Config], mem: dict[str, MemoryEstimate], planned: bool = False) -> dict[str, str]:
    precision = "/".join(sorted({w.spec.precision for w in req.workloads}))
    a = {
        "cost": req.cost.describe(),
        "prices": "buy: the catalog's dated street price (new or used), else the launch MSRP; rent: the catalog's "
                  "on-demand price per GPU-hour; a prices file and --price override them; older than a year = stale",
        "precision": ("auto: BF16 on Ampere and newer, FP16 AMP on Volta/Turing, FP32 without 16-bit tensor cores "
                      "(Dettmers' guide); LoRA/QLoRA store the frozen base in 16 bits (the PEFT recipe)" if precision == "auto"
                      else f"{precision} on every card (cards without it are listed apart)"),
        "layout": "per GPU count: DDP, then ZeRO-2 (= FSDP SHARD_GRAD_OP), then ZeRO-3 (= FSDP FULL_SHARD); when none "
                  "fits, smaller micro-batches with gradient accumulation keep the batch per optimizer step",
        "counts": "GPU counts " + ", ".join(str(n) for n in req.counts()) + "; 8 GPUs per node on the card's "
                  "scale-up link (NVLink) or PCIe; inference on n GPUs = n replicas (tensor parallelism is not searched here)",
        "power": (f"power limit {req.power_limit_w:g} W: {POWER_SOURCE}" if req.power_limit_w else
                  "stock power limits; cards draw their TDP while working"),
        "speed": ("throughput of all GPUs together" if len(req.workloads) == 1 else
                  "relative speed: weighted geometric mean over the mix of throughput / the best configuration's"),
    }
    if req.max_power_w is not None:
        a["power_check"] = f"GPUs x TDP (or the limit) <= {req.max_power_w:g} W; the host's own draw is not counted"
    if req.memory_rule:
        a["memory_rule"] = f"{req.memory_rule} (the guide: {GUIDE}); cards below it are listed apart"
    traced = next((r for c in rows for r in c.runs if isinstance(r, Run)), None)
    if traced is not None:
        e = traced.pred.est.assumptions
        for k in ("efficiency_source", "engine", "overlap", "step_host"):
            if k in e:
                a[f"perf_{k}"] = str(e[k])
    if planned:
        a["parallel_layouts"] = ("LLM training at a GPU count (2 or more) where no DP/ZeRO/FSDP layout fits: the "
                                 "parallel planner's fastest tensor/pipeline (context, expert) parallel layout there "
                                 "(`whichgpu plan`: Megatron-style kernels, sharding, recomputation, micro-batch and "
                                 "schedule searched, global batch = batch x GPUs); its figures come from the planner, "
                                 "not from the traced step, and carry no error band")
    if rows and rows[0].key in mem:
        m = mem[rows[0].key].assumptions
        for k in ("fragmentation", "cuda_context"):
            if k in m:
                a[f"memory_{k}"] = m[k]
    return a


def _configs(res: GpuResult, req: Request) -> list[Config]:
    if not res.runs:
        return []
    prices = resolve_prices(res.gpu, req.prices, req.today)
    watts = card_watts(res.gpu, req.power_limit_w)
    return [Config(res.gpu, n, runs, watts, prices, min(res.runs)) for n, runs in sorted(res.runs.items())]


def free_tier(tracer: Tracer, req: Request, catalog: Catalog, results: list[GpuResult],
              configs: list[Config]) -> tuple[list[Config], str]:
    """The free notebooks' T4 on this job, one or two (as on Kaggle): its configurations and, when
    it cannot run the job, why. It is evaluated even when a memory rule or --max-gpus leaves it out
    of the ranking."""
    try:
        t4 = catalog.get("t4")
    except WhichGPUError:
        return [], ""
    if req.gpu_ids is not None and t4.id not in req.gpu_ids:
        return [], ""  # the user chose the cards
    res = next((r for r in results if r.gpu.id == t4.id), None)
    if res is None or (res.blockers and res.blockers[0].kind == "min-memory") or req.max_gpus < 2:
        res = evaluate_gpu(tracer, replace(req, min_memory_gb=None, max_gpus=2, max_power_w=None), t4)
        mine = [c for c in _configs(res, req) if c.gpus <= 2]
    else:
        mine = [c for c in configs if c.gpu.id == t4.id and c.gpus <= 2]
    return mine, (res.blockers[0].text if res.blockers and not mine else "")


def recommend(req: Request, catalog: Catalog, trace_for: TraceFor) -> Recommendation:
    """Evaluate, rank and pick (see the package docstring)."""
    req.validate()
    gpus = [g for g in catalog if req.gpu_ids is None or g.id in req.gpu_ids]
    check_constraints(req, gpus)
    tracer = Tracer(trace_for)
    results = [evaluate_gpu(tracer, req, g) for g in gpus]
    configs = [c for res in results for c in _configs(res, req)]
    t4, t4_why = free_tier(tracer, req, catalog, results, configs)
    known = {id(c) for c in configs}
    every = configs + [c for c in t4 if id(c) not in known]
    set_speeds(every)  # (a mix's speeds are relative to the best of all of them)
    for c in every:
        price_config(c, req)
        c.reasons = config_reasons(c, req)
    ranked = rank(configs, req.objective)
    rows = best_per_gpu(ranked, req.budget_usd is not None)
    mem = {c.key: m for c in rows if (m := memory_of(c, tracer)) is not None}
    unit = req.workloads[0].unit if len(req.workloads) == 1 else "x best"
    picks = make_picks(ranked, FreeTier(tuple(t4), t4_why), req, unit)
    notes = []
    stale = sorted({c.gpu.id for c in rows if (c.prices.rent if req.cost.mode == "rent" else c.prices.buy).stale})
    if stale:
        notes.append(f"{len(stale)} of the prices used are over a year old (marked *): refresh them with "
                     "--prices FILE or --price NAME=USD")
    capped = [r for r in results if r.power_capped_counts and r.runs]
    if capped:
        notes.append(f"--max-power-w left out the larger counts of {len(capped)} GPU kind(s)")
    return Recommendation(req, unit, ranked, rows, [Rejected(r) for r in results if r.blockers], picks, mem,
                          assumptions(req, rows, mem, any(not isinstance(r, Run) for c in ranked for r in c.runs)),
                          notes, tracer.captures)
