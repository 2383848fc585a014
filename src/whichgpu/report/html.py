"""A self-contained HTML page for a recommendation: the picks, a performance-per-dollar bar chart,
the workload's roofline on the top GPUs, the memory breakdown, the ranked table and the cards that
cannot run the job. Charts are inline SVG; the style sheet and the (table sorting) script are
inlined from recommend.css / recommend.js: the page needs no network."""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

from whichgpu.memory.estimate import LINE_TITLES, MemoryEstimate
from whichgpu.recommend.evaluate import Run
from whichgpu.recommend.rank import Config
from whichgpu.recommend.result import Recommendation
from whichgpu.units import GB, fmt_usd

HERE = Path(__file__).parent
COLORS = ("#3867d6", "#eb3b5a", "#20bf6b", "#f7b731", "#8854d0", "#0fb9b1", "#fa8231", "#4b6584",
          "#a5b1c2", "#2d98da", "#c0392b", "#16a085", "#7f8c8d")


def _e(x: object) -> str:
    return escape(str(x), quote=True)


def _fmt(x: float) -> str:
    a = abs(x)
    for unit, s in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if a >= s:
            return f"{x / s:.3g}{unit}"
    return f"{x:.3g}"


# ---- charts ------------------------------------------------------------------------------------

def value_chart(rows: list[Config], unit: str, limit: int = 20) -> str:
    """Horizontal bars: work per dollar of each GPU's best configuration."""
    priced = [c for c in rows if c.value is not None][:limit]
    if not priced:
        return '<p class="note">No configuration has a price: no performance-per-dollar chart.</p>'
    priced.sort(key=lambda c: -(c.value or 0.0))
    top = max(c.value or 0.0 for c in priced) or 1.0
    left, width, bar, gap = 260, 560, 18, 6
    height = len(priced) * (bar + gap) + 30
    out = [f'<svg id="value-chart" role="img" width="{left + width + 90}" height="{height}" '
           f'viewBox="0 0 {left + width + 90} {height}" xmlns="http://www.w3.org/2000/svg">']
    for i, c in enumerate(priced):
        y = 10 + i * (bar + gap)
        w = max(1.0, width * (c.value or 0.0) / top)
        name = (f"{c.gpus} x " if c.gpus > 1 else "") + c.gpu.name
        stale = (c.prices.buy if c.usd_per_hour is not None and c.purchase_usd is not None else c.prices.rent).stale
        out.append(f'<text class="lbl" x="{left - 6}" y="{y + bar - 5}" text-anchor="end">{_e(name)}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar}" fill="{COLORS[0]}">'
                   f'<title>{_e(name)}: {_fmt(c.value or 0.0)} {_e(unit)} per $</title></rect>')
        out.append(f'<text class="dim" x="{left + w + 4:.1f}" y="{y + bar - 5}">{_fmt(c.value or 0.0)}'
                   f'{" *" if stale else ""}</text>')
    out.append("</svg>")
    return "".join(out)


def roofline_chart(rows: list[Config], count: int = 3) -> str:
    """Each op category of the first workload as a point (FLOP/byte, achieved FLOP/s per GPU)
    under each top GPU's compute roof and bandwidth slope (log-log)."""
    series: list[tuple[Config, float, float, list[tuple[str, float, float]]]] = []
    for c in rows:
        run = c.runs[0]
        if not isinstance(run, Run):  # a layout of the parallel planner: no traced ops to draw
            continue
        if len(series) == count:
            break
        e = run.pred.est
        peak = (c.gpu.peak(e.mfu_peak_dtype) or c.gpu.peak("fp32") or 1.0) * 1e12
        bw = c.gpu.memory_bandwidth_gbps * 1e9
        pts = [(cat, d["flops"] / d["bytes"], d["flops"] / d["seconds"]) for cat, d in sorted(e.by_category.items())
               if d["flops"] > 0 and d["bytes"] > 0 and d["seconds"] > 0]
        series.append((c, peak, bw, pts))
    if not series:
        return '<p class="note">No configuration to draw.</p>'
    xs = [p[1] for s in series for p in s[3]] + [s[1] / s[2] for s in series]
    ys = [p[2] for s in series for p in s[3]] + [s[1] for s in series]
    x0, x1 = 10 ** math.floor(math.log10(min(xs) / 2)), 10 ** math.ceil(math.log10(max(xs) * 4))
    y0, y1 = 10 ** math.floor(math.log10(min(ys) / 2)), 10 ** math.ceil(math.log10(max(ys) * 2))
    W, H, L, T, R, B = 760, 420, 70, 16, 200, 44
    pw, ph = W - L - R, H - T - B

    def px(x: float) -> float:
        return L + pw * (math.log10(x) - math.log10(x0)) / (math.log10(x1) - math.log10(x0))

    def py(y: float) -> float:
        return T + ph * (1 - (math.log10(y) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)))

    out = [f'<svg id="roofline-chart" role="img" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'xmlns="http://www.w3.org/2000/svg">']
    for k in range(round(math.log10(x0)), round(math.log10(x1)) + 1):
        x = px(10.0 ** k)
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{T + ph}"/>'
                   f'<text class="dim" x="{x:.1f}" y="{T + ph + 14}" text-anchor="middle">{_fmt(10.0 ** k)}</text>')
    for k in range(round(math.log10(y0)), round(math.log10(y1)) + 1):
        y = py(10.0 ** k)
        out.append(f'<line class="grid" x1="{L}" y1="{y:.1f}" x2="{L + pw}" y2="{y:.1f}"/>'
                   f'<text class="dim" x="{L - 4}" y="{y + 4:.1f}" text-anchor="end">{_fmt(10.0 ** k)}</text>')
    out.append(f'<line class="axis" x1="{L}" y1="{T + ph}" x2="{L + pw}" y2="{T + ph}"/>'
               f'<line class="axis" x1="{L}" y1="{T}" x2="{L}" y2="{T + ph}"/>'
               f'<text class="lbl" x="{L + pw / 2}" y="{H - 6}" text-anchor="middle">arithmetic intensity, FLOP/byte</text>'
               f'<text class="lbl" transform="translate(14 {T + ph / 2}) rotate(-90)" text-anchor="middle">'
               'achieved FLOP/s per GPU</text>')
    for i, (c, peak, bw, pts) in enumerate(series):
        col = COLORS[i % len(COLORS)]
        ridge = peak / bw
        xa = max(x0, y0 / bw)
        out.append(f'<polyline class="roof" style="stroke:{col}" points="{px(xa):.1f},{py(bw * xa):.1f} '
                   f'{px(ridge):.1f},{py(peak):.1f} {px(x1):.1f},{py(peak):.1f}"><title>{_e(c.gpu.name)}: '
                   f'{_fmt(peak)}FLOP/s roof, {_fmt(bw)}B/s slope</title></polyline>')
        for cat, x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{col}" fill-opacity="0.75">'
                       f'<title>{_e(c.gpu.name)} {_e(cat)}: {x:.3g} FLOP/byte, {_fmt(y)}FLOP/s</title></circle>')
            if i == 0:  # (the categories sit at the same intensity on every GPU: label them once)
                out.append(f'<text class="dim" x="{px(x) + 5:.1f}" y="{py(y) - 4:.1f}">{_e(cat)}</text>')
        ly = T + 14 + 16 * i
        out.append(f'<rect x="{L + pw + 12}" y="{ly - 9}" width="10" height="10" fill="{col}"/>'
                   f'<text class="lbl" x="{L + pw + 26}" y="{ly}">{_e(c.gpu.name)}</text>')
    out.append("</svg>")
    return "".join(out)


def memory_chart(mem: MemoryEstimate) -> str:
    """One stacked bar of the peak memory per GPU by line, against the usable capacity."""
    lines = [(LINE_TITLES[k], v.bytes) for k, v in mem.lines() if v.bytes > 0]
    total = max(mem.total_bytes, mem.capacity_bytes) or 1.0
    W, L, width, H = 820, 10, 800, 70 + 18 * ((len(lines) + 2) // 3)
    out = [f'<svg id="memory-chart" role="img" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'xmlns="http://www.w3.org/2000/svg">']
    x = float(L)
    for i, (title, b) in enumerate(lines):
        w = width * b / total
        out.append(f'<rect x="{x:.1f}" y="10" width="{w:.1f}" height="26" fill="{COLORS[i % len(COLORS)]}">'
                   f'<title>{_e(title)}: {b / GB:.2f} GB</title></rect>')
        x += w
    cap = L + width * mem.capacity_bytes / total
    out.append(f'<line x1="{cap:.1f}" y1="4" x2="{cap:.1f}" y2="42" stroke="#1d2330" stroke-width="2"/>'
               f'<text class="lbl" x="{min(cap, W - 120):.1f}" y="52">usable {mem.capacity_bytes / GB:.1f} GB</text>')
    for i, (title, b) in enumerate(lines):
        lx, ly = L + 270 * (i % 3), 70 + 18 * (i // 3)
        out.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{COLORS[i % len(COLORS)]}"/>'
                   f'<text class="lbl" x="{lx + 14}" y="{ly}">{_e(title)} {b / GB:.2f} GB</text>')
    out.append("</svg>")
    return "".join(out)


# ---- page --------------------------------------------------------------------------------------

def _table(rec: Recommendation) -> str:
    mode = rec.request.cost.mode
    head = ["#", "GPU", "GPUs", "precision", rec.unit, "likely (p10-p90)", "$/hour", "work per $", "price",
            "break-even h", "GB used", "why"]
    out = ['<table class="sortable" id="ranking"><thead><tr>']
    out += [f'<th class="{"l" if h in ("GPU", "precision", "why") else ""}">{_e(h)}</th>' for h in head]
    out.append("</tr></thead><tbody>")
    for i, c in enumerate(rec.rows, start=1):
        q = c.prices.rent if mode == "rent" else c.prices.buy
        price = "no price" if q.usd is None else fmt_usd(q.usd) + ("/h" if mode == "rent" else "")
        need = max(r.layout.need_bytes for r in c.runs)
        rng = c.likely_speed()
        gpu = c.gpu.name + (" * outside the validated ground: " + "; ".join(c.outside) if c.outside else "")
        cells = [(i, str(i)), (None, gpu), (c.gpus, str(c.gpus)),
                 (None, "/".join(sorted({r.precision for r in c.runs}))), (c.speed, _fmt(c.speed)),
                 (rng[0] if rng else None, f"{_fmt(rng[0])}-{_fmt(rng[1])}" if rng else "-"),
                 (c.usd_per_hour, fmt_usd(c.usd_per_hour) if c.usd_per_hour is not None else "-"),
                 (c.value, _fmt(c.value) if c.value is not None else "no price"),
                 (q.usd, price + (f' <span class="stale">* {_e(q.date)}</span>' if q.stale else "")),
                 (c.break_even_h, "never" if c.break_even_never else (_fmt(c.break_even_h) if c.break_even_h else "-")),
                 (need / GB, f"{need / GB:.1f}"), (None, "; ".join(c.reasons))]
        cls = ' class="over"' if c.within_budget is False else ""
        out.append(f"<tr{cls}>")
        for j, (v, text) in enumerate(cells):
            left = ' class="l"' if j in (1, 3, 11) else ""
            data = f' data-v="{v}"' if isinstance(v, (int, float)) else ""
            out.append(f"<td{left}{data}>{text if j == 8 else _e(text)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def render(rec: Recommendation) -> str:
    req = rec.request
    css = (HERE / "recommend.css").read_text(encoding="utf-8")
    js = (HERE / "recommend.js").read_text(encoding="utf-8")
    what = " + ".join(w.label for w in req.workloads)
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>whichgpu: {_e(req.title)}"
             f"</title><style>{css}</style></head><body>",
             f"<h1>Which GPU for {_e(what)}</h1>",
             f'<p class="sub">{_e(req.cost.describe())}; objective: <b>{_e(req.objective)}</b>'
             + (f"; budget {fmt_usd(req.budget_usd)}" if req.budget_usd is not None else "")
             + (f"; job: {_e(req.job.describe())}" if req.job.given else "") + "</p>",
             '<h2>Picks</h2><ul class="picks">']
    parts += [f"<li><b>{_e(p.title)}</b> {_e(p.text)}</li>" for p in rec.picks]
    parts.append("</ul>")
    parts.append(f"<h2>Performance per dollar</h2><figure>{value_chart(rec.rows, rec.unit)}<figcaption>{_e(rec.unit)}"
                 f" x 3600 / USD per hour of use, each GPU's best configuration; * = price over a year old."
                 "</figcaption></figure>")
    parts.append(f"<h2>Roofline of the workload on the top GPUs</h2><figure>{roofline_chart(rec.rows)}<figcaption>"
                 "Each op category of one step (of the first workload; decode when serving) at its arithmetic "
                 "intensity and achieved FLOP/s per GPU, under the GPU's dense compute roof and memory-bandwidth "
                 "slope. Categories without FLOPs (copies, memsets) are not drawn.</figcaption></figure>")
    if rec.rows and rec.rows[0].key in rec.memory:
        m = rec.memory[rec.rows[0].key]
        parts.append(f"<h2>Memory per GPU on {_e(rec.rows[0].gpu.name)}</h2><figure>{memory_chart(m)}<figcaption>"
                     f"Peak {m.total_bytes / GB:.2f} GB per GPU in {_e(m.peak_phase)}"
                     f" ({_e(m.plan.sharding)} over {m.plan.gpus} GPU(s)).</figcaption></figure>")
    parts.append(f"<h2>Ranking ({len(rec.rows)} GPUs run it)</h2>{_table(rec)}"
                 '<p class="sub">likely: the range holding 80% of the true values (p10-p90 of the scored errors '
                 "of the workload's class on the GPU's architecture, <code>whichgpu validate</code>); * outside the "
                 "validated ground: no validation rows for that architecture, engine, precision or model family.</p>")
    if rec.rejected:
        parts.append(f"<h2>Cannot run this job or left out ({len(rec.rejected)})</h2><table><thead><tr>"
                     '<th class="l">GPU</th><th>GB</th><th class="l">why</th></tr></thead><tbody>')
        parts += [f'<tr><td class="l">{_e(r.result.gpu.name)}</td><td>{r.result.gpu.memory_gb:g}</td>'
                  f'<td class="l">{_e(r.blocker.text)}</td></tr>' for r in rec.rejected]
        parts.append("</tbody></table>")
    parts.append("<h2>Assumptions</h2><ul>")
    parts += [f'<li class="note"><code>{_e(k)}</code> {_e(v)}</li>' for k, v in rec.assumptions.items()]
    parts += [f'<li class="note">note: {_e(n)}</li>' for n in rec.notes]
    parts.append(f"</ul><script>{js}</script></body></html>\n")
    return "".join(parts)
