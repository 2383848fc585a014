"""`whichgpu ui` end to end in headless Chromium (Playwright from PyPI driving the system's
chromium: no browser download). A real uvicorn server on a free port, its own trace cache.

Checked: the app loads with no console error; changing the model or the batch re-runs and updates
the ranking (and the URL); an uploaded config.json becomes the model and a malformed one shows
the server's one-line error; the Serve tab's "which GPUs for a rate" mode ranks a two-GPU list
and toggles back to one configuration; a shared URL reproduces the view in a fresh browser; no
page makes a request to any host but the app's own."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from tests.conftest import needs_torch

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
try:
    from playwright.sync_api import sync_playwright
except ImportError:  # the dev extra is not installed
    sync_playwright = None

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install -y "
                       "chromium), so the web app is not checked in a browser"),
    pytest.mark.skipif(sync_playwright is None, reason="playwright is not installed (pip install -e '.[dev]')"),
    pytest.mark.usefixtures("isolated_cache"),
]

TINY_LLAMA = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
              "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 512}
WAIT_MS = 120_000  # a first capture of a model takes seconds on a slow runner


@pytest.fixture(scope="module")
def server(isolated_cache: None) -> Iterator[str]:
    """The app under uvicorn in a thread, on a free port of 127.0.0.1: its base URL."""
    import uvicorn

    from whichgpu.web.app import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not srv.started:
        assert time.time() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)


class Recorder:
    """A page's console errors, uncaught exceptions and the hosts it requested."""

    def __init__(self, page: Any) -> None:
        self.errors: list[str] = []
        self.expected: list[str] = []  # console lines a test provokes (Chromium logs every 4xx fetch)
        self.hosts: set[str] = set()
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        page.on("request", lambda r: self.hosts.add(urlsplit(r.url).netloc if r.url.startswith("http") else urlsplit(r.url).scheme))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    assert sync_playwright is not None
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, server: str) -> Iterator[tuple[Any, Recorder]]:
    context = browser.new_context()
    p = context.new_page()
    p.set_default_timeout(WAIT_MS)
    rec = Recorder(p)
    yield p, rec
    context.close()
    own = urlsplit(server).netloc
    assert rec.hosts <= {own, "data"}, f"requests to other hosts: {rec.hosts - {own, 'data'}}"
    unexpected = [e for e in rec.errors if not any(x in e for x in rec.expected)]
    assert unexpected == [], unexpected


def answered(p: Any, after: int = 0) -> int:
    """Wait for the answer to the latest question (after the `after`-th): its sequence number."""
    p.wait_for_function(f"() => Number(document.getElementById('result').dataset.ready || 0) > {after}"
                        " && !document.getElementById('status').classList.contains('busy')")
    return int(p.eval_on_selector("#result", "e => e.dataset.ready"))


def first_row(p: Any) -> list[str]:
    return [c.strip() for c in p.eval_on_selector_all("#ranking tbody tr:first-child td", "cs => cs.map(c => c.innerText)")]


def test_every_page_loads_without_console_errors(page: tuple[Any, Recorder], server: str) -> None:
    p, rec = page
    p.goto(f"{server}/#plan?model=llama-3-8b&gpu=h100-sxm5-80gb&gpus=8&pp=2&global_batch=16&seq_len=2048")
    n = answered(p)
    assert p.get_attribute("#tabs button[aria-selected=true]", "data-page") == "plan"
    assert p.is_hidden("#error")
    assert p.locator("#plans tbody tr").count() >= 1
    assert p.locator("#gantt svg").count() == 1, "the Gantt chart of the pipeline schedule"
    p.goto(f"{server}/#serve?model=llama-3.1-8b&gpu=h100-sxm5-80gb&rate=2&input_len=128&output_len=32&requests=50")
    n = answered(p, n)  # (the same document: a new hash)
    assert p.get_attribute("#tabs button[aria-selected=true]", "data-page") == "serve"
    assert p.locator("#serve-chart canvas").count() >= 1 and p.locator("#sweep tbody tr").count() == 8
    # an MoE model with expert parallelism and DP attention: the form holds them, the title says them
    p.goto(f"{server}/#serve?model=qwen3-30b-a3b&gpu=h100-sxm5-80gb&tp=2&ep=2&attention_dp=2&rate=2&input_len=128"
           "&output_len=32&requests=40")
    n = answered(p, n)
    assert p.input_value("#f-ep") == "2" and p.input_value("#f-attention_dp") == "2"
    assert p.inner_text("#result-title").endswith("TP2 EP2 DP-attention 2")
    p.click("#tabs button[data-page=plan]")  # a tab opens at its defaults, in the URL
    n = answered(p, n)
    # precision left to the planner's default for the GPU (bf16 here, fp16 on a GPU without BF16)
    assert p.url.endswith("#plan?model=llama-3-8b&gpu=h100-sxm5-80gb&gpus=8&objective=time")
    assert p.inner_text("#result-title").startswith("llama-3-8b on 8 x NVIDIA H100")
    assert p.inner_text("#result-title").endswith(", bf16")
    p.goto(p.url.replace("h100-sxm5-80gb", "v100-sxm2-32gb"))
    answered(p, n)
    assert p.inner_text("#result-title").endswith(", fp16")
    assert rec.errors == [] and rec.expected == []  # (and no other host: checked as the page closes)


def test_the_serve_tab_ranks_gpus_for_a_rate(page: tuple[Any, Recorder], server: str) -> None:
    p, rec = page
    # two GPUs: seconds, where the whole catalog (the view's default) takes tens
    p.goto(f"{server}/#serve-rate?model=llama-3.1-8b&rate=2&input_len=512&output_len=128&slo_tpot_ms=50"
           "&gpu=h100-sxm5-80gb,rtx-4090")
    n = answered(p)
    assert p.is_hidden("#error")
    assert p.get_attribute("#tabs button[aria-selected=true]", "data-page") == "serve"
    assert p.get_attribute("#modes button[aria-selected=true]", "data-view") == "serve-rate"
    assert "slo_ttft_ms=500" in p.url and "mode=buy" in p.url, "the view's defaults are in the URL"
    assert p.inner_text("#result-title").startswith("llama-3.1-8b at 2 requests/s (512 prompt + 128 answer tokens)")
    rows = p.locator("#serving-ranking tbody tr")
    assert 1 <= rows.count() <= 5
    layouts = p.eval_on_selector_all("#serving-ranking tbody td:nth-child(3)", "cs => cs.map(c => c.innerText)")
    assert all("H100" in t or "4090" in t for t in layouts), layouts
    assert p.locator("#serving-cost .bar-row").count() == rows.count(), "one bar per ranked row"
    assert p.locator("#serving-out tbody tr").count() >= 1
    assert "RTX 4090" in p.inner_text("#validated-note"), "predicted outside the GPUs serving is validated on"
    p.click("#modes button[data-view=serve]")  # the other mode keeps the question, on its one GPU
    answered(p, n)
    assert p.url.startswith(f"{server}/#serve?model=llama-3.1-8b&gpu=h100-sxm5-80gb&rate=2&input_len=512")
    assert p.inner_text("#result-title").startswith("llama-3.1-8b on 1 x NVIDIA H100")
    assert p.locator("#serve-chart canvas").count() >= 1
    assert rec.errors == []


@needs_torch
def test_changing_the_batch_or_the_model_updates_the_ranking(page: tuple[Any, Recorder], server: str) -> None:
    p, _ = page
    p.goto(f"{server}/#recommend?model=gpt2&batch_size=2&seq_len=128")
    n = answered(p)
    assert p.inner_text("#result-title").startswith("gpt2")
    before = first_row(p)
    assert p.locator("#ranking tbody tr").count() >= 5 and p.locator("#value-chart canvas").count() >= 1
    p.fill("#f-batch_size", "16")
    p.dispatch_event("#f-batch_size", "change")
    n = answered(p, n)
    assert "batch_size=16" in p.url
    assert "batch 16" in p.inner_text("#result .note")
    assert first_row(p) != before, "the ranking did not change with the batch"
    p.select_option("#f-model", "gpt2-medium")
    answered(p, n)
    assert p.inner_text("#result-title").startswith("gpt2-medium")
    assert "model=gpt2-medium" in p.url


def test_an_uploaded_config_becomes_the_model_and_a_malformed_one_shows_the_error(
        page: tuple[Any, Recorder], server: str, tmp_path: Path) -> None:
    p, rec = page
    p.goto(f"{server}/#plan?model=llama-3-8b&gpu=h100-sxm5-80gb&gpus=2&global_batch=4&seq_len=256")
    n = answered(p)
    good = tmp_path / "tiny-llama.json"
    good.write_text(json.dumps(TINY_LLAMA))
    p.set_input_files("#config-file", str(good))
    p.wait_for_function("() => document.getElementById('upload-status').innerText.includes('upload:')")
    answered(p, n)
    model = p.eval_on_selector("#f-model", "e => e.value")
    assert model.startswith("upload:") and f"model={model.replace(':', '%3A')}" in p.url
    title = p.inner_text("#result-title")
    assert title.startswith("config on 2 x NVIDIA H100") and not title.startswith("llama-3-8b"), title
    rec.expected.append("the server responded with a status of 400 (Bad Request)")
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama",')
    p.set_input_files("#config-file", str(bad))
    p.wait_for_function("() => document.getElementById('upload-status').innerText.startsWith('error:')")
    assert p.inner_text("#upload-status").startswith("error: config.json: not valid JSON (")
    assert p.eval_on_selector("#f-model", "e => e.value") == model, "a failed upload leaves the model as it was"


def test_the_closest_layouts_that_do_not_fit_say_how_each_differs(page: tuple[Any, Recorder], server: str) -> None:
    """Llama-3-8B on two H100s: its pipeline layouts miss by a few GB; each row of the list names the
    micro-batch, sharding and recomputation that set its memory, with the reason."""
    p, _ = page
    p.goto(f"{server}/#plan?model=llama-3-8b&gpu=h100-sxm5-80gb&gpus=2&global_batch=4&seq_len=256")
    answered(p)
    heads = p.eval_on_selector_all("details table thead th", "hs => hs.map(h => h.textContent.trim())")
    assert heads == ["layout", "mb x acc", "sharding", "recompute", "why"]
    rows = p.eval_on_selector_all("details table tbody tr",
                                  "rs => rs.map(r => Array.from(r.cells).map(c => c.textContent.trim()))")
    assert rows and all(len(r) == 5 and r[4].startswith("needs ") for r in rows)
    assert len({tuple(r[:4]) for r in rows}) == len(rows), "no two rows read the same"


def test_bad_input_shows_the_one_line_error(page: tuple[Any, Recorder], server: str) -> None:
    p, rec = page
    rec.expected.append("the server responded with a status of 400 (Bad Request)")
    p.goto(f"{server}/#plan?model=llama-3-8b&gpu=h100-sxm5-80gb&gpus=8&tp=3")
    p.wait_for_selector("#error:not([hidden])")
    assert p.inner_text("#error") == "error: the fixed degrees (tp x pp x cp = 3) do not divide --gpus 8"


def test_a_shared_url_reproduces_the_view(browser: Any, server: str) -> None:
    url = f"{server}/#plan?model=llama-3-8b&gpu=h100-sxm5-80gb&gpus=16&global_batch=32&seq_len=4096&pp=2&objective=cost"
    views = []
    for _ in range(2):  # two browsers that share nothing but the link
        context = browser.new_context()
        p = context.new_page()
        p.set_default_timeout(WAIT_MS)
        rec = Recorder(p)
        p.goto(url)
        answered(p)
        views.append((p.url, p.inner_text("#result-title"), p.inner_text("#plans"),
                      {f: p.eval_on_selector(f"#f-{f}", "e => e.value") for f in ("model", "gpus", "pp", "objective")}))
        context.close()
        assert rec.errors == [] and rec.hosts <= {urlsplit(server).netloc, "data"}
    assert views[0] == views[1]
    assert views[0][3] == {"model": "llama-3-8b", "gpus": "16", "pp": "2", "objective": "cost"}
    assert "16 x NVIDIA H100" in views[0][1]
