"""`whichgpu validate-plan`: score the parallel planner on published multi-GPU training runs."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import typer

from whichgpu.commands.common import JsonOpt, emit_json
from whichgpu.errors import InputError

FILES = {"llm_training": "llm_training.csv", "moe": "llm_training.csv", "vtrain": "vtrain.csv",
         "foundry": "llm_foundry.csv", "zero_bubble": "zero_bubble_tables.csv"}


def _find(root: Path, name: str) -> Path | None:
    for cand in (root / name, root / "planner_dev" / name):
        if cand.is_file():
            return cand
    return None


def validate_plan_cmd(
    data: Path = typer.Option(..., "--data", help="The validation folder (shared/validation, or its copy tests/planner_data): "
                              "llm_training.csv and planner_dev/ (vtrain.csv, llm_foundry.csv, zero_bubble_*.csv)."),
    only: str = typer.Option("llm_training,moe,vtrain,foundry,zero_bubble", "--only",
                             help="Corpora to score, comma-separated: llm_training (dense rows), moe (its MoE rows, "
                                  "scored apart), vtrain, foundry, zero_bubble."),
    search_own: bool = typer.Option(False, "--search", help="Also search the planner's own best layout for each "
                                    "llm_training row (slower)."),
    show_rows: bool = typer.Option(False, "--rows", help="List every row."),
    json_out: bool = JsonOpt,
) -> None:
    """Median / p90 / signed error of the planner per corpus, group and GPU, the rows not scored with the
    reason, vTrain's pick-within-5% per job, and the Zero Bubble bubble rates."""
    from whichgpu.measure import planner_validate as pv
    from whichgpu.report.console import compact_table, console, say

    if not data.is_dir():
        raise InputError(f"--data {data}: not a folder (give shared/validation or tests/planner_data)", field="data")
    wanted = [x.strip() for x in only.split(",") if x.strip()]
    bad = [x for x in wanted if x not in FILES]
    if bad:
        raise InputError(f"--only {', '.join(bad)}: unknown; valid: {', '.join(FILES)}", field="only")
    doc: dict[str, Any] = {"corpora": {}}
    tables: list[tuple[str, list[Any]]] = []
    for name in wanted:
        path = _find(data, FILES[name])
        if path is None:
            raise InputError(f"{FILES[name]} not found under {data} (nor in planner_dev/)", field="data")
        extra: dict[str, Any] = {}
        if name == "llm_training":
            rows = pv.llm_training_rows(path, search_own)
        elif name == "moe":
            rows = pv.moe_training_rows(path)
            extra = {"measured_over_predicted": pv.moe_accuracy(rows)}
        elif name == "vtrain":
            rows, picks = pv.vtrain_rows(path)
            within = sum(1 for p in picks if p["miss"] <= 0.05)
            extra = {"groups": len(picks), "pick_within_5pct": within,
                     "pick_median_miss": sorted(p["miss"] for p in picks)[len(picks) // 2] if picks else None,
                     "picks": picks}
        elif name == "foundry":
            rows = pv.foundry_rows(path)
        else:
            rows = pv.zero_bubble_rows(path.parent)
            extra = {"max_abs_diff": pv.abs_diff(rows)}
        groups: dict[str, list[Any]] = defaultdict(list)
        for r in rows:
            groups[r.group].append(r)
        by_gpu: dict[str, list[Any]] = defaultdict(list)
        for r in rows:
            if r.gpu:
                by_gpu[r.gpu].append(r)
        doc["corpora"][name] = {"summary": pv.summary(rows), **extra,
                                "by_group": {g: pv.summary(v) for g, v in sorted(groups.items())},
                                "by_gpu": {g: pv.summary(v) for g, v in sorted(by_gpu.items())},
                                "not_scored": [{"name": r.name, "reason": r.reason} for r in rows if r.error is None],
                                "rows": [r.to_dict() for r in rows]}
        tables.append((name, rows))
    doc["assumptions"] = dict(pv.SOURCE_ASSUMPTIONS)
    if json_out:
        emit_json("whichgpu.validate-plan/1", doc)
        return
    for name, rows in tables:
        c = doc["corpora"][name]
        s = c["summary"]
        t = compact_table(f"{name}: {s['rows']} rows scored")
        for col in ("group", "rows", "median |err|", "p90 |err|", "signed"):
            t.add_column(col, justify="left" if col == "group" else "right")

        def fmt(x: float | None, signed: bool = False) -> str:
            return "-" if x is None else (f"{x:+.1%}" if signed else f"{x:.1%}")

        t.add_row("all", str(s["rows"]), fmt(s["median"]), fmt(s["p90"]), fmt(s["signed"], True))
        for g, gs in c["by_group"].items():
            t.add_row(g, str(gs["rows"]), fmt(gs["median"]), fmt(gs["p90"]), fmt(gs["signed"], True))
        if len(c["by_gpu"]) > 1:
            for g, gs in c["by_gpu"].items():
                t.add_row(f"GPU {g}", str(gs["rows"]), fmt(gs["median"]), fmt(gs["p90"]), fmt(gs["signed"], True))
        console.print(t)
        if name == "vtrain":
            say(f"vtrain: the planner's pick is within 5% of the measured best in {c['pick_within_5pct']} of "
                f"{c['groups']} jobs (median miss {fmt(c['pick_median_miss'])})")
        if name == "zero_bubble":
            say(f"zero bubble: largest |bubble rate - paper| = {c['max_abs_diff']:.5f}")
        if name == "moe":
            q = c["measured_over_predicted"]
            say(f"moe: measured throughput is {q['p10']:.2f}-{q['p90']:.2f}x the prediction (p10-p90, median "
                f"{q['p50']:.2f}x): scored apart, outside the dense bounds")
        for ns in c["not_scored"]:
            say(f"  not scored: {ns['name']}: {ns['reason']}")
        if show_rows:
            for r in rows:
                e = r.error
                if e is None and r.reason:
                    continue  # listed above as not scored
                say(f"  {r.name}: predicted {r.predicted if r.predicted is None else f'{r.predicted:.4g}'} "
                    f"measured {r.measured if r.measured is None else f'{r.measured:.4g}'} {r.unit}"
                    + (f" ({e:+.1%})" if e is not None else "") + (f" [{r.layout}]" if r.layout else ""))


def register(app: typer.Typer) -> None:
    app.command("validate-plan")(validate_plan_cmd)
