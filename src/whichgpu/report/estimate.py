"""Rendering of step-time estimates: a side-by-side table, the split, top ops, assumptions."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from whichgpu.hardware.system import System
from whichgpu.parallel.plan import Plan
from whichgpu.perf.estimate import StepEstimate
from whichgpu.predict import Prediction
from whichgpu.report.console import Table, compact_table, console, line, print_wide, say
from whichgpu.report.workload import (
    active_params,
    coverage_document,
    coverage_warnings,
    merged_assumptions,
    params_text,
)
from whichgpu.units import fmt_bytes, fmt_flops, fmt_rate, fmt_si, fmt_time
from whichgpu.workload.trace import Trace


def _throughput(e: StepEstimate, t: Trace) -> dict[str, float | None]:
    """samples/s and tokens/s (null for a workload without tokens: none were counted)."""
    return {"samples_per_s": e.samples_per_s, "tokens_per_s": e.tokens_per_s if t.tokens else None}


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
                         "bytes_per_step": t.total_bytes(), "params": t.params,
                         "active_params": active_params(t), "attention": t.shape.attention or None}
        d["coverage"] = coverage_document(t)
        d["assumptions"] = merged_assumptions(d["assumptions"], t)
        if r.prefill is not None:
            p: StepEstimate = r.prefill
            d["serving"] = {"time_to_first_token_s": p.step_s, "prefill_bound": p.bound,
                            "decode_step_s": e.step_s, "decode_tokens_per_s": e.tokens_per_s,
                            "decode_bound": e.bound, "context": t.context, "batch": t.batch_size,
                            "prefill_confidence": p.confidence(),
                            "prefill_coverage": coverage_document(r.prefill_trace) if r.prefill_trace else None}
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


def _headline(results: list[Prediction]) -> Text:
    r0 = results[0]
    plan, t0, serving = r0.plan, r0.trace, r0.serving
    prompt = r0.prefill_trace.seq_len if r0.prefill_trace is not None else None
    precisions = sorted({r.precision for r in results})
    n = plan.gpus
    text = (f"  {t0.task}" + (" (serving: prefill + decode)" if serving else (f"/{t0.phase}" if t0.phase != "full" else ""))
            + f", batch {t0.batch_size} per GPU"
            + (f", seq {prompt}" if serving else (f", seq {t0.seq_len}" if t0.seq_len else ""))
            + (f", image {t0.image_size}" if t0.image_size else "")
            + (f", context {t0.context}" if t0.context and not serving else "")
            + (f", {precisions[0]}" if len(precisions) == 1 else "")
            + f", on {n} GPU{'s' if n > 1 else ''}"
            + (f" ({plan.parallel_label()}" + (f" in {r0.system.name}" if len({r.system.id for r in results}) == 1 else "")
               + ")" if n > 1 else "")
            + f", engine {plan.engine}")
    return line((t0.model, "bold"), text)


def _why(e: StepEstimate) -> str:
    """What limits the step, with its figure: the estimate's 'reason' in a few words."""
    s = e.step_s or 1.0
    if e.bound == "compute":
        return f"compute, MFU {100 * e.mfu:.0f}%"
    if e.bound == "host":
        return "host (CPU dispatch)"
    share = {"memory": e.memory_s, "overhead": e.overhead_s, "communication": e.comm_s}.get(e.bound)
    return e.bound if share is None else f"{e.bound} {100 * share / s:.0f}%"


def _memory_cell(r: Prediction, unit: bool = True) -> Text:
    m = r.memory
    if m is None:
        return Text("-")
    cell = Text(f"{m.total_bytes / 1e9:.1f}/{m.capacity_bytes / 1e9:.0f}" + (" GB" if unit else ""))
    if not m.fits:
        cell.append(" does not fit", style="bold red")
    return cell


def _gpu_cell(r: Prediction) -> Text:
    cell = Text(r.gpu.name)
    if not r.est.validated:
        cell.append(" *", style="yellow")
    return cell


def _compact_table(results: list[Prediction]) -> Table:
    """GPU, step, the key throughput and its likely range, what bounds the step, memory: laid
    out for 80-120 columns (precision: in the headline when one for all, else under the table)."""
    t0: Trace = results[0].trace
    serving = results[0].serving
    unit = "tokens/s" if t0.tokens else "samples/s"
    cols = ["GPU"] + (["1st token", "decode tok/s"] if serving else ["step", unit]) + ["likely", "bound", "memory GB"]
    tb = compact_table("")
    words = max(len(w) for r in results for w in _why(r.est).split())  # the bound wraps between words only
    for c in cols:
        left = c in ("GPU", "bound", "memory GB")
        tb.add_column(c, justify="left" if left else "right", no_wrap=not left,
                      min_width={"GPU": 12, "bound": words}.get(c))
    for r in results:
        e: StepEstimate = r.est
        row: list[str | Text] = [_gpu_cell(r)]
        if r.prefill is not None:
            row += [fmt_time(r.prefill.step_s), fmt_si(e.tokens_per_s), _likely(e, e.tokens_per_s, "")]
        else:
            main = e.tokens_per_s if t0.tokens else e.samples_per_s
            row += [fmt_time(e.step_s), fmt_si(main), _likely(e, main, "")]
        row += [_why(e), _memory_cell(r, unit=False)]
        tb.add_row(*row)
    return tb


def _wide_table(results: list[Prediction], explain: bool) -> Table:
    """Every column: precision, both throughputs, MFU (HFU), the split of the step, memory."""
    t0: Trace = results[0].trace
    serving = results[0].serving
    tb = Table()
    cols = ["GPU", "precision", "step", "samples/s"] + (["tokens/s"] if t0.tokens and not serving else [])
    if serving:
        cols = ["GPU", "precision", "time to 1st token", "decode tok/s", "decode step", "decode bound"]
    cols.insert(4 if serving else (5 if t0.tokens else 4), "likely (p10-p90)")
    cols += ["MFU (HFU)", "bound", "compute", "memory", "overhead", "comm", "GPU memory"]
    if explain:
        cols += ["BW-ratio est."]
    for c in cols:
        tb.add_column(c, justify="left" if c in ("GPU", "precision", "bound", "decode bound") else "right", no_wrap=True)
    ratio = dettmers_ratio(results) if explain else {}
    for r in results:
        e: StepEstimate = r.est
        s = e.step_s or 1.0
        split = [f"{100 * e.compute_s / s:.0f}%", f"{100 * e.memory_s / s:.0f}%", f"{100 * e.overhead_s / s:.0f}%",
                 f"{100 * e.comm_s / s:.0f}%"]
        row: list[str | Text] = [_gpu_cell(r), r.precision]
        if r.prefill is not None:
            p: StepEstimate = r.prefill
            row += [fmt_time(p.step_s), fmt_rate(e.tokens_per_s, "tok/s"),
                    _likely(e, e.tokens_per_s, "tok/s"), fmt_time(e.step_s), e.bound]
        else:
            row += [fmt_time(e.step_s), fmt_rate(e.samples_per_s, "/s")]
            if t0.tokens:
                row.append(fmt_rate(e.tokens_per_s, "tok/s"))
            main = e.tokens_per_s if t0.tokens else e.samples_per_s
            row.append(_likely(e, main, "tok/s" if t0.tokens else "/s"))
        hfu = f" ({100 * e.hfu:.0f}%)" if round(100 * e.hfu) != round(100 * e.mfu) else ""
        row += [f"{100 * e.mfu:.0f}%{hfu}", e.bound, *split, _memory_cell(r)]
        if explain:
            row.append(fmt_rate(ratio[r.gpu.id], "/s"))
        tb.add_row(*row)
    return tb


def _ops_table(r: Prediction, top: int, serving: bool, wide: bool) -> Table:
    title = f"top ops on {r.gpu.name} ({'decode' if serving else 'one step'})"
    cols = (("op", "phase", "module", "x", "time", "bound", "FLOPs", "bytes", "FLOP/byte", "GEMM eff.") if wide
            else ("op", "module", "x", "time", "bound"))
    ot = Table(title=title) if wide else compact_table(title)
    for c in cols:
        left = c in ("op", "phase", "module", "bound")
        ot.add_column(c, justify="left" if left else "right", overflow="fold", no_wrap=wide or not left)
    for o in r.est.top_ops[:top]:
        cells = {"op": o.name.replace("aten.", ""), "phase": o.phase, "module": o.module or "-", "x": str(o.count),
                 "time": fmt_time(o.seconds), "bound": o.bound, "FLOPs": fmt_flops(o.flops), "bytes": fmt_bytes(o.bytes),
                 "FLOP/byte": f"{o.flops / o.bytes:.1f}" if o.bytes else "-",
                 "GEMM eff.": f"{100 * o.efficiency:.0f}%" if o.efficiency else "-"}
        if not wide and o.phase != "forward":
            cells["op"] += f" ({o.phase})"
        ot.add_row(*(cells[c] for c in cols))
    return ot


def print_estimates(results: list[Prediction], explain: bool, top: int, wide: bool = False) -> None:
    """The estimates side by side. The default table fits 80-120 columns (GPU, step, the key
    throughput and its likely range, what bounds the step, memory); `wide` adds every column
    (precision, both throughputs, MFU/HFU, the split of the step) at full width."""
    serving = results[0].serving
    say(_headline(results))
    say(f"  {params_text(results[0].trace)}")
    traces = [t for r in results for t in (r.prefill_trace, r.trace) if t is not None]
    for w in coverage_warnings(traces):
        say(("warning", "yellow"), f": {w}", wrap=True)
    if wide or explain:
        print_wide(_wide_table(results, explain))
    else:
        console.print(_compact_table(results))
    for r in results[: (len(results) if len(results) <= 3 else 1)]:
        ops = _ops_table(r, top, serving, wide)
        if wide:
            print_wide(ops)
        else:
            console.print(ops)
    if not wide and not explain:
        say(("more columns (precision, samples/s, MFU, the split of the step, FLOPs and bytes per op): "
             "--wide; every figure: --json", "dim"))
    a = merged_assumptions(results[0].est.assumptions, results[0].trace)
    say(("assumptions", "bold"), ": " + "; ".join(f"{k}: {v}" for k, v in a.items()))
    slowed = [(r.gpu.name, sum(u.seconds for u in r.est.unaligned_gemms), sum(u.padded_s for u in r.est.unaligned_gemms))
              for r in results if r.est.unaligned_gemms]
    if len(results) > 1 and slowed:  # the assumption line above is the first GPU's: each GPU's cost
        say("unaligned GEMMs, ms per step as capped / padded: "
            + "; ".join(f"{name}: {cap * 1e3:.3g} / {pad * 1e3:.3g}" for name, cap, pad in slowed[:8])
            + (f" ({len(results) - len(slowed)} other GPU(s): not slowed)" if len(slowed) < len(results) else ""))
    bands = {r.est.band.describe() for r in results if r.est.band is not None}
    if bands:
        say("likely: the range holding 80% of the true values, from the " + "; ".join(sorted(bands)))
    flagged = {f"{r.gpu.name}: {', '.join(r.est.outside)}" for r in results if r.est.outside}
    for why in sorted(flagged)[:8]:
        say(("* outside the validated ground", "yellow"), f" ({why}): the band comes from other classes "
            "of workload; treat the number as a rough guide")
    reasons = {f"{r.gpu.id}: {r.precision} ({r.precision_reason})" for r in results if r.precision_reason != "as requested"}
    if reasons and len(reasons) <= 6:
        say("precision: " + "; ".join(sorted(reasons)))
    elif len({r.precision for r in results}) > 1 and not (wide or explain):
        say("precision: " + ", ".join(sorted({r.precision for r in results})) + " (each GPU's: --wide)")
    unfit = [r for r in results if r.memory is not None and not r.memory.fits]
    if unfit:
        say(("does not fit", "bold red"), f" on {', '.join(r.gpu.name for r in unfit)}: the times above "
            "assume it did; run 'whichgpu fit' for what would make it fit (checkpointing, sharding, "
            "LoRA/QLoRA, a smaller batch).")
    notes = sorted({n for r in results for n in r.est.notes})
    for n in notes[:8]:
        say(f"note: {n}")
    if explain:
        say(("explain", "bold"), ": each op takes max(FLOPs / (peak x GEMM efficiency), bytes / (bandwidth x "
            "efficiency)) plus launch latency; ops whose FLOP/byte is below the GPU's ridge point "
            "(peak / bandwidth) are memory-bound. 'BW-ratio est.' scales the first GPU's estimate by "
            "memory bandwidth alone, the rule of thumb of Dettmers' GPU guide for transformer training; "
            "where it disagrees with ours, compute peaks, overheads or memory capacity differ.")
        for r in results[:4]:
            g = r.gpu
            pk = r.est.mfu_peak_dtype
            peak = g.peak(pk) or g.peak("fp32") or 0.0
            say(f"  {g.name}: ridge point {peak * 1e12 / (g.memory_bandwidth_gbps * 1e9):.0f} FLOP/byte "
                f"({pk} {peak:g} TFLOP/s / {g.memory_bandwidth_gbps:g} GB/s); workload intensity "
                f"{r.trace.total_flops() / max(r.trace.total_bytes(), 1):.0f} FLOP/byte")


def _likely(e: StepEstimate, value: float, unit: str) -> str:
    rng = e.likely(value)
    if rng is None or not value > 0:
        return "-"
    return f"{fmt_si(rng[0])}-{fmt_si(rng[1])}" + (f" {unit}" if unit else "")
