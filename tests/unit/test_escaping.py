"""User text is shown as written wherever it is rendered: any name a catalog, a config path or a
prices file can give reaches the terminal (rich) and the HTML page literally, never as markup.

Results on synthetic cards and a toy workload (torch-free, as tests/unit/test_recommend.py) are
made once; each example renames the GPU and the model in them and renders every report."""

from __future__ import annotations

import html
import io
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console
from tests.unit.test_recommend import card, run, toy_trace, toy_workload

from whichgpu.hardware.names import name_problem
from whichgpu.memory.fit import fit
from whichgpu.parallel.plan import Plan
from whichgpu.workload.spec import WorkloadSpec

REPORTS = ("estimate", "recommend", "memory", "gpus", "systems", "trace", "validate")
NAMES = st.text(min_size=1, max_size=40).map(str.strip).filter(lambda s: bool(s) and name_problem(s) is None)
MARKUP = ["[/red]", "[link=https://example.com]x[/link]", "[bold]b[/]", "\\[x]", "[", "]", ":smile:", "<b>&amp;</b>",
          "[nvml]", "a [/] b [red"]


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    """What each print function gets: {"estimate": (predictions,), "fit": (report,), "recommend": (rec,)}."""
    cards = [card("rtx-4090", "a", street=1600.0), card("a100-sxm4-80gb", "b", cloud=2.0),
             card("t4", "c", memory_gb=2.0, street=500.0)]  # c: too small, listed apart
    rec = run(cards, (toy_workload("train", 8),))
    assert rec.rows and rec.rejected
    spec = WorkloadSpec("toy", task="train", batch_size=512, precision="amp-bf16")
    report = fit(toy_trace(spec), cards[0], Plan(), lambda **changes: toy_trace(replace(spec, **changes)))
    assert report.suggestions
    return {"estimate": ([c.runs[0].pred for c in rec.rows],), "fit": (report,), "recommend": (rec,)}


@pytest.fixture
def screen(monkeypatch: pytest.MonkeyPatch) -> Console:
    """A recording console, wide enough that no cell wraps, in place of the CLI's."""
    import importlib

    c = Console(width=4000, record=True, file=io.StringIO(), highlight=False)
    # Import the reports before patching: a module imported after would bind the patched console
    # at import, and keep it once the patch is undone.
    modules = [importlib.import_module(f"whichgpu.report.{mod}") for mod in REPORTS]
    monkeypatch.setattr("whichgpu.report.console.console", c)
    for m in modules:
        monkeypatch.setattr(m, "console", c)
    return c


def _renamed(got: dict[str, Any], gpu: str, model: str) -> dict[str, Any]:
    preds = [replace(p, gpu=replace(p.gpu, name=gpu), trace=replace(p.trace, model=model)) for p in got["estimate"][0]]
    fit = got["fit"][0]
    e = fit.estimate
    fit = replace(fit, estimate=replace(e, gpu_name=gpu, trace=replace(e.trace, model=model)))
    rec = got["recommend"][0]
    rows = [replace(c, gpu=replace(c.gpu, name=gpu)) for c in rec.rows]
    req = replace(rec.request, workloads=tuple(replace(w, label=model) for w in rec.request.workloads))
    rejected = [replace(r, result=replace(r.result, gpu=replace(r.result.gpu, name=gpu))) for r in rec.rejected]
    rec = replace(rec, rows=rows, configs=rows, request=req, rejected=rejected)
    return {"estimate": preds, "fit": fit, "recommend": rec}


def _render_all(got: dict[str, Any], gpu: str, model: str, screen: Console) -> str:
    from whichgpu.report.estimate import print_estimates
    from whichgpu.report.gpus import print_show, print_table
    from whichgpu.report.memory import print_fit
    from whichgpu.report.recommend import print_recommendation
    from whichgpu.report.trace import print_trace

    r = _renamed(got, gpu, model)
    print_estimates(r["estimate"], False, 3)
    print_estimates(r["estimate"], True, 3, wide=True)
    print_fit(r["fit"])
    print_fit(r["fit"], wide=True)
    print_recommendation(r["recommend"], 5)
    print_recommendation(r["recommend"], 5, wide=True)
    print_table([p.gpu for p in r["estimate"]])
    print_show(r["estimate"][0].gpu)
    print_trace(r["estimate"][0].trace, "module", 3)
    return screen.export_text()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gpu=NAMES | st.sampled_from(MARKUP), model=NAMES | st.sampled_from(MARKUP))
def test_any_name_renders_literally(results: dict[str, Any], screen: Console, gpu: str, model: str) -> None:
    screen.export_text()  # (clear the record of earlier examples)
    out = _render_all(results, gpu, model, screen)
    lines = out.splitlines()
    assert any(gpu in ln for ln in lines), gpu
    assert any(model in ln for ln in lines), model


@pytest.mark.parametrize("name", MARKUP)
def test_markup_in_names_reaches_every_report(results: dict[str, Any], screen: Console, name: str) -> None:
    out = _render_all(results, name, name, screen)
    assert out.count(name) >= 8  # estimate (table, ops title), fit, recommend, gpus, show, trace, ...


@settings(max_examples=40, deadline=None)
@given(gpu=NAMES | st.sampled_from(MARKUP), model=NAMES | st.sampled_from(MARKUP))
def test_html_page_escapes_any_name(results: dict[str, Any], gpu: str, model: str) -> None:
    from whichgpu.report.html import render

    page = render(_renamed(results, gpu, model)["recommend"])
    assert html.escape(gpu, quote=True) in page and html.escape(model, quote=True) in page
    if gpu == "<b>&amp;</b>":
        assert gpu not in page  # never as tags


def test_the_page_script_sets_no_html() -> None:
    """recommend.js only reads cells (textContent) and moves rows: no user text becomes markup."""
    js = (Path(__file__).resolve().parents[2] / "src" / "whichgpu" / "report" / "recommend.js").read_text(encoding="utf-8")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in js, sink
