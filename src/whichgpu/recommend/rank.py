"""Configurations (GPU kind x count) with their cost, speed and energy, and their ranking.

Speed of one workload is its throughput in its unit (all GPUs together). A preset's mix has no
common unit: each workload's throughput is divided by the best any configuration reaches, and the
mix's speed is the weighted geometric mean of these ratios (1.0 = the fastest configuration on
every workload).

Objectives (each a key; ties go to the faster configuration, then the GPU's id):
    value         most work per dollar: speed x 3600 / (USD per hour of use)
    time          fastest: the highest speed (the shortest job)
    energy        most work per kWh: speed x 3600 / (GPUs x watts / 1000)
    cost-per-job  the cheapest job: job hours x USD per hour
Configurations without the figure the objective needs (no price; no TDP) rank after the others,
by speed, and are marked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from whichgpu.hardware.spec import GpuSpec
from whichgpu.recommend.cost import (
    break_even_hours,
    buy_usd_per_hour,
    energy_kwh,
    job_hours,
    rent_usd_per_hour,
)
from whichgpu.recommend.evaluate import AnyRun
from whichgpu.recommend.prices import GpuPrices
from whichgpu.recommend.request import Request


@dataclass
class Config:
    """One GPU kind x count that runs every workload."""

    gpu: GpuSpec
    gpus: int
    runs: list[AnyRun]
    watts: float | None  # per card while working
    prices: GpuPrices
    min_count: int  # the fewest GPUs of this kind that run the job
    speed: float = 0.0
    usd_per_hour: float | None = None  # of use, under the request's cost mode
    purchase_usd: float | None = None  # n cards
    break_even_h: float | None = None  # buy vs rent; None: unknown or never
    break_even_never: bool = False
    job_h: float | None = None
    job_usd: float | None = None
    job_kwh: float | None = None
    value: float | None = None  # work per USD
    per_kwh: float | None = None  # work per kWh
    within_budget: bool | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def power_w(self) -> float | None:
        return None if self.watts is None else self.gpus * self.watts

    @property
    def band(self) -> tuple[float, float] | None:
        """(p10, p90) of ln(predicted / measured) for the workloads' classes: the widest of the
        runs' bands (perf/bands.py), None without bands."""
        bands = [b for r in self.runs if (b := r.band) is not None]
        if not bands:
            return None
        return min(b.p10 for b in bands), max(b.p90 for b in bands)

    def likely_speed(self) -> tuple[float, float] | None:
        b = self.band
        return None if b is None else (self.speed * math.exp(-b[1]), self.speed * math.exp(-b[0]))

    @property
    def outside(self) -> tuple[str, ...]:
        """Why the configuration lies outside the validated ground (empty: inside)."""
        seen: dict[str, None] = {}
        for r in self.runs:
            for why in r.outside:
                seen.setdefault(why, None)
        return tuple(seen)

    @property
    def memory_gb(self) -> float:
        return self.gpu.memory_gb

    @property
    def key(self) -> str:
        return f"{self.gpus}x {self.gpu.id}"


def _job_work(req: Request, run: AnyRun) -> tuple[float, float] | None:
    """(work, rate per second) of the job in the rate's unit."""
    j = req.job
    if j.tokens is not None:
        return j.tokens, run.tokens_per_s
    if j.epochs is not None and j.dataset_size is not None:
        return j.epochs * j.dataset_size, run.samples_per_s
    return None


def price_config(c: Config, req: Request) -> None:
    """Fill the cost, job, energy and budget figures of a configuration (speed must be set)."""
    m = req.cost
    n = c.gpus
    buy, rent = c.prices.buy, c.prices.rent
    if buy.usd is not None:
        c.purchase_usd = n * buy.usd
    if m.mode == "buy":
        c.usd_per_hour = buy_usd_per_hour(buy.usd, n, c.watts, m) if buy.usd is not None else None
    else:
        c.usd_per_hour = rent_usd_per_hour(rent.usd, n) if rent.usd is not None else None
    if buy.usd is not None and rent.usd is not None:
        c.break_even_h = break_even_hours(buy.usd, rent.usd, c.watts, m.usd_per_kwh)
        c.break_even_never = c.break_even_h is None
    work = _job_work(req, c.runs[0])
    if work is not None:
        c.job_h = job_hours(*work)
        if c.usd_per_hour is not None and math.isfinite(c.job_h):
            c.job_usd = c.job_h * c.usd_per_hour
        if c.watts is not None and math.isfinite(c.job_h):
            c.job_kwh = energy_kwh(n, c.watts, c.job_h)
    if c.usd_per_hour:
        c.value = c.speed * 3600.0 / c.usd_per_hour
    if c.watts:
        c.per_kwh = c.speed * 3600.0 / (n * c.watts / 1000.0)
    if req.budget_usd is not None:
        if m.mode == "buy":
            spend = c.purchase_usd
        elif c.job_usd is not None:
            spend = c.job_usd
        else:
            spend = None if c.usd_per_hour is None else c.usd_per_hour * m.hours_per_month
        c.within_budget = None if spend is None else spend <= req.budget_usd


def set_speeds(configs: list[Config]) -> None:
    """Absolute throughput for one workload; the weighted geometric mean of ratios to the best
    for a mix."""
    if not configs:
        return
    k = len(configs[0].runs)
    if k == 1:
        for c in configs:
            c.speed = c.runs[0].throughput
        return
    best = [max(c.runs[i].throughput for c in configs) or 1.0 for i in range(k)]
    weights = [r.workload.weight for r in configs[0].runs]
    total = sum(weights) or 1.0
    for c in configs:
        logs = sum(wt * math.log(max(r.throughput, 1e-30) / b) for wt, r, b in zip(weights, c.runs, best))
        c.speed = math.exp(logs / total)


def metric(c: Config, objective: str) -> float | None:
    """The objective's figure, oriented so that larger is better; None when unknown."""
    if objective == "value":
        return c.value
    if objective == "time":
        return c.speed
    if objective == "energy":
        return c.per_kwh
    return None if c.job_usd is None else -c.job_usd


def sort_key(c: Config, objective: str) -> tuple[int, float, float, str, int]:
    m = metric(c, objective)
    return (0 if m is not None else 1, -(m or 0.0), -c.speed, c.gpu.id, c.gpus)


def rank(configs: list[Config], objective: str) -> list[Config]:
    return sorted(configs, key=lambda c: sort_key(c, objective))


def best_per_gpu(ranked: list[Config], budget: bool) -> list[Config]:
    """Each GPU kind's best configuration (within the budget when one is given and any is),
    in ranking order."""
    chosen: dict[str, Config] = {}
    for c in ranked:
        prev = chosen.get(c.gpu.id)
        if prev is None or (budget and prev.within_budget is not True and c.within_budget is True):
            chosen[c.gpu.id] = c
    order = {id(c): i for i, c in enumerate(ranked)}
    return sorted(chosen.values(), key=lambda c: order[id(c)])
