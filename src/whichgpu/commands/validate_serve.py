"""`whichgpu validate-serve`: score the serving simulation on published serving latencies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from whichgpu.commands.common import JsonOpt, emit_json
from whichgpu.errors import InputError


def validate_serve_cmd(
    data: Path = typer.Option(..., "--data", help="serving_dev.csv, or the folder holding it (shared/validation, or "
                              "its copy tests/serving_data)."),
    only: str = typer.Option("", "--only", help="Score only rows whose name contains this text (a model id, "
                             "GPU or engine, e.g. 'Llama-3.1-8B' or 'H200-SXM-141GB vllm')."),
    show_rows: bool = typer.Option(False, "--rows", help="List every scored row."),
    trtllm_adp_balance: str = typer.Option(None, "--trtllm-adp-balance", help="Run the TensorRT-LLM DP-attention "
                                           "rows with attention-DP balancing, TIMEOUT[,WAIT] or 'default' (as serve "
                                           "--adp-balance); default off, TensorRT-LLM's default."),
    json_out: bool = JsonOpt,
) -> None:
    """Median |error| and signed median of mean TTFT and mean TPOT, overall and per (GPU, engine), and
    the rows not scored with the reason."""
    from whichgpu.measure import serving_validate as sv
    from whichgpu.report.console import compact_table, console, say

    path = data / "serving_dev.csv" if data.is_dir() else data
    if not path.is_file():
        raise InputError(f"--data {data}: no serving_dev.csv there (give shared/validation or tests/serving_data)",
                         field="data")
    from whichgpu.commands.serve import parse_adp_balance

    balance = parse_adp_balance(trtllm_adp_balance)
    rows = sv.serving_rows(path, match=only or None, trtllm_adp_balance=balance)
    s = sv.summary(rows)
    doc: dict[str, Any] = {"summary": s, "assumptions": sv.assumptions(balance),
                           "not_scored": [{"name": r.name, "reason": r.reason} for r in rows if r.reason],
                           "rows": [r.to_dict() for r in rows if not r.reason]}
    if json_out:
        emit_json("whichgpu.validate-serve/1", doc)
        return

    def pct(x: float | None, signed: bool = False) -> str:
        return "-" if x is None else (f"{x:+.1%}" if signed else f"{x:.1%}")

    t = compact_table(f"serving: {s['all']['rows']} measurements scored (mean TTFT and TPOT)")
    for col in ("group", "rows", "TTFT median", "TTFT signed", "TPOT median", "TPOT signed"):
        t.add_column(col, justify="left" if col == "group" else "right")
    for g, b in [("all", s["all"]), *s["groups"].items()]:
        if b["rows"]:
            t.add_row(g, str(b["rows"]), pct(b["ttft_median"]), pct(b["ttft_signed"], True), pct(b["tpot_median"]),
                      pct(b["tpot_signed"], True))
    console.print(t)
    for why, part in s["apart"].items():
        if part["all"]["rows"]:
            say(f"  scored apart ({why}):")
            for g, blk in [("all", part["all"]), *part["groups"].items()]:
                say(f"    {g}: {blk['rows']} rows, TTFT {pct(blk['ttft_median'])} ({pct(blk['ttft_signed'], True)}), "
                    f"TPOT {pct(blk['tpot_median'])} ({pct(blk['tpot_signed'], True)})")
    reasons: dict[str, int] = {}
    for r in rows:
        if r.reason:
            reasons[r.reason] = reasons.get(r.reason, 0) + 1
    for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        say(f"  not scored ({n}): {why}")
    if show_rows:
        for r in rows:
            e = r.errors()
            if e is not None:
                say(f"  {r.name}{' (apart)' if r.apart else ''}: TTFT {r.predicted_ttft_ms:.1f} / {r.measured_ttft_ms:.1f} ms ({e[0]:+.0%}), "
                    f"TPOT {r.predicted_tpot_ms:.2f} / {r.measured_tpot_ms:.2f} ms ({e[1]:+.0%})")


def register(app: typer.Typer) -> None:
    app.command("validate-serve")(validate_serve_cmd)
