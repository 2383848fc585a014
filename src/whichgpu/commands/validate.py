"""`whichgpu validate`: predict every row of published measurements and score the model."""

from __future__ import annotations

import typer

from whichgpu import limits
from whichgpu.commands.common import (
    CatalogOpt,
    JsonOpt,
    SystemOpt,
    emit_json,
    get_catalog,
    get_system,
    int_option,
)


def validate(
    data: list[str] = typer.Option(..., "--data", help="A measurements CSV (throughput or external format) or a "
                                   "directory of them (searched recursively); repeatable."),
    worst: int = int_option(15, "--worst", bound=limits.TOP, help="Rows with the largest errors to list."),
    show_rows: bool = typer.Option(False, "--rows", help="List every row (predicted, measured, error)."),
    by: str = typer.Option("source,gpu", "--by", help="Summary tables to print, comma-separated: format, source, "
                           "file, metric, engine, gpu, model, precision, task."),
    system: str = SystemOpt,
    json_out: bool = JsonOpt,
    catalog: str = CatalogOpt,
) -> None:
    """Predict each row, score rows that have a value: median / p90 / signed error by source, GPU, engine, metric."""
    from whichgpu.errors import InputError
    from whichgpu.measure.corpus import read_measurements
    from whichgpu.measure.validate import GROUPS, run

    groups = [g.strip() for g in by.split(",") if g.strip()]
    bad = [g for g in groups if f"by_{g}" not in GROUPS]
    if bad:
        raise InputError(f"--by {', '.join(bad)}: unknown; valid: " + ", ".join(k[3:] for k in GROUPS))
    rows = read_measurements(data)
    cat = get_catalog(catalog)
    sys_ = get_system(catalog, system)
    if json_out:
        result = run(rows, cat, system=sys_)
        emit_json("whichgpu.validate/1", {"data": data, "summary": result.summary,
                                          "rows": [r.to_dict() for r in result.rows]})
        return
    from rich.progress import Progress

    from whichgpu.report.console import err_console

    with Progress(console=err_console, transient=True) as prog:
        task = prog.add_task("predicting rows (captures are cached after the first run)", total=len(rows))
        result = run(rows, cat, progress=lambda i, n: prog.update(task, completed=i), system=sys_)
    from whichgpu.report.validate import print_validation

    print_validation(result, worst, show_rows, groups)


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
