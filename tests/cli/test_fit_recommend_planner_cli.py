"""`whichgpu fit` and `whichgpu recommend` take the parallel planner's tensor/pipeline layouts when
one GPU's memory is not enough: the console section, the JSON keys, the exit line."""

from __future__ import annotations

import pytest
from tests.cli.conftest import invoke, invoke_json

pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("isolated_cache")  # the module's own trace cache (tests/conftest.py)

LLAMA_70B = ("llama-3-70b", "--seq-len", "4096")


def test_fit_70b_on_one_h100_shows_the_layouts_that_fit_and_exits_1_naming_one() -> None:
    doc = invoke_json("fit", "whichgpu.memory/1", *LLAMA_70B, "--gpu", "h100", code=1)
    layouts = doc["parallel_layouts"]
    assert doc["fits"] is False and 1 <= len(layouts) <= 3
    best = layouts[0]
    usable = 80 * 2**30 * 0.985 / 1e9  # an "80 GB" H100: 80 GiB, the driver's share off (84.6 GB)
    assert best["fits"] and best["peak_memory_gb"] < usable and best["gpus"] == 16
    assert best["tp"] * best["pp"] * best["cp"] * best["dp"] == 16 and best["tp"] * best["pp"] > 1
    for key in ("vp", "ep", "micro_batch", "grad_accum", "sharding", "recompute", "schedule", "step_s", "tokens_per_s"):
        assert key in best, key
    assert "16 GPUs" in doc["parallel_layouts_note"]
    assert doc["parallel_layouts_command"].startswith("whichgpu plan llama-3-70b --gpu h100-sxm5-80gb --gpus 16")

    res = invoke("fit", *LLAMA_70B, "--gpu", "h100")
    assert res.exit_code == 1  # not fitting as given stays a "no", even when a layout fits
    assert "tensor/pipeline parallel layouts that fit on 16 x NVIDIA H100" in res.stdout
    assert "whichgpu plan llama-3-70b" in res.stdout
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("no:")
    assert f"it fits on 16 x NVIDIA H100 SXM5 80GB as {best['layout']}" in err


def test_fit_that_fits_has_no_parallel_layouts() -> None:
    doc = invoke_json("fit", "whichgpu.memory/1", "gpt2", "--gpu", "h100", "-b", "2", "--seq-len", "128")
    assert doc["fits"] is True and doc["parallel_layouts"] is None
    assert "fits as given" in doc["parallel_layouts_note"]


def test_recommend_70b_ranks_tensor_pipeline_layouts() -> None:
    doc = invoke_json("recommend", "whichgpu.recommend/1", *LLAMA_70B, "--task", "train", "--gpu", "h100,b200",
                      "--max-gpus", "16")
    assert {r["gpu"] for r in doc["rows"]} == {"h100-sxm5-80gb", "b200"}  # before the planner: memory blockers
    layouts = [run["layout"] for r in doc["rows"] for run in r["runs"]]
    assert all(lay["planner"] and lay["tp"] * lay["pp"] > 1 for lay in layouts)
    h100 = next(r for r in doc["rows"] if r["gpu"] == "h100-sxm5-80gb")
    assert h100["gpus"] == 16 and h100["runs"][0]["memory_bytes"] < 80 * 2**30 * 0.985  # the usable 84.6 GB
    assert "parallel planner" in h100["reason"]

    res = invoke("recommend", *LLAMA_70B, "--task", "train", "--gpu", "h100,b200", "--max-gpus", "16")
    assert res.exit_code == 0, res.output
    assert "parallel planner" in res.stdout and "TP8" in res.stdout


def test_recommend_small_model_runs_stay_data_parallel() -> None:
    doc = invoke_json("recommend", "whichgpu.recommend/1", "gpt2", "-b", "2", "--seq-len", "64", "--gpu", "rtx-4090")
    runs = [run for r in doc["configurations"] for run in r["runs"]]
    assert runs and all(not run["layout"]["planner"] and run["layout"]["tp"] == 1 for run in runs)
    assert "parallel_layouts" not in doc["assumptions"]
