"""`whichgpu plan` and `whichgpu validate-plan` end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli.conftest import invoke, invoke_json

DATA = Path(__file__).resolve().parent.parent / "planner_data"  # copies of shared/validation
ARGS = ("llama-3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--global-batch", "64", "--seq-len", "4096")


def test_plan_json_lists_layouts_with_the_promised_fields() -> None:
    doc = invoke_json("plan", "whichgpu.plan/1", *ARGS, "--top", "3")
    assert doc["gpus"] == 16 and doc["tokens_per_step"] == 64 * 4096
    assert 1 <= len(doc["plans"]) <= 3
    keys = {"tp", "pp", "vp", "cp", "ep", "dp", "micro_batch", "grad_accum", "sharding", "recompute", "schedule",
            "step_s", "tokens_per_s", "model_tflops_per_gpu", "mfu", "peak_memory_gb", "fits"}
    for p in doc["plans"]:
        assert keys <= set(p)
        assert p["fits"] and p["tp"] * p["pp"] * p["cp"] * p["dp"] == 16
        assert p["micro_batch"] * p["dp"] * p["grad_accum"] == 64
        assert 0 < p["mfu"] < 1 and p["peak_memory_gb"] <= 80
        assert set(p["time_split_s"]) >= {"compute", "tp", "cp", "ep", "bubble", "dp", "optimizer", "overhead"}
    steps = [p["step_s"] for p in doc["plans"]]
    assert steps == sorted(steps)


def test_fixed_degrees_are_kept() -> None:
    doc = invoke_json("plan", "whichgpu.plan/1", *ARGS, "--tp", "2", "--pp", "2", "--schedule", "zb-h1")
    assert all((p["tp"], p["pp"], p["schedule"]) == (2, 2, "zb-h1") for p in doc["plans"])


def test_export_launches_whole_nodes_of_equal_size(tmp_path: Path) -> None:
    from whichgpu.commands.plan import launch_gpus_per_node

    # every node runs as many processes, each tensor-parallel group inside one node
    assert [launch_gpus_per_node(12, 8, tp) for tp in (1, 2, 4)] == [6, 6, 4]
    assert (launch_gpus_per_node(16, 8, 8), launch_gpus_per_node(4, 8, 4), launch_gpus_per_node(10, 8, 1)) == (8, 4, 5)
    out = tmp_path / "run.sh"  # 12 GPUs of 8-GPU nodes: was "nodes 1 x gpus_per_node 8 = 8 GPUs" and exit 2
    res = invoke("plan", "llama-3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "12", "--global-batch", "24", "--seq-len",
                 "4096", "--tp", "4", "--top", "1", "--export", "torchrun", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "torchrun --nnodes 3 --nproc-per-node 4 " in out.read_text()


def test_virtual_stages_may_count_the_embedding_and_loss_as_layers(tmp_path: Path) -> None:
    # Llama-3.1-405B as NeMo runs it: 126 layers + the embedding + the loss over pp 16 x vp 8 stages
    args = ("llama-3-405b", "--gpu", "h100-sxm5-80gb", "--gpus", "128", "--global-batch", "16", "--seq-len", "8192",
            "--tp", "8", "--pp", "16", "--vp", "8", "--top", "1")
    doc = invoke_json("plan", "whichgpu.plan/1", *args)
    assert [(p["pp"], p["vp"]) for p in doc["plans"]] == [(16, 8)]
    out = tmp_path / "megatron.sh"
    res = invoke("plan", *args, "--export", "megatron", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "--account-for-embedding-in-pipeline-split" in out.read_text()
    bad = invoke("plan", *args[:-6], "--pp", "16", "--vp", "16")  # 256 stages for 128
    assert bad.exit_code == 2 and "exceed the 126 layers" in bad.output


@pytest.mark.parametrize(("extra", "text"), [
    (("--tp", "3"), "--gpus"),
    (("--tp", "4", "--pp", "1", "--cp", "1", "--micro-batch", "3"), "not divisible"),
    (("--micro-batch", "3"), "global batch 64 is not divisible by micro-batch 3"),  # any data parallel
    (("--tp", "1", "--pp", "1", "--cp", "1", "--micro-batch", "8"), "micro-batch 8 x data-parallel 16"),
    (("--schedule", "zb-x"), "zb-h1"),
    (("--ep", "2"), "dense"),
    (("--export", "megatron"), "--out"),
    (("--attention", "fa3"), "flash1"),
    (("--grad-dtype", "fp64"), "bf16"),
    (("--grad-dtype", "fp16"), "--precision fp16"),
    (("--fp8-params",), "--precision fp8"),
    (("--schedule", "zb-v", "--pp", "1"), "--pp 1 has one stage"),  # a pipeline schedule without a pipeline
    (("--schedule", "zb-v", "--vp", "3"), "--vp must be 2"),
    (("--schedule", "interleaved-1f1b", "--vp", "1"), "two virtual stages"),
    (("--schedule", "zb-h1", "--vp", "2"), "not zb-h1"),
    (("--seq-len", "8193"), "max_position_embeddings 8192"),  # beyond llama-3-8b's window, as estimate refuses
    (("--recompute", "some"), "--recompute: unknown recompute 'some'"),  # the flag as typed (--checkpointing too)
    (("--checkpointing", "some"), "--checkpointing: unknown recompute 'some'"),
])
def test_bad_input_is_one_line_and_exit_2(extra: tuple[str, ...], text: str) -> None:
    res = invoke("plan", *ARGS, *extra)
    assert res.exit_code == 2, res.output
    assert text in res.output and "Traceback" not in res.output


def test_no_layout_fits_exits_1_with_the_reason(tmp_path: Path) -> None:
    res = invoke("plan", "llama-3-405b", "--gpu", "a100-sxm4-40gb", "--system", "dgx-a100-320gb", "--gpus", "8",
                 "--global-batch", "8", "--seq-len", "4096")
    assert res.exit_code == 1, res.output
    assert "no layout" in res.output and "fits" in res.output
    assert "the model states alone" in res.output and "of these GPUs hold them" in res.output
    doc = invoke_json("plan", "whichgpu.plan/1", "llama-3-405b", "--gpu", "a100-sxm4-40gb", "--system",
                      "dgx-a100-320gb", "--gpus", "8", "--global-batch", "8", "--seq-len", "4096", code=1)
    assert not doc["plans"] and doc["no_layout_reason"].startswith("the model states alone")
    # the HTML page says the same instead of empty tables and a schedule "of #1"
    page = tmp_path / "none.html"
    res = invoke("plan", "llama-3-405b", "--gpu", "a100-sxm4-40gb", "--system", "dgx-a100-320gb", "--gpus", "8",
                 "--global-batch", "8", "--seq-len", "4096", "--html", str(page))
    assert res.exit_code == 1, res.output
    html = page.read_text()
    assert "<h2>No layout fits</h2>" in html and "the model states alone" in html
    assert "Layouts that fit" not in html and "Pipeline schedule of #1" not in html


def test_no_split_of_the_degrees_says_the_rules() -> None:
    # one sequence on 64 GPUs without pipelining or context parallelism: tp would have to be 64,
    # beyond the 8-GPU NVLink domain; the answer names the rules the split broke
    res = invoke("plan", "llama-3-70b", "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--global-batch", "1",
                 "--seq-len", "4096", "--pp", "1", "--cp", "1")
    assert res.exit_code == 1, res.output
    assert "no split of the degrees exists" in res.output and "up to 8 (the scale-up domain)" in res.output
    assert "must divide the global batch 1" in res.output and "Traceback" not in res.output


def test_html_has_the_gantt_chart_and_export_writes_megatron_args(tmp_path: Path) -> None:
    page, script = tmp_path / "plan.html", tmp_path / "run.sh"
    res = invoke("plan", *ARGS, "--pp", "2", "--html", str(page), "--export", "megatron", "--out", str(script))
    assert res.exit_code == 0, res.output
    html = page.read_text()
    assert "<svg" in html and "Pipeline schedule" in html and "Where the step goes" in html
    text = script.read_text()
    assert "--pipeline-model-parallel-size 2" in text and "--global-batch-size 64" in text


def test_validate_plan_scores_every_corpus() -> None:
    doc = invoke_json("validate-plan", "whichgpu.validate-plan/1", "--data", str(DATA), "--only",
                      "llm_training,moe,zero_bubble")
    llm = doc["corpora"]["llm_training"]
    assert llm["summary"]["rows"] >= 20
    assert any("MoE: scored apart" in n["reason"] for n in llm["not_scored"])
    moe = doc["corpora"]["moe"]
    assert moe["summary"]["rows"] >= 19 and {"gb200", "b200", "h100-sxm5-80gb"} <= set(moe["by_gpu"])
    q = moe["measured_over_predicted"]
    assert 0 < q["p10"] <= q["p50"] <= q["p90"] and q["rows"] == moe["summary"]["rows"]
    assert all(r["layout"].startswith("tp") for r in moe["rows"])
    assert doc["corpora"]["zero_bubble"]["max_abs_diff"] < 1e-3


def test_a_gpu_without_bf16_trains_in_fp16_unless_told_and_then_says_why_it_is_slow() -> None:
    """V100 has FP16 tensor cores and no BF16: with no --precision the planner takes fp16 (bf16
    elsewhere); --precision bf16 there runs its matmuls at the FP32 rate, and a note says so."""
    args = ("llama-3-8b", "--gpu", "v100-sxm2-32gb", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048",
            "--tp", "8", "--top", "1")
    auto = invoke_json("plan", "whichgpu.plan/1", *args)
    bf16 = invoke_json("plan", "whichgpu.plan/1", *args, "--precision", "bf16")
    assert auto["precision"] == "fp16" and not auto["notes"]
    assert bf16["precision"] == "bf16" and any("has no BF16" in n and "--precision fp16" in n for n in bf16["notes"])
    # FP16 tensor cores (125 TFLOP/s) against the FP32 rate (15.7): several times faster
    assert auto["plans"][0]["step_s"] * 3 < bf16["plans"][0]["step_s"]
    assert invoke_json("plan", "whichgpu.plan/1", *ARGS, "--top", "1")["precision"] == "bf16"


@pytest.mark.parametrize("gpu", ["v100-sxm2-32gb", "t4"])
def test_a_gpu_older_than_ampere_plans_unfused_attention_and_says_why_flash_was_refused(gpu: str) -> None:
    """FlashAttention-2 and Transformer Engine's fused attention need Ampere: with no --attention the
    planner takes Megatron's unfused attention there (flash on H100); asked for flash, it computes
    what was asked and a note says those kernels do not run on the GPU."""
    args = ("llama-3.2-1b", "--gpu", gpu, "--gpus", "8", "--global-batch", "32", "--seq-len", "2048",
            "--tp", "1", "--pp", "1", "--top", "1")
    auto = invoke_json("plan", "whichgpu.plan/1", *args)
    asked = invoke_json("plan", "whichgpu.plan/1", *args, "--attention", "flash")
    unfused = invoke_json("plan", "whichgpu.plan/1", *args, "--attention", "unfused")
    assert not auto["notes"] and "no flash kernels on" in auto["plans"][0]["assumptions"]["attention"]
    assert auto["plans"][0]["step_s"] == unfused["plans"][0]["step_s"]
    assert any("cannot run --attention flash" in n and "Ampere" in n for n in asked["notes"])
    # the score matrices: unfused attention is the slower of the two at the same layout
    assert asked["plans"][0]["step_s"] < auto["plans"][0]["step_s"]
    h100 = invoke_json("plan", "whichgpu.plan/1", "llama-3.2-1b", "--gpu", "h100-sxm5-80gb", *args[3:])
    assert not h100["notes"] and h100["plans"][0]["assumptions"]["attention"].startswith("fused flash kernels")


def test_fp8_asked_of_a_gpu_without_fp8_is_the_16_bit_path_with_casts_and_a_note_says_so() -> None:
    """A100 has no FP8 tensor cores: --precision fp8 there is the BF16 path plus the casts (slower than
    bf16), with a note naming the faster question; on H100 no note."""
    args = ("llama-3.2-1b", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048", "--tp", "1", "--pp", "1",
            "--micro-batch", "4", "--top", "1")
    fp8 = invoke_json("plan", "whichgpu.plan/1", *args, "--gpu", "a100-sxm4-80gb", "--precision", "fp8")
    bf16 = invoke_json("plan", "whichgpu.plan/1", *args, "--gpu", "a100-sxm4-80gb")
    assert any("no FP8 tensor cores" in n and "--precision bf16" in n for n in fp8["notes"])
    assert fp8["plans"][0]["step_s"] > bf16["plans"][0]["step_s"] and not bf16["notes"]
    h100 = invoke_json("plan", "whichgpu.plan/1", *args, "--gpu", "h100-sxm5-80gb", "--precision", "fp8")
    assert not h100["notes"]


def test_tensor_parallel_overlap_is_on_over_nvlink_and_off_over_pcie_by_default() -> None:
    """Transformer Engine's comm+GEMM overlap maps its peers' memory over NVLink: with no flag the
    planner overlaps TP collectives on a DGX H100 and not on a PCIe L40S server, where they are all
    exposed; --tp-comm-overlap still asks for it."""
    args = ("llama-3.2-1b", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048", "--tp", "2", "--pp", "1",
            "--micro-batch", "4", "--sharding", "zero1", "--recompute", "none", "--top", "1")
    nvlink = invoke_json("plan", "whichgpu.plan/1", *args, "--gpu", "h100-sxm5-80gb")["plans"][0]
    pcie = invoke_json("plan", "whichgpu.plan/1", *args, "--gpu", "l40s")["plans"][0]
    asked = invoke_json("plan", "whichgpu.plan/1", *args, "--gpu", "l40s", "--tp-comm-overlap")["plans"][0]
    assert nvlink["tp_comm_overlap"] and "overlapped with GEMMs" in nvlink["assumptions"]["tensor_parallel"]
    assert not pcie["tp_comm_overlap"] and "overlapped" not in pcie["assumptions"]["tensor_parallel"]
    assert pcie["time_split_s"]["tp"] == pytest.approx(pcie["comm_total_s"]["tp"])
    assert asked["tp_comm_overlap"] and asked["time_split_s"]["tp"] < pcie["time_split_s"]["tp"]


def test_plan_of_an_moe_model_prints_the_measured_caveat() -> None:
    res = invoke("plan", "qwen3-30b-a3b", "--gpu", "b200", "--gpus", "8", "--global-batch", "64", "--seq-len",
                 "4096", "--precision", "fp8", "--ep", "8", "--top", "1")
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "note: not calibrated for MoE" in text and "validate-plan --only moe" in text


def test_plan_keeps_experts_whole_with_etp_and_refuses_it_on_dense_models() -> None:
    doc = invoke_json("plan", "whichgpu.plan/1", "qwen3-30b-a3b", "--gpu", "h100-sxm5-80gb", "--gpus", "16",
                      "--global-batch", "64", "--seq-len", "4096", "--tp", "2", "--ep", "16", "--etp", "1", "--top", "2")
    assert doc["plans"] and all(p["etp"] == 1 and p["ep"] == 16 and "ETP1" in p["layout"] for p in doc["plans"])
    res = invoke("plan", *ARGS, "--etp", "1")
    assert res.exit_code == 2 and "--etp" in res.stderr and "dense" in res.stderr


@pytest.mark.parametrize(("flags", "flag", "text"), [
    (("--tp", "2", "--etp", "1", "--no-sequence-parallel"), "--etp", "needs sequence parallelism"),
    (("--tp", "2", "--ep", "16", "--etp", "2"), "--ep", "must divide tp x cp x dp"),
    (("--tp", "4", "--etp", "3"), "--etp", "must divide --tp 4"),
])
def test_impossible_expert_degrees_exit_2_with_the_reason(flags: tuple[str, ...], flag: str, text: str) -> None:
    res = invoke("plan", "qwen3-30b-a3b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--global-batch", "64", *flags)
    assert res.exit_code == 2 and flag in res.stderr and text in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_expert_parallelism_folds_over_a_fixed_tp_without_etp() -> None:
    """--tp 2 --ep 16 on 16 GPUs runs with whole experts (etp 1), as the search keeps them."""
    doc = invoke_json("plan", "whichgpu.plan/1", "qwen3-30b-a3b", "--gpu", "h100-sxm5-80gb", "--gpus", "16",
                      "--global-batch", "64", "--tp", "2", "--ep", "16", "--top", "1")
    assert doc["plans"][0]["ep"] == 16 and doc["plans"][0]["etp"] == 1
