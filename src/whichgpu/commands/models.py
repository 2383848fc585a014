"""`whichgpu models`: the model zoo."""

from __future__ import annotations

import typer

from whichgpu.commands.common import JsonOpt, emit_json


def models_body() -> dict[str, object]:
    """The JSON body of whichgpu.models/1: every zoo entry with its default input."""
    from whichgpu.workload.zoo import all_entries

    return {"models": [
        {"id": e.id, "title": e.title, "family": e.family, "input": e.input_kind,
         "default_batch_size": e.default_batch_size, "default_seq_len": e.default_seq_len,
         "default_image_size": e.default_image_size, "default_optimizer": e.default_optimizer,
         "validation_names": list(e.validation_names), "aliases": list(e.aliases),
         "definition": e.definition, "throughput_unit": e.throughput_unit, "notes": e.notes}
        for e in all_entries().values()]}


def models(json_out: bool = JsonOpt) -> None:
    """List the zoo: ids, default inputs, and the validation names that map to each."""
    from whichgpu.workload.zoo import all_entries

    entries = list(all_entries().values())
    if json_out:
        emit_json("whichgpu.models/1", models_body())
        return
    from whichgpu.report.console import Table, console

    t = Table(title=f"{len(entries)} zoo models (also: a config.json path, or file.py:factory)")
    for c in ("id", "title", "family", "default input", "optimizer", "validation names"):
        t.add_column(c, overflow="fold")
    for e in entries:
        inp = f"b{e.default_batch_size} x " + (f"{e.default_seq_len} tok" if e.input_kind == "tokens" else f"{e.default_image_size}px")
        t.add_row(e.id, e.title, e.family, inp, e.default_optimizer, "; ".join(e.validation_names))
    console.print(t)


def register(app: typer.Typer) -> None:
    app.command("models")(models)
