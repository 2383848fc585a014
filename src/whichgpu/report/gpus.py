"""Terminal rendering of catalog entries."""

from __future__ import annotations

from typing import Any

from whichgpu.hardware.spec import PEAK_FIELDS, GpuSpec
from whichgpu.report.console import Table, compact_table, console, print_wide, say


def _num(x: float | None, fmt: str = "{:g}") -> str:
    return "?" if x is None else fmt.format(x)


def _peak(s: GpuSpec, dt: str) -> str:
    v = s.peak(dt)
    if v is not None:
        return f"{v:g}"
    return "-" if dt in s.unsupported else "?"


WIDE = ("id", "name", "arch", "mem GB", "GB/s", "L2 MB", "FP32", "TF32", "FP16*", "BF16", "FP8", "TDP W", "street $",
        "cloud $/h")
COMPACT = ("id", "name", "mem GB", "GB/s", "FP32", "FP16*", "BF16", "FP8", "TDP W", "street $", "cloud $/h")
DROP_FIRST = ("TDP W", "FP32", "cloud $/h", "street $", "FP8")  # when even COMPACT is too wide for the console
NAME_MIN = 14


def _cells(s: GpuSpec) -> dict[str, str]:
    return {"id": s.id, "name": s.name, "arch": s.architecture, "mem GB": _num(s.memory_gb),
            "GB/s": _num(s.memory_bandwidth_gbps), "L2 MB": _num(s.l2_cache_mb), "FP32": _peak(s, "fp32"),
            "TF32": _peak(s, "tf32"), "FP16*": _peak(s, "fp16"), "BF16": _peak(s, "bf16"), "FP8": _peak(s, "fp8"),
            "TDP W": _num(s.tdp_w), "street $": _num(s.price.street_usd, "{:,.0f}"),
            "cloud $/h": _num(s.price.cloud_usd_per_hour, "{:.2f}")}


def _fit(rows: list[dict[str, str]], width: int) -> tuple[str, ...]:
    """COMPACT less the DROP_FIRST columns it takes for every other column to fit `width` whole
    beside a name column of NAME_MIN (a column takes 3 more: its padding and the rule between)."""
    cols = list(COMPACT)

    def need(c: str) -> int:
        return NAME_MIN if c == "name" else max([len(c)] + [len(r[c]) for r in rows])

    for drop in DROP_FIRST:
        if 1 + sum(need(c) + 3 for c in cols) <= width:
            break
        cols.remove(drop)
    return tuple(cols)


def print_table(specs: list[GpuSpec], wide: bool = False) -> None:
    """One row per card. The default fits the console (120 columns: all but architecture, L2 and
    TF32; narrower: fewer figures), the name wrapping; `wide` has every column at full width."""
    title = f"{len(specs)} accelerators (dense peaks; '-' = no such path, '?' = unknown)"
    rows = [_cells(s) for s in specs]
    cols = WIDE if wide else _fit(rows, console.width)
    t = Table(title=title) if wide else compact_table(title)
    for col in cols:
        t.add_column(col, justify="left" if col in ("id", "name", "arch") else "right",
                     no_wrap=col != "name", min_width=NAME_MIN if col == "name" else None)
    for c in rows:
        t.add_row(*(c[col] for col in cols))
    if wide:
        print_wide(t)
    else:
        console.print(t)
    left_out = [c for c in WIDE if c not in cols]
    say("FP16* = FP16 tensor math with FP32 accumulate (what AMP uses); TFLOP/s."
        + (f" More columns ({', '.join(left_out)}): --wide or --json." if left_out else ""))


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
                  ("memory_bandwidth_gbps", "memory.bandwidth_gbps"), ("l2_cache_mb", "memory.l2_cache_mb"),
                  ("inline_ecc", "memory.inline_ecc")):
        row(k, d[k], sk)
    t.add_row("usable memory", f"{d['usable_memory_gib']:g} GiB", s.usable_memory_text)
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
        say(f"notes: {s.notes}")
    say(f"file: {s.path}" + (f"; overridden by {', '.join(s.overridden_by)}" if s.overridden_by else ""))


def print_local(report: dict[str, Any]) -> None:
    if not report["gpus"]:
        say(f"No GPU found on this machine: {report['reason']}")
        return
    t = Table(title="GPUs on this machine (NVML)")
    for col in ("index", "nvidia-smi name", "memory GB", "catalog entry", "note"):
        t.add_column(col)
    for g in report["gpus"]:
        t.add_row(str(g["index"]), str(g["name"]), f"{g['memory_gb']:.1f}", g["catalog_id"] or "-", str(g["note"]))
    console.print(t)
    if report["reason"]:
        say(f"note: {report['reason']}")
