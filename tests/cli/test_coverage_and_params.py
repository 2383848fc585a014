"""Every report says what its times miss and what the model is: estimate, fit and recommend (console
and JSON) warn when an op has no cost formula or the traced matmuls fall short of the model's
shape, with the share of FLOPs and bytes uncovered, and a model with full coverage does not warn;
they show the total parameters and, for a mixture of experts, the active ones, and echo the
attention and routing variants with the assumptions (issue 16)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import invoke_json, runner
from typer.testing import Result

from whichgpu.cli import app
from whichgpu.report.workload import coverage_warning
from whichgpu.workload.trace import Trace

pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("isolated_cache")

UNMODELLED = str(Path(__file__).parents[1] / "data" / "factories" / "unmodelled_op.py") + ":make"
COVERED = str(Path(__file__).parents[1] / "data" / "factories" / "sized.py") + ":make"
GPT2 = ("gpt2", "-b", "2", "--seq-len", "64")
MIXTRAL = ("mixtral-8x7b", "--seq-len", "256")
GPU = ("--gpu", "h100-sxm5-80gb")
CARDS = ("--gpu", "h100-sxm5-80gb,h200-sxm-141gb")


def flat(text: str) -> str:
    return " ".join(text.split())


def ok(command: str, *args: str) -> Result:
    """The command's console report, laid out wide enough that no line wraps."""
    res = runner.invoke(app, [command, *args], env={"COLUMNS": "1000"})
    assert res.exit_code in (0, 1), res.output  # fit answers "no" with exit 1
    return res


def warnings(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith("warning")]


# ---- coverage --------------------------------------------------------------------------------

def _check_unmodelled(cov: dict[str, Any]) -> None:
    assert cov["unmodelled_names"] == ["aten._euclidean_dist"]
    assert cov["unmodelled_ops"] >= 1
    assert 0 < cov["bytes_uncovered"] < 0.5 and cov["bytes"] == pytest.approx(1 - cov["bytes_uncovered"])
    assert cov["flops_uncovered"] is None and cov["flops_expected"] is None  # no transformer description
    assert "aten._euclidean_dist" in cov["warning"] and "no cost formula" in cov["warning"]


def test_estimate_flags_an_unmodelled_op() -> None:
    doc = invoke_json("estimate", "whichgpu.estimate/1", UNMODELLED, "--gpu", "h100-sxm5-80gb,a100-sxm4-80gb")
    for r in doc["results"]:
        _check_unmodelled(r["coverage"])
    out = ok("estimate", UNMODELLED, "--gpu", "h100-sxm5-80gb,a100-sxm4-80gb").stdout
    (w,) = warnings(out)  # one line for both GPUs (the same trace)
    assert "of bytes have no cost formula (aten._euclidean_dist)" in w and "times may be low" in w


def test_fit_flags_an_unmodelled_op() -> None:
    doc = invoke_json("fit", "whichgpu.memory/1", UNMODELLED, GPU[0], GPU[1], "--no-search")
    _check_unmodelled(doc["coverage"])
    (w,) = warnings(ok("fit", UNMODELLED, *GPU, "--no-search").stdout)
    assert "aten._euclidean_dist" in w and "memory counts their tensors in full" in w


def test_recommend_flags_an_unmodelled_op() -> None:
    doc = invoke_json("recommend", "whichgpu.recommend/1", UNMODELLED, *CARDS)
    _check_unmodelled(doc["workloads"][0]["coverage"])
    (w,) = warnings(ok("recommend", UNMODELLED, *CARDS).stdout)
    assert "aten._euclidean_dist" in w


def test_analyze_flags_an_unmodelled_op() -> None:
    doc = invoke_json("analyze", "whichgpu.trace/1", UNMODELLED)
    _check_unmodelled(doc["coverage"])
    assert doc["coverage"]["ops"] < 1  # the keys analyze had stay
    assert len(warnings(ok("analyze", UNMODELLED).stdout)) == 1


@pytest.mark.parametrize("model", [COVERED, "gpt2"], ids=["factory", "gpt2"])
def test_full_coverage_does_not_warn(model: str) -> None:
    size = GPT2[1:] if model == "gpt2" else ()
    for command, schema, extra in (("estimate", "whichgpu.estimate/1", GPU), ("fit", "whichgpu.memory/1", GPU),
                                   ("recommend", "whichgpu.recommend/1", CARDS)):
        doc = invoke_json(command, schema, model, *size, *extra)
        covs = {"estimate": lambda d: [r["coverage"] for r in d["results"]], "fit": lambda d: [d["coverage"]],
                "recommend": lambda d: [w["coverage"] for w in d["workloads"]]}[command](doc)
        for cov in covs:
            assert cov["warning"] is None and cov["unmodelled_names"] == [] and cov["bytes_uncovered"] == 0
            if model == "gpt2":  # a described transformer: its matmuls do all of 6N per token
                assert cov["flops_uncovered"] == 0 and cov["flops_traced"] == pytest.approx(cov["flops_expected"], rel=1e-3)
            else:
                assert cov["flops_uncovered"] is None
        assert "warning" not in ok(command, model, *size, *extra).stdout


def test_serving_prefill_counts_the_head_once_per_sample() -> None:
    """A prefill computes the logits of the last position only: gpt2's LM head (50257 x 768, a
    third of N) is expected once per sample, not once per token, so no shortfall is seen."""
    r = invoke_json("estimate", "whichgpu.estimate/1", *GPT2, *GPU, "--task", "infer")["results"][0]
    for cov in (r["coverage"], r["serving"]["prefill_coverage"]):
        assert cov["flops_uncovered"] == 0 and cov["warning"] is None


def _without_formula(t: Trace, names: tuple[str, ...]) -> Trace:
    """`t` as a capture would record it if the ops `names` had no formula: category other, no FLOPs."""
    ops = [replace(o, name="aten._grouped_mm", category="other", flops=0.0, modelled=False, tags=())
           if o.name in names else o for o in t.ops]
    return replace(t, ops=ops)


def test_a_grouped_gemm_without_formula_is_a_flops_shortfall() -> None:
    """Mixtral's expert GEMMs are most of its matmul work: without their formula, the shortfall
    against 6N per token says how much (the expert share of 2N: 2 x 32 layers x 2 experts x
    3 x 4096 x 14336 over N = 12.75e9), not just that an op is unmodelled."""
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.spec import WorkloadSpec

    t = get_trace(WorkloadSpec(model="mixtral-8x7b", seq_len=256, batch_size=1))
    full = t.coverage()
    assert full["flops_uncovered"] == 0 and coverage_warning(full) is None
    broken = _without_formula(t, ("whichgpu.grouped_mm", "whichgpu.grouped_mm_backward")).coverage()
    expert_share = 2 * 32 * 2 * 3 * 4096 * 14336 / (2 * 12_748_587_008)
    assert broken["flops_uncovered"] == pytest.approx(expert_share, rel=0.02)
    w = coverage_warning(broken)
    assert w is not None and w.startswith(f"{100 * broken['flops_uncovered']:.0f}% of FLOPs and ")
    assert "(aten._grouped_mm): times are low by up to that much" in w


def test_a_shortfall_alone_warns_over_three_percent() -> None:
    cov = {"unmodelled_names": [], "flops_uncovered": 0.12, "bytes_uncovered": 0.0}
    w = coverage_warning(cov)
    assert w is not None and "12% fewer FLOPs" in w
    assert coverage_warning({**cov, "flops_uncovered": 0.02}) is None


# ---- parameters and assumptions --------------------------------------------------------------

MIXTRAL_PARAMS = "46.70B parameters, 12.88B active per token"


def test_estimate_shows_total_and_active_parameters() -> None:
    shape = invoke_json("analyze", "whichgpu.trace/1", *MIXTRAL)["model_shape"]
    doc = invoke_json("estimate", "whichgpu.estimate/1", *MIXTRAL, *GPU)
    r = doc["results"][0]
    assert r["workload"]["params"] == 46_702_792_704
    assert r["workload"]["active_params"] == shape["active_params"] == 12_879_925_248
    assert r["workload"]["attention"] == "GQA 32/8" and r["assumptions"]["attention"] == "GQA 32/8"
    assert r["assumptions"]["moe"].startswith("8 routed experts, top-2")
    out = flat(ok("estimate", *MIXTRAL, *GPU).stdout)
    assert MIXTRAL_PARAMS in out and "attention: GQA 32/8" in out and "moe: 8 routed experts, top-2" in out


def test_fit_shows_total_and_active_parameters() -> None:
    doc = invoke_json("fit", "whichgpu.memory/1", *MIXTRAL, *GPU, "--no-search", code=1)
    assert doc["workload"]["active_params"] == 12_879_925_248 and doc["assumptions"]["attention"] == "GQA 32/8"
    out = ok("fit", *MIXTRAL, *GPU, "--no-search").stdout
    assert MIXTRAL_PARAMS in flat(out)
    assert "assumption attention: GQA 32/8" in out and "assumption moe: 8 routed experts" in out


def test_recommend_shows_total_and_active_parameters() -> None:
    doc = invoke_json("recommend", "whichgpu.recommend/1", *MIXTRAL, "--gpu", "h200-sxm-141gb,b200")
    w = doc["workloads"][0]
    assert w["params"] == 46_702_792_704 and w["active_params"] == 12_879_925_248
    assert w["assumptions"]["attention"] == "GQA 32/8" and w["assumptions"]["moe"].startswith("8 routed experts")
    out = ok("recommend", *MIXTRAL, "--gpu", "h200-sxm-141gb,b200").stdout
    assert MIXTRAL_PARAMS in flat(out) and "assumption attention: GQA 32/8" in out


def test_dense_and_undescribed_models_show_no_active_count() -> None:
    # llama: the active count is known and equal to the total; gpt2 and factories: not known (null)
    llama = invoke_json("estimate", "whichgpu.estimate/1", "llama-2-7b", "--seq-len", "128", *GPU)["results"][0]
    assert llama["workload"]["active_params"] == llama["workload"]["params"]
    for model in (("gpt2", *GPT2[1:]), (COVERED,)):
        doc = invoke_json("estimate", "whichgpu.estimate/1", *model, *GPU)["results"][0]
        assert doc["workload"]["active_params"] is None
    for model in (("llama-2-7b", "--seq-len", "128"), (COVERED,)):
        out = ok("estimate", *model, *GPU).stdout
        assert "parameters" in out and "active per token" not in out
