"""`whichgpu validate`: predict every row of a measurements CSV and score the model."""

from __future__ import annotations

import typer

from whichgpu.commands.common import CatalogOpt, JsonOpt, emit_json, get_catalog


def validate(
    data: str = typer.Option(..., "--data", help="CSV in the format of shared/validation/throughput.csv."),
    worst: int = typer.Option(15, "--worst", help="Rows with the largest errors to list."),
    show_rows: bool = typer.Option(False, "--rows", help="List every row (predicted, measured, error)."),
    json_out: bool = JsonOpt,
    catalog: str = CatalogOpt,
) -> None:
    """Predict each row, score rows that have a value (median / p90 error, GPU rank correlation)."""
    from whichgpu.measure.validate import read_rows, run

    rows = read_rows(data)
    cat = get_catalog(catalog)
    if json_out:
        result = run(rows, cat)
        emit_json("whichgpu.validate/1", {"data": data, "summary": result.summary,
                                          "rows": [r.to_dict() for r in result.rows]})
        return
    from rich.progress import Progress

    from whichgpu.report.console import err_console

    with Progress(console=err_console, transient=True) as prog:
        task = prog.add_task("predicting rows (captures are cached after the first run)", total=len(rows))
        result = run(rows, cat, progress=lambda i, n: prog.update(task, completed=i))
    from whichgpu.report.validate import print_validation

    print_validation(result, worst, show_rows)


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
