"""Rendering of a memory fit: the breakdown, fits or not, the largest batch, the suggestions."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from whichgpu.memory.estimate import LINE_TITLES, MemoryEstimate
from whichgpu.memory.fit import FitReport
from whichgpu.report.console import console
from whichgpu.report.flags import flags
from whichgpu.units import GB


def _gb(x: float) -> str:
    return f"{x / GB:,.2f}"


def fit_document(r: FitReport, lora_rank: int | None = None) -> dict[str, Any]:
    d = r.to_dict()
    d["workload"].update(finetune=r.finetune, checkpointing=r.checkpointing, lora_rank=lora_rank)
    for s, x in zip(d["suggestions"], r.suggestions, strict=True):
        s["how"] = flags(x.changes)
    return d


def _headline(e: MemoryEstimate, r: FitReport) -> str:
    size = f"seq {e.trace.seq_len}" if e.trace.seq_len else (f"image {e.trace.image_size}" if e.trace.image_size else "")
    if e.trace.context:
        size = f"context {e.trace.context}"
    parts = [f"[bold]{e.trace.model}[/]  {e.trace.task}{'/' + e.trace.phase if e.trace.phase != 'full' else ''}, batch {e.trace.batch_size}"
             + (f", {size}" if size else ""), f"precision {e.trace.precision}"]
    if e.trace.task == "train":
        parts.append(f"optimizer {e.trace.optimizer}")
        if r.finetune != "full":
            parts.append(r.finetune)
        if r.checkpointing != "none":
            parts.append(f"checkpointing {r.checkpointing}")
    p = e.plan
    where = f"on {e.gpu_name} ({e.capacity_bytes / GB:,.1f} GB usable)"
    if p.gpus > 1 or p.sharding != "ddp":
        where += f", {p.sharding} over {p.gpus} GPU{'s' if p.gpus > 1 else ''}"
    if p.offload_optimizer:
        where += ", optimizer offloaded to CPU"
    return ", ".join(parts) + "\n" + where


def print_fit(r: FitReport) -> None:
    e = r.estimate
    console.print(_headline(e, r), soft_wrap=True)
    t = Table(title="memory per GPU at the peak")
    t.add_column("")
    t.add_column("GB", justify="right")
    t.add_column("how", overflow="fold")
    always = ("weights", "gradients", "optimizer_states", "activations") if e.trace.task == "train" else ("weights", "activations")
    for key, line in e.lines():
        if line.bytes == 0 and line.host_bytes == 0 and key not in always:
            continue
        gb = _gb(line.bytes) + (f" (+{_gb(line.host_bytes)} CPU)" if line.host_bytes else "")
        t.add_row(LINE_TITLES[key], gb, line.assumption)
    t.add_row("[bold]total[/]", f"[bold]{_gb(e.total_bytes)}[/]", f"peak in {e.peak_phase}"
              + (f" at {e.peak_module}" if e.peak_module else ""))
    console.print(t)
    if e.fits:
        console.print(f"[green]fits[/]: {_gb(e.total_bytes)} of {_gb(e.capacity_bytes)} GB, "
                      f"headroom {_gb(e.headroom_bytes)} GB", soft_wrap=True)
    else:
        console.print(f"[red]does not fit[/]: {_gb(e.total_bytes)} of {_gb(e.capacity_bytes)} GB, "
                      f"{_gb(-e.headroom_bytes)} GB over", soft_wrap=True)
    b = r.batch
    if b is not None:
        if b.max_batch and b.estimate is not None:
            console.print(f"largest batch that fits: [bold]{b.max_batch}[/]{'+' if b.capped else ''} per GPU "
                          f"({_gb(b.estimate.total_bytes)} GB, headroom {_gb(b.estimate.headroom_bytes)} GB; "
                          f"{len(b.tried)} batch sizes evaluated)", soft_wrap=True)
        else:
            console.print("[red]not even batch 1 fits[/] as configured", soft_wrap=True)
    if r.suggestions:
        title = "what would make it fit" + (f" (at batch {r.suggestions_batch})"
                                              if r.suggestions_batch and r.suggestions_batch != e.trace.batch_size else "")
        s = Table(title=title + ": each change alone")
        for c in ("change", "flags", "GB per GPU", "saves GB", "fits", "note"):
            s.add_column(c, justify="right" if c in ("GB per GPU", "saves GB") else "left", overflow="fold")
        for x in r.suggestions:
            s.add_row(x.change, flags(x.changes), _gb(x.total_bytes), _gb(x.saves_bytes),
                      "[green]yes[/]" if x.fits else "no", x.note)
        console.print(s)
    console.print(f"as tools report it: torch.cuda.max_memory_allocated ~{_gb(e.allocated_peak_bytes)} GB, "
                  f"max_memory_reserved ~{_gb(e.reserved_bytes)} GB, nvidia-smi ~{_gb(e.nvidia_smi_bytes)} GB "
                  "(reserved + CUDA context)", soft_wrap=True, highlight=False)
    rng = e.likely_bytes()
    if rng is not None and e.band is not None:
        console.print(f"likely {_gb(rng[0])}-{_gb(rng[1])} GB as nvidia-smi shows it ({escape(e.band.describe())})",
                      soft_wrap=True, highlight=False)
    if e.outside:
        console.print("[yellow]outside the validated ground[/]: " + escape("; ".join(e.outside))
                      + " (the band comes from other classes of workload)", soft_wrap=True)
    for k, v in e.assumptions.items():
        console.print(f"assumption {k}: {v}", soft_wrap=True, highlight=False)
    for n in e.notes:
        console.print(f"note: {n}", soft_wrap=True)


def never_fits_message(r: FitReport) -> str:
    e = r.estimate
    fixes = [s.change for s in r.suggestions if s.fits][:3]
    at = f"at batch {r.suggestions_batch}" if r.suggestions_batch else ""
    tail = (f"; it would fit {at} with: " + "; ".join(fixes)) if fixes else "; no single change found makes it fit"
    return (f"{e.trace.model} does not fit on {e.gpu_name} even at batch 1 "
            f"({_gb(e.total_bytes)} GB needed at batch {e.trace.batch_size}, {_gb(e.capacity_bytes)} GB usable){tail}")
