"""`whichgpu systems`: the systems a GPU runs in (hardware/systems/*.toml plus user files)."""

from __future__ import annotations

import typer

from whichgpu.commands.common import CatalogOpt, JsonOpt, WideOpt, emit_json


def systems(
    gpu: str = typer.Option(None, "--gpu", help="Only the systems this GPU runs in, and its default system."),
    json_out: bool = JsonOpt,
    wide: bool = WideOpt,
    catalog: str = CatalogOpt,
) -> None:
    """List the systems (nodes, scale-up and scale-out links) and where each figure comes from."""
    from whichgpu.hardware.catalog import load_catalog
    from whichgpu.hardware.system import default_system, load_systems

    found = load_systems(catalog)
    rows = list(found)
    default = None
    if gpu is not None:
        spec = load_catalog(catalog).get(gpu)
        rows = found.for_gpu(spec)
        default = default_system(spec, found)
    if json_out:
        emit_json("whichgpu.systems/1", {
            "count": len(rows), "user_catalog_dirs": list(found.user_dirs),
            "gpu": None if default is None else default.gpu,
            "default_system": None if default is None else default.to_dict(),
            "systems": [s.to_dict() for s in rows],
        })
        return
    from whichgpu.report.systems import print_table

    print_table(rows, default, wide=wide)


def register(app: typer.Typer) -> None:
    app.command("systems")(systems)
