"""Rendering of a recommendation: the ranked table, the picks, the cards that cannot run the job,
the assumptions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text

from whichgpu.recommend.rank import Config
from whichgpu.recommend.result import Recommendation
from whichgpu.report.console import Table, compact_table, console, print_wide, say
from whichgpu.report.workload import (
    active_params,
    coverage_document,
    coverage_warnings,
    model_assumptions,
    params_text,
)
from whichgpu.units import GB, fmt_si, fmt_time, fmt_usd
from whichgpu.workload.trace import Trace


def recommend_document(rec: Recommendation, traced: Trace | None = None) -> dict[str, Any]:
    """The recommendation's JSON (schema whichgpu.recommend/1): `Recommendation.to_dict` with, for
    each workload of the top row, the model's active parameters, attention variant, routing and
    attention assumptions, and the coverage of its cost formulas. With no row (nothing can run
    the job), a single workload's model facts come from `traced`, a trace of it."""
    d = rec.to_dict()
    runs = rec.rows[0].runs if rec.rows else []
    traces = [r.trace for r in runs] or ([traced] if traced is not None and len(d["workloads"]) == 1 else [])
    for w, t in zip(d["workloads"], traces, strict=False):
        w.setdefault("params", t.params)
        w.update(active_params=active_params(t), attention=t.shape.attention or None,
                 assumptions=model_assumptions(t), coverage=coverage_document(t))
    return d


def _model_lines(rec: Recommendation, traced: Trace | None = None) -> list[str]:
    """Each workload's parameters ("46.70B parameters, 12.88B active per token"), named when
    several, from the top row's traces (or `traced` when no row can run a single workload)."""
    runs = rec.rows[0].runs if rec.rows else []
    if not runs and traced is not None and len(rec.request.workloads) == 1:
        return [params_text(traced)]
    if len(runs) == 1:
        return [params_text(runs[0].trace)]
    return [f"{r.workload.label}: {params_text(r.trace)}" for r in runs]


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


def _key_figure(rec: Recommendation) -> tuple[str, Callable[[Config], str]]:
    """The column the ranking is decided by: its header and its cell."""
    obj = rec.request.objective
    unit = rec.unit.split("/")[0] if rec.unit != "x best" else "work"
    if obj == "value":
        return f"{unit}/$", lambda c: fmt_si(c.value) if c.value is not None else "no price"
    if obj == "energy":
        return f"{unit}/kWh", lambda c: fmt_si(c.per_kwh) if c.per_kwh is not None else "no TDP"
    if obj == "cost-per-job":
        return "job $", lambda c: fmt_usd(c.job_usd) if c.job_usd is not None else "no price"
    return _speed_unit(rec), lambda c: fmt_si(c.speed)


def _gpu_cell(c: Config) -> Text:
    cell = Text(c.gpu.name)
    if c.outside:
        cell.append(" *", style="yellow")
    return cell


def _title(rec: Recommendation, top: int) -> str:
    return (f"ranked by {rec.request.objective}: each GPU's best configuration ({len(rec.rows)} GPUs run it; "
            f"showing {min(top, len(rec.rows))})")


def _compact_table(rec: Recommendation, top: int) -> Table:
    """Rank, GPU count, the objective's figure, then the GPU with why under it: laid out for
    80-120 columns (the reasons get the width of the line, not a narrow last column)."""
    head, figure = _key_figure(rec)
    job = rec.request.objective == "cost-per-job"
    t = compact_table(_title(rec, top), leading=1)
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column("GPUs", justify="right", no_wrap=True)
    t.add_column(head, justify="right", no_wrap=True)
    if job:
        t.add_column("job time", justify="right", no_wrap=True)
    t.add_column("GPU: why", min_width=24)
    for i, c in enumerate(rec.rows[:top], start=1):
        row: list[str | Text] = [str(i), str(c.gpus), figure(c)]
        if job:
            row.append(fmt_time(c.job_h * 3600) if c.job_h is not None else "-")
        gpu = _gpu_cell(c)
        gpu.stylize("bold", 0, len(c.gpu.name))
        row.append(Text.assemble(gpu, "\n", "; ".join(c.reasons)))
        t.add_row(*row, style="dim" if c.within_budget is False else None)
    return t


def _wide_table(rec: Recommendation, top: int) -> Table:
    """Every column: precision, speed, likely range, prices, job, energy, break-even, memory."""
    req = rec.request
    mode = req.cost.mode
    unit = rec.unit.split("/")[0] if rec.unit != "x best" else "work"
    t = Table(title=_title(rec, top))
    cols = ["#", "GPU", "n", "precision", _speed_unit(rec), "likely", "$/hour" + (" (rent)" if mode == "rent" else ""),
            f"{unit}/$", "price" + (" per GPU-hour" if mode == "rent" else " per card")]
    if req.job.given:
        cols += ["job time", "job $"]
    if req.objective == "energy":
        cols.append(f"{unit}/kWh")
    cols += ["buy vs rent break-even", "GB used/usable", "why"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("GPU", "precision", "why", "#") else "right",
                     no_wrap=col != "why", max_width=80 if col == "why" else None)
    for i, c in enumerate(rec.rows[:top], start=1):
        rng = c.likely_speed()
        row: list[str | Text] = [
            str(i), _gpu_cell(c), str(c.gpus), "/".join(sorted({r.precision for r in c.runs})), fmt_si(c.speed),
            f"{fmt_si(rng[0])}-{fmt_si(rng[1])}" if rng else "-",
            fmt_usd(c.usd_per_hour) if c.usd_per_hour is not None else "-",
            fmt_si(c.value) if c.value is not None else "no price", _price(c, mode)]
        if req.job.given:
            row += [fmt_time(c.job_h * 3600) if c.job_h is not None else "-",
                    fmt_usd(c.job_usd) if c.job_usd is not None else "-"]
        if req.objective == "energy":
            row.append(fmt_si(c.per_kwh) if c.per_kwh is not None else "no TDP")
        row += [_break_even(c, req.cost.hours_per_month), _memory(c), "; ".join(c.reasons)]
        t.add_row(*row, style="dim" if c.within_budget is False else None)
    return t


def print_recommendation(rec: Recommendation, top: int, wide: bool = False, traced: Trace | None = None) -> None:
    """The ranking. The default table fits 80-120 columns (rank, GPU, count, the objective's
    figure, why); `wide` adds precision, speed, likely range, prices, break-even and memory at
    full width."""
    req = rec.request
    what = " + ".join(w.label for w in req.workloads)
    say(("Which GPU for", "bold"), f": {what}", (f"  (use case {req.preset})" if req.preset else "", "dim"))
    say(f"{req.cost.describe()}; objective: ", (req.objective, "bold"),
        (f"; budget {fmt_usd(req.budget_usd)}" if req.budget_usd is not None else "")
        + (f"; job: {req.job.describe()}" if req.job.given else ""))
    runs = rec.rows[0].runs if rec.rows else []
    for text in _model_lines(rec, traced):
        say(text)
    for w in coverage_warnings(t for r in runs for t in r.traces):
        say(("warning", "yellow"), f": {w}", wrap=True)
    if wide:
        print_wide(_wide_table(rec, top))
    else:
        console.print(_compact_table(rec, top))
        say(("more columns (precision, speed, likely range, $/hour, price, break-even, GB used): --wide; "
             "every figure: --json", "dim"))
    say("likely: p10-p90 of the scored errors of the workload's class on each GPU's architecture "
        "(whichgpu validate)")
    flagged = sorted({f"{c.gpu.name}: {'; '.join(c.outside)}" for c in rec.rows[:top] if c.outside})
    if flagged:
        say(("*", "yellow"), " outside the validated ground (no validation rows for it; the band is borrowed "
            "from other classes): " + " | ".join(flagged[:6]) + (" ..." if len(flagged) > 6 else ""))
    for p in rec.picks:
        say((p.title, "bold"), f": {p.text}")
    if rec.rejected:
        rt = compact_table(f"cannot run this job or left out ({len(rec.rejected)})")
        rt.add_column("GPU", min_width=12)
        rt.add_column("GB", justify="right", no_wrap=True)
        rt.add_column("why", min_width=20)
        for r in rec.rejected:
            rt.add_row(r.result.gpu.name, f"{r.result.gpu.memory_gb:g}", r.blocker.text)
        console.print(rt)
    for n in rec.notes:
        say(f"note: {n}")
    for k, v in rec.assumptions.items():
        say((f"assumption {k}: {v}", "dim"))
    for run in runs:
        for k, v in model_assumptions(run.trace).items():
            say((f"assumption {k}" + (f" ({run.workload.label})" if len(runs) > 1 else "") + f": {v}", "dim"))
