"""Reports of `whichgpu plan`: the console tables, the JSON document (whichgpu.plan/1) and the
self-contained HTML page (Gantt chart of the chosen schedule, time split of the top layouts)."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from whichgpu.parallel.planner import Job, Result
from whichgpu.parallel.search import SearchResult
from whichgpu.report.console import Table, compact_table, console, say

SHORT = {"interleaved-1f1b": "1f1b-int"}
SPLIT_KEYS = ("compute", "tp", "cp", "ep", "bubble", "dp", "optimizer", "overhead")
SPLIT_TITLES = {"compute": "compute", "tp": "TP comm", "cp": "CP comm", "ep": "EP comm", "bubble": "bubble",
                "dp": "DP comm", "optimizer": "optimizer", "overhead": "overhead"}
COLORS = {"compute": "#3867d6", "tp": "#eb3b5a", "cp": "#fa8231", "ep": "#8854d0", "bubble": "#a5b1c2",
          "dp": "#20bf6b", "optimizer": "#f7b731", "overhead": "#4b6584"}


def layout_text(r: Result) -> str:
    from whichgpu.parallel.search import label

    return label(r.plan)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def plan_document(job: Job, res: SearchResult, objective: str) -> dict[str, Any]:
    """The JSON body of whichgpu.plan/1."""
    a = job.args
    total, active = a.params()

    def item(r: Result) -> dict[str, Any]:
        d = r.to_dict()
        for k, v in list(d.items()):
            if isinstance(v, float):
                d[k] = _finite(v)
        d["layout"] = layout_text(r)
        d["usd_per_step"] = None
        return d

    return {
        "model": job.model_id, "params": total, "active_params": active, "gpu": job.gpu.id, "gpu_name": job.gpu.name,
        "system": job.system.id, "gpus": job.gpus, "global_batch": job.global_batch, "seq_len": job.seq_len,
        "tokens_per_step": job.tokens, "precision": job.precision, "attention": job.attention, "objective": objective,
        "plans": [item(r) for r in res.best], "not_fitting": [item(r) for r in res.not_fitting],
        "evaluated": res.evaluated, "skipped": dict(res.skipped), "notes": plan_notes(job),
        "no_layout_reason": None if res.best else res.why_none(),
    }


def plan_notes(job: Job) -> list[str]:
    """What the figures carry beyond the assumptions: for an MoE model, that the planner is not
    calibrated for it, with the measured range (parallel/moe_accuracy.toml); flash attention, FP8 or BF16
    asked of a GPU without them."""
    from whichgpu.parallel.planner import attention_runs, moe_caveat

    out = [moe_caveat()] if job.args.experts else []
    if not attention_runs(job.attention, job.gpu):
        kernel, need = (("FlashAttention-2 and Transformer Engine's fused attention need", "Ampere (compute capability 8.0)")
                        if job.attention == "flash" else ("FlashAttention-1 needs", "Turing (compute capability 7.5)"))
        out.append(f"{job.gpu.name} ({job.gpu.architecture}) cannot run --attention {job.attention}: {kernel} {need} "
                   "or newer; Megatron runs its unfused attention there (--attention unfused, the default on this "
                   "GPU), slower and holding the score matrices")
    if job.precision == "fp8" and job.gpu.supports("fp8") is False:
        out.append(f"{job.gpu.name} has no FP8 tensor cores (Transformer Engine trains in FP8 from compute capability "
                   "8.9, Ada and Hopper, on): its matmuls take the 16-bit path and the FP8 casts only add time; "
                   "--precision bf16 is the faster question on this GPU")
    if job.precision.endswith("bf16") and job.gpu.supports("bf16") is False:
        out.append(f"{job.gpu.name} has no BF16: its matmuls run at the FP32 rate, on no tensor cores; --precision "
                   "fp16 trains on its FP16 tensor cores (the default on this GPU)")
    return out


def print_plan(job: Job, res: SearchResult) -> None:
    a = job.args
    total, active = a.params()
    size = f"{total / 1e9:.1f}B" + (f" ({active / 1e9:.1f}B active)" if active != total else "")
    say(f"{job.model_id} ({size}) on {job.gpus} x {job.gpu.name} ({job.system.name}), global batch "
        f"{job.global_batch} x {job.seq_len} tokens, {job.precision}: {res.evaluated} layouts evaluated")
    if res.best:
        t = compact_table("layouts that fit, fastest first (TFLOP/s: model FLOPs per GPU)")
        for col in ("#", "layout", "mb x acc", "sharding", "recompute", "schedule", "step s", "tokens/s",
                    "TFLOP/s", "MFU", "peak GB"):
            t.add_column(col, justify="right" if col not in ("layout", "sharding", "recompute", "schedule") else "left",
                         no_wrap=col != "layout")
        for i, r in enumerate(res.best, 1):
            p = r.plan
            t.add_row(str(i), layout_text(r), f"{p.micro_batch}x{p.grad_accum}", p.sharding, p.recompute or "none",
                      SHORT.get(p.schedule, p.schedule) if p.pp > 1 else "-", f"{r.step_s:.3g}", f"{r.tokens_per_s:,.0f}",
                      f"{r.model_tflops_per_gpu:.0f}", f"{r.mfu:.1%}", f"{r.peak_memory_bytes / 1e9:.1f}")
        console.print(t)
        s = compact_table("where the step goes (seconds; exposed communication by kind)")
        s.add_column("#", justify="right")
        for k in SPLIT_KEYS:
            s.add_column(SPLIT_TITLES[k], justify="right")
        for i, r in enumerate(res.best, 1):
            s.add_row(str(i), *(f"{r.split.get(k, 0.0):.3g}" for k in SPLIT_KEYS))
        console.print(s)
        best = res.best[0]
        say("assumptions of #1: " + "; ".join(f"{k}: {v}" for k, v in best.assumptions.items()), wrap=True)
        for note in plan_notes(job):
            say("note: " + note, wrap=True)
    if res.not_fitting:
        t = Table(title="closest layouts that do not fit")
        t.add_column("layout")
        t.add_column("mb x acc", justify="right")
        t.add_column("sharding")
        t.add_column("recompute")
        t.add_column("why")
        for r in res.not_fitting[:5]:
            t.add_row(layout_text(r), f"{r.plan.micro_batch} x {r.plan.grad_accum}", r.plan.sharding,
                      r.plan.recompute or "none", r.reason)
        console.print(t)


def _e(x: object) -> str:
    return escape(str(x), quote=True)


def split_chart(results: list[Result], width: int = 760) -> str:
    """Stacked horizontal bars: each layout's step split into compute, exposed communication by
    kind, bubble, optimizer and overhead."""
    if not results:
        return ""
    row_h, left = 26, 150
    longest = max(r.step_s for r in results) or 1.0
    h = row_h * len(results) + 50
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" role="img" '
           'aria-label="time split of the top layouts">']
    for i, r in enumerate(results):
        y = 10 + i * row_h
        out.append(f'<text x="4" y="{y + 15}" font-size="12">#{i + 1} {_e(layout_text(r))}</text>')
        x = float(left)
        for k in SPLIT_KEYS:
            v = r.split.get(k, 0.0)
            if v <= 0:
                continue
            w = v / longest * (width - left - 70)
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h - 8}" fill="{COLORS[k]}">'
                       f'<title>{_e(SPLIT_TITLES[k])}: {v:.4g} s</title></rect>')
            x += w
        out.append(f'<text x="{x + 4:.1f}" y="{y + 15}" font-size="11">{r.step_s:.3g} s</text>')
    y = 10 + len(results) * row_h + 10
    x = 4
    for k in SPLIT_KEYS:
        out.append(f'<rect x="{x}" y="{y}" width="10" height="10" fill="{COLORS[k]}"/>'
                   f'<text x="{x + 14}" y="{y + 9}" font-size="11">{_e(SPLIT_TITLES[k])}</text>')
        x += 14 + 8 * len(SPLIT_TITLES[k]) + 12
    out.append("</svg>")
    return "".join(out)


def render_html(job: Job, res: SearchResult, gantt: str) -> str:
    rows = []
    for i, r in enumerate(res.best, 1):
        p = r.plan
        rows.append(f"<tr><td>{i}</td><td>{_e(layout_text(r))}</td><td>{p.micro_batch} x {p.grad_accum}</td>"
                    f"<td>{_e(p.sharding)}</td><td>{_e(p.recompute)}</td><td>{_e(p.schedule)}</td>"
                    f"<td>{r.step_s:.3g}</td><td>{r.tokens_per_s:,.0f}</td><td>{r.model_tflops_per_gpu:.0f}</td>"
                    f"<td>{r.mfu:.1%}</td><td>{r.peak_memory_bytes / 1e9:.1f}</td></tr>")
    nofit = "".join(f"<li>{_e(layout_text(r))}, micro-batch {r.plan.micro_batch}, {_e(r.plan.sharding)}, "
                    f"recompute {_e(r.plan.recompute or 'none')}: {_e(r.reason)}</li>"
                    for r in res.not_fitting[:5])
    assumptions = "".join(f"<li><b>{_e(k)}</b>: {_e(v)}</li>" for k, v in (res.best[0].assumptions.items()
                                                                          if res.best else []))
    title = f"{job.model_id} on {job.gpus} x {job.gpu.name}"
    css = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}"
           "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f0f0f0}"
           ".note{color:#555}")
    closest = f"<h2>Closest layouts that do not fit</h2><ul>{nofit}</ul>" if nofit else ""
    if res.best:
        body = ("<h2>Layouts that fit</h2><table><tr><th>#</th><th>layout</th><th>mb x acc</th><th>sharding</th>"
                "<th>recompute</th><th>schedule</th><th>step s</th><th>tokens/s</th><th>TFLOP/s/GPU</th><th>MFU</th>"
                f"<th>peak GB</th></tr>{''.join(rows)}</table>"
                f"<h2>Where the step goes</h2>{split_chart(res.best)}"
                f"<h2>Pipeline schedule of #1</h2>{gantt or '<p class=note>No pipeline (pp = 1).</p>'}"
                + closest + f"<h2>Assumptions of #1</h2><ul>{assumptions}</ul>")
    else:
        body = f"<h2>No layout fits</h2><p>{_e(res.why_none())}</p>" + closest
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>whichgpu plan: {_e(title)}</title>"
            f"<style>{css}</style></head><body><h1>whichgpu plan: {_e(title)}</h1>"
            f"<p>Global batch {job.global_batch} x {job.seq_len} tokens, {_e(job.precision)}, system "
            f"{_e(job.system.name)}; {res.evaluated} layouts evaluated.</p>{body}</body></html>\n")
