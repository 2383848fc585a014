"""`whichgpu fit`: fits, does not fit, never fits, suggestions, JSON, bad input."""

from __future__ import annotations

from typing import Any

import pytest
from tests.cli.conftest import invoke, invoke_json
from typer.testing import Result

pytest.importorskip("torch")



pytestmark = pytest.mark.usefixtures("isolated_cache")  # the module's own trace cache (tests/conftest.py)


def run(*args: str) -> Result:
    return invoke("fit", *args)


def run_json(*args: str, code: int = 0) -> dict[str, Any]:
    return invoke_json("fit", "whichgpu.memory/1", *args, code=code)


def test_fits_with_breakdown_and_largest_batch() -> None:
    res = run("gpt2", "--gpu", "rtx-4090", "-b", "8", "--seq-len", "512")
    assert res.exit_code == 0, res.output
    out = res.stdout
    for line in ("weights", "gradients", "optimizer states", "activations", "CUDA context", "allocator fragmentation",
                 "total", "fits", "largest batch that fits", "lifetime simulation"):
        assert line in out, line
    assert "what would make it fit" not in out


def test_does_not_fit_lists_suggestions() -> None:
    res = run("gpt2", "--gpu", "rtx-4090", "-b", "64", "--seq-len", "1024")
    assert res.exit_code == 1, res.output  # the answer to "does it fit as given" is no: exit 1, report printed
    out = res.stdout
    assert "does not fit" in out and "what would make it fit" in out
    assert "--checkpointing full" in out and "--batch-size" in out and "--seq-len" in out


def test_never_fits_is_a_no_that_says_what_would_fit() -> None:
    res = run("llama-2-7b", "--gpu", "rtx-4090", "-b", "1", "--seq-len", "256")
    assert res.exit_code == 1  # a valid question answered "no"; bad input is 2
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("no:")
    assert "even at batch 1" in err and "QLoRA" in err
    assert "Traceback" not in res.output
    assert "what would make it fit" in res.stdout  # the table is still shown


def test_json_document() -> None:
    d = run_json("gpt2", "--gpu", "h100", "-b", "4", "--seq-len", "256")
    lines = {x["line"]: x for x in d["breakdown"]}
    assert set(lines) >= {"weights", "gradients", "master_weights", "optimizer_states", "activations", "kv_cache",
                          "inputs", "workspace", "cuda_context", "fragmentation"}
    assert all(x["assumption"] for x in d["breakdown"] if x["bytes"])
    assert d["total_bytes"] == pytest.approx(sum(x["bytes"] for x in d["breakdown"]))
    assert lines["weights"]["bytes"] == 124_439_808 * 4  # amp-bf16 keeps FP32 parameters
    assert d["fits"] is True and d["headroom_bytes"] == pytest.approx(d["capacity_bytes"] - d["total_bytes"])
    assert d["max_batch"]["batch_size"] > 4 and d["suggestions"] == []
    assert d["workload"]["model"] == "gpt2" and d["plan"]["sharding"] == "ddp"


def test_json_never_fits_still_prints_one_document() -> None:
    d = run_json("llama-2-7b", "--gpu", "rtx-4090", "-b", "2", "--seq-len", "256", code=1)
    assert d["fits"] is False and d["max_batch"]["batch_size"] == 0
    assert d["suggestions_batch_size"] == 1
    assert any(s["fits"] and s["how"] == "--finetune qlora" for s in d["suggestions"])


def test_sharded_training_and_offload() -> None:
    d = run_json("llama-2-7b", "--gpu", "h100", "-b", "1", "--seq-len", "1024", "--precision", "bf16",
                 "--sharding", "zero3", "--gpus", "8")
    lines = {x["line"]: x for x in d["breakdown"]}
    assert lines["weights"]["bytes"] == pytest.approx(6_738_415_616 * 2 / 8 + 128 / 8)
    assert lines["gathered_params"]["bytes"] > 0 and lines["comm_buffers"]["bytes"] > 0
    off = run_json("llama-2-7b", "--gpu", "h100", "-b", "1", "--seq-len", "1024", "--precision", "bf16",
                   "--sharding", "zero2", "--offload-optimizer", "--no-search")
    assert off["host_bytes"] > 0 and off["max_batch"] is None
    assert {x["line"]: x for x in off["breakdown"]}["optimizer_states"]["bytes"] == 0


def test_lora_and_checkpointing_flags() -> None:
    d = run_json("gpt2", "--gpu", "h100", "-b", "4", "--seq-len", "256", "--finetune", "lora", "--lora-rank", "8",
                 "--checkpointing", "full", "--no-search")
    assert d["workload"]["trainable_params"] < d["workload"]["params"] / 20
    assert d["workload"]["finetune"].startswith("lora") and d["workload"]["checkpointing"] == "full"


def test_inference_kv_cache() -> None:
    d = run_json("llama-3-8b", "--gpu", "h100", "--task", "infer", "--phase", "decode", "-b", "8", "--context", "1024",
                 "--no-search")
    kv = {x["line"]: x for x in d["breakdown"]}["kv_cache"]
    assert kv["bytes"] == 2 * 32 * 8 * 128 * 2 * 8 * 1025  # GQA: 8 KV heads
    assert "GQA" in kv["assumption"]
    assert {x["line"]: x for x in d["breakdown"]}["gradients"]["bytes"] == 0


@pytest.mark.parametrize(("args", "message"), [
    (("-b", "0"), "--batch-size: 0 is out of range; valid: an integer >= 1 and <= 1048576"),
    (("-b", "-3"), "--batch-size: -3 is out of range"),
    (("--seq-len", "0"), "--seq-len: 0 is out of range"),
    (("--gpus", "0"), "--gpus: 0 is out of range; valid: an integer >= 1 and <= 65536"),
    (("--optimizer", "adamx"), "unknown optimizer 'adamx'"),
    (("--sharding", "zero4"), "unknown sharding 'zero4'"),
    (("--finetune", "dora"), "--finetune: finetune must be full, lora or qlora"),
    (("--checkpointing", "some"), "checkpointing must be"),
    (("--offload-optimizer",), "--offload-optimizer"),
    (("--precision", "fp7"), "unknown precision"),
    (("--task", "infer", "--sharding", "zero3"), "apply to training"),
])
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    res = run("gpt2", "--gpu", "h100", "--seq-len", "128", *args) if "--seq-len" not in args else run(
        "gpt2", "--gpu", "h100", *args)
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error:") and message in err, err


def test_unknown_gpu_and_user_catalog(tmp_path: Any) -> None:
    res = run("gpt2", "--gpu", "h1000")
    assert res.exit_code == 2 and "unknown GPU" in res.stderr
    res = run("gpt2", "--gpu", "h100", "-b", "1", "--seq-len", "64", "--no-search", "--catalog", str(tmp_path))
    assert res.exit_code == 0, res.output
