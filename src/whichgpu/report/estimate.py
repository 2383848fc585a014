"""Rendering of step-time estimates: a side-by-side table, the split, top ops, assumptions."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from whichgpu.hardware.system import System
from whichgpu.parallel.plan import Plan
from whichgpu.perf.estimate import StepEstimate
from whichgpu.predict import Prediction
from whichgpu.report.console import console
from whichgpu.units import fmt_bytes, fmt_flops, fmt_rate, fmt_si, fmt_time
from whichgpu.workload.trace import Trace


def _throughput(e: StepEstimate, t: Trace) -> dict[str, float]:
    d = {"samples_per_s": e.samples_per_s}
    if t.tokens:
        d["tokens_per_s"] = e.tokens_per_s
    return d


def dettmers_ratio(results: list[Prediction]) -> dict[str, float]:
    """Tim Dettmers' rule of thumb: relative speed ~ memory bandwidth ratio (for transformer
    training on tensor-core GPUs). Scaled from the first GPU's estimate."""
    if not results:
        return {}
    ref = results[0]
    ref_bw = ref.gpu.memory_bandwidth_gbps
    ref_thr = ref.est.samples_per_s
    return {r.gpu.id: ref_thr * r.gpu.memory_bandwidth_gbps / ref_bw for r in results}


def estimate_document(results: list[Prediction], explain: bool) -> dict[str, Any]:
    out = []
    bw_ratio = dettmers_ratio(results) if explain else {}
    for r in results:
        e: StepEstimate = r.est
        t: Trace = r.trace
        d = e.to_dict()
        d["gpu"] = r.gpu.id
        d["system"] = r.system.id
        d["precision"] = r.precision
        d["precision_reason"] = r.precision_reason
        d["throughput"] = _throughput(e, t)
        d["workload"] = {"model": t.model, "task": t.task, "phase": t.phase, "batch_size": t.batch_size,
                         "seq_len": t.seq_len, "image_size": t.image_size, "context": t.context,
                         "precision": t.precision, "optimizer": t.optimizer, "finetune": t.finetune,
                         "checkpointing": t.checkpointing, "flops_per_step": t.total_flops(),
                         "bytes_per_step": t.total_bytes(), "params": t.params}
        if r.prefill is not None:
            p: StepEstimate = r.prefill
            d["serving"] = {"time_to_first_token_s": p.step_s, "prefill_bound": p.bound,
                            "decode_step_s": e.step_s, "decode_tokens_per_s": e.tokens_per_s,
                            "decode_bound": e.bound, "context": t.context, "batch": t.batch_size,
                            "prefill_confidence": p.confidence()}
        if explain:
            d["explain"] = {"bandwidth_ratio_samples_per_s": bw_ratio.get(r.gpu.id)}
        m = r.memory
        if m is not None:
            d["memory"] = {"total_bytes": m.total_bytes, "capacity_bytes": m.capacity_bytes, "fits": m.fits,
                           "headroom_bytes": m.headroom_bytes}
        out.append(d)
    return {"plan": plan_document(results[0].plan, results[0].system), "results": out}


def plan_document(plan: Plan, system: System) -> dict[str, Any]:
    """The plan as run, with the system it ran in (the fields of schema version 1 kept)."""
    so = system.scaleout
    return {**plan.to_dict(), "gpus_per_node": system.gpus_per_node,
            "network": so.kind if so is not None else "none", "compile": plan.compile,
            "ddp_overlap": plan.comm_overlap, "system": system.id, "system_name": system.name,
            "parallelism": plan.parallel_label()}


def print_estimates(results: list[Prediction], explain: bool, top: int) -> None:
    plan = results[0].plan
    t0: Trace = results[0].trace
    serving = results[0].serving
    prompt = results[0].prefill_trace.seq_len if results[0].prefill_trace is not None else None
    head = (f"[bold]{t0.model}[/]  {t0.task}"
            + (" (serving: prefill + decode)" if serving else (f"/{t0.phase}" if t0.phase != "full" else ""))
            + f", batch {t0.batch_size} per GPU"
            + (f", seq {prompt}" if serving else (f", seq {t0.seq_len}" if t0.seq_len else ""))
            + (f", image {t0.image_size}" if t0.image_size else "")
            + (f", context {t0.context}" if t0.context and not serving else "")
            + (f", {plan.parallel_label()} on {results[0].system.name}" if plan.gpus > 1 else "")
            + f", engine {plan.engine}")
    console.print(head)
    tb = Table()
    cols = ["GPU", "precision", "step", "samples/s"] + (["tokens/s"] if t0.tokens and not serving else [])
    if serving:
        cols = ["GPU", "precision", "time to 1st token", "decode tok/s", "decode step", "decode bound"]
    cols.insert(4 if serving else (5 if t0.tokens else 4), "likely (p10-p90)")
    cols += ["MFU (HFU)", "bound", "compute", "memory", "overhead", "comm", "GPU memory"]
    if explain:
        cols += ["BW-ratio est."]
    for c in cols:
        tb.add_column(c, justify="left" if c in ("GPU", "precision", "bound", "decode bound") else "right")
    ratio = dettmers_ratio(results) if explain else {}
    for r in results:
        e: StepEstimate = r.est
        s = e.step_s or 1.0
        split = [f"{100 * e.compute_s / s:.0f}%", f"{100 * e.memory_s / s:.0f}%", f"{100 * e.overhead_s / s:.0f}%",
                 f"{100 * e.comm_s / s:.0f}%"]
        flag = "" if e.validated else " [yellow]*[/]"
        if r.prefill is not None:
            p: StepEstimate = r.prefill
            row = [escape(r.gpu.name) + flag, r.precision, fmt_time(p.step_s), fmt_rate(e.tokens_per_s, "tok/s"),
                   _likely(e, e.tokens_per_s, "tok/s"), fmt_time(e.step_s), e.bound]
        else:
            row = [escape(r.gpu.name) + flag, r.precision, fmt_time(e.step_s), fmt_rate(e.samples_per_s, "/s")]
            if t0.tokens:
                row.append(fmt_rate(e.tokens_per_s, "tok/s"))
            main = e.tokens_per_s if t0.tokens else e.samples_per_s
            row.append(_likely(e, main, "tok/s" if t0.tokens else "/s"))
        m = r.memory
        mem = "-" if m is None else (f"{m.total_bytes / 1e9:.1f}/{m.capacity_bytes / 1e9:.0f} GB"
                                     + ("" if m.fits else " [red]DOES NOT FIT[/]"))
        hfu = f" ({100 * e.hfu:.0f}%)" if round(100 * e.hfu) != round(100 * e.mfu) else ""
        row += [f"{100 * e.mfu:.0f}%{hfu}", e.bound, *split, mem]
        if explain:
            row.append(fmt_rate(ratio[r.gpu.id], "/s"))
        tb.add_row(*row)
    console.print(tb)
    for r in results[: (len(results) if len(results) <= 3 else 1)]:
        e = r.est
        ot = Table(title=f"top ops on {r.gpu.name} ({'decode' if serving else 'one step'})")
        for c in ("op", "phase", "module", "x", "time", "bound", "FLOPs", "bytes", "FLOP/byte", "GEMM eff."):
            ot.add_column(c, justify="left" if c in ("op", "phase", "module", "bound") else "right", overflow="fold")
        for o in e.top_ops[:top]:
            ot.add_row(o.name.replace("aten.", ""), o.phase, o.module or "-", str(o.count), fmt_time(o.seconds), o.bound,
                       fmt_flops(o.flops), fmt_bytes(o.bytes), f"{o.flops / o.bytes:.1f}" if o.bytes else "-",
                       f"{100 * o.efficiency:.0f}%" if o.efficiency else "-")
        console.print(ot)
    a = results[0].est.assumptions
    console.print("[bold]assumptions[/]: " + escape("; ".join(f"{k}: {v}" for k, v in a.items())), soft_wrap=True)
    bands = {r.est.band.describe() for r in results if r.est.band is not None}
    if bands:
        console.print("likely: the range holding 80% of the true values, from the " + escape("; ".join(sorted(bands))),
                      soft_wrap=True)
    flagged = {f"{r.gpu.name}: {', '.join(r.est.outside)}" for r in results if r.est.outside}
    for why in sorted(flagged)[:8]:
        console.print(f"[yellow]* outside the validated ground[/] ({escape(why)}): the band comes from other classes "
                      "of workload; treat the number as a rough guide", soft_wrap=True)
    reasons = {f"{r.gpu.id}: {r.precision} ({r.precision_reason})" for r in results if r.precision_reason != "as requested"}
    if reasons and len(reasons) <= 6:
        console.print("precision: " + "; ".join(sorted(reasons)), soft_wrap=True)
    unfit = [r for r in results if r.memory is not None and not r.memory.fits]
    if unfit:
        console.print(f"[bold red]does not fit[/] on {', '.join(r.gpu.name for r in unfit)}: the times above "
                      "assume it did; run 'whichgpu fit' for what would make it fit (checkpointing, sharding, "
                      "LoRA/QLoRA, a smaller batch).", soft_wrap=True)
    notes = sorted({n for r in results for n in r.est.notes})
    for n in notes[:8]:
        console.print(f"note: {n}", soft_wrap=True)
    if explain:
        console.print("[bold]explain[/]: each op takes max(FLOPs / (peak x GEMM efficiency), bytes / (bandwidth x "
                      "efficiency)) plus launch latency; ops whose FLOP/byte is below the GPU's ridge point "
                      "(peak / bandwidth) are memory-bound. 'BW-ratio est.' scales the first GPU's estimate by "
                      "memory bandwidth alone, the rule of thumb of Dettmers' GPU guide for transformer training; "
                      "where it disagrees with ours, compute peaks, overheads or memory capacity differ.", soft_wrap=True)
        for r in results[:4]:
            g = r.gpu
            pk = r.est.mfu_peak_dtype
            peak = g.peak(pk) or g.peak("fp32") or 0.0
            console.print(f"  {g.name}: ridge point {peak * 1e12 / (g.memory_bandwidth_gbps * 1e9):.0f} FLOP/byte "
                          f"({pk} {peak:g} TFLOP/s / {g.memory_bandwidth_gbps:g} GB/s); workload intensity "
                          f"{r.trace.total_flops() / max(r.trace.total_bytes(), 1):.0f} FLOP/byte", soft_wrap=True)


def _likely(e: StepEstimate, value: float, unit: str) -> str:
    rng = e.likely(value)
    if rng is None or value <= 0:
        return "-"
    return f"{fmt_si(rng[0])}-{fmt_si(rng[1])} {unit}"
