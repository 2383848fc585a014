"""Pipeline-parallel serving: the stage split, weights and KV per GPU, the virtual engines'
scheduling and timing, and pp = 1 staying today's path."""

from __future__ import annotations

import numpy as np
import pytest

from whichgpu.errors import InputError, NoAnswerError
from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.system import load_systems, resolve_system
from whichgpu.serving import (
    ClosedLoop,
    PipelineStepTime,
    Poisson,
    StepBatch,
    Workload,
    fixed_lengths,
    simulate,
    simulate_pipeline,
    stage_layers,
)
from whichgpu.serving.model import Setup, build, stage_weight_bytes, weight_bytes
from whichgpu.serving.pipeline import boundary_links
from whichgpu.serving.slo import idle_run, poisson_runner, saturation_rate
from whichgpu.serving.step import StepModel


def _model(model: str = "llama-3.1-8b", gpu: str = "h100-sxm5-80gb", system: str | None = "dgx-h100", **kw: object):  # type: ignore[no-untyped-def]
    g = load_catalog().get(gpu)
    systems = load_systems()
    sys_ = systems.get(system) if system else resolve_system(g, None, systems)
    return build(Setup(model, g, sys_, **kw))  # type: ignore[arg-type]


def _cfg(sm, max_seq_len: int = 2048):  # type: ignore[no-untyped-def]
    cap = sm.capacity(max_seq_len=max_seq_len, max_num_batched_tokens=8192, max_num_seqs=1024)
    return cap, sm.scheduler_config(cap, max_num_seqs=1024, max_num_batched_tokens=8192)


def test_stage_split_gives_the_first_stages_the_extra_layer() -> None:
    assert stage_layers(33, 2) == ((0, 17), (17, 33))
    assert stage_layers(32, 3) == ((0, 11), (11, 22), (22, 32))
    assert stage_layers(80, 4) == ((0, 20), (20, 40), (40, 60), (60, 80))
    assert stage_layers(5, 5) == ((0, 1), (1, 2), (2, 3), (3, 4), (4, 5))
    assert stage_layers(7, 1) == ((0, 7),)
    sm = _model(pp=3)  # Llama-3.1-8B: 32 layers as 11 + 11 + 10
    assert isinstance(sm.step_time, PipelineStepTime)
    assert [st.layer_span for st in sm.step_time.stages] == [(0, 11), (11, 22), (22, 32)]
    assert [st.lm_head for st in sm.step_time.stages] == [False, False, True]
    assert [kv.layers for _, kv in sm.stages] == [11, 11, 10]
    # the first stage: 11 layers + the embedding (the largest); the last: 10 layers + the LM head
    a = sm.args
    w = [w for w, _ in sm.stages]
    table = a.vocab * a.hidden * 2.0
    layer = w[1] / 11  # the middle stage: 11 layers, no embedding table
    assert w[0] == pytest.approx(11 * layer + table)
    assert w[2] == pytest.approx(10 * layer + table)  # untied LM head
    assert sm.weight_bytes == max(w) == w[0]


@pytest.mark.parametrize("pp", [0, -1, 33, 2.0, True])
def test_bad_pipeline_parallelism_is_a_one_line_error(pp: object) -> None:
    with pytest.raises(InputError) as e:
        _model(pp=pp)
    assert e.value.field == "pp" and "\n" not in str(e.value)


def test_pp1_is_todays_path() -> None:
    sm = _model()
    assert isinstance(sm.step_time, StepModel) and sm.stages == ()
    assert sm.step_time.layer_span == (0, 32) and sm.step_time.lm_head and sm.step_time.host
    assert sm.weight_bytes == weight_bytes(sm.args, "bf16", 1, 1)
    # one stage holding everything is the unsplit model's weights
    assert stage_weight_bytes(sm.args, "bf16", 1, 1, 0, 32, embedding=True, head=True) == pytest.approx(sm.weight_bytes)
    _, cfg = _cfg(sm)
    for arrival in (ClosedLoop(8), Poisson(4.0, seed=1)):
        wl = Workload(fixed_lengths(500, 300, 40), arrival)  # type: ignore[arg-type]
        ours, today = sm.simulate(wl, cfg), simulate(wl, sm.step_time, cfg)
        assert np.array_equal(ours.requests.finish_s, today.requests.finish_s)
        assert np.array_equal(ours.requests.first_token_s, today.requests.first_token_s)
        assert ours.steps == today.steps


def test_pp2_fits_a_model_one_gpu_cannot_hold() -> None:
    # Qwen3-32B in BF16 (65.5 GB) on one 48 GB L40S (ECC on: 44.3 GiB, 47.6 GB usable): no; on two,
    # 32.8 GB per GPU
    with pytest.raises(NoAnswerError):
        _cfg(_model("qwen3-32b", "l40s", None))
    one = _model("qwen3-32b", "l40s", None, pp=1)
    two = _model("qwen3-32b", "l40s", None, pp=2)
    assert two.weight_bytes == pytest.approx(one.weight_bytes / 2, rel=0.02)
    cap, _ = _cfg(two)
    assert cap.num_tokens > 45_000
    # where both fit, a GPU's cache holds more than 2x the tokens: half the layers per token and
    # more memory left by half the weights
    cap1, _ = _cfg(_model())
    cap2, _ = _cfg(_model(pp=2))
    assert cap2.num_tokens > 2 * cap1.num_tokens
    assert cap2.bytes_per_block * 2 == cap1.bytes_per_block


def test_pp2_throughput_at_high_concurrency_is_between_1x_and_2x_of_one_gpu() -> None:
    wl = Workload(fixed_lengths(200, 200, 512), ClosedLoop(128))
    one, two = _model(), _model(pp=2)
    r1 = one.simulate(wl, _cfg(one, 400)[1])
    r2 = two.simulate(wl, _cfg(two, 400)[1])
    assert r1.preemptions == r2.preemptions == 0
    ratio = r2.output_tokens_per_s / r1.output_tokens_per_s
    assert 1.0 < ratio < 2.0


def test_a_lone_requests_tpot_is_not_lower_with_pp2() -> None:
    wl = Workload(fixed_lengths(1000, 300, 3), ClosedLoop(1))
    one, two = _model(), _model(pp=2)
    t1 = one.simulate(wl, _cfg(one)[1]).tpot.mean
    t2 = two.simulate(wl, _cfg(two)[1]).tpot.mean
    assert isinstance(two.step_time, PipelineStepTime)
    assert t2 >= t1 + two.step_time.p2p_s(1)  # both stages' work + the send between them


def test_virtual_engines_share_the_requests_and_the_pool() -> None:
    sm = _model(pp=2)
    cap, cfg = _cfg(sm)
    rate = Poisson(6.0, seed=4)
    wl = Workload(fixed_lengths(300, 100, 30), rate)
    r = sm.simulate(wl, cfg)
    assert np.array_equal(r.requests.arrival_s, rate.arrivals(30))  # every request once, as sent
    assert np.all(r.requests.finish_s > r.requests.first_token_s)
    assert r.num_blocks == cap.num_blocks // 2 * 2
    # three in flight over two engines: two on one, one on the other; the lone engine is faster
    closed = sm.simulate(Workload(fixed_lengths(300, 100, 30), ClosedLoop(3)), cfg)
    tpot = closed.requests.tpot_s
    assert tpot[1::2].mean() < tpot[0::2].mean()
    # fast decode runs equal step-by-step simulation through the stages
    slow = simulate_pipeline(wl, sm.step_time, cfg, 2, decode_runs=False)
    np.testing.assert_allclose(slow.requests.finish_s, r.requests.finish_s, rtol=1e-9)
    ctx = np.array([100, 900, 37])
    assert isinstance(sm.step_time, PipelineStepTime)
    each = [sm.step_time(StepBatch.decode_only(ctx + j)) for j in range(20)]
    np.testing.assert_allclose(sm.step_time.decode_run(ctx, 20), each, rtol=1e-12)
    assert "pipeline" in sm.assumptions and "pipeline" not in _model().assumptions


def test_stage_boundaries_cross_nodes_over_the_network() -> None:
    sm = _model("llama-3.1-70b", pp=2)
    params = sm.step_time.stages[0].device.params  # type: ignore[union-attr]
    dgx = load_systems().get("dgx-h100")
    inside = boundary_links(dgx, 4, 2, params)
    across = boundary_links(dgx, 8, 2, params)
    assert inside[0].bytes_per_s > across[0].bytes_per_s
    with pytest.raises(InputError) as e:
        boundary_links(load_systems().get("workstation-4gpu"), 4, 2, params)
    assert e.value.field == "pp" and "\n" not in str(e.value)


def test_rate_search_helpers_take_the_pipeline_simulation() -> None:
    sm = _model(pp=2)
    _, cfg = _cfg(sm, 700)
    reqs = fixed_lengths(500, 200, 200)
    piped = saturation_rate(reqs, sm.step_time, cfg, 64, simulate_fn=sm.simulator)
    whole = saturation_rate(reqs, sm.step_time, cfg, 64)  # one engine over the whole pool: not pipelined
    assert piped.requests_per_s > whole.requests_per_s
    run = poisson_runner(reqs, sm.step_time, cfg, simulate_fn=sm.simulator)
    assert run(2.0).requests.arrival_s.size == 200
    assert idle_run(reqs, sm.step_time, cfg, simulate_fn=sm.simulator).tpot.mean > 0
