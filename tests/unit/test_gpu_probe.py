"""scripts/gpu_probe.py's CPU self-check: every probe runs its code at toy sizes and writes a
schema'd JSON with a prediction beside each measurement (what a lent GPU then runs for real)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_probe.py"


def _module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gpu_probe", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_probe"] = mod  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(mod)
    return mod


def test_every_probe_runs_on_the_cpu_and_writes_predictions(tmp_path: Path) -> None:
    mod = _module()
    assert mod.main(["--out", str(tmp_path), "--device", "cpu"]) == 0
    doc = json.loads((tmp_path / "gpu_probe.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert doc["schema"] == "whichgpu.gpu_probe/1" and doc["self_check"] is True
    assert doc["gpu"] == "h100-sxm5-80gb"  # predictions for --gpu off CUDA
    rows = doc["rows"]
    assert {r["probe"] for r in rows} == set(mod.PROBES)
    assert not [r["case"] for r in rows if r["case"].startswith("FAILED")]
    for r in rows:
        assert math.isfinite(r["measured_s"]) and r["measured_s"] > 0, r
        if r["probe"] == "train_step":  # predicted afterwards, where the tests run (--predict)
            assert r["predicted_s"] is None and r["extra"]["model"] == "gpt2", r
            continue
        assert r["predicted_s"] is not None and r["predicted_s"] > 0, r
        assert r["ratio"] == pytest.approx(r["measured_s"] / r["predicted_s"])
    md = (tmp_path / "gpu_probe.md").read_text()
    assert all(f"## {p}" in md for p in mod.PROBES)
    assert mod.main(["--predict", str(tmp_path / "gpu_probe.json")]) == 0
    doc = json.loads((tmp_path / "gpu_probe.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    (step,) = [r for r in doc["rows"] if r["probe"] == "train_step"]
    assert step["predicted_s"] > 0 and step["ratio"] == pytest.approx(step["measured_s"] / step["predicted_s"])
    assert step["extra"]["predicted_alloc_bytes"] > step["extra"]["predicted_reserved_bytes"] * 0.5 > 0
    assert step["extra"]["predicted_bound"] in ("compute", "memory", "host", "overhead")


def test_an_unknown_probe_is_refused_with_the_valid_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _module().main(["--out", str(tmp_path), "--only", "gemm,nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nope" in err and "prefill_layer" in err
    assert not (tmp_path / "gpu_probe.json").exists()


def test_a_probe_that_breaks_leaves_a_failed_row_and_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _module()

    def broken(p: object) -> None:
        raise RuntimeError("no such kernel")

    monkeypatch.setattr(mod, "probe_gemm", broken)
    assert mod.main(["--out", str(tmp_path), "--device", "cpu", "--only", "gemm,launch"]) == 0
    doc = json.loads((tmp_path / "gpu_probe.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    failed = [r for r in doc["rows"] if r["probe"] == "gemm"]
    assert len(failed) == 1 and failed[0]["case"] == "FAILED: RuntimeError: no such kernel"
    assert failed[0]["measured_s"] is None and failed[0]["ratio"] is None
    assert [r for r in doc["rows"] if r["probe"] == "launch"], "the other probe still ran"
    assert "| FAILED: RuntimeError: no such kernel | - |" in (tmp_path / "gpu_probe.md").read_text()
