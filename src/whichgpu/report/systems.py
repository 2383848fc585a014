"""Terminal rendering of systems (hardware/system.py)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from whichgpu.hardware.system import System
from whichgpu.report.console import console

COLUMNS = ("id", "name", "GPU x per node", "PCIe", "scale-up link", "GB/s", "domain", "scale-out",
           "GB/s per GPU", "NICs")


def _cells(s: System) -> list[str]:
    up, out = s.scaleup, s.scaleout
    return [
        s.name, f"{s.gpu or 'any PCIe card'} x {s.gpus_per_node}",
        f"{s.pcie.gen}.0 x{s.pcie.lanes}" + ("" if s.pcie.p2p else ", no P2P"),
        "- (PCIe only)" if up is None else up.link,
        "" if up is None else f"{up.gbps_per_direction:g}",
        "" if up is None else str(up.domain_gpus),
        "- (single node)" if out is None else out.kind,
        "" if out is None else f"{out.gbps_per_gpu:g}",
        "" if out is None else str(out.rails),
    ]


def print_table(systems: list[System], default: System | None = None) -> None:
    """One row per system; with `default` (a GPU was named) its default system is marked."""
    title = f"{len(systems)} systems (GB/s per direction)" + (f" for {default.gpu}" if default else "")
    t = Table(title=title)
    for col in COLUMNS:
        t.add_column(col, overflow="fold", justify="right" if col in ("GB/s", "domain", "GB/s per GPU", "NICs") else "left")
    for s in systems:
        mark = " *" if default is not None and s.id == default.id else ""
        t.add_row(s.id + mark, *(escape(c) for c in _cells(s)))
    console.print(t)
    if default is not None and default.path:
        console.print(f"* default system for {default.gpu}: {default.id}", soft_wrap=True)
    elif default is not None:
        cells = _cells(default)
        console.print(f"default system for {default.gpu}: synthesised from its catalog entry: "
                      f"{default.gpus_per_node} per node, PCIe {cells[2]}, scale-up {cells[3]}"
                      + (f" {cells[4]} GB/s over {cells[5]} GPUs" if default.scaleup else "")
                      + f", scale-out {cells[6]} {cells[7]} GB/s per GPU", soft_wrap=True)
    console.print("sources of each figure: whichgpu systems --json, or the files in src/whichgpu/hardware/systems/",
                  soft_wrap=True)
