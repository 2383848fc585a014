"""The recommendation: ranked configurations, the cards that cannot run the job, the picks, the
assumptions; and its JSON form (schema whichgpu.recommend/1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from whichgpu.memory.estimate import MemoryEstimate
from whichgpu.recommend.evaluate import AnyRun, Blocker, GpuResult, Run
from whichgpu.recommend.picks import Pick
from whichgpu.recommend.planned import PlannedRun
from whichgpu.recommend.rank import Config, metric
from whichgpu.recommend.request import Request

SCHEMA = "whichgpu.recommend/1"


@dataclass
class Rejected:
    """A GPU kind that cannot run the job (or was left out), with why."""

    result: GpuResult

    @property
    def blocker(self) -> Blocker:
        return self.result.blockers[0]


@dataclass
class Recommendation:
    request: Request
    unit: str  # the speed column's unit
    configs: list[Config]  # every feasible configuration, ranked
    rows: list[Config]  # each GPU kind's best configuration, ranked
    rejected: list[Rejected]
    picks: list[Pick]
    memory: dict[str, MemoryEstimate]  # row key -> memory breakdown of its first workload
    assumptions: dict[str, str]
    notes: list[str] = field(default_factory=list)
    captures: int = 0

    def to_dict(self) -> dict[str, Any]:
        req = self.request
        return {
            "title": req.title,
            "preset": req.preset,
            "objective": req.objective,
            "unit": self.unit,
            "request": request_dict(req),
            "workloads": [workload_dict(w_run) for w_run in (self.rows[0].runs if self.rows else [])]
            or [{"label": w.label, "model": w.spec.model, "task": w.spec.task} for w in req.workloads],
            "picks": [{"kind": p.kind, "title": p.title, "config": p.config.key if p.config else None,
                       "gpu": p.config.gpu.id if p.config else None, "gpus": p.config.gpus if p.config else None,
                       "text": p.text} for p in self.picks],
            "rows": [config_dict(c, req, i + 1, self.memory.get(c.key)) for i, c in enumerate(self.rows)],
            "configurations": [config_dict(c, req, i + 1, None) for i, c in enumerate(self.configs)],
            "cannot_run": [rejected_dict(r) for r in self.rejected],
            "assumptions": dict(self.assumptions),
            "notes": list(self.notes),
        }


def _fuses(engine: str) -> bool:
    from whichgpu.hardware.engine import get_engine

    return get_engine(engine).fuses


def request_dict(req: Request) -> dict[str, Any]:
    m = req.cost
    return {"mode": m.mode, "hours_per_month": m.hours_per_month, "years": m.years,
            "electricity_usd_per_kwh": m.usd_per_kwh, "budget_usd": req.budget_usd, "max_gpus": req.max_gpus,
            "counts": list(req.counts()), "max_power_w": req.max_power_w, "min_memory_gb": req.min_memory_gb,
            "memory_rule": req.memory_rule or None, "power_limit_w": req.power_limit_w,
            "step_host_ms": req.step_host_ms,
            "precision": sorted({w.spec.precision for w in req.workloads}),
            "compile": _fuses(req.engine), "engine": req.engine, "job": {"tokens": req.job.tokens, "epochs": req.job.epochs,
                                            "dataset_size": req.job.dataset_size},
            "gpus": list(req.gpu_ids) if req.gpu_ids else None, "today": req.today.isoformat()}


def workload_dict(r: AnyRun) -> dict[str, Any]:
    w = r.workload
    s = w.spec
    return {"label": w.label, "model": s.model, "task": s.task, "serving": w.serving, "batch_size": s.batch_size,
            "seq_len": s.seq_len, "image_size": s.image_size, "finetune": s.finetune,
            "checkpointing": s.checkpointing, "optimizer": s.optimizer, "unit": w.unit, "weight": w.weight,
            "params": r.trace.params, "trainable_params": r.trace.trainable_params}


def layout_dict(r: AnyRun) -> dict[str, Any]:
    """How the run is laid out: the degrees, and whether the parallel planner chose them."""
    p = r.layout.plan
    return {"label": r.label, "planner": not isinstance(r, Run), "gpus": p.gpus, "tp": p.tp, "pp": p.pp, "vp": p.vp,
            "cp": p.cp, "ep": p.ep, "dp": p.dp, "sequence_parallel": p.sequence_parallel,
            "recompute": (p.recompute or "none") if not isinstance(r, Run) else r.workload.spec.checkpointing,
            "schedule": p.schedule if p.pp > 1 else None}


def run_dict(r: AnyRun) -> dict[str, Any]:
    if not isinstance(r, Run):
        return planned_dict(r)
    e = r.pred.est
    lay = r.layout
    d: dict[str, Any] = {
        "workload": r.workload.label, "precision": r.pred.precision, "precision_reason": r.pred.precision_reason,
        "sharding": lay.sharding, "micro_batch": lay.micro_batch, "grad_accum": lay.grad_accum,
        "memory_bytes": lay.need_bytes, "capacity_bytes": lay.capacity_bytes,
        "throughput": r.throughput, "unit": r.workload.unit, "samples_per_s": r.samples_per_s,
        "tokens_per_s": r.tokens_per_s or None, "step_s": e.step_s, "bound": e.bound, "mfu": e.mfu, "split": e.split,
        **e.confidence(), "layout": layout_dict(r),
    }
    if r.pred.prefill is not None:
        d["serving"] = {"time_to_first_token_s": r.pred.prefill.step_s, "prefill_bound": r.pred.prefill.bound,
                        "decode_step_s": e.step_s, "decode_tokens_per_s": e.tokens_per_s}
    return d


def planned_dict(r: PlannedRun) -> dict[str, Any]:
    """A run of the parallel planner, with the keys of a traced run where they mean the same."""
    x = r.result
    lay = r.layout
    return {
        "workload": r.workload.label, "precision": r.precision, "precision_reason": r.precision_reason,
        "sharding": lay.sharding, "micro_batch": lay.micro_batch, "grad_accum": lay.grad_accum,
        "memory_bytes": lay.need_bytes, "capacity_bytes": lay.capacity_bytes,
        "throughput": r.throughput, "unit": r.workload.unit, "samples_per_s": r.samples_per_s,
        "tokens_per_s": r.tokens_per_s, "step_s": r.step_s, "bound": r.bound, "mfu": x.mfu,
        "split": dict(x.split), "validated": False, "outside_validated": [], "layout": layout_dict(r),
        "planner": {"step": "step_s is one optimizer step of the global batch", "global_batch": r.job.global_batch,
                    "seq_len": r.job.seq_len, "engine": lay.plan.engine,
                    "bubble_fraction": x.bubble_fraction, "model_tflops_per_gpu": x.model_tflops_per_gpu,
                    "memory_gb": {k: v / 1e9 for k, v in x.memory.items()}, "assumptions": dict(x.assumptions)},
    }


def config_dict(c: Config, req: Request, rank: int, mem: MemoryEstimate | None) -> dict[str, Any]:
    d: dict[str, Any] = {
        "rank": rank, "key": c.key, "gpu": c.gpu.id, "name": c.gpu.name, "gpus": c.gpus, "min_gpus": c.min_count,
        "memory_gb": c.gpu.memory_gb, "speed": c.speed, "objective_value": metric(c, req.objective),
        "usd_per_hour": c.usd_per_hour, "purchase_usd": c.purchase_usd,
        "price": {"buy": c.prices.buy.to_dict(), "rent": c.prices.rent.to_dict()},
        "value_per_usd": c.value, "per_kwh": c.per_kwh, "watts_per_gpu": c.watts, "power_w": c.power_w,
        "break_even_hours": c.break_even_h, "break_even_never": c.break_even_never,
        "break_even_months": (c.break_even_h / req.cost.hours_per_month) if c.break_even_h else None,
        "job_hours": c.job_h, "job_usd": c.job_usd, "job_kwh": c.job_kwh, "within_budget": c.within_budget,
        "reason": "; ".join(c.reasons), "reasons": list(c.reasons), "runs": [run_dict(r) for r in c.runs],
        "validated": not c.outside and all(r.validated for r in c.runs), "outside_validated": list(c.outside),
        "likely_speed": list(rng) if (rng := c.likely_speed()) is not None else None,
    }
    if mem is not None:
        d["memory"] = mem.to_dict()
    return d


def rejected_dict(r: Rejected) -> dict[str, Any]:
    b = r.blocker
    return {"gpu": r.result.gpu.id, "name": r.result.gpu.name, "memory_gb": r.result.gpu.memory_gb,
            "kind": b.kind, "reason": b.text, "suggestion": b.suggestion or None,
            "needs_bytes": b.attempt.need_bytes if b.attempt else None,
            "capacity_bytes": b.attempt.capacity_bytes if b.attempt else None}
