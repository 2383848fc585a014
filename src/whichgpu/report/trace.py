"""Rendering of a trace: totals, groups, coverage."""

from __future__ import annotations

from typing import Any

from whichgpu.report.console import Table, console, say
from whichgpu.report.workload import active_params, coverage_document, coverage_warning
from whichgpu.units import fmt_bytes, fmt_count, fmt_flops
from whichgpu.workload.trace import Trace, summarize


def _workload(t: Trace) -> dict[str, Any]:
    return {"model": t.model, "task": t.task, "phase": t.phase, "batch_size": t.batch_size,
            "seq_len": t.seq_len, "image_size": t.image_size, "context": t.context,
            "precision": t.precision, "optimizer": t.optimizer, "sparsity": t.sparsity,
            "samples_per_step": t.samples, "tokens_per_step": t.tokens}


def trace_document(t: Trace, by: str = "category") -> dict[str, Any]:
    groups = summarize(t.ops, by)
    return {
        "workload": _workload(t),
        "params": t.params, "trainable_params": t.trainable_params, "param_bytes": t.param_bytes,
        "active_params": active_params(t),
        "totals": {"flops": t.total_flops(), "bytes": t.total_bytes(), "kernels": t.kernel_count(),
                   "intensity_flop_per_byte": t.total_flops() / max(t.total_bytes(), 1.0)},
        "by_phase": {ph: {"flops": t.total_flops(ph), "bytes": t.total_bytes(ph)} for ph in ("forward", "backward", "optimizer")},
        "group_by": by,
        "groups": {k: {**v, "intensity_flop_per_byte": v["flops"] / v["bytes"] if v["bytes"] else None} for k, v in groups.items()},
        "coverage": coverage_document(t),
        # "model_meta": the same facts under their first name (and experts_per_token for active_experts).
        "repeats": t.repeats, "model_shape": t.shape.to_dict(),
        "model_meta": {**t.shape.to_dict(), "experts_per_token": t.shape.active_experts}, "notes": t.notes,
        "capture_seconds": t.capture_seconds, "cache_key": t.key,
        "ops": [{"name": o.name, "category": o.category, "phase": o.phase, "module": o.module, "dtype": o.dtype,
                 "flops": o.flops, "bytes_read": o.bytes_read, "bytes_written": o.bytes_written, "count": o.count,
                 "kernels": o.kernels, "modelled": o.modelled, "mm": list(o.mm) if o.mm else None,
                 "sparse": o.sparse, "tags": list(o.tags), "shapes": o.shapes}
                for o in t.ops if o.category != "view"],
    }


def print_trace(t: Trace, by: str, top: int) -> None:
    w = _workload(t)
    size = f"seq {t.seq_len}" if t.seq_len else (f"image {t.image_size}" if t.image_size else "")
    if t.context:
        size = f"context {t.context}"
    say((t.model, "bold"), f"  {t.task}{'/' + t.phase if t.phase != 'full' else ''}, batch {t.batch_size}"
        f"{', ' + size if size else ''}, precision {t.precision}"
        f"{', optimizer ' + t.optimizer if t.task == 'train' else ''}"
        f"{', 2:4 sparse' if t.sparsity != 'none' else ''}", wrap=True)
    say(f"parameters {fmt_count(t.params)} ({t.params:,}; {fmt_bytes(t.param_bytes)} as stored), "
        f"trainable {fmt_count(t.trainable_params)}"
        + (f", {fmt_count(t.shape.active_params)} active per token" if 0 < t.shape.active_params < t.params else "")
        + (f"; attention {t.shape.attention}" if t.shape.attention else ""), wrap=True)
    tf, tb = t.total_flops(), t.total_bytes()
    say(f"per step: {fmt_flops(tf)}, {fmt_bytes(tb)} moved, {t.kernel_count():,.0f} kernels, "
        f"intensity {tf / max(tb, 1):.1f} FLOP/byte; {w['samples_per_step']} samples"
        + (f", {w['tokens_per_step']:,} tokens" if w["tokens_per_step"] else ""), wrap=True)
    ph = Table(title="by phase")
    for c in ("phase", "FLOPs", "bytes", "FLOP/byte"):
        ph.add_column(c, justify="right" if c != "phase" else "left")
    for p in ("forward", "backward", "optimizer"):
        f, b = t.total_flops(p), t.total_bytes(p)
        if f or b:
            ph.add_row(p, fmt_flops(f), fmt_bytes(b), f"{f / b:.1f}" if b else "-")
    console.print(ph)
    groups = summarize([o for o in t.ops if o.category != "view"], by)
    rows = sorted(groups.items(), key=lambda kv: -kv[1]["flops"] - kv[1]["bytes"] * 100)
    if by in ("module", "op"):
        rows = rows[:top]
    g = Table(title=f"by {by}")
    for c in (by, "FLOPs", "% FLOPs", "bytes", "% bytes", "FLOP/byte", "kernels"):
        g.add_column(c, justify="left" if c == by else "right", overflow="fold")
    for k, v in rows:
        g.add_row(str(k), fmt_flops(v["flops"]), f"{100 * v['flops'] / max(tf, 1):.1f}", fmt_bytes(v["bytes"]),
                  f"{100 * v['bytes'] / max(tb, 1):.1f}", f"{v['flops'] / v['bytes']:.1f}" if v["bytes"] else "-",
                  f"{v['kernels']:,.0f}")
    console.print(g)
    cov = t.coverage()
    names = list(cov["unmodelled_names"])
    flops = cov["flops_uncovered"]
    say(f"coverage: {100 * cov['ops']:.1f}% of ops and {100 * cov['bytes']:.1f}% of bytes have a FLOP formula"
        + (f"; the traced matmuls do {100 * (1 - flops):.1f}% of the shape's matmul work" if flops is not None else "")
        + (f"; unmodelled: {', '.join(names)}" if names else ""), wrap=True)
    warning = coverage_warning(cov)
    if warning is not None:
        say(("warning", "yellow"), f": {warning}", wrap=True)
    if t.repeats:
        say("repeated blocks traced once: " + ", ".join(f"{k} x{v + 1}" for k, v in t.repeats.items()), wrap=True)
    for n in t.notes:
        say(f"note: {n}")
