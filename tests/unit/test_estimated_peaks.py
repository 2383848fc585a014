"""A tensor-core dtype whose peak no source gives is estimated from physics, with a caveat, never
silently dropped to FP32 (issue 15: the A10G was modelled in FP32, 2.3x slower than the A10, the
same GA102 chip, and recommend could not run on it what the A10 runs).

    peak = (dense FLOP per SM per clock of the architecture) x SMs x boost clock

GA102 professional cards (A10, A40, RTX A5000, RTX A6000) all give 1024 BF16 FLOP per SM per clock
(A10: 125e12 / (72 x 1695e6) = 1024.0), so the A10G (72 SMs, 1710 MHz, as the catalog gives
them) is 1024 x 72 x 1710e6 = 126.1 TFLOP/s: the A10's peak x 1710 / 1695.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tests.cli.conftest import strict_json
from tests.conftest import needs_torch
from typer.testing import CliRunner

from whichgpu.cli import app
from whichgpu.hardware.catalog import ENV_VAR, load_catalog
from whichgpu.hardware.spec import GpuSpec, with_estimated_peaks
from whichgpu.perf.auto import resolve_precision
from whichgpu.perf.device import Device
from whichgpu.perf.params import load_params

CATALOG = load_catalog()
A10, A10G = CATALOG.get("a10"), CATALOG.get("a10g")
runner = CliRunner()


@pytest.fixture(autouse=True)
def no_env_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def test_a10g_bf16_peak_is_the_a10s_scaled_by_sms_and_clock() -> None:
    a10, a10g = A10.peak("bf16"), A10G.peak("bf16")
    assert a10 is not None and a10g is not None
    # Same chip, same per-SM rate: the ratio is (72 x 1710) / (72 x 1695) = 1.0088.
    physical = (A10G.sm_count or 0) * (A10G.boost_clock_mhz or 0) / ((A10.sm_count or 0) * (A10.boost_clock_mhz or 0))
    assert a10g / a10 == pytest.approx(physical, rel=1e-3)
    assert a10g == pytest.approx(1024 * 72 * 1710e6 / 1e12, abs=0.05)  # 126.1


def test_the_estimate_carries_its_caveat_everywhere_a_figure_goes() -> None:
    caveat = A10G.peak_caveat("bf16")
    assert "estimated" in caveat and "72 SMs" in caveat and "1710 MHz" in caveat
    assert "a10, a40, rtx-a5000, rtx-a6000" in caveat and "GA102" in caveat  # which cards it comes from
    assert "as this catalog entry gives them" in caveat  # the SM count is the catalog's (its notes: 72 or 80)
    d = A10G.to_dict()
    assert d["peak_dense"]["bf16_tflops"] == A10G.peak("bf16")
    assert d["estimated_peaks"]["bf16_tflops"] == caveat
    assert A10G.source_of("peak_dense.bf16_tflops") == caveat
    assert A10.peak_caveat("bf16") == "" and A10.to_dict()["estimated_peaks"] == {}  # published: no caveat
    assert A10G.peak("fp32") == 31.52 and A10G.peak_caveat("fp32") == ""  # a given figure is kept
    assert A10G.supports("fp8") is False  # "n/a" stays unsupported, never estimated


def test_auto_precision_picks_bf16_and_says_the_peak_is_estimated() -> None:
    prec, why = resolve_precision(A10G, "train", "auto")
    assert prec == "amp-bf16" and why.startswith("BF16 tensor cores; BF16 peak 126.1 TFLOP/s estimated (no source gives it), derived as 1024")
    assert resolve_precision(A10G, "infer", "auto")[0] == "bf16"
    prec, why = resolve_precision(A10G, "infer", "bf16")
    assert prec == "bf16" and why.startswith("as requested; BF16 peak") and "estimated" in why
    assert resolve_precision(A10, "train", "auto") == ("amp-bf16", "BF16 tensor cores")


def test_the_performance_model_runs_bf16_matmuls_at_the_estimated_rate() -> None:
    params = load_params()
    rate, ref = Device(A10G, params).rate("bf16"), Device(A10, params).rate("bf16")
    assert rate.dtype == "bf16" and rate.note == ""  # not "run at the fp32 rate"
    assert rate.flops / ref.flops == pytest.approx(1710 / 1695, rel=0.02)


def _card(**kw: object) -> GpuSpec:
    base = dict(id="x", name="X", vendor="NVIDIA", architecture="ampere", chip="GA102", year=2022,
                form_factor="PCIe", segment="datacenter", memory_gb=24.0, memory_type="GDDR6",
                memory_bandwidth_gbps=600.0, peak_tflops={"fp32": 30.0}, unsupported=frozenset({"fp8"}),
                sm_count=80, boost_clock_mhz=1500.0, tensor_core_dtypes=("fp16", "bf16"))
    base.update(kw)
    return GpuSpec(**base)  # type: ignore[arg-type]


def test_a_geforce_card_is_estimated_from_geforce_cards() -> None:
    """GeForce GA102 runs BF16 at half the professional rate (512, not 1024 FLOP/SM/clock)."""
    (est,) = [s for s in with_estimated_peaks([*CATALOG, _card(segment="consumer")]) if s.id == "x"]
    assert est.peak("bf16") == pytest.approx(512 * 80 * 1500e6 / 1e12, abs=0.1)
    assert "GA102 consumer cards" in est.peak_caveat("bf16") and "rtx-3090" in est.peak_caveat("bf16")


def test_no_estimate_without_sms_and_clock_or_without_references() -> None:
    out = {s.id: s for s in with_estimated_peaks([*CATALOG, _card(sm_count=None),
                                                   replace(_card(), id="y", architecture="gaudi")])}
    assert out["x"].peak("bf16") is None and out["x"].estimated_peaks == {}
    assert out["y"].peak("bf16") is None  # no Gaudi entry gives SMs and a clock


def test_a_user_figure_replaces_the_estimate(tmp_path: Path) -> None:
    (tmp_path / "a10g.toml").write_text('id = "a10g"\n[peak_dense]\nbf16_tflops = 70\n')
    a10g = load_catalog(str(tmp_path)).get("a10g")
    assert a10g.peak("bf16") == 70 and a10g.peak_caveat("bf16") == ""
    assert a10g.peak_caveat("fp16") != ""  # the others are still estimated


# --------------------------------------------------------------------------- the CLI


@needs_torch
def test_estimate_on_a10g_runs_bf16_and_shows_the_caveat() -> None:
    args = ["estimate", "gpt2", "-b", "1", "--seq-len", "64", "--gpu", "a10,a10g"]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    a10, a10g = strict_json(res.stdout)["results"]
    assert (a10["gpu_id"], a10g["gpu_id"]) == ("a10", "a10g")
    assert a10g["precision"] == "amp-bf16" and "estimated" in a10g["precision_reason"]
    assert a10g["step_s"] == pytest.approx(a10["step_s"], rel=0.05)  # same chip: not 2.3x slower
    text = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert text.exit_code == 0, text.output
    assert "a10g: amp-bf16 (BF16 tensor cores; BF16 peak 126.1 TFLOP/s estimated" in " ".join(text.stdout.split())


@needs_torch
def test_recommend_ranks_a10g_beside_a10_for_a_job_that_needs_16_bit_weights() -> None:
    # Llama-2-7B inference: 13.5 GB in BF16 fits 24 GB; in FP32 (27 GB) it did not, and the A10G
    # was listed as unable to run it.
    res = runner.invoke(app, ["recommend", "llama-2-7b", "--task", "infer", "-b", "1", "--seq-len", "64",
                              "--max-gpus", "1", "--gpu", "a10,a10g", "--json"])
    assert res.exit_code == 0, res.output
    doc = strict_json(res.stdout)
    assert doc["cannot_run"] == []
    rows = {r["gpu"]: r for r in doc["rows"]}
    assert set(rows) == {"a10", "a10g"}
    assert rows["a10g"]["speed"] == pytest.approx(rows["a10"]["speed"], rel=0.05)
    (run,) = rows["a10g"]["runs"]
    assert run["precision"] == "bf16" and "estimated" in run["precision_reason"]
