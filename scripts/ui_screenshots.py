"""Screenshots of the web app's pages (docs/img/ui-*.png), taken in headless Chromium (Playwright
from PyPI driving the system's chromium: no browser download).

    python scripts/ui_screenshots.py [--out docs/img] [--page NAME ...]

Starts `whichgpu ui` on a free port (its own trace cache unless $WHICHGPU_CACHE_DIR is set),
opens each page at the URL below, waits for the answer and saves a full-page PNG. The first run
traces the models (seconds each); later runs read the trace cache.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

PAGES = {
    "recommend": "#recommend?model=llama-3-8b&finetune=lora&seq_len=2048&precision=auto&mode=rent",
    "compare": "#compare?model=gpt2&gpu=h100-sxm5-80gb,a100-sxm4-80gb,rtx-4090&task=train&batch_size=8"
               "&seq_len=1024&precision=auto&finetune=full",
    "fit": "#fit?model=llama-2-7b&gpu=rtx-4090&task=train&batch_size=1&seq_len=2048&precision=auto&finetune=lora"
           "&checkpointing=none&sharding=ddp",
    "plan": "#plan?model=llama-3-70b&gpu=h100-sxm5-80gb&gpus=32&global_batch=64&seq_len=4096&precision=bf16&pp=4"
            "&schedule=zb-h1&objective=time",
    "serve": "#serve?model=llama-3.1-8b&gpu=h100-sxm5-80gb&rate=5&input_len=1000&output_len=200&requests=300"
             "&precision=bf16&engine=vllm&slo_ttft_ms=500&slo_tpot_ms=20",
    "serve-rate": "#serve-rate?model=llama-3.1-8b&rate=5&input_len=1000&output_len=200&slo_ttft_ms=500"
                  "&slo_tpot_ms=50&slo_percentile=90&engine=vllm&precision=bf16&mode=rent",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "whichgpu", "ui", "--port", str(port), "--no-browser"], env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/models", timeout=2).read()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("whichgpu ui did not start within 60 s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/img", help="Directory for ui-PAGE.png (default docs/img).")
    ap.add_argument("--page", action="append", choices=sorted(PAGES), help="Only this page (repeatable; default all).")
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        raise SystemExit("no chromium on PATH (Debian: apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("WHICHGPU_CACHE_DIR", tempfile.mkdtemp(prefix="whichgpu-ui-shots-"))
    port = free_port()
    server = start_server(port, env)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            for name, frag in PAGES.items():
                if args.page and name not in args.page:
                    continue
                page.goto(f"http://127.0.0.1:{port}/{frag}")
                page.wait_for_selector("#result[data-ready]", timeout=300_000)
                page.wait_for_timeout(300)  # the charts' last paint
                path = out / f"ui-{name}.png"
                page.screenshot(path=str(path), full_page=True)
                print(f"wrote {path}")
                page.goto("about:blank")
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
