"""The parallel planner where one GPU's memory is not enough: fit's layouts (parallel/fallback.py)
and recommend's planned runs (recommend/planned.py). Torch-free: recommend runs on toy traces."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

import pytest
from tests.unit.test_recommend import toy_trace, toy_workload

from whichgpu.hardware.catalog import Catalog, load_catalog
from whichgpu.hardware.system import default_system
from whichgpu.parallel import fallback
from whichgpu.parallel.fallback import at_count, fewest, for_fit, quick_best
from whichgpu.parallel.plan import Plan
from whichgpu.parallel.planner import Job
from whichgpu.parallel.search import label
from whichgpu.recommend import Recommendation, Request, Workload, recommend
from whichgpu.recommend.planned import PlannedRun
from whichgpu.workload.spec import WorkloadSpec
from whichgpu.workload.zoo.llm.args import args_from_config

H100_USABLE = 80 * 2**30 * 0.985  # an "80 GB" H100: 80 GiB less the driver's share, 84.6 GB

CAT = load_catalog()
H100 = CAT.get("h100-sxm5-80gb")
TODAY = dt.date(2026, 11, 22)


def step(**kw: Any) -> Any:
    """The fields of a traced step that fit's planner question reads."""
    base = {"task": "train", "finetune": "full", "optimizer": "adamw/foreach", "phase": "full", "batch_size": 1,
            "seq_len": 4096, "precision": "amp-bf16"}
    return SimpleNamespace(**{**base, **kw})


# ---- fit ---------------------------------------------------------------------------------------

def test_70b_training_on_one_h100_gets_a_parallel_layout_that_fits() -> None:
    found = for_fit(step(), "llama-3-70b", H100, default_system(H100), gpus=1, grad_accum=1)
    # 70.6B parameters x 16 bytes (amp-bf16: FP32 weights, gradients, Adam m and v) = 1.13 TB of
    # model states: 8 H100s (8 x 80 GB = 640 GB) cannot hold them in any layout, 16 can
    assert found.job is not None and found.job.gpus == 16 and found.job.global_batch == 1
    assert 1 <= len(found.best) <= 3
    for r in found.best:
        assert r.fits and r.peak_memory_bytes < H100_USABLE
        assert r.plan.tp * r.plan.pp * r.plan.cp * r.plan.dp == 16 and r.plan.tp * r.plan.pp > 1
    assert [r.step_s for r in found.best] == sorted(r.step_s for r in found.best)
    assert found.command.startswith("whichgpu plan llama-3-70b --gpu h100-sxm5-80gb --gpus 16 --global-batch 1 "
                                    "--seq-len 4096 --precision amp-bf16")
    rows = found.to_list()
    for key in ("tp", "pp", "vp", "cp", "ep", "dp", "micro_batch", "grad_accum", "sharding", "recompute", "schedule",
                "step_s", "tokens_per_s", "peak_memory_gb", "fits", "gpus"):
        assert key in rows[0], key
    assert rows[0]["gpus"] == 16 and rows[0]["peak_memory_gb"] < H100_USABLE / 1e9


def test_given_gpus_are_searched_alone_with_the_global_batch_of_the_step() -> None:
    found = for_fit(step(batch_size=2), "llama-3-70b", H100, default_system(H100), gpus=8, grad_accum=4)
    assert found.job is not None and found.job.gpus == 8 and found.job.global_batch == 2 * 8 * 4
    assert not found.best and "no layout fits on 8 x" in found.note  # the model states alone exceed 8 x 80 GB


@pytest.mark.parametrize(("changes", "words"), [
    ({"finetune": "lora (rank 16, 448 layers)"}, "not lora fine-tuning"),
    ({"task": "infer", "optimizer": "none"}, "training, not inference"),
    ({"optimizer": "sgd/foreach"}, "AdamW, not sgd"),
])
def test_lora_inference_and_other_optimizers_never_call_the_planner(monkeypatch: pytest.MonkeyPatch,
                                                                     changes: dict[str, str], words: str) -> None:
    def refuse(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the planner was called")

    monkeypatch.setattr(fallback, "search", refuse)
    found = for_fit(step(**changes), "llama-3-70b", H100, default_system(H100), gpus=1, grad_accum=1)
    assert found.job is None and not found.best and words in found.note


def test_a_model_the_planner_cannot_express_says_so() -> None:
    found = for_fit(step(), "resnet50-v1.5", H100, default_system(H100), gpus=1, grad_accum=1)
    assert found.job is None and "decoder-only LLMs" in found.note


def test_a_global_batch_that_cannot_be_split_takes_the_smallest_multiple_that_can() -> None:
    # 2 heads and 2 layers: tp <= 2 and pp <= 2, so 8 GPUs need dp >= 2, which one sequence per
    # step cannot split; 2 sequences can (dp 2, micro-batch 1)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
           "num_attention_heads": 2, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1024,
           "max_position_embeddings": 2048}
    args = args_from_config(cfg, "tiny")
    job = Job("tiny", args, H100, default_system(H100), 8, 1, 2048, "bf16")
    got, res = at_count(job, Plan(engine="megatron"))
    assert got.global_batch == 2 and res.best and all(r.plan.dp == 2 for r in res.best)
    found = fewest(lambda n: job, (8,), Plan(engine="megatron"))
    assert found.job is not None and found.job.global_batch == 2 and found.asked_batch == 1
    assert "smallest multiple that does, 2" in found.note


def test_quick_best_agrees_with_the_full_search() -> None:
    from whichgpu.parallel.search import Fixed, search

    model_id, args = fallback.decoder("llama-3-70b")  # type: ignore[misc]
    job = Job(model_id, args, H100, default_system(H100), 16, 16, 4096, "amp-bf16")
    full = search(job, Fixed(), Plan(engine="pytorch"), top=1).best[0]
    quick = quick_best(job, Plan(engine="pytorch"))
    assert quick is not None and quick.step_s == pytest.approx(full.step_s, rel=0.02)
    assert label(quick.plan).startswith("TP")


# ---- recommend ---------------------------------------------------------------------------------

def llm(model: str = "llama-3-70b") -> Workload:
    return Workload(f"{model} training", WorkloadSpec(model, batch_size=1, seq_len=4096, precision="auto",
                                                       optimizer="adamw"), unit="tokens/s", family="decoder")


def run(workload: Workload, gpus: tuple[str, ...], params: float, **kw: Any) -> Recommendation:
    req = Request(workloads=(workload,), title="t", today=TODAY, **kw)
    return recommend(req, Catalog([CAT.get(g) for g in gpus]),
                     lambda spec: toy_trace(spec, params=params, act_per_sample=2e9))


def test_recommend_ranks_tensor_pipeline_layouts_where_data_parallelism_does_not_fit() -> None:
    gpus = ("h100-sxm5-80gb", "a100-sxm4-80gb")
    rec = run(llm(), gpus, 70e9, max_gpus=16, objective="time")
    planned = [c for c in rec.configs if isinstance(c.runs[0], PlannedRun)]
    assert planned and {c.gpu.id for c in rec.rows} == set(gpus)
    top = rec.rows[0]
    run0 = top.runs[0]
    assert isinstance(run0, PlannedRun) and top.gpus == 16 and run0.layout.need_bytes < H100_USABLE
    assert run0.result.plan.tp * run0.result.plan.pp > 1
    assert "parallel planner" in top.reasons[0] and run0.label in top.reasons[0]
    doc = rec.to_dict()
    lay = doc["rows"][0]["runs"][0]["layout"]
    assert lay["planner"] is True and lay["tp"] * lay["pp"] > 1 and lay["gpus"] == 16
    assert doc["rows"][0]["runs"][0]["tokens_per_s"] == pytest.approx(run0.result.tokens_per_s)
    assert "parallel_layouts" in doc["assumptions"]
    # without the planner every card is a memory blocker
    off = run(llm(), gpus, 70e9, max_gpus=16, objective="time", model_parallel=False)
    assert not off.rows and all(r.blocker.kind == "memory" for r in off.rejected)


def test_recommend_is_unchanged_where_the_planner_does_not_apply_or_is_not_needed() -> None:
    gpus = ("h100-sxm5-80gb", "rtx-4090", "t4")
    for w, params in ((toy_workload("train"), 1e8), (llm("gpt2"), 1.24e8)):
        on = run(w, gpus, params, max_gpus=4)
        off = run(w, gpus, params, max_gpus=4, model_parallel=False)
        assert on.to_dict() == off.to_dict()
        assert all(not isinstance(r, PlannedRun) for c in on.configs for r in c.runs)
