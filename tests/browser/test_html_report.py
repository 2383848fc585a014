"""The recommend HTML report in headless Chromium: it renders, its charts are there, its script
runs, and the browser logs no console message or uncaught error. Torch-free (synthetic workload)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from tests.unit.test_recommend import card, run, toy_workload

from whichgpu.report.html import render

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (Debian: "
                                "apt-get install -y chromium), so the HTML report is not checked in a browser")


def browse(page: Path, profile: Path) -> tuple[str, list[str]]:
    """(the DOM after scripts ran, the browser's console lines)."""
    assert CHROMIUM is not None
    proc = subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", f"--user-data-dir={profile}", "--enable-logging=stderr",
         "--v=0", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return proc.stdout, console


def test_report_renders_with_its_charts_and_no_console_errors(tmp_path: Path) -> None:
    cards = [card("h100-sxm5-80gb", "h100", street=25000, cloud=2.5), card("rtx-4090", "r4090", street=1600, cloud=0.7),
             card("rtx-4090", "tiny", memory_gb=4, street=200)]
    rec = run(cards, (toy_workload("train", batch=4),), max_gpus=2)
    page = tmp_path / "report.html"
    page.write_text(render(rec), encoding="utf-8")
    dom, console = browse(page, tmp_path / "profile")
    assert console == [], console
    assert 'data-ready="1"' in dom, "the page's script did not run to its end"
    for chart in ("value-chart", "roofline-chart", "memory-chart"):
        assert f'id="{chart}"' in dom, chart
    assert dom.count("<rect") >= 3 and dom.count("<circle") >= 2 and "<polyline" in dom
    assert "Card tiny" in dom and "does not fit" in dom  # listed apart, with why
    assert '<table class="sortable" id="ranking">' in dom


def test_the_console_check_catches_errors(tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><body><script>throw new Error("boom");</script></body></html>')
    _dom, console = browse(page, tmp_path / "profile")
    assert any("boom" in line for line in console)
