"""Speculative decoding in the serving simulation: the expected tokens per verification step, the
step cost of verifying and drafting, exact progress and KV lookahead in the scheduler, and the
decode-run fast path staying equal to step-by-step simulation."""

from __future__ import annotations

import numpy as np
import pytest

from whichgpu.errors import InputError, NoAnswerError
from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.system import load_systems
from whichgpu.serving import (
    AffineStepTime,
    BlockGroups,
    ClosedLoop,
    Poisson,
    RequestLengths,
    SchedulerConfig,
    SpecDecode,
    StepBatch,
    Workload,
    expected_tokens,
    fixed_lengths,
    simulate,
)
from whichgpu.serving.model import Setup, build
from whichgpu.serving.scheduler import _Engine


def _model(model: str = "llama-3.1-8b", gpu: str = "h100-sxm5-80gb", system: str = "dgx-h100", **kw: object):  # type: ignore[no-untyped-def]
    return build(Setup(model, load_catalog().get(gpu), load_systems().get(system), **kw))  # type: ignore[arg-type]


def _run(sm, workload: Workload, decode_runs: bool = True):  # type: ignore[no-untyped-def]
    cap = sm.capacity(max_seq_len=4096, max_num_batched_tokens=8192, max_num_seqs=256)
    return sm.simulate(workload, sm.scheduler_config(cap, max_num_seqs=256, max_num_batched_tokens=8192),
                       decode_runs=decode_runs)


def test_expected_tokens_per_verification_step() -> None:
    # Leviathan et al. 2023 eq. 1: E = (1 - a^(k+1)) / (1 - a)
    assert expected_tokens(4, 0.8) == pytest.approx((1 - 0.8**5) / 0.2)  # = 3.3616
    assert expected_tokens(4, 0.8) == pytest.approx(3.3616)
    assert expected_tokens(3, 0.5) == pytest.approx(1.875)  # 1 + 0.5 + 0.25 + 0.125
    assert expected_tokens(4, 1.0) == 5.0  # every draft accepted: k + 1
    assert expected_tokens(0, 0.3) == 1.0  # no drafts: one token per step
    assert expected_tokens(16, 1e-6) == pytest.approx(1.0, abs=1e-5)
    assert SpecDecode(7, 1.0).expected_tokens == 8.0


@pytest.mark.parametrize(("args", "field"), [
    ((0, 0.5), "spec_draft_len"), ((17, 0.5), "spec_draft_len"), ((2.0, 0.5), "spec_draft_len"), ((True, 0.5), "spec_draft_len"),
    ((4, 0.0), "spec_acceptance"), ((4, 1.5), "spec_acceptance"), ((4, -0.1), "spec_acceptance"), ((4, float("nan")), "spec_acceptance"),
    ((4, 0.5, ""), "spec_draft_model"),
])
def test_bad_spec_inputs_are_one_line_errors(args: tuple[object, ...], field: str) -> None:
    with pytest.raises(InputError) as e:
        SpecDecode(*args)  # type: ignore[arg-type]
    assert e.value.field == field and "\n" not in str(e.value)


@pytest.mark.parametrize(("kw", "field"), [
    ({"spec": SpecDecode(4, 0.7, "no-such-model")}, "spec_draft_model"),
    ({"spec": SpecDecode(4, 0.7, "qwen3-8b")}, "spec_draft_model"),  # another tokenizer
    ({"spec": SpecDecode(4, 0.7), "pp": 2}, "pp"),
])
def test_bad_spec_setups_are_one_line_errors(kw: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as e:
        _model(**kw)
    assert e.value.field == field and "\n" not in str(e.value)


def test_the_scheduler_config_must_carry_the_setups_spec() -> None:
    sm = _model(spec=SpecDecode(4, 0.8))
    cap = sm.capacity(max_seq_len=2048)
    assert sm.scheduler_config(cap).spec == SpecDecode(4, 0.8)
    with pytest.raises(InputError) as e:
        sm.simulate(Workload(fixed_lengths(100, 10, 2), ClosedLoop(1)), SchedulerConfig.from_capacity(cap))
    assert e.value.field == "spec" and "\n" not in str(e.value)


def test_near_zero_acceptance_gives_no_gain() -> None:
    wl = Workload(fixed_lengths(1000, 300, 4), ClosedLoop(1))
    base = _run(_model(), wl)
    spec = _run(_model(spec=SpecDecode(4, 0.01)), wl)
    # E = 1.0101: about one token per step, and each step also pays the 4 draft passes
    assert spec.tpot.mean >= 0.99 * base.tpot.mean
    assert spec.output_tokens_per_s <= 1.01 * base.output_tokens_per_s


def test_high_acceptance_cuts_small_batch_tpot_by_e_over_the_draft_share() -> None:
    spec = SpecDecode(4, 0.9)
    base, sp = _model(), _model(spec=spec)
    E = spec.expected_tokens  # (1 - 0.9^5) / 0.1 = 4.0951
    ctx = np.array([1250])  # the middle of the answer's contexts
    cpu = base.cpu_overhead_s
    t_base = base.step_time(StepBatch.decode_only(ctx)) + cpu
    t_spec = sp.step_time(StepBatch.decode_only(ctx, np.array([spec.draft_len]))) + cpu
    expected = E * t_base / t_spec  # = E / (1 + extra cost of verifying 5 tokens and drafting, as a share)
    assert 1.5 < expected < E
    wl = Workload(fixed_lengths(1000, 501, 2), ClosedLoop(1))
    ratio = _run(base, wl).tpot.mean / _run(sp, wl).tpot.mean
    assert ratio == pytest.approx(expected, rel=0.02)


def test_output_token_counts_and_steps_are_exact() -> None:
    # a constant 10 ms step: prefill (1 step, first token), then 100 more tokens
    step = AffineStepTime(base_s=0.01)
    wl = Workload(fixed_lengths(1000, 101, 1), ClosedLoop(1))
    for spec, decode_steps in ((SpecDecode(3, 1.0), 25),  # E = 4: 100 / 4 steps
                               (SpecDecode(2, 0.5), 58)):  # E = 1.75: floor(1.75 j) >= 100 at j = 58 (101.5)
        for runs in (True, False):
            cfg = SchedulerConfig(num_blocks=1000, spec=spec)
            r = simulate(wl, step, cfg, decode_runs=runs)
            assert r.steps == 1 + decode_steps
            assert r.tpot.mean == pytest.approx(decode_steps * 0.01 / 100)
            assert r.ttft.mean == pytest.approx(0.01)
    # every request ends with exactly its answer length, fast path or not, tight pool or not
    rng = np.random.default_rng(3)
    lengths = RequestLengths(rng.integers(20, 400, 60), rng.integers(1, 300, 60))
    for blocks in (10_000, 120):
        for runs in (True, False):
            eng = _Engine(Workload(lengths, ClosedLoop(16)), AffineStepTime(0.01, 1e-5, 1e-8),
                          SchedulerConfig(num_blocks=blocks, max_num_batched_tokens=512, spec=SpecDecode(5, 0.7)), runs)
            eng.run()
            assert np.array_equal(eng.out, lengths.output_len)


@pytest.mark.parametrize("arrival", [ClosedLoop(24), Poisson(30.0, seed=2)])
@pytest.mark.parametrize("blocks", [100_000, 300])
def test_decode_runs_equal_step_by_step_with_the_step_model(arrival: object, blocks: int) -> None:
    sm = _model(spec=SpecDecode(3, 0.75))
    rng = np.random.default_rng(0)
    wl = Workload(RequestLengths(rng.integers(50, 600, 120), rng.integers(2, 300, 120)), arrival)  # type: ignore[arg-type]
    cfg = SchedulerConfig(num_blocks=blocks, max_num_seqs=64, max_num_batched_tokens=2048,
                          cpu_overhead_s=sm.cpu_overhead_s, spec=sm.setup.spec)
    fast = simulate(wl, sm.step_time, cfg)
    slow = simulate(wl, sm.step_time, cfg, decode_runs=False)
    assert fast.steps == slow.steps and fast.preemptions == slow.preemptions
    assert fast.peak_blocks_used == slow.peak_blocks_used
    np.testing.assert_allclose(fast.requests.finish_s, slow.requests.finish_s, rtol=1e-9)
    np.testing.assert_allclose(fast.requests.first_token_s, slow.requests.first_token_s, rtol=1e-9)


@pytest.mark.parametrize("knobs", [{"prefix_cache_hit_rate": 0.5}, {"groups": BlockGroups(16, 1, 1, 9)},
                                   {"sglang_admission": True, "prefill_first": True}, {"sglang_admission": True}])
def test_decode_runs_equal_step_by_step_with_prefix_caching_and_sliding_windows(knobs: dict[str, object]) -> None:
    rng = np.random.default_rng(5)
    wl = Workload(RequestLengths(rng.integers(30, 500, 150), rng.integers(1, 200, 150)), Poisson(40.0, seed=3))
    step = AffineStepTime(0.008, 2e-5, 2e-9, 1e-12)
    cfg = SchedulerConfig(num_blocks=400, max_num_seqs=32, max_num_batched_tokens=1024, spec=SpecDecode(6, 0.65),
                          **knobs)  # type: ignore[arg-type]
    fast, slow = simulate(wl, step, cfg), simulate(wl, step, cfg, decode_runs=False)
    assert fast.steps == slow.steps and fast.preemptions == slow.preemptions
    np.testing.assert_allclose(fast.requests.finish_s, slow.requests.finish_s, rtol=1e-12)


def test_drafts_are_cut_to_the_token_budget() -> None:
    # 32 decoding requests x (1 + 4) tokens exceed a 64-token budget: later requests verify fewer
    # drafts or wait (vLLM trims spec_token_ids); the run still ends with every answer exact
    lengths = fixed_lengths(40, 50, 64)
    cfg = SchedulerConfig(num_blocks=10_000, max_num_batched_tokens=64, spec=SpecDecode(4, 0.8))
    eng = _Engine(Workload(lengths, ClosedLoop(32)), AffineStepTime(0.01, 1e-4), cfg, True)
    r = eng.run()
    assert np.array_equal(eng.out, lengths.output_len)
    plain = simulate(Workload(lengths, ClosedLoop(32)), AffineStepTime(0.01, 1e-4),
                     SchedulerConfig(num_blocks=10_000, max_num_batched_tokens=64))
    assert r.tpot.mean < plain.tpot.mean


def test_kv_lookahead_slots_raise_block_use() -> None:
    step = AffineStepTime(0.01, 1e-5)
    wl = Workload(fixed_lengths(1000, 300, 64), ClosedLoop(32))
    base = simulate(wl, step, SchedulerConfig(num_blocks=100_000))
    spec = simulate(wl, step, SchedulerConfig(num_blocks=100_000, spec=SpecDecode(8, 0.3)))
    assert spec.peak_blocks_used > base.peak_blocks_used
    # a pool that holds a lone request's prompt + answer exactly has no room for its 8 lookahead slots
    exact = (1000 + 297 - 1) // 16  # 81 blocks of 16 tokens hold the 1,296 tokens exactly
    one = Workload(fixed_lengths(1000, 297, 1), ClosedLoop(1))
    simulate(one, step, SchedulerConfig(num_blocks=exact))
    with pytest.raises(NoAnswerError):
        simulate(one, step, SchedulerConfig(num_blocks=exact, spec=SpecDecode(8, 0.3)))


def test_a_draft_model_costs_more_than_a_draft_head() -> None:
    kw: dict[str, object] = {"model": "llama-3.1-70b", "gpu": "h200", "system": "dgx-h200", "tp": 2}
    plain = _model(**kw)  # type: ignore[arg-type]
    head = _model(**kw, spec=SpecDecode(4, 0.8))  # type: ignore[arg-type]
    draft = _model(**kw, spec=SpecDecode(4, 0.8, "llama-3.1-8b"))  # type: ignore[arg-type]
    b = StepBatch.decode_only(np.full(8, 2048), np.full(8, 4))
    assert plain.step_time(b) < head.step_time(b) < draft.step_time(b)
    # weights: one extra decoder layer vs a whole 8B model (split over tp 2); KV: one layer vs 32
    assert plain.weight_bytes < head.weight_bytes < 1.02 * plain.weight_bytes
    assert draft.weight_bytes - plain.weight_bytes == pytest.approx(16.06e9 / 2, rel=0.02)
    assert (plain.kv.layers, head.kv.layers, draft.kv.layers) == (80, 81, 112)
    assert "speculative" in head.assumptions and "speculative" not in plain.assumptions
    wl = Workload(fixed_lengths(1000, 200, 4), ClosedLoop(1))
    assert _run(head, wl).tpot.mean < _run(draft, wl).tpot.mean < _run(plain, wl).tpot.mean
