"""`recommend --rate R --slo-...`: GPU x count x TP ranked by cost per million output tokens among
the configurations that serve the rate within the latency targets (recommend/serving.py)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from tests.cli.conftest import invoke

from whichgpu.hardware.catalog import load_catalog
from whichgpu.recommend.cost import CostModel
from whichgpu.recommend.serving import (
    ServingAsk,
    _saturation,
    _search,
    _setup_option,
    rate_upper_bound,
    recommend_serving,
)

GPUS = ("h100-sxm5-80gb", "a100-sxm4-80gb", "l40s", "rtx-4090", "h200-sxm-141gb")
ASK = ServingAsk("llama-3-8b", 12.0, 1000, 200, slo_ttft_ms=600, slo_tpot_ms=35, cost=CostModel(mode="rent"),
                 max_gpus=8, top=2)


@pytest.fixture(scope="module")
def gpus():  # type: ignore[no-untyped-def]
    cat = load_catalog()
    return [cat.get(g) for g in GPUS]


@pytest.fixture(scope="module")
def pruned(gpus):  # type: ignore[no-untyped-def]
    return recommend_serving(ASK, gpus)


def test_each_ranked_configuration_serves_the_rate_within_the_targets(pruned) -> None:  # type: ignore[no-untyped-def]
    assert pruned.ranked, [o.reason for o in pruned.others]
    for o in pruned.ranked:
        assert o.replicas is not None and o.max_rate_per_replica is not None
        assert o.replicas * o.max_rate_per_replica >= ASK.rate_per_s  # enough replicas for the rate
        assert (o.replicas - 1) * o.max_rate_per_replica < ASK.rate_per_s  # and no more than needed
        assert o.gpus is not None and o.gpus <= ASK.max_gpus
        # the latency each replica shows at its share of the rate meets the targets
        assert o.ttft_ms is not None and o.ttft_ms <= ASK.slo_ttft_ms  # type: ignore[operator]
        assert o.tpot_ms is not None and o.tpot_ms <= ASK.slo_tpot_ms  # type: ignore[operator]
        # cost per million output tokens: the replicas' $/hour over an hour's output tokens at the rate
        want = o.usd_per_gpu_hour * o.gpus / (ASK.rate_per_s * ASK.output_len * 3600 / 1e6)  # type: ignore[operator]
        assert o.usd_per_million_tokens(ASK) == pytest.approx(want, rel=1e-12)
    costs = [o.usd_per_million_tokens(ASK) for o in pruned.ranked]
    assert costs == sorted(costs)  # type: ignore[type-var]


def test_pruning_keeps_the_exact_top(gpus, pruned) -> None:  # type: ignore[no-untyped-def]
    # every configuration searched (no pruning: a top larger than the candidates) gives the same top 2
    full = recommend_serving(replace(ASK, top=100), gpus)
    key = [(o.gpu.id, o.tp, o.replicas) for o in full.ranked[:2]]
    assert [(o.gpu.id, o.tp, o.replicas) for o in pruned.ranked] == key
    assert any(o.kind == "pruned" for o in pruned.others) or len(full.ranked) <= 2
    assert not any(o.kind == "pruned" for o in full.others)


def test_the_throughput_bound_is_above_every_achievable_rate(gpus) -> None:  # type: ignore[no-untyped-def]
    import datetime as dt

    from whichgpu.hardware.system import default_system

    for g in gpus[:3]:
        opt, ctx = _setup_option(ASK, g, default_system(g), 1, dt.date.today())
        assert ctx is not None
        ub = rate_upper_bound(replace(ASK, slo_tpot_ms=None), ctx)
        _saturation(ASK, opt, ctx)
        assert opt.ceiling_per_replica is not None and opt.ceiling_per_replica <= ub, g.id
        _search(ASK, opt, ctx)
        if opt.max_rate_per_replica is not None:
            assert opt.max_rate_per_replica <= rate_upper_bound(ASK, ctx), g.id


def test_reasons_have_kinds(pruned, gpus) -> None:  # type: ignore[no-untyped-def]
    assert all(o.reason and o.kind in ("price", "fit", "slo", "max-gpus", "pruned", "engine") for o in pruned.others)
    tight = recommend_serving(replace(ASK, slo_tpot_ms=1.0), gpus)  # below one decode step on any of them
    assert not tight.ranked and {o.kind for o in tight.others} <= {"slo", "fit", "price"}
    # no GPU count helps: each says one request alone decodes slower than the target (not "needs N GPUs")
    slo = [o for o in tight.others if o.kind == "slo"]
    assert slo and all("even one request alone decodes at" in o.reason and "at any rate" in o.reason for o in slo)
    for o in slo:
        ms = float(o.reason.split("decodes at ")[1].split(" ms")[0])
        assert 1.0 < ms < 100.0


def test_tensorrt_llm_is_offered_on_nvidia_gpus_only() -> None:
    cat = load_catalog()
    gpus = [cat.get("mi300x"), cat.get("h100-sxm5-80gb")]
    rec = recommend_serving(replace(ASK, engine="tensorrt-llm"), gpus)
    amd = [o for o in rec.others if o.gpu.vendor == "AMD"]
    assert len(amd) == 1 and amd[0].kind == "engine" and "NVIDIA GPUs only" in amd[0].reason
    assert all(o.gpu.vendor == "NVIDIA" for o in rec.ranked) and rec.ranked
    vllm = recommend_serving(ASK, gpus)  # vLLM runs on ROCm: the MI300X is weighed
    assert not any(o.kind == "engine" for o in vllm.others)
    assert any(o.gpu.vendor == "AMD" for o in [*vllm.ranked, *vllm.others])
    # no chunked prefill: a prompt over TensorRT-LLM's max_num_tokens (8192) is refused, said per option
    long = recommend_serving(replace(ASK, model="llama-3.1-8b", engine="tensorrt-llm", input_len=9000, output_len=20),
                             gpus[1:])
    assert not long.ranked and long.others
    assert all(o.kind == "engine" and "does not chunk prefills" in o.reason for o in long.others)


def test_bad_asks_are_one_line_errors() -> None:
    from whichgpu.errors import InputError

    for bad in (replace(ASK, rate_per_s=0.0), replace(ASK, rate_per_s=math.nan), replace(ASK, slo_ttft_ms=None,
                slo_tpot_ms=None), replace(ASK, input_len=0), replace(ASK, max_gpus=0)):
        with pytest.raises(InputError):
            bad.validate()


def test_cli_serving_recommendation_json_and_exit_codes() -> None:
    r = invoke("recommend", "llama-3-8b", "--rate", "12", "--input-len", "1000", "--output-len", "200",
               "--slo-ttft-ms", "600", "--slo-tpot-ms", "35", "--rent", "--gpu", ",".join(GPUS), "--top", "2", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema"] == "whichgpu.recommend-serving/1"
    first = doc["ranking"][0]
    for k in ("gpu", "tp", "replicas", "gpus", "usd_per_million_output_tokens", "ttft_ms_p90", "tpot_ms_p90",
              "max_rate_per_s_per_replica"):
        assert first[k] is not None, k
    # no configuration meets a 1 ms TPOT: exit 1 with the reason
    r = invoke("recommend", "--use-case", "llm-serving", "--rate", "5", "--slo-tpot-ms", "1", "--rent",
               "--gpu", "h100-sxm5-80gb,rtx-4090")
    assert r.exit_code == 1 and "no GPU x TP configuration serves" in r.output


@pytest.mark.parametrize(("args", "words"), [
    (["--rate", "5"], "--slo-ttft-ms"),
    (["--slo-tpot-ms", "30"], "--rate"),
    (["--use-case", "learning", "--rate", "5", "--slo-tpot-ms", "30"], "llm-serving"),
    (["--rate", "5", "--slo-tpot-ms", "30", "--batch-size", "8"], "do not apply"),
    (["--rate", "5", "--slo-tpot-ms", "30", "--engine", "pytorch"], "--engine for serving"),
    (["--rate", "5", "--slo-tpot-ms", "30", "--precision", "tf32"], "--precision for serving"),
    (["--rate", "5", "--slo-tpot-ms", "30", "--html", "x.html"], "--html"),
    (["resnet50-v1.5", "--rate", "5", "--slo-tpot-ms", "30"], "resnet50"),
])
def test_cli_bad_serving_questions_exit_2(args: list[str], words: str) -> None:
    r = invoke("recommend", *args)
    assert r.exit_code == 2, r.output
    assert words in r.output and "Traceback" not in r.output


def test_layouts_tried_per_tp() -> None:
    from whichgpu.recommend.serving import layouts

    assert layouts(0, 8) == [(1, 1)]  # dense: tensor parallelism only
    assert layouts(128, 1) == [(1, 1)]
    assert layouts(128, 4) == [(1, 1), (4, 1), (4, 4)]  # MoE: experts by TP, EP = TP, EP with DP attention
    assert layouts(60, 8) == [(1, 1)]  # EP must divide the experts


MOE = ServingAsk("qwen3-30b-a3b", 30.0, 1000, 300, slo_ttft_ms=1000, slo_tpot_ms=40, cost=CostModel(mode="rent"),
                 max_gpus=2, top=5)


@pytest.fixture(scope="module")
def moe(gpus):  # type: ignore[no-untyped-def]
    return recommend_serving(MOE, [gpus[0]])


def test_moe_layouts_are_ranked_with_their_groups_rates(moe) -> None:  # type: ignore[no-untyped-def]
    every = moe.ranked + moe.more + moe.others
    got = {(o.tp, o.ep, o.attention_dp) for o in every}
    assert got == {(1, 1, 1), (2, 1, 1), (2, 2, 1), (2, 2, 2)}
    dp = next(o for o in every if o.attention_dp == 2)
    assert dp.layout == "TP2 EP2 DP-attention 2" and dp.gpus in (None, 2 * (dp.replicas or 0))
    searched = [o for o in every if o.max_rate_per_replica is not None]
    assert searched and all(o.replicas * o.max_rate_per_replica >= MOE.rate_per_s for o in searched)  # type: ignore[operator]
    # the DP-attention replica is simulated as one attention group: its SLO rate per replica is the
    # group's x 2, which `serve --attention-dp 2` reports the same way (1,000 probe requests there, 400 here)
    assert dp.max_rate_per_replica is not None
    r = invoke("serve", "qwen3-30b-a3b", "--gpu", "h100-sxm5-80gb", "--tp", "2", "--ep", "2", "--attention-dp", "2",
               "--rate", "10", "--input-len", "1000", "--output-len", "300", "--slo-ttft-ms", "1000",
               "--slo-tpot-ms", "40", "--json")
    assert r.exit_code == 0, r.output
    serve_rate = json.loads(r.stdout)["slo"]["max_rate_per_s_per_replica"]
    assert dp.max_rate_per_replica == pytest.approx(serve_rate, rel=0.15)
    # one attention group alone sustains about half of that: the factor is the groups, not a rescale
    single = next(o for o in every if (o.tp, o.ep, o.attention_dp) == (2, 2, 1))
    assert single.max_rate_per_replica is not None and dp.max_rate_per_replica < 2 * single.max_rate_per_replica


def test_weights_that_do_not_fit_are_listed_once_per_tp(gpus) -> None:  # type: ignore[no-untyped-def]
    ask = replace(MOE, model="deepseek-v3", precision="fp8", max_gpus=4)
    rec = recommend_serving(ask, [gpus[0]])
    assert not rec.ranked
    fits = [o for o in rec.others if o.kind == "fit"]
    assert sorted(o.tp for o in fits) == [1, 2, 4] and all(o.ep == 1 and o.attention_dp == 1 for o in fits)
