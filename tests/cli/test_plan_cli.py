"""The plan and the system through the commands: --system in estimate/fit/recommend/validate, the
echoed plan, MFU beside HFU, tensor parallelism, user systems from --catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import strict_json
from typer.testing import CliRunner, Result

from whichgpu.cli import app
from whichgpu.hardware.catalog import ENV_VAR

runner = CliRunner()

LAB = """\
schema = "whichgpu.system/1"
id = "lab-2x4090"
name = "Lab box, 2x RTX 4090"
kind = "workstation"
gpu = "rtx-4090"
gpus_per_node = 2

[pcie]
gen = 4
lanes = 8
p2p = false
latency_us = 4

[sources]
default = "our lab inventory"
"""


@pytest.fixture(autouse=True)
def _no_user_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def run(*args: str) -> Result:
    return runner.invoke(app, list(args))


def run_json(*args: str) -> dict[str, Any]:
    res = run(*args, "--json")
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = strict_json(res.stdout)
    return doc


def test_estimate_echoes_the_system_and_the_sharding() -> None:
    d = run_json("estimate", "gpt2", "--gpu", "h100", "--system", "dgx-h100", "--gpus", "16", "--sharding", "zero3",
                 "-b", "4", "--seq-len", "256")
    plan = d["plan"]
    assert plan["system"] == "dgx-h100" and plan["sharding"] == "zero3" and plan["dp"] == 16
    assert plan["gpus_per_node"] == 8 and plan["network"] == "infiniband-ndr"
    assert plan["parallelism"] == "ZeRO-3 x 16"
    r = d["results"][0]
    assert r["system"] == "dgx-h100"
    assert r["assumptions"]["data_parallel"].startswith("ZeRO-3 over 16 GPUs (2 node(s) of 8)")


def test_step_host_ms_reaches_the_estimate_and_the_planner_and_is_echoed() -> None:
    """A user's own loop: --step-host-ms replaces the engine's per-step host time (the plan echoes
    it, the step moves by the difference, the assumption says where the figure came from); GPT-2's
    50,257-word head is listed as an unaligned GEMM with its time padded."""
    args = ("estimate", "gpt2", "--gpu", "h100", "-b", "1", "--seq-len", "256")
    base, mine = run_json(*args), run_json(*args, "--step-host-ms", "3")
    assert base["plan"]["step_host_ms"] is None and mine["plan"]["step_host_ms"] == 3.0
    b, m = base["results"][0], mine["results"][0]
    assert b["step_s"] - m["step_s"] == pytest.approx(0.012, abs=1e-9)  # the pytorch engine's 15 ms, less 3
    assert m["assumptions"]["step_host"] == "3 ms of host work per step outside kernel issue (--step-host-ms)"
    [head] = {tuple(u["dims"]) for u in b["unaligned_gemms"]}
    assert head == (50257,) and "lm_head (50257; 3 kernels)" in b["assumptions"]["unaligned_gemms"]
    p = run_json("plan", "llama-3-8b", "--gpu", "h100", "--gpus", "8", "--tp", "8", "--pp", "1", "--global-batch", "8",
                 "--seq-len", "1024", "--step-host-ms", "25", "--top", "1")
    assert "25 ms per step (--step-host-ms)" in p["plans"][0]["assumptions"]["host"]


def test_checkpointed_training_has_mfu_and_a_larger_hfu() -> None:
    d = run_json("estimate", "llama-2-7b", "--gpu", "h100", "-b", "1", "--seq-len", "512", "--checkpointing", "full")
    r = d["results"][0]
    assert 0 < r["mfu"] < r["hfu"] < 1
    assert d["plan"]["recompute"] == "full"
    assert "PaLM" in r["assumptions"]["mfu"]


def test_each_gpu_runs_in_its_default_system() -> None:
    d = run_json("estimate", "gpt2", "--gpu", "h100,a100-sxm4-80gb,l40s", "-b", "4", "--seq-len", "128")
    assert [r["system"] for r in d["results"]] == ["dgx-h100", "dgx-a100", "l40s-default"]


def test_a_system_file_in_the_catalog_directory_is_selectable(tmp_path: Path) -> None:
    (tmp_path / "lab.toml").write_text(LAB)
    listed = run_json("systems", "--catalog", str(tmp_path))
    assert "lab-2x4090" in [s["id"] for s in listed["systems"]]
    d = run_json("estimate", "gpt2", "--gpu", "rtx-4090", "--gpus", "2", "--system", "lab-2x4090", "--catalog",
                 str(tmp_path), "-b", "4", "--seq-len", "128")
    assert d["plan"]["system"] == "lab-2x4090"
    assert "host-staged PCIe" in d["results"][0]["assumptions"]["data_parallel"]  # p2p = false in the file


def test_tensor_parallel_decoder_and_not_modelled_degrees() -> None:
    d = run_json("estimate", "llama-2-13b", "--gpu", "h100", "--task", "infer", "--phase", "decode", "-b", "1",
                 "--context", "512", "--tp", "2")
    assert d["plan"]["tp"] == 2 and "tensor_parallel" in d["results"][0]["assumptions"]
    res = run("estimate", "resnet50", "--gpu", "h100", "--tp", "2")
    assert res.exit_code == 2 and "tensor parallelism (tp 2) is not modelled yet" in res.stderr
    assert "Traceback" not in res.output


@pytest.mark.parametrize(("args", "text"), [
    (("estimate", "gpt2", "--gpu", "h100", "--system", "workstation-2gpu"), "--system: system 'workstation-2gpu'"),
    (("estimate", "gpt2", "--gpu", "h100", "--system", "dgx-a100"), "is built from a100-sxm4-80gb"),
    (("estimate", "gpt2", "--gpu", "h100", "--system", "dgx-h1000"), "unknown system"),
    (("fit", "gpt2", "--gpu", "h100", "--system", "dgx-a100"), "--system"),
    (("recommend", "gpt2", "--gpu", "h100", "--system", "dgx-a100"), "--system dgx-a100 holds a100-sxm4-80gb"),
])
def test_a_system_that_cannot_hold_the_gpu_is_a_one_line_error(args: tuple[str, ...], text: str) -> None:
    res = run(*args)
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and text in err, err


def test_fit_shards_hybrid_inside_the_system_node() -> None:
    args = ("fit", "llama-2-7b", "--gpu", "h100", "-b", "1", "--seq-len", "512", "--no-search")
    hybrid = run_json(*args, "--gpus", "32", "--sharding", "fsdp-hybrid", "--system", "dgx-h100")
    node = run_json(*args, "--gpus", "8", "--sharding", "fsdp-full", "--system", "dgx-h100")
    assert hybrid["total_bytes"] == pytest.approx(node["total_bytes"], rel=1e-9)


def test_recommend_in_a_system_ranks_its_gpu_only() -> None:
    d = run_json("recommend", "gpt2", "--system", "dgx-a100", "-b", "8", "--seq-len", "256", "--max-gpus", "2")
    gpus = {row["gpu"] for row in d["rows"]}
    assert gpus == {"a100-sxm4-80gb"}


def test_the_system_names_the_gpu_when_no_gpu_is_given() -> None:
    d = run_json("estimate", "gpt2", "--system", "dgx-h100")
    assert d["plan"]["system"] == "dgx-h100" and d["plan"]["sharding"] == "ddp"
    assert d["results"][0]["gpu"] == "h100-sxm5-80gb"
    res = run("estimate", "gpt2")
    assert res.exit_code == 2 and "name a GPU with --gpu" in res.stderr
    res = run("estimate", "gpt2", "--system", "pcie-server-8gpu")  # a generic chassis holds any PCIe card
    assert res.exit_code == 2 and "name a GPU with --gpu" in res.stderr
