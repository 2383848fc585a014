"""Error bands and the validated-ground flag (perf/bands.py, perf/bands.toml)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from whichgpu.hardware.catalog import load_catalog
from whichgpu.parallel.plan import Plan
from whichgpu.perf import estimate
from whichgpu.perf.bands import ANY, BANDS_FILE, load_bands
from whichgpu.workload.shape import ModelShape
from whichgpu.workload.trace import Op, Trace

CAT = load_catalog()

TOML = """
[meta]
source = "test"
[validated]
architectures = ["ampere"]
engines = ["pytorch"]
precisions = ["amp-16bit/train"]
families = ["cnn"]
[[band]]
engine = "pytorch"
kind = "train"
family = "cnn"
architecture = "ampere"
rows = 12
p10 = -0.2
p90 = 0.1
[[band]]
engine = "*"
kind = "train"
family = "*"
architecture = "*"
rows = 40
p10 = -0.3
p90 = 0.3
"""


def test_lookup_takes_the_most_specific_class_and_falls_back(tmp_path: Path) -> None:
    p = tmp_path / "bands.toml"
    p.write_text(TOML)
    b = load_bands(p)
    exact = b.lookup("pytorch", "train", "cnn", "ampere")
    assert exact.rows == 12 and exact.scope() == "pytorch cnn train on ampere"
    other = b.lookup("tensorrt-llm", "train", "decoder", "hopper")
    assert other.rows == 40 and other.engine == ANY
    # predicted 100 samples/s with e in [-0.2, 0.1]: the true value lies in [100 e^-0.1, 100 e^0.2]
    lo, hi = exact.throughput_range(100.0)
    assert lo == pytest.approx(100 * math.exp(-0.1)) and hi == pytest.approx(100 * math.exp(0.2))
    assert exact.time_range(1.0) == (pytest.approx(math.exp(-0.2)), pytest.approx(math.exp(0.1)))
    # no band at all: a wide default, flagged by rows = 0
    assert b.lookup("x", "decode", "y", "z").rows == 0


def test_outside_names_each_missing_piece(tmp_path: Path) -> None:
    p = tmp_path / "bands.toml"
    p.write_text(TOML)
    b = load_bands(p)
    assert b.outside("pytorch", "amp-bf16", "train", "cnn", "ampere") == ()
    reasons = b.outside("vllm", "fp4", "infer", "diffusion", "blackwell")
    assert len(reasons) == 4
    assert any("blackwell" in r for r in reasons) and any("vllm" in r for r in reasons)
    assert any("fp4 inference" in r for r in reasons) and any("diffusion" in r for r in reasons)


@pytest.mark.skipif(not BANDS_FILE.is_file(), reason="perf/bands.toml not written yet (scripts/error_bands.py)")
def test_the_packaged_bands_flag_a_configuration_outside_the_validated_ground() -> None:
    t = Trace(model="t", task="infer", phase="full", batch_size=1, seq_len=None, image_size=None, context=None,
              precision="fp4", optimizer="none", sparsity="none", samples=1, tokens=0, params=0,
              trainable_params=0, param_bytes=0, buffer_bytes=0, input_bytes=0,
              ops=[Op("aten.mm", "matmul", "forward", "", "fp4", 2e12, 1e9, 1e9, mm=(1, 8192, 8192, 8192))],
              shape=ModelShape(arch="decoder"))
    e = estimate(t, CAT.get("b200"), Plan(engine="vllm"))
    assert not e.validated and any("blackwell" in r for r in e.outside)
    assert e.band is not None and e.likely(e.samples_per_s) is not None
    d = e.to_dict()
    assert d["validated"] is False and d["outside_validated"] and "error_band" in d
    ok = estimate(t, CAT.get("a100-sxm4-80gb"), Plan())
    assert not any("ampere" in r for r in ok.outside)
