"""Rendering of a recommendation: the ranked table, the picks, the cards that cannot run the job,
the assumptions."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from whichgpu.recommend.rank import Config
from whichgpu.recommend.result import Recommendation
from whichgpu.report.console import console
from whichgpu.units import GB, fmt_si, fmt_time, fmt_usd


def recommend_document(rec: Recommendation) -> dict[str, Any]:
    return rec.to_dict()


def _price(c: Config, mode: str) -> str:
    q = c.prices.rent if mode == "rent" else c.prices.buy
    if q.usd is None:
        return "no price"
    text = f"{fmt_usd(q.usd)}/h" if mode == "rent" else fmt_usd(q.usd)
    star = "*" if q.stale else ""
    return f"{text}{star}" + (f" ({q.date})" if q.date else "")


def _break_even(c: Config, hours_per_month: float) -> str:
    if c.break_even_never:
        return "never"
    if c.break_even_h is None:
        return "-"
    months = c.break_even_h / hours_per_month
    return f"{fmt_si(c.break_even_h)} h ({months:.0f} mo)" if months < 1000 else f"{fmt_si(c.break_even_h)} h"


def _memory(c: Config) -> str:
    lay = max((r.layout for r in c.runs), key=lambda x: x.need_bytes / x.capacity_bytes)
    return f"{lay.need_bytes / GB:.1f}/{lay.capacity_bytes / GB:.1f}"


def _speed_unit(rec: Recommendation) -> str:
    return rec.unit if rec.unit != "x best" else "speed (x best)"


def print_recommendation(rec: Recommendation, top: int) -> None:
    req = rec.request
    what = " + ".join(w.label for w in req.workloads)
    head = f"[bold]Which GPU for[/]: {what}"
    if req.preset:
        head += f"  [dim](use case {req.preset})[/]"
    console.print(head, soft_wrap=True)
    console.print(f"{req.cost.describe()}; objective: [bold]{req.objective}[/]"
                  + (f"; budget {fmt_usd(req.budget_usd)}" if req.budget_usd is not None else "")
                  + (f"; job: {req.job.describe()}" if req.job.given else ""), soft_wrap=True)
    mode = req.cost.mode
    unit = rec.unit.split("/")[0] if rec.unit != "x best" else "work"
    t = Table(title=f"ranked by {req.objective}: each GPU's best configuration ({len(rec.rows)} GPUs run it; "
              f"showing {min(top, len(rec.rows))})")
    cols = ["#", "GPU", "n", "precision", _speed_unit(rec), "likely", "$/hour" + (" (rent)" if mode == "rent" else ""),
            f"{unit}/$", "price" + (" per GPU-hour" if mode == "rent" else " per card")]
    if req.job.given:
        cols += ["job time", "job $"]
    if req.objective == "energy":
        cols.append(f"{unit}/kWh")
    cols += ["buy vs rent break-even", "GB used/usable", "why"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("GPU", "precision", "why", "#") else "right",
                     overflow="fold" if col == "why" else "ellipsis", no_wrap=col != "why",
                     max_width=70 if col == "why" else None)
    for i, c in enumerate(rec.rows[:top], start=1):
        rng = c.likely_speed()
        row = [str(i), escape(c.gpu.name) + ("" if not c.outside else " [yellow]*[/]"), str(c.gpus),
               "/".join(sorted({r.pred.precision for r in c.runs})), fmt_si(c.speed),
               f"{fmt_si(rng[0])}-{fmt_si(rng[1])}" if rng else "-",
               fmt_usd(c.usd_per_hour) if c.usd_per_hour is not None else "-",
               fmt_si(c.value) if c.value is not None else "no price", _price(c, mode)]
        if req.job.given:
            row += [fmt_time(c.job_h * 3600) if c.job_h is not None else "-",
                    fmt_usd(c.job_usd) if c.job_usd is not None else "-"]
        if req.objective == "energy":
            row.append(fmt_si(c.per_kwh) if c.per_kwh is not None else "no TDP")
        row += [_break_even(c, req.cost.hours_per_month), _memory(c), "; ".join(c.reasons)]
        style = "dim" if c.within_budget is False else None
        t.add_row(*row, style=style)
    console.print(t)
    console.print("likely: p10-p90 of the scored errors of the workload's class on each GPU's architecture "
                  "(whichgpu validate)", soft_wrap=True)
    flagged = sorted({f"{c.gpu.name}: {'; '.join(c.outside)}" for c in rec.rows[:top] if c.outside})
    if flagged:
        console.print("[yellow]*[/] outside the validated ground (no validation rows for it; the band is borrowed "
                      "from other classes): " + escape(" | ".join(flagged[:6])) + (" ..." if len(flagged) > 6 else ""),
                      soft_wrap=True)
    for p in rec.picks:
        console.print(f"[bold]{p.title}[/]: {p.text}", soft_wrap=True)
    if rec.rejected:
        rt = Table(title=f"cannot run this job or left out ({len(rec.rejected)})")
        for col in ("GPU", "GB", "why"):
            rt.add_column(col, justify="right" if col == "GB" else "left", overflow="fold")
        for r in rec.rejected:
            rt.add_row(r.result.gpu.name, f"{r.result.gpu.memory_gb:g}", r.blocker.text)
        console.print(rt)
    for n in rec.notes:
        console.print(f"note: {n}", soft_wrap=True)
    for k, v in rec.assumptions.items():
        console.print(f"[dim]assumption {k}: {v}[/]", soft_wrap=True)
