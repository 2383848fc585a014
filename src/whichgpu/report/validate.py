"""Rendering of a validation run."""

from __future__ import annotations

import math
from typing import Any

from whichgpu.measure.validate import Validation
from whichgpu.report.console import Table, console, say


def _f(x: float | None, fmt: str = ".1f", none: str = "-") -> str:
    """`x` formatted; `none` for a figure with nothing behind it (None, NaN, an infinity)."""
    return none if x is None or not math.isfinite(x) else format(x, fmt)


def summary_line(v: Validation) -> str:
    s = v.summary
    fits = s["fits"]
    rho = s.get("rank_correlation")
    groups = s.get("rank_groups") or 0
    rank = (f"GPU rank correlation {_f(rho, '.3f')} over {groups} group{'s' if groups != 1 else ''}"
            if groups and rho is not None and math.isfinite(rho)
            else "GPU rank correlation n/a (no configuration measured on 3 or more GPUs)")
    line = (f"{s['rows']} rows, {s['modelled']} modelled ({_f(100 * (s['modelled_fraction'] or 0.0), '.1f', 'n/a')}%), "
            f"{s['scored']} scored ({s['bounded']} in the bounds): median APE {_f(s['median_ape'], '.1f', 'n/a')}%, "
            f"p90 APE {_f(s['p90_ape'], '.1f', 'n/a')}%, signed median {_f(s['signed_median'], '+.1f', 'n/a')}%, {rank}")
    if fits["rows"]:
        line += f"; fits/OOM labels {fits['correct']}/{fits['rows']} right"
    return line


def _group_table(title: str, groups: dict[str, dict[str, Any]]) -> Table:
    t = Table(title=title)
    t.add_column(title.split()[-1])
    for c in ("rows", "median APE %", "p90 APE %", "signed median %"):
        t.add_column(c, justify="right", no_wrap=True)
    for k, g in groups.items():
        t.add_row(str(k), str(g["rows"]), _f(g["median_ape"]), _f(g["p90_ape"]), _f(g["signed_median"], "+.1f"))
    return t


def print_validation(v: Validation, worst: int, show_rows: bool, groups: list[str] | None = None) -> None:
    s = v.summary
    for g in groups or ["source", "gpu"]:
        console.print(_group_table(f"by {g}", s[f"by_{g}"]))
    scored = [r for r in v.rows if r.status == "ok" and r.error_pct is not None]
    rows = scored if show_rows else sorted(scored, key=lambda r: -(r.error_pct or 0))[:worst]
    if rows:
        # 80-120 columns: the figures never wrap; the row's description (model, metric, GPU x n,
        # precision, batch, source) wraps in one column
        t = Table(title="rows" if show_rows else f"{len(rows)} largest errors")
        t.add_column("row", no_wrap=True)
        t.add_column("what (model, metric, GPU x n, precision, batch; source)", ratio=1)
        for c in ("predicted", "measured", "signed %", "bound"):
            t.add_column(c, justify="left" if c == "bound" else "right", no_wrap=True)
        for r in rows:
            what = (f"{r.model}, {r.metric}, {r.gpu} x {r.gpu_count}, {r.precision}, batch {r.batch}; {r.source}"
                    + (" (excluded from the bounds)" if r.excluded else ""))
            t.add_row(r.row_id, what, _f(r.predicted, ",.4g"), _f(r.measured, ",.4g"), _f(r.signed_pct, "+.1f"),
                      str(r.extra.get("bound", "")))
        console.print(t)
    ex: list[dict[str, Any]] = s["excluded"]
    if ex:
        t = Table(title=f"{len(ex)} rows scored but left out of the bounds")
        t.add_column("row")
        t.add_column("reason")
        for e in ex:
            t.add_row(str(e["row_id"]), str(e["reason"]))
        console.print(t)
    un = [r for r in v.rows if r.status != "ok"]
    if un:
        t = Table(title=f"{len(un)} rows not modelled")
        for c in ("row", "model", "GPU", "reason"):
            t.add_column(c)
        for r in un:
            t.add_row(r.row_id, r.model, r.gpu, r.reason)
        console.print(t)
    say(summary_line(v))
