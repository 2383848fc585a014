"""`whichgpu gpus`: list, filter and show catalog entries; report this machine's GPUs."""

from __future__ import annotations

from typing import Any

import typer

from whichgpu import limits
from whichgpu.commands.common import (
    CatalogOpt,
    JsonOpt,
    WideOpt,
    emit_json,
    float_option,
    get_catalog,
)
from whichgpu.errors import InputError, UnknownNameError
from whichgpu.hardware.spec import ARCHITECTURES, COMPUTE_DTYPES, VENDORS, GpuSpec

app = typer.Typer(help="List the GPU catalog, show one entry, or report this machine's GPUs.",
                  invoke_without_command=True, no_args_is_help=False)

SORT_FIELDS: dict[str, Any] = {
    "year": lambda s: s.year,
    "memory_gb": lambda s: s.memory_gb,
    "memory_bandwidth_gbps": lambda s: s.memory_bandwidth_gbps,
    "l2_cache_mb": lambda s: s.l2_cache_mb,
    "sm_count": lambda s: s.sm_count,
    "boost_clock_mhz": lambda s: s.boost_clock_mhz,
    "tdp_w": lambda s: s.tdp_w,
    "scaleup_gbps_per_direction": lambda s: s.scaleup_gbps_per_direction,
    **{f"{dt}_{'tops' if dt.startswith('int') else 'tflops'}": (lambda d: lambda s: s.peak(d))(dt) for dt in COMPUTE_DTYPES},
    "launch_msrp_usd": lambda s: s.price.launch_msrp_usd,
    "street_usd": lambda s: s.price.street_usd,
    "cloud_usd_per_hour": lambda s: s.price.cloud_usd_per_hour,
}


def filter_specs(specs: list[GpuSpec], vendor: str | None, arch: str | None,
                 min_memory_gb: float | None, dtype: str | None) -> list[GpuSpec]:
    out = specs
    if vendor:
        vmap = {v.lower(): v for v in VENDORS}
        if vendor.lower() not in vmap:
            raise UnknownNameError("vendor", vendor, VENDORS)
        out = [s for s in out if s.vendor == vmap[vendor.lower()]]
    if arch:
        if arch.lower() not in ARCHITECTURES:
            raise UnknownNameError("architecture", arch, ARCHITECTURES)
        out = [s for s in out if s.architecture == arch.lower()]
    if min_memory_gb is not None:
        if min_memory_gb < 0:
            raise InputError(f"--min-memory-gb must be >= 0, got {min_memory_gb}")
        out = [s for s in out if s.memory_gb >= min_memory_gb]
    if dtype:
        if dtype.lower() not in COMPUTE_DTYPES:
            raise UnknownNameError("dtype", dtype, COMPUTE_DTYPES)
        out = [s for s in out if s.supports(dtype.lower())]
    return out


def sort_specs(specs: list[GpuSpec], sort: str | None, ascending: bool) -> list[GpuSpec]:
    if not sort:
        return specs
    if sort not in SORT_FIELDS:
        raise UnknownNameError("sort field", sort, SORT_FIELDS)
    key = SORT_FIELDS[sort]
    known = [s for s in specs if key(s) is not None]
    unknown = [s for s in specs if key(s) is None]
    known.sort(key=key, reverse=not ascending)
    return known + unknown


def gpus_body(specs: list[GpuSpec], cat: Any) -> dict[str, object]:
    """The JSON body of whichgpu.gpus/1: the entries listed, with every field and its source."""
    return {"count": len(specs), "user_catalog_dirs": list(cat.user_dirs), "gpus": [s.to_dict() for s in specs]}


@app.callback()
def gpus(
    ctx: typer.Context,
    vendor: str = typer.Option(None, "--vendor", help="NVIDIA, AMD, Intel or Google."),
    arch: str = typer.Option(None, "--arch", help="Architecture: " + ", ".join(ARCHITECTURES) + "."),
    min_memory_gb: float = float_option(None, "--min-memory-gb", bound=limits.MEMORY_GB, help="Only cards with at least this much memory (GB)."),
    dtype: str = typer.Option(None, "--dtype", help="Only cards with a hardware path for this dtype: " + ", ".join(COMPUTE_DTYPES) + "."),
    sort: str = typer.Option(None, "--sort", help="Sort by a numeric field (descending), e.g. bf16_tflops, memory_bandwidth_gbps, street_usd."),
    ascending: bool = typer.Option(False, "--ascending", help="Sort ascending instead."),
    local: bool = typer.Option(False, "--local", help="Report the GPUs of this machine (NVML), mapped to catalog entries."),
    json_out: bool = JsonOpt,
    wide: bool = WideOpt,
    catalog: str = CatalogOpt,
) -> None:
    """List the catalog (filter and sort), or with --local the GPUs of this machine."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = {"catalog": catalog, "json": json_out}
        return
    cat = get_catalog(catalog)
    if local:
        from whichgpu.measure.nvml import local_gpus

        report = local_gpus(cat)
        if json_out:
            emit_json("whichgpu.local/1", report)
        else:
            from whichgpu.report.gpus import print_local

            print_local(report)
        return
    specs = sort_specs(filter_specs(list(cat), vendor, arch, min_memory_gb, dtype), sort, ascending)
    if json_out:
        emit_json("whichgpu.gpus/1", gpus_body(specs, cat))
        return
    from whichgpu.report.gpus import print_table

    print_table(specs, wide=wide)


@app.command("show")
def show(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="GPU name: id, product name, alias or nvidia-smi spelling."),
    json_out: bool = JsonOpt,
    catalog: str = CatalogOpt,
) -> None:
    """Show one entry with all fields and their sources."""
    parent = ctx.obj or {}
    cat = get_catalog(catalog or parent.get("catalog"))
    spec = cat.get(name)
    if json_out or parent.get("json"):
        emit_json("whichgpu.gpu/1", {"gpu": spec.to_dict()})
        return
    from whichgpu.report.gpus import print_show

    print_show(spec)
