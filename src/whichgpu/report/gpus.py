"""Terminal rendering of catalog entries."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from whichgpu.hardware.spec import PEAK_FIELDS, GpuSpec
from whichgpu.report.console import console


def _num(x: float | None, fmt: str = "{:g}") -> str:
    return "?" if x is None else fmt.format(x)


def _peak(s: GpuSpec, dt: str) -> str:
    v = s.peak(dt)
    if v is not None:
        return f"{v:g}"
    return "-" if dt in s.unsupported else "?"


def print_table(specs: list[GpuSpec]) -> None:
    t = Table(title=f"{len(specs)} accelerators (dense peaks; '-' = no such path, '?' = unknown)")
    for col in ("id", "name", "arch", "mem GB", "GB/s", "L2 MB", "FP32", "TF32", "FP16*", "BF16", "FP8", "TDP W", "street $", "cloud $/h"):
        t.add_column(col, justify="left" if col in ("id", "name", "arch") else "right", no_wrap=True)
    for s in specs:
        t.add_row(
            s.id, s.name, s.architecture, _num(s.memory_gb), _num(s.memory_bandwidth_gbps),
            _num(s.l2_cache_mb), _peak(s, "fp32"), _peak(s, "tf32"), _peak(s, "fp16"),
            _peak(s, "bf16"), _peak(s, "fp8"), _num(s.tdp_w),
            _num(s.price.street_usd, "{:,.0f}"), _num(s.price.cloud_usd_per_hour, "{:.2f}"),
        )
    console.print(t)
    console.print("FP16* = FP16 tensor math with FP32 accumulate (what AMP uses); TFLOP/s.")


def print_show(s: GpuSpec) -> None:
    d = s.to_dict()
    t = Table(title=f"{s.name} ({s.id})", show_header=True)
    t.add_column("field")
    t.add_column("value")
    t.add_column("source", overflow="fold")

    def row(key: str, val: Any, src_key: str) -> None:
        if isinstance(val, float):
            val = f"{val:g}"
        t.add_row(key, "?" if val is None or val == "" else str(val), s.source_of(src_key))

    for k in ("vendor", "architecture", "chip", "year", "form_factor", "segment"):
        row(k, d[k], k)
    row("aliases", ", ".join(s.aliases), "aliases")
    for k, sk in (("memory_gb", "memory.size_gb"), ("memory_type", "memory.type"),
                  ("memory_bandwidth_gbps", "memory.bandwidth_gbps"), ("l2_cache_mb", "memory.l2_cache_mb")):
        row(k, d[k], sk)
    for k in ("sm_count", "boost_clock_mhz", "base_clock_mhz", "shared_mem_per_sm_kb", "l1_cache_per_sm_kb",
              "sparsity_2to4"):
        row(k, d[k], f"compute.{k}")
    row("tensor_core_dtypes", ", ".join(s.tensor_core_dtypes) or "none", "compute.tensor_core_dtypes")
    for fname in PEAK_FIELDS.values():
        row(f"{fname} (dense)", d["peak_dense"][fname], f"peak_dense.{fname}")
    row("fp16_acc16_tflops (dense)", d["fp16_acc16_tflops"], "peak_dense.fp16_acc16_tflops")
    row("tdp_w", d["tdp_w"], "power.tdp_w")
    row("scaleup_link", d["scaleup_link"], "interconnect.scaleup")
    row("scaleup_gbps_per_direction", d["scaleup_gbps_per_direction"], "interconnect.scaleup_gbps_per_direction")
    row("pcie_gen", d["pcie_gen"], "interconnect.pcie_gen")
    p = s.price
    t.add_row("launch_msrp_usd", _num(p.launch_msrp_usd, "{:,.0f}"), p.launch_source or s.source_of("price.launch_msrp_usd"))
    t.add_row("street_usd", _num(p.street_usd, "{:,.0f}") + (f" ({p.street_date})" if p.street_date else ""), p.street_source)
    t.add_row("cloud_usd_per_hour", _num(p.cloud_usd_per_hour, "{:.2f}") + (f" ({p.cloud_provider}, {p.cloud_date})" if p.cloud_provider else ""), p.cloud_source)
    for m in s.measured:
        t.add_row(f"measured {m.dtype} matmul TFLOP/s", f"{m.matmul_tflops:g}" + (f" @ {m.shape}" if m.shape else ""), m.source)
    console.print(t)
    if s.notes:
        console.print(f"notes: {s.notes}", soft_wrap=True)
    console.print(f"file: {s.path}" + (f"; overridden by {', '.join(s.overridden_by)}" if s.overridden_by else ""), soft_wrap=True)


def print_local(report: dict[str, Any]) -> None:
    if not report["gpus"]:
        console.print(f"No GPU found on this machine: {report['reason']}", soft_wrap=True)
        return
    t = Table(title="GPUs on this machine (NVML)")
    for col in ("index", "nvidia-smi name", "memory GB", "catalog entry", "note"):
        t.add_column(col)
    for g in report["gpus"]:
        t.add_row(str(g["index"]), g["name"], f"{g['memory_gb']:.1f}", g["catalog_id"] or "-", g["note"])
    console.print(t)
