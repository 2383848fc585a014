"""Terminal rendering of systems (hardware/system.py).

The default table fits 100 columns: the system's id with its name under it, the GPUs per node,
PCIe, then the scale-up link and the scale-out network each as the kind with its figures under it.
``wide`` gives every figure a column of its own.
"""

from __future__ import annotations

from rich.text import Text

from whichgpu.hardware.system import System
from whichgpu.report.console import Table, compact_table, console, print_wide, say

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


def _title(systems: list[System], default: System | None) -> str:
    return f"{len(systems)} systems (GB/s per direction)" + (f" for {default.gpu}" if default else "")


def _wide(systems: list[System], default: System | None) -> Table:
    t = Table(title=_title(systems, default))
    for col in COLUMNS:
        t.add_column(col, no_wrap=True, justify="right" if col in ("GB/s", "domain", "GB/s per GPU", "NICs") else "left")
    for s in systems:
        mark = " *" if default is not None and s.id == default.id else ""
        t.add_row(s.id + mark, *_cells(s))
    return t


def _compact(systems: list[System], default: System | None) -> Table:
    t = compact_table(_title(systems, default), leading=1)
    words = [len(w) for s in systems for w in (s.id + " *", *s.name.split())]
    t.add_column("system", min_width=max([*words, 6]))  # ids and the words of names whole
    t.add_column("GPU x per node", min_width=12)
    t.add_column("PCIe", no_wrap=True)
    t.add_column("scale-up: GB/s, GPUs", min_width=16)
    t.add_column("scale-out: GB/s per GPU, NICs", min_width=16)
    for s in systems:
        c = _cells(s)
        mark = " *" if default is not None and s.id == default.id else ""
        up = Text(c[3]) if s.scaleup is None else Text.assemble(c[3], "\n", f"{c[4]} GB/s over {c[5]} GPUs")
        out = Text(c[6]) if s.scaleout is None else Text.assemble(c[6], "\n", f"{c[7]} GB/s per GPU, {c[8]} NICs")
        t.add_row(Text.assemble((s.id + mark, "bold"), "\n", c[0]), c[1], c[2], up, out)
    return t


def print_table(systems: list[System], default: System | None = None, wide: bool = False) -> None:
    """One row per system; with `default` (a GPU was named) its default system is marked."""
    if wide:
        print_wide(_wide(systems, default))
    else:
        console.print(_compact(systems, default))
    if default is not None and default.path:
        say(f"* default system for {default.gpu}: {default.id}")
    elif default is not None:
        cells = _cells(default)
        say(f"default system for {default.gpu}: synthesised from its catalog entry: "
            f"{default.gpus_per_node} per node, PCIe {cells[2]}, scale-up {cells[3]}"
            + (f" {cells[4]} GB/s over {cells[5]} GPUs" if default.scaleup else "")
            + f", scale-out {cells[6]} {cells[7]} GB/s per GPU")
    for s in systems:
        if s.measured_allreduce:
            sizes = [x for m in s.measured_allreduce for x in m.sizes_bytes]
            say(f"{s.id}: NCCL all-reduce times measured on it for "
                + ", ".join(str(m.gpus) for m in s.measured_allreduce)
                + f" GPUs, {min(sizes) / 2**20:g}-{max(sizes) / 2**20:g} MiB (nccl-tests), used in place of the link "
                "model inside a node", wrap=True)
    say("sources of each figure: whichgpu systems --json, or the files in src/whichgpu/hardware/systems/")
