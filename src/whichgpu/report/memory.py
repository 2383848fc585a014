"""Rendering of a memory fit: the breakdown, fits or not, the largest batch, the suggestions."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from whichgpu.memory.estimate import LINE_TITLES, MemoryEstimate
from whichgpu.memory.fit import FitReport
from whichgpu.parallel.fallback import Layouts
from whichgpu.parallel.search import label
from whichgpu.report.console import Table, compact_table, console, line, print_wide, say, styled
from whichgpu.report.flags import flags
from whichgpu.report.workload import (
    active_params,
    coverage_document,
    coverage_warnings,
    merged_assumptions,
    params_text,
)
from whichgpu.units import GB


def _gb(x: float) -> str:
    return f"{x / GB:,.2f}"


def fit_document(r: FitReport, lora_rank: int | None = None) -> dict[str, Any]:
    d = r.to_dict()
    t = r.estimate.trace
    d["workload"].update(finetune=r.finetune, checkpointing=r.checkpointing, lora_rank=lora_rank,
                         active_params=active_params(t), attention=t.shape.attention or None)
    d["coverage"] = coverage_document(t, memory=True)
    d["assumptions"] = merged_assumptions(d["assumptions"], t)
    for s, x in zip(d["suggestions"], r.suggestions, strict=True):
        s["how"] = flags(x.changes)
    return d


def _headline(e: MemoryEstimate, r: FitReport) -> list[Text]:
    size = f"seq {e.trace.seq_len}" if e.trace.seq_len else (f"image {e.trace.image_size}" if e.trace.image_size else "")
    if e.trace.context:
        size = f"context {e.trace.context}"
    parts = [f"  {e.trace.task}{'/' + e.trace.phase if e.trace.phase != 'full' else ''}, batch {e.trace.batch_size}"
             + (f", {size}" if size else ""), f"precision {e.trace.precision}"]
    if e.trace.task == "train":
        parts.append(f"optimizer {e.trace.optimizer}")
        if r.finetune != "full":
            parts.append(r.finetune)
        if r.checkpointing != "none":
            parts.append(f"checkpointing {r.checkpointing}")
    p = e.plan
    where = f"on {p.gpus} x {e.gpu_name} ({e.capacity_bytes / GB:,.1f} GB usable per GPU)"
    if p.gpus > 1 or p.sharding != "ddp":
        where += f", {p.sharding} over {p.gpus} GPU{'s' if p.gpus > 1 else ''}"
    if p.offload_optimizer:
        where += ", optimizer offloaded to CPU"
    return [line((e.trace.model, "bold"), ", ".join(parts)), Text(where), Text(params_text(e.trace))]


def _breakdown(e: MemoryEstimate, wide: bool) -> Table:
    t = Table(title="memory per GPU at the peak") if wide else compact_table("memory per GPU at the peak")
    t.add_column("")
    t.add_column("GB", justify="right", no_wrap=True)
    t.add_column("how", min_width=20, max_width=100 if wide else None)
    always = ("weights", "gradients", "optimizer_states", "activations") if e.trace.task == "train" else ("weights", "activations")
    for key, ln in e.lines():
        if ln.bytes == 0 and ln.host_bytes == 0 and key not in always:
            continue
        gb = _gb(ln.bytes) + (f" (+{_gb(ln.host_bytes)} CPU)" if ln.host_bytes else "")
        t.add_row(LINE_TITLES[key], gb, ln.assumption)
    t.add_row(styled("total", "bold"), styled(_gb(e.total_bytes), "bold"), f"peak in {e.peak_phase}"
              + (f" at {e.peak_module}" if e.peak_module else ""))
    return t


def _suggestions(r: FitReport, title: str, wide: bool) -> Table:
    """Each change alone. Compact: fits, GB per GPU, saves, then the change with its flags and
    note under it (the flags whole, on a line of their own); wide: one column each."""
    if wide:
        s = Table(title=title)
        for c in ("change", "flags", "GB per GPU", "saves GB", "fits", "note"):
            s.add_column(c, justify="right" if c in ("GB per GPU", "saves GB") else "left", no_wrap=c != "note",
                         max_width=60 if c == "note" else None)
        for x in r.suggestions:
            s.add_row(x.change, flags(x.changes), _gb(x.total_bytes), _gb(x.saves_bytes),
                      styled("yes", "green") if x.fits else "no", x.note)
        return s
    s = compact_table(title, leading=1)
    s.add_column("fits", no_wrap=True)
    s.add_column("GB per GPU", justify="right", no_wrap=True)
    s.add_column("saves GB", justify="right", no_wrap=True)
    s.add_column("change: flags, note", min_width=24)
    for x in r.suggestions:
        cell = Text.assemble((x.change, "bold"), "\n", (flags(x.changes), "cyan"), *(("\n", x.note) if x.note else ()))
        s.add_row(styled("yes", "green") if x.fits else "no", _gb(x.total_bytes), _gb(x.saves_bytes), cell)
    return s


def print_fit(r: FitReport, wide: bool = False) -> None:
    """The memory breakdown, fits or not, the largest batch, what would make it fit. Laid out for
    80-120 columns; `wide` gives the suggestions one column each, at full width."""
    e = r.estimate
    for ln in _headline(e, r):
        say(ln)
    for w in coverage_warnings([e.trace], memory=True):
        say(("warning", "yellow"), f": {w}", wrap=True)
    if wide:
        print_wide(_breakdown(e, wide))
    else:
        console.print(_breakdown(e, wide))
    if e.fits:
        say(("fits", "green"), f": {_gb(e.total_bytes)} of {_gb(e.capacity_bytes)} GB, "
            f"headroom {_gb(e.headroom_bytes)} GB")
    else:
        say(("does not fit", "red"), f": {_gb(e.total_bytes)} of {_gb(e.capacity_bytes)} GB, "
            f"{_gb(-e.headroom_bytes)} GB over")
    b = r.batch
    if b is not None:
        if b.fixed:  # a factory that builds one batch: nothing to search (its note says so below)
            say(f"batch fixed at {e.trace.batch_size} by the model: not searched")
        elif b.max_batch and b.estimate is not None:
            say("largest batch that fits: ", (f"{b.max_batch}", "bold"), f"{'+' if b.capped else ''} per GPU "
                f"({_gb(b.estimate.total_bytes)} GB, headroom {_gb(b.estimate.headroom_bytes)} GB; "
                f"{len(b.tried)} batch sizes evaluated)")
        else:
            say(("not even batch 1 fits", "red"), " as configured")
    if r.suggestions:
        title = "what would make it fit" + (f" (at batch {r.suggestions_batch})"
                                              if r.suggestions_batch and r.suggestions_batch != e.trace.batch_size else "")
        table = _suggestions(r, title + ": each change alone", wide)
        if wide:
            print_wide(table)
        else:
            console.print(table)
    if r.parallel is not None and r.parallel.job is not None:
        _parallel(r.parallel)
    say(f"as tools report it: torch.cuda.max_memory_allocated ~{_gb(e.allocated_peak_bytes)} GB, "
        f"max_memory_reserved ~{_gb(e.reserved_bytes)} GB, nvidia-smi ~{_gb(e.nvidia_smi_bytes)} GB "
        "(reserved + CUDA context)")
    rng = e.likely_bytes()
    if rng is not None and e.band is not None:
        say(f"likely {_gb(rng[0])}-{_gb(rng[1])} GB as nvidia-smi shows it ({e.band.describe()})")
    if e.outside:
        say(("outside the validated ground", "yellow"), ": " + "; ".join(e.outside)
            + " (the band comes from other classes of workload)")
    for k, v in merged_assumptions(e.assumptions, e.trace).items():
        say(f"assumption {k}: {v}")
    for n in e.notes:
        say(f"note: {n}")


def _parallel(p: Layouts) -> None:
    """The planner's best layouts (tensor/pipeline/context/expert parallel) and how to see more."""
    job = p.job
    if job is None:
        return
    if not p.best:
        say(("tensor/pipeline parallel layouts", "bold"), f" (parallel planner): {p.note}", wrap=True)
        return
    t = compact_table(f"tensor/pipeline parallel layouts that fit on {job.gpus} x {job.gpu.name}")
    for col in ("layout", "mb x acc", "sharding", "recompute", "peak GB", "step s", "tokens/s"):
        t.add_column(col, justify="left" if col in ("layout", "sharding", "recompute") else "right", no_wrap=True)
    for x in p.best:
        q = x.plan
        t.add_row(label(q), f"{q.micro_batch}x{q.grad_accum}", q.sharding, q.recompute or "none",
                  f"{x.peak_memory_bytes / 1e9:.1f}", f"{x.step_s:.3g}", f"{x.tokens_per_s:,.0f}")
    console.print(t)
    say(f"{p.note}; peak GB: the worst rank's, of {job.gpu.usable_memory_bytes / 1e9:.1f} GB usable "
        f"({job.gpu.usable_memory_text})", wrap=True)
    if p.command:
        say("more layouts, the time split and export:")
        say((p.command, "cyan"), wrap=True)


def parallel_tail(r: FitReport) -> str:
    """For the one-line exit message: the layout that fits, when the planner found one."""
    p = r.parallel
    if p is None or p.job is None or not p.best:
        return ""
    x = p.best[0]
    q = x.plan
    return (f"; it fits on {p.job.gpus} x {p.job.gpu.name} as {label(q)} (micro-batch {q.micro_batch} x "
            f"{q.grad_accum}, {q.sharding}, recompute {q.recompute or 'none'}, {x.peak_memory_bytes / 1e9:.1f} GB peak)")


def never_fits_message(r: FitReport) -> str:
    e = r.estimate
    fixes = [s.change for s in r.suggestions if s.fits][:3]
    at = f"at batch {r.suggestions_batch}" if r.suggestions_batch else ""
    tail = (f"; it would fit {at} with: " + "; ".join(fixes)) if fixes else "; no single change found makes it fit"
    if r.batch is not None and r.batch.fixed:
        return (f"{e.trace.model} does not fit on {e.gpu_name} at its fixed batch {e.trace.batch_size} "
                f"({_gb(e.total_bytes)} GB needed, {_gb(e.capacity_bytes)} GB usable){tail}")
    return (f"{e.trace.model} does not fit on {e.gpu_name} even at batch 1 "
            f"({_gb(e.total_bytes)} GB needed at batch {e.trace.batch_size}, {_gb(e.capacity_bytes)} GB usable){tail}")
