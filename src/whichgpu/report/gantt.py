"""SVG Gantt chart of one simulated pipeline timeline (``parallel.schedule.Timeline``).

Pure string building, no dependencies, no scripts or external fonts: one row per stage, one
rectangle per pass (F, B, W in three colours, labelled by micro-batch when wide enough, a
``<title>`` tooltip each), idle gaps left blank (the bubbles), a time axis in ms and a legend.
Timeline times are seconds. Timelines with more than ``MAX_PASSES`` passes draw only the first
and last ``KEEP`` passes of each stage, and the chart says so.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

if TYPE_CHECKING:
    from whichgpu.parallel.schedule import Pass, Timeline

COLOURS = {"F": "#4c78a8", "B": "#f58518", "W": "#54a24b"}
NAMES = {"F": "forward", "B": "backward (input grad)", "W": "weight grad"}
MAX_PASSES = 3000
KEEP = 200  # passes per stage kept at each end of a long timeline
ROW_H, ROW_GAP, LEFT, RIGHT, TOP = 22, 6, 70, 20, 44


def _nice_step(span: float, ticks: int = 8) -> float:
    """A 1/2/2.5/5 x 10^k step giving about ``ticks`` ticks over ``span``."""
    raw = span / ticks if span > 0 else 1.0
    mag = 10.0 ** math.floor(math.log10(raw))
    for mult in (1.0, 2.0, 2.5, 5.0, 10.0):
        if mag * mult >= raw:
            return mag * mult
    return mag * 10.0


def _attr(text: str) -> str:
    return escape(text, {'"': "&quot;"})


def _fmt(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".") or "0"


def gantt_svg(timeline: Timeline, title: str = "", width: int = 900) -> str:
    """A standalone ``<svg>`` document drawing ``timeline``: one row per stage."""
    p = timeline.stages
    rows: list[list[Pass]] = [[] for _ in range(p)]
    for q in timeline.passes:
        rows[q.stage].append(q)
    truncated = len(timeline.passes) > MAX_PASSES
    if truncated:
        rows = [r if len(r) <= 2 * KEEP else r[:KEEP] + r[-KEEP:] for r in rows]
    plot_w = max(width - LEFT - RIGHT, 50)
    span_ms = max(timeline.makespan, 1e-30) * 1e3
    scale = plot_w / span_ms  # px per ms
    height = TOP + p * (ROW_H + ROW_GAP) + 90
    head = title or (f"{timeline.schedule}: {p} stages, {timeline.micro_batches} micro-batches"
                     + (f", {timeline.chunks} chunks" if timeline.chunks > 1 else ""))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(head)}</title>",
        f'<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{escape(head)}</text>',
        f'<text x="{LEFT}" y="32" fill="#555">makespan {_fmt(span_ms)} ms, bubble '
        f"{timeline.bubble_fraction * 100:.1f} %</text>",
    ]
    for s in range(p):
        y = TOP + s * (ROW_H + ROW_GAP)
        out.append(f'<rect x="{LEFT}" y="{y}" width="{plot_w}" height="{ROW_H}" fill="#f2f2f2"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + ROW_H / 2 + 4}" text-anchor="end">'
                   f"stage {s}</text>")
        for q in rows[s]:
            x = LEFT + q.start * 1e3 * scale
            w = max((q.end - q.start) * 1e3 * scale, 0.5)
            colour = COLOURS.get(q.kind, "#999")
            tip = (f"stage {q.stage} {q.kind} ({NAMES.get(q.kind, q.kind)}) micro-batch {q.micro}"
                   f" chunk {q.chunk}: {_fmt(q.start * 1e3)}-{_fmt(q.end * 1e3)} ms")
            out.append(f'<g><title>{escape(tip)}</title><rect x="{x:.2f}" y="{y}" '
                       f'width="{w:.2f}" height="{ROW_H}" fill="{colour}" stroke="#fff" '
                       'stroke-width="0.5"/>')
            label = str(q.micro)
            if w >= 7 * len(label) + 2:
                out.append(f'<text x="{x + w / 2:.2f}" y="{y + ROW_H / 2 + 4}" '
                           f'text-anchor="middle" fill="#fff">{label}</text>')
            out.append("</g>")
    axis_y = TOP + p * (ROW_H + ROW_GAP)
    out.append(f'<line x1="{LEFT}" y1="{axis_y}" x2="{LEFT + plot_w}" y2="{axis_y}" '
               'stroke="#333"/>')
    step = _nice_step(span_ms)
    k = 0
    while k * step <= span_ms * (1 + 1e-9):
        x = LEFT + k * step * scale
        out.append(f'<line x1="{x:.2f}" y1="{axis_y}" x2="{x:.2f}" y2="{axis_y + 4}" '
                   'stroke="#333"/>')
        out.append(f'<text x="{x:.2f}" y="{axis_y + 16}" text-anchor="middle">'
                   f"{_fmt(k * step)}</text>")
        k += 1
    out.append(f'<text x="{LEFT + plot_w}" y="{axis_y + 30}" text-anchor="end">time (ms)</text>')
    ly = axis_y + 46
    lx = LEFT
    kinds = sorted({q.kind for q in timeline.passes}, key="FBW".index)
    for kind in kinds:
        out.append(f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" '
                   f'fill="{COLOURS[kind]}"/>')
        out.append(f'<text x="{lx + 16}" y="{ly}">{kind}: {escape(NAMES[kind])}</text>')
        lx += 170
    out.append(f'<text x="{lx}" y="{ly}" fill="#555">blank: idle (bubble)</text>')
    if truncated:
        out.append(f'<text x="{LEFT}" y="{ly + 16}" fill="#b00">{len(timeline.passes)} passes: '
                   f"only the first and last {KEEP} of each stage are drawn</text>")
    out.append("</svg>")
    return "\n".join(out) + "\n"
