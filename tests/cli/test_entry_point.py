"""The console entry point (`whichgpu.cli:main`) in a real process.

After a command that loaded torch, main() flushes its output and ends with os._exit to skip the
interpreter's slow teardown of torch. These tests hold what that must not lose: the whole
output, the exit status, the one-line error, and the files the command wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli.conftest import strict_json

pytest.importorskip("torch")


def _whichgpu(args: list[str], cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WHICHGPU_CACHE_DIR": str(cache)}
    env.pop("WHICHGPU_CATALOG", None)
    env.pop("PYTHONUNBUFFERED", None)  # output to a pipe is block-buffered, as for a user piping to jq
    return subprocess.run([sys.executable, "-m", "whichgpu", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_a_capturing_command_writes_all_its_output_and_its_cache(tmp_path: Path) -> None:
    out = _whichgpu(["analyze", "gpt2", "-b", "2", "--seq-len", "64", "--json"], tmp_path)
    assert out.returncode == 0, out.stderr
    doc = strict_json(out.stdout)  # complete: the whole document reached the pipe
    assert doc["schema"].startswith("whichgpu.")
    cached = list(tmp_path.glob("*.json"))
    assert len(cached) == 1
    json.loads(cached[0].read_text())  # the cache file is whole
    again = _whichgpu(["analyze", "gpt2", "-b", "2", "--seq-len", "64", "--json"], tmp_path)
    assert again.returncode == 0 and strict_json(again.stdout)["schema"] == doc["schema"]


def test_an_error_after_torch_is_loaded_keeps_its_status_and_message(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("import torch\n\ndef make():\n    raise ValueError('boom')\n")
    out = _whichgpu(["analyze", f"{f}:make"], tmp_path / "cache")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "boom" in lines[0]
    assert "Traceback" not in out.stderr


def test_html_report_is_complete(tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    out = _whichgpu(["recommend", "gpt2", "-b", "1", "--seq-len", "64", "--max-gpus", "1", "--html", str(page)],
                    tmp_path / "cache")
    assert out.returncode == 0, out.stderr
    text = page.read_text()
    assert text.rstrip().endswith("</html>")
