"""Rendering of a validation run."""

from __future__ import annotations

import math
from typing import Any

from rich.markup import escape
from rich.table import Table

from whichgpu.measure.validate import Validation
from whichgpu.report.console import console


def _f(x: float | None, fmt: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def summary_line(v: Validation) -> str:
    s = v.summary
    fits = s["fits"]
    line = (f"{s['rows']} rows, {s['modelled']} modelled ({100 * s['modelled_fraction']:.1f}%), {s['scored']} scored"
            f" ({s['bounded']} in the bounds): median APE {_f(s['median_ape'])}%, p90 APE {_f(s['p90_ape'])}%, "
            f"signed median {_f(s['signed_median'], '+.1f')}%, "
            f"GPU rank correlation {_f(s['rank_correlation'], '.3f')} over {s['rank_groups']} groups")
    if fits["rows"]:
        line += f"; fits/OOM labels {fits['correct']}/{fits['rows']} right"
    return line


def _group_table(title: str, groups: dict[str, dict[str, float]]) -> Table:
    t = Table(title=title)
    t.add_column(title.split()[-1])
    for c in ("rows", "median APE %", "p90 APE %", "signed median %"):
        t.add_column(c, justify="right")
    for k, g in groups.items():
        t.add_row(escape(k), str(g["rows"]), _f(g["median_ape"]), _f(g["p90_ape"]), _f(g["signed_median"], "+.1f"))
    return t


def print_validation(v: Validation, worst: int, show_rows: bool, groups: list[str] | None = None) -> None:
    s = v.summary
    for g in groups or ["source", "gpu"]:
        console.print(_group_table(f"by {g}", s[f"by_{g}"]))
    scored = [r for r in v.rows if r.status == "ok" and r.error_pct is not None]
    rows = scored if show_rows else sorted(scored, key=lambda r: -(r.error_pct or 0))[:worst]
    if rows:
        t = Table(title="rows" if show_rows else f"{len(rows)} largest errors")
        for c in ("row", "source", "model", "metric", "GPU", "n", "precision", "batch", "predicted", "measured",
                  "signed %", "bound"):
            t.add_column(c, justify="right" if c in ("n", "batch", "predicted", "measured", "signed %") else "left")
        for r in rows:
            t.add_row(escape(r.row_id), escape(r.source), escape(r.model), r.metric, escape(r.gpu), str(r.gpu_count),
                      escape(r.precision), escape(r.batch), f"{r.predicted:,.4g}", f"{r.measured:,.4g}",
                      _f(r.signed_pct, "+.1f") + (" (excluded)" if r.excluded else ""),
                      str(r.extra.get("bound", "")))
        console.print(t)
    ex: list[dict[str, Any]] = s["excluded"]
    if ex:
        t = Table(title=f"{len(ex)} rows scored but left out of the bounds")
        t.add_column("row")
        t.add_column("reason", overflow="fold")
        for e in ex:
            t.add_row(escape(e["row_id"]), escape(e["reason"]))
        console.print(t)
    un = [r for r in v.rows if r.status != "ok"]
    if un:
        t = Table(title=f"{len(un)} rows not modelled")
        for c in ("row", "model", "GPU", "reason"):
            t.add_column(c, overflow="fold")
        for r in un:
            t.add_row(escape(r.row_id), escape(r.model), escape(r.gpu), escape(r.reason))
        console.print(t)
    console.print(escape(summary_line(v)), soft_wrap=True)
