"""SVG Gantt chart of a simulated pipeline timeline (whichgpu.report.gantt)."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

from whichgpu.parallel.schedule import simulate
from whichgpu.report.gantt import COLOURS, gantt_svg

NS = "{http://www.w3.org/2000/svg}"


def _tree(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def test_gantt_is_valid_svg_with_one_rect_per_pass() -> None:
    tl = simulate("zb-h1", 4, 8, 1e-3, 1e-3, 0.5e-3, comm=1e-4)
    root = _tree(gantt_svg(tl, title="zb-h1 <test> & co", width=800))
    assert root.tag == f"{NS}svg" and root.get("width") == "800"
    groups = [g for g in root.iter(f"{NS}g") if g.find(f"{NS}title") is not None]
    assert len(groups) == len(tl.passes)
    fills = {g.find(f"{NS}rect").get("fill") for g in groups}  # type: ignore[union-attr]
    assert fills == set(COLOURS.values())  # F, B and W in three colours
    texts = [t.text or "" for t in root.iter(f"{NS}text")]
    assert "zb-h1 <test> & co" in texts  # escaped in the file, intact once parsed
    assert any(t.startswith("stage 3") for t in texts)
    assert "time (ms)" in texts
    assert any(t.startswith("W: ") for t in texts)  # legend
    tip = groups[0].find(f"{NS}title").text or ""  # type: ignore[union-attr]
    assert "stage 0 F" in tip and "micro-batch 0" in tip and "chunk 0" in tip and "ms" in tip
    assert "<script" not in gantt_svg(tl)


def test_bubbles_are_gaps_and_labels_fit() -> None:
    tl = simulate("1f1b", 4, 4, 2e-3, 4e-3)
    root = _tree(gantt_svg(tl, width=1200))
    rects = [g.find(f"{NS}rect") for g in root.iter(f"{NS}g")]
    xs = sorted((float(r.get("x")), float(r.get("width"))) for r in rects  # type: ignore[union-attr,arg-type]
                if r is not None and r.get("y") == rects[0].get("y"))  # type: ignore[union-attr]
    gaps = [b[0] - (a[0] + a[1]) for a, b in itertools.pairwise(xs)]
    assert max(gaps) > 10  # stage 0 waits for its first B after the warm-up
    labels = [t.text for t in root.iter(f"{NS}text") if t.text and t.text.isdigit()]
    assert "3" in labels  # micro-batch labels on wide enough bars


def test_long_timeline_is_truncated_and_says_so() -> None:
    tl = simulate("1f1b", 8, 256, 1e-3, 2e-3)
    assert len(tl.passes) > 3000
    svg = gantt_svg(tl)
    root = _tree(svg)
    groups = [g for g in root.iter(f"{NS}g")]
    assert len(groups) == 8 * 400
    assert "only the first and last 200" in svg


def test_interleaved_chunks_in_tooltips() -> None:
    tl = simulate("interleaved-1f1b", 2, 4, 1e-3, 2e-3, chunks=2)
    svg = gantt_svg(tl)
    assert "chunk 1" in svg and "2 chunks" in svg
    _tree(svg)
