"""`whichgpu engines`: the execution engine profiles (hardware/engines/*.toml)."""

from __future__ import annotations

import typer

from whichgpu.commands.common import JsonOpt, emit_json


def engines(
    json_out: bool = JsonOpt,
    engines_dir: str = typer.Option(None, "--engines", metavar="DIR",
                                    help="Directory of extra/override engine files (also $WHICHGPU_ENGINES)."),
) -> None:
    """List the engines --engine selects: launch path, fusion, kernels, and where each figure comes from."""
    from whichgpu.hardware.engine import load_engines, user_engine_dirs
    from whichgpu.perf.bands import load_bands

    found = list(load_engines(user_engine_dirs(engines_dir)))
    validated = load_bands().ground.engines
    if json_out:
        emit_json("whichgpu.engines/1", {"engines": [{**e.to_dict(), "aliases": list(e.aliases),
                                                      "validated": e.id in validated} for e in found]})
        return
    from whichgpu.report.console import Table, console, say, styled

    t = Table(title=f"{len(found)} engines (--engine NAME; --compile = torch-compile)")
    for c in ("id", "launch", "host us/op", "fusion", "conv layout", "attention", "validated", "aliases"):
        t.add_column(c, overflow="fold")
    for e in found:
        t.add_row(e.id, "CUDA graphs" if e.graphs else "stream", f"{e.host_op_us:g}", e.fusion, e.conv_layout,
                  e.attention, "yes" if e.id in validated else styled("no rows", "yellow"), ", ".join(e.aliases))
    console.print(t)
    say("sources of each figure: whichgpu engines --json, or the files in src/whichgpu/hardware/engines/")


def register(app: typer.Typer) -> None:
    app.command("engines")(engines)
