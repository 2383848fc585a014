"""Rendering of a validation run."""

from __future__ import annotations

from rich.table import Table

from whichgpu.measure.validate import Validation
from whichgpu.report.console import console


def summary_line(v: Validation) -> str:
    s = v.summary
    return (f"{s['rows']} rows, {s['modelled']} modelled ({100 * s['modelled_fraction']:.1f}%), {s['scored']} scored: "
            f"median APE {s['median_ape']:.1f}%, p90 APE {s['p90_ape']:.1f}%, "
            f"GPU rank correlation {s['rank_correlation']:.3f} over {s['rank_groups']} groups")


def print_validation(v: Validation, worst: int, show_rows: bool) -> None:
    s = v.summary
    for title, key in (("by model", "by_model"), ("by GPU", "by_gpu"), ("by precision", "by_precision"), ("by task", "by_task")):
        t = Table(title=title)
        for c in (title.split()[-1], "rows", "median APE %", "p90 APE %"):
            t.add_column(c, justify="left" if c == title.split()[-1] else "right")
        for k, g in s[key].items():
            t.add_row(k, str(g["rows"]), f"{g['median_ape']:.1f}", f"{g['p90_ape']:.1f}")
        console.print(t)
    scored = [r for r in v.rows if r.status == "ok" and r.error_pct is not None]
    rows = scored if show_rows else sorted(scored, key=lambda r: -(r.error_pct or 0))[:worst]
    t = Table(title="rows" if show_rows else f"{len(rows)} largest errors")
    for c in ("#", "model", "task", "GPU", "n", "precision", "batch", "predicted", "measured", "error %", "bound"):
        t.add_column(c, justify="right" if c in ("#", "n", "batch", "predicted", "measured", "error %") else "left")
    for r in rows:
        t.add_row(str(r.index), r.model, r.task, r.gpu, str(r.gpu_count), r.precision, r.batch,
                  f"{r.predicted:,.1f}", f"{r.measured:,.1f}", f"{r.error_pct:.1f}", str(r.extra.get("bound", "")))
    console.print(t)
    un = [r for r in v.rows if r.status != "ok"]
    if un:
        t = Table(title=f"{len(un)} rows not modelled")
        for c in ("#", "model", "GPU", "reason"):
            t.add_column(c, overflow="fold")
        for r in un:
            t.add_row(str(r.index), r.model, r.gpu, r.reason)
        console.print(t)
    console.print(summary_line(v), soft_wrap=True)
