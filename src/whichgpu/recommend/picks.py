"""The picks: best overall, best value, fastest, best within budget, and what to do with no budget."""

from __future__ import annotations

from dataclasses import dataclass

from whichgpu.parallel.plan import LABELS
from whichgpu.recommend.rank import Config, metric
from whichgpu.recommend.reasons import needs_server
from whichgpu.recommend.request import Request
from whichgpu.units import fmt_usd

FREE_TIERS = ("Google Colab's free tier gives a T4 (16 GB); Kaggle notebooks give a T4, two T4s or a P100 "
              "(16 GB each) for about 30 GPU-hours a week; both have usage limits")


@dataclass(frozen=True)
class FreeTier:
    """The T4 of the free notebooks on this job: its configurations (1 and 2 GPUs) or why not."""

    configs: tuple[Config, ...] = ()
    why: str = ""


@dataclass(frozen=True)
class Pick:
    kind: str  # best-overall | best-value | fastest | best-within-budget | no-budget
    title: str
    config: Config | None
    text: str


def _name(c: Config) -> str:
    return f"{c.gpus} x {c.gpu.name}" if c.gpus > 1 else c.gpu.name


def _price(c: Config, req: Request) -> str:
    if req.cost.mode == "rent":
        q = c.prices.rent
        return f"{fmt_usd(q.usd)}/GPU-hour" if q.usd is not None else "no rental price"
    q = c.prices.buy
    if q.usd is None:
        return "no purchase price"
    return f"{fmt_usd(q.usd)} per card" + (" (stale price)" if q.stale else "")


def make_picks(ranked: list[Config], free: FreeTier, req: Request, unit: str) -> list[Pick]:
    picks: list[Pick] = []
    obj = req.objective
    # Buying: SXM/OAM modules need a server whose price is not in the catalog; the picks use
    # cards that can be bought on their own (the modules stay in the table, marked).
    buyable = [c for c in ranked if req.cost.mode != "buy" or not needs_server(c.gpu)]
    left_out = " (SXM/OAM modules left out: they need a server, not priced)" if len(buyable) < len(ranked) else ""
    known = [c for c in buyable if metric(c, obj) is not None]
    top = known[0] if known else None
    none_runs = "no configuration compared runs this job" if not ranked else ""
    picks.append(Pick("best-overall", f"best overall ({obj})", top,
                      f"{_name(top)}, {_price(top, req)}{left_out}" if top else
                      none_runs or f"no configuration has the figures the {obj} objective needs (prices or TDPs)"))
    valued = [c for c in buyable if c.value is not None]
    bv = max(valued, key=lambda c: (c.value or 0.0, c.speed)) if valued else None
    picks.append(Pick("best-value", "best value (work per dollar)", bv,
                      f"{_name(bv)}, {_price(bv, req)}" if bv else none_runs or "no configuration has a price"))
    fastest = max(ranked, key=lambda c: (c.speed, -c.gpus)) if ranked else None
    picks.append(Pick("fastest", "fastest", fastest, _name(fastest) if fastest else none_runs))
    if req.budget_usd is not None:
        within = [c for c in buyable if c.within_budget]
        wb = within[0] if within else None
        what = "purchase" if req.cost.mode == "buy" else ("job" if req.job.given else "monthly rent")
        picks.append(Pick("best-within-budget", f"best within {fmt_usd(req.budget_usd)} ({what})", wb,
                          f"{_name(wb)}, {_price(wb, req)}" if wb else
                          f"nothing within {fmt_usd(req.budget_usd)}; the cheapest that runs it is "
                          + _cheapest(ranked, req)))
    picks.append(no_budget(ranked, free, req, unit))
    return picks


def _cheapest(ranked: list[Config], req: Request) -> str:
    priced = [c for c in ranked if (c.purchase_usd if req.cost.mode == "buy" else c.usd_per_hour) is not None]
    if not priced:
        return "unknown (no prices)"
    if req.cost.mode == "buy":
        c = min(priced, key=lambda c: c.purchase_usd or 0.0)
        return f"{_name(c)} at {fmt_usd(c.purchase_usd or 0.0)}"
    c = min(priced, key=lambda c: c.usd_per_hour or 0.0)
    return f"{_name(c)} at {fmt_usd(c.usd_per_hour or 0.0)}/hour"


def no_budget(ranked: list[Config], free: FreeTier, req: Request, unit: str) -> Pick:
    """Free notebooks when a T4 runs the job (the T4 is evaluated for this even when a memory rule
    leaves it out of the ranking); otherwise the smallest card that does."""
    t4 = next((c for c in free.configs if c.gpus == 1), None)
    t4x2 = next((c for c in free.configs if c.gpus == 2), None)
    if t4 is not None:
        extra = f"; two T4s (Kaggle): {t4x2.speed:,.4g} {unit}" if t4x2 is not None else ""
        return Pick("no-budget", "no budget", t4, f"free notebooks: it fits on one T4 ({t4.speed:,.4g} {unit}"
                    f"{extra}). {FREE_TIERS}")
    if t4x2 is not None:
        how = LABELS.get(t4x2.runs[0].layout.sharding, "DDP")
        return Pick("no-budget", "no budget", t4x2, f"free notebooks: it needs two T4s ({how}), as Kaggle offers "
                    f"({t4x2.speed:,.4g} {unit}). {FREE_TIERS}")
    lead = (f"free notebooks (T4, 16 GB) cannot run it: {free.why}" if free.why else
            "free notebooks (T4, 16 GB): not evaluated (not among the GPUs compared)")
    singles = [c for c in ranked if c.gpus == 1]
    smallest = min(singles, key=lambda c: (c.memory_gb, c.purchase_usd or float("inf"), -c.speed), default=None)
    if smallest is None:
        return Pick("no-budget", "no budget", None, lead + "; no single card runs it")
    return Pick("no-budget", "no budget", smallest, f"{lead}. The smallest card that runs it: {smallest.gpu.name} "
                f"({smallest.memory_gb:g} GB), {_price(smallest, req)}")
