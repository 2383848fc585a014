"""The continuous-batching scheduler simulation (serving/scheduler.py), workloads and results."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from whichgpu.errors import InputError, NoAnswerError
from whichgpu.serving import (
    AffineStepTime,
    BlockGroups,
    ClosedLoop,
    LatencyStats,
    Poisson,
    RequestLengths,
    SchedulerConfig,
    StepBatch,
    Workload,
    fixed_lengths,
    read_lengths,
    sample_lengths,
    simulate,
    spread_lengths,
)
from whichgpu.serving.scheduler import _Blocks, _Engine, _preemption_cut, schedule_running

# 10 ms a step + 10 us a token + 1 ns per cached position a decode reads
STEP = AffineStepTime(base_s=10e-3, per_token_s=10e-6, per_context_s=1e-9)
PLENTY = SchedulerConfig(num_blocks=100_000, max_num_seqs=256, max_num_batched_tokens=2048)


class Recorder:
    """A step-time function that keeps every batch (no decode_run: one call per step)."""

    def __init__(self, inner: AffineStepTime = STEP) -> None:
        self.inner = inner
        self.batches: list[StepBatch] = []

    def __call__(self, batch: StepBatch) -> float:
        self.batches.append(batch)
        return self.inner(batch)


def closed(n: int, c: int, inp: int, out: int) -> Workload:
    return Workload(fixed_lengths(inp, out, n), ClosedLoop(c))


def test_single_request_ttft_is_its_prefill_step_and_tpot_its_decode_steps() -> None:
    overhead = 2e-3
    cfg = SchedulerConfig(num_blocks=1000, cpu_overhead_s=overhead)
    r = simulate(closed(1, 1, 100, 10), STEP, cfg)
    # prefill: one step of 100 tokens: 10 ms + 100 x 10 us + 2 ms overhead = 13 ms
    assert r.ttft.mean == pytest.approx(10e-3 + 100 * 10e-6 + overhead)
    # 9 decode steps feeding tokens 101..109: 10 ms + 10 us + (100 + j + 1) ns + 2 ms each
    decode = [10e-3 + 10e-6 + (101 + j) * 1e-9 + overhead for j in range(9)]
    assert r.tpot.mean == pytest.approx(sum(decode) / 9)
    assert r.e2e.mean == pytest.approx(r.ttft.mean + sum(decode))
    assert r.steps == 10
    assert r.requests.output_tokens[0] == 10


def test_concurrency_one_never_batches() -> None:
    rec = Recorder()
    r = simulate(closed(5, 1, 64, 20), rec, PLENTY)
    assert all(b.num_seqs == 1 for b in rec.batches)
    assert r.mean_batch_seqs == 1
    assert r.steps == 5 * 20  # one prefill step (first token) + 19 decode steps each
    # closed loop: each request is sent when the previous one finishes
    np.testing.assert_allclose(r.requests.arrival_s[1:], r.requests.finish_s[:-1])
    # all requests alike, served alone: the same latencies
    assert np.ptp(r.requests.ttft_s) < 1e-12 and np.ptp(r.requests.e2e_s) < 1e-12


def test_token_budget_chunks_a_long_prompt() -> None:
    rec = Recorder()
    r = simulate(closed(1, 1, 5000, 2), rec, PLENTY)
    # 5,000 prompt tokens in chunks of 2,048, 2,048, 904, each attending to what is cached + itself
    chunks = [(b.prefill_tokens.tolist(), b.prefill_context.tolist()) for b in rec.batches[:3]]
    assert chunks == [([2048], [2048]), ([2048], [4096]), ([904], [5000])]
    assert r.ttft.mean == pytest.approx(sum(STEP(b) for b in rec.batches[:3]))
    short = simulate(closed(1, 1, 2000, 2), STEP, PLENTY)
    assert r.ttft.mean > 2 * short.ttft.mean  # three steps instead of one


def test_decode_and_prefill_share_a_step_within_the_budget() -> None:
    rec = Recorder()
    cfg = SchedulerConfig(num_blocks=10_000, max_num_batched_tokens=512)
    simulate(Workload(RequestLengths(np.array([16, 1000]), np.array([50, 5])), ClosedLoop(2)), rec, cfg)
    # step 0: request 0's prompt (16) + request 1's first chunk (512 - 16 = 496); step 1: request 0
    # decodes (context 17) and request 1 takes the rest of its prompt, 504 <= 511 tokens left
    assert rec.batches[0].prefill_tokens.tolist() == [16, 496]
    assert rec.batches[1].decode_context.tolist() == [17]
    assert rec.batches[1].prefill_tokens.tolist() == [504]
    assert rec.batches[1].prefill_context.tolist() == [1000]


def test_without_chunked_prefill_a_prompt_waits_for_a_step_with_room() -> None:
    # TensorRT-LLM's default: two 600-token prompts and a 1,024-token budget. Chunked: step 0 takes
    # request 0's prompt and 424 of request 1's; whole prompts: request 1 waits for step 1, beside
    # request 0's first decode (context 601)
    lengths = RequestLengths(np.array([600, 600]), np.array([5, 5]))
    rec = Recorder()
    simulate(Workload(lengths, ClosedLoop(2)), rec, SchedulerConfig(num_blocks=10_000, max_num_batched_tokens=1024))
    assert rec.batches[0].prefill_tokens.tolist() == [600, 424]
    whole = Recorder()
    r = simulate(Workload(lengths, ClosedLoop(2)), whole,
                 SchedulerConfig(num_blocks=10_000, max_num_batched_tokens=1024, chunked_prefill=False))
    assert whole.batches[0].prefill_tokens.tolist() == [600] and whole.batches[0].decode_context.size == 0
    assert whole.batches[1].prefill_tokens.tolist() == [600] and whole.batches[1].prefill_context.tolist() == [600]
    assert whole.batches[1].decode_context.tolist() == [601]
    assert all(b.prefill_tokens.tolist() in ([], [600]) for b in whole.batches)  # never a partial prompt
    assert r.requests.first_token_s[1] == pytest.approx(STEP(whole.batches[0]) + STEP(whole.batches[1]))


def test_without_chunked_prefill_a_prompt_over_the_budget_is_refused() -> None:
    with pytest.raises(NoAnswerError, match="prompt of 5,000 tokens exceeds the step budget of 2,048"):
        simulate(closed(1, 1, 5000, 2), STEP, SchedulerConfig(num_blocks=10_000, chunked_prefill=False))


def test_prefill_first_steps_never_mix_prefill_with_decode() -> None:
    # SGLang's default (no --enable-mixed-chunk): the same two requests as above, but request 0
    # waits out request 1's second chunk instead of decoding beside it
    rec = Recorder()
    cfg = SchedulerConfig(num_blocks=10_000, max_num_batched_tokens=512, prefill_first=True)
    r = simulate(Workload(RequestLengths(np.array([16, 1000]), np.array([50, 5])), ClosedLoop(2)), rec, cfg)
    assert rec.batches[0].prefill_tokens.tolist() == [16, 496]
    assert rec.batches[1].prefill_tokens.tolist() == [504] and rec.batches[1].decode_context.size == 0
    assert rec.batches[2].prefill_tokens.size == 0 and rec.batches[2].decode_context.tolist() == [17, 1001]
    assert all(b.prefill_tokens.size == 0 or b.decode_context.size == 0 for b in rec.batches)
    mixed = simulate(Workload(RequestLengths(np.array([16, 1000]), np.array([50, 5])), ClosedLoop(2)), STEP,
                     SchedulerConfig(num_blocks=10_000, max_num_batched_tokens=512))
    # request 0 loses a step to the prefill: its answer ends later, request 1's first token does not
    assert r.requests.finish_s[0] > mixed.requests.finish_s[0]
    assert r.requests.first_token_s[1] <= mixed.requests.first_token_s[1]


def test_prefill_first_admits_a_waiting_request_as_soon_as_its_blocks_fit() -> None:
    # a decode run stops for a request that arrives: the next step prefills it, the decoders wait
    rec = Recorder()
    cfg = SchedulerConfig(num_blocks=10_000, max_num_batched_tokens=2048, prefill_first=True)
    wl = Workload(RequestLengths(np.array([100, 100]), np.array([1000, 5])), Poisson(1.0, seed=0))
    res = simulate(wl, rec, cfg)
    arrival, first, finish = res.requests.arrival_s, res.requests.first_token_s, res.requests.finish_s
    assert arrival[1] < finish[0]  # request 1 arrives while request 0 decodes (1,000 steps of ~10 ms)
    prefills = [i for i, b in enumerate(rec.batches) if b.prefill_tokens.size]
    assert len(prefills) == 2 and all(rec.batches[i].decode_context.size == 0 for i in prefills)
    # its prefill is the first step that starts after it arrives: at most one step (~10 ms) of waiting
    assert arrival[1] < first[1] <= arrival[1] + 2 * 11e-3


def test_max_num_seqs_caps_the_batch() -> None:
    rec = Recorder()
    cfg = SchedulerConfig(num_blocks=100_000, max_num_seqs=3)
    r = simulate(closed(12, 8, 32, 16), rec, cfg)
    assert max(b.num_seqs for b in rec.batches) == 3
    assert (r.requests.output_tokens == 16).all()
    unlimited = simulate(closed(12, 8, 32, 16), STEP, PLENTY)
    assert unlimited.ttft.mean < r.ttft.mean  # queueing behind the cap


def test_preemption_when_blocks_are_scarce_and_everyone_still_finishes() -> None:
    # 40 blocks of 16 tokens = 640 tokens; 6 requests of 64 + 200 tokens need 17 blocks each at the end
    cfg = SchedulerConfig(num_blocks=40, max_num_seqs=16)
    rec = Recorder()
    r = simulate(closed(6, 6, 64, 200), rec, cfg)
    assert r.preemptions > 0
    assert r.peak_blocks_used <= 40
    assert (r.requests.output_tokens == 200).all()
    assert np.isfinite(r.requests.finish_s).all()
    assert (r.requests.finish_s >= r.requests.first_token_s).all()
    # a preempted request is recomputed: a prefill chunk longer than its 64-token prompt
    assert max(int(b.prefill_tokens.max(initial=0)) for b in rec.batches) > 64
    roomy = simulate(closed(6, 6, 64, 200), STEP, PLENTY)
    assert roomy.preemptions == 0 and roomy.e2e.mean < r.e2e.mean


def test_no_evict_reserves_whole_requests_and_never_preempts() -> None:
    # the case above under TensorRT-LLM's GUARANTEED_NO_EVICT: each request of 64 + 200 tokens holds
    # ceil(263 / 16) = 17 blocks at its last step, so 40 blocks admit two at a time (34 <= 40, 51 > 40)
    cfg = SchedulerConfig(num_blocks=40, max_num_seqs=16, no_evict=True)
    rec = Recorder()
    r = simulate(closed(6, 6, 64, 200), rec, cfg)
    assert r.preemptions == 0
    assert max(b.num_seqs for b in rec.batches) == 2
    assert r.peak_blocks_used <= 34
    assert (r.requests.output_tokens == 200).all()
    # no recomputation: every prefill chunk is a 64-token prompt
    assert max(int(b.prefill_tokens.max(initial=0)) for b in rec.batches) == 64
    # the others queue: the third and later requests wait for a pair to finish
    order = np.sort(r.requests.ttft_s)
    assert order[2] > r.requests.e2e_s.min()
    # with room for everyone both policies run the same schedule
    roomy = SchedulerConfig(num_blocks=1000, max_num_seqs=16)
    a, b = simulate(closed(6, 6, 64, 200), STEP, roomy), simulate(closed(6, 6, 64, 200), STEP,
                                                                  SchedulerConfig(num_blocks=1000, max_num_seqs=16,
                                                                                  no_evict=True))
    np.testing.assert_allclose(a.requests.finish_s, b.requests.finish_s, rtol=1e-12)


def test_no_evict_admits_on_the_reservation_not_on_the_free_blocks() -> None:
    # block_size 4, 12 blocks, requests of 8 + 20 tokens (7 blocks at the end): under preemption
    # both start at once (2 blocks each), under no_evict the second waits for the first to finish
    base = SchedulerConfig(num_blocks=12, block_size=4)
    keep = SchedulerConfig(num_blocks=12, block_size=4, no_evict=True)
    pre, ne = simulate(closed(2, 2, 8, 20), STEP, base), simulate(closed(2, 2, 8, 20), STEP, keep)
    assert pre.requests.first_token_s[1] < pre.requests.finish_s[0]
    assert ne.preemptions == 0
    assert ne.requests.first_token_s[1] > ne.requests.finish_s[0]


def test_the_most_recently_admitted_request_is_preempted_first() -> None:
    # block_size 4, 12 blocks: two requests of 8 + 20 tokens each end needing 7 blocks (27 tokens)
    cfg = SchedulerConfig(num_blocks=12, block_size=4)
    r = simulate(closed(2, 2, 8, 20), STEP, cfg)
    assert r.requests.preemptions.tolist()[0] == 0
    assert r.requests.preemptions.tolist()[1] >= 1
    assert r.requests.finish_s[0] < r.requests.finish_s[1]


def _loop_reference(new: np.ndarray, computed: np.ndarray, held: np.ndarray, budget: int, free: int,
                    blocks: _Blocks) -> tuple[int, list[int], list[int], int]:
    """vLLM's running loop written plainly (scheduler.py ``Scheduler.schedule``, FCFS)."""
    running = list(range(new.size))
    held = held.copy()
    served: list[int] = []
    needs: list[int] = []
    i = 0
    while i < len(running) and budget > 0:
        n = min(int(new[i]), budget)
        need = blocks.one(int(computed[i]) + n) - int(held[i])
        ok = True
        while need > free:
            victim = running.pop()
            free += int(held[victim])
            held[victim] = 0
            if victim == i:
                ok = False
                break
        if not ok:
            break
        free -= need
        budget -= n
        served.append(n)
        needs.append(need)
        i += 1
    return len(served), served, needs, len(running)


def test_vectorised_running_loop_matches_the_plain_loop() -> None:
    rng = np.random.default_rng(0)
    blocks = _Blocks(SchedulerConfig(num_blocks=1, block_size=4))
    for _ in range(3000):
        m = int(rng.integers(1, 12))
        computed = rng.integers(0, 40, m)
        new = np.where(rng.random(m) < 0.6, 1, rng.integers(1, 60, m))
        held = np.array([blocks.one(int(c)) for c in computed])
        budget = int(rng.integers(1, 200))
        free = int(rng.integers(0, 30))
        n, got_new, got_need, cut = schedule_running(new, computed, held, budget, free, blocks.many)
        ref = _loop_reference(new, computed, held, budget, free, blocks)
        assert (n, got_new.tolist(), got_need.tolist(), cut) == ref


def test_preemption_cut_of_a_decode_step_matches_the_plain_loop() -> None:
    # every running request decodes one token; their blocks fall short: the cut _short_step takes
    rng = np.random.default_rng(1)
    blocks = _Blocks(SchedulerConfig(num_blocks=1, block_size=4))
    checked = 0
    for _ in range(3000):
        m = int(rng.integers(1, 14))
        computed = rng.integers(0, 60, m)
        held = np.array([blocks.one(int(c)) for c in computed])
        ones = np.ones(m, np.int64)
        need = blocks.many(computed + 1) - held
        free = int(rng.integers(0, 4))
        if int(need.sum()) <= free:
            continue
        n, _, _, cut = _loop_reference(ones, computed, held, m, free, blocks)
        assert n == cut  # a decode step that falls short serves exactly the requests it keeps
        if n:
            assert _preemption_cut(need, held, free) == n
            checked += 1
    assert checked > 500


def test_decode_steps_short_of_blocks_take_the_lean_path(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    lean = _Engine._short_step

    def counted(self: _Engine) -> None:
        calls.append(len(self.running))
        lean(self)

    monkeypatch.setattr(_Engine, "_short_step", counted)
    cfg = SchedulerConfig(num_blocks=400, max_num_seqs=64, max_num_batched_tokens=1024)
    wl = closed(120, 48, 300, 120)
    fast = simulate(wl, STEP, cfg)
    lean_steps = len(calls)
    assert lean_steps and fast.preemptions >= lean_steps  # each lean step preempts
    slow = simulate(wl, STEP, cfg, decode_runs=False)  # one step at a time: the generic scheduler only
    assert len(calls) == lean_steps
    np.testing.assert_allclose(fast.requests.finish_s, slow.requests.finish_s, rtol=1e-12)
    assert (fast.requests.preemptions == slow.requests.preemptions).all()
    assert (fast.steps, fast.peak_blocks_used) == (slow.steps, slow.peak_blocks_used)


@pytest.mark.parametrize("groups", [BlockGroups(16), BlockGroups(4, 3), BlockGroups(1)])
def test_blocks_added_by_decode_steps_in_closed_form_match_counting_them(groups: BlockGroups) -> None:
    blocks = _Blocks(SchedulerConfig(num_blocks=1, block_size=groups.block_size, groups=groups))
    rng = np.random.default_rng(2)
    for _ in range(200):
        ctx = rng.integers(1, 300, int(rng.integers(1, 40)))
        held = int(blocks.many(ctx).sum())
        added = blocks.added_by_steps(ctx, held)
        assert added is not None
        for s in range(1, 70):
            assert added(s) == int(blocks.many(ctx + s - 1).sum()) - held
        steps = np.arange(70)  # the same for an array of step counts (0 steps add nothing)
        assert blocks.added_by_steps_each(ctx, held, steps).tolist() == [0] + [added(s) for s in range(1, 70)]
    sliding = _Blocks(SchedulerConfig(num_blocks=1, groups=BlockGroups(16, 1, 1, 4)))
    assert sliding.added_by_steps(np.array([5]), 1) is None  # the window's cap: counted step by step
    ctx = np.array([5, 60, 200])
    held = int(sliding.many(ctx - 1).sum())
    assert sliding.added_by_steps_each(ctx, held, np.arange(5, 90, 7)).tolist() == [
        int(sliding.many(ctx + s - 1).sum()) - held for s in range(5, 90, 7)]


@pytest.mark.parametrize("workload", [
    closed(40, 16, 300, 120),
    Workload(fixed_lengths(300, 120, 60), Poisson(20.0, seed=3)),
    Workload(fixed_lengths(300, 120, 60), Poisson(1.0, seed=3)),  # runs going on past finishes, nothing waiting
    Workload(sample_lengths(RequestLengths(np.array([50, 900, 3000]), np.array([10, 200, 64])), 80, seed=1),
             Poisson(8.0, seed=5)),
])
@pytest.mark.parametrize("cfg", [
    SchedulerConfig(num_blocks=100_000, max_num_seqs=8, max_num_batched_tokens=512),
    SchedulerConfig(num_blocks=300, max_num_seqs=64, max_num_batched_tokens=1024, prefix_cache_hit_rate=0.3),
    SchedulerConfig(num_blocks=500, groups=BlockGroups(16, 1, 2, 5), cpu_overhead_s=1e-3),
    SchedulerConfig(num_blocks=300, max_num_seqs=64, max_num_batched_tokens=1024, no_evict=True),
    SchedulerConfig(num_blocks=100_000, max_num_seqs=8, max_num_batched_tokens=512, prefill_first=True),
    SchedulerConfig(num_blocks=300, max_num_seqs=64, max_num_batched_tokens=1024, prefill_first=True),
    SchedulerConfig(num_blocks=300, max_num_seqs=64, max_num_batched_tokens=4096, no_evict=True, chunked_prefill=False),
    SchedulerConfig(num_blocks=300, max_num_seqs=64, max_num_batched_tokens=4096, chunked_prefill=False),
    SchedulerConfig(num_blocks=300, max_num_seqs=64, max_num_batched_tokens=1024, prefill_first=True,
                    sglang_admission=True),
    SchedulerConfig(num_blocks=2000, max_num_seqs=64, max_num_batched_tokens=1024, prefill_first=True,
                    sglang_admission=True, groups=BlockGroups(16, 1, 1, 8)),
    SchedulerConfig(num_blocks=300, max_num_seqs=64, max_num_batched_tokens=1024, sglang_admission=True),
    SchedulerConfig(num_blocks=300, max_num_seqs=64, max_num_batched_tokens=4096, no_evict=True, chunked_prefill=False,
                    adp_balance=(20, 3), adp_groups=4),
    SchedulerConfig(num_blocks=100_000, max_num_seqs=8, max_num_batched_tokens=512, adp_balance=(7, 0), adp_groups=8),
])
def test_decode_runs_change_nothing(workload: Workload, cfg: SchedulerConfig) -> None:
    fast = simulate(workload, STEP, cfg)
    slow = simulate(workload, STEP, cfg, decode_runs=False)
    generic = simulate(workload, lambda b: STEP(b), cfg)  # no decode_run: one call per step
    for other in (slow, generic):
        for name in ("arrival_s", "first_token_s", "finish_s"):
            np.testing.assert_allclose(getattr(fast.requests, name), getattr(other.requests, name), rtol=1e-12,
                                       atol=1e-12)
        assert (fast.requests.preemptions == other.requests.preemptions).all()
        assert (fast.steps, fast.peak_blocks_used) == (other.steps, other.peak_blocks_used)


def test_prefix_cache_hits_skip_prefill_compute() -> None:
    rec = Recorder()
    cfg = SchedulerConfig(num_blocks=1000, prefix_cache_hit_rate=0.5)
    r = simulate(closed(1, 1, 1000, 4), rec, cfg)
    # 50 % of 1,000 = 500 -> 496 (31 whole blocks of 16) cached; 504 tokens computed, attending to 1,000
    assert rec.batches[0].prefill_tokens.tolist() == [504]
    assert rec.batches[0].prefill_context.tolist() == [1000]
    assert r.peak_blocks_used == 63  # the cached blocks are still held: ceil(1003 / 16)
    cold = simulate(closed(1, 1, 1000, 4), STEP, SchedulerConfig(num_blocks=1000))
    assert r.ttft.mean < cold.ttft.mean


def test_sliding_window_groups_cap_the_blocks_held() -> None:
    # one full group + one sliding group capped at 3 blocks: 1,000 tokens hold 63 + 3 blocks
    cfg = SchedulerConfig(num_blocks=1000, groups=BlockGroups(16, 1, 1, 3))
    r = simulate(closed(1, 1, 900, 101), STEP, cfg)
    assert r.peak_blocks_used == 63 + 3


def test_a_request_that_can_never_fit_is_a_no_answer() -> None:
    with pytest.raises(NoAnswerError, match="needs 63 KV blocks but the cache holds 50"):
        simulate(closed(1, 1, 900, 101), STEP, SchedulerConfig(num_blocks=50))


def test_throughput_is_tokens_over_the_measured_window() -> None:
    r = simulate(closed(30, 4, 200, 50), STEP, PLENTY)
    window = r.requests.finish_s.max() - r.requests.arrival_s.min()
    assert r.duration_s == pytest.approx(window)
    assert r.requests_per_s == pytest.approx(30 / window)
    assert r.output_tokens_per_s == pytest.approx(30 * 50 / window)
    assert r.total_tokens_per_s == pytest.approx(30 * 250 / window)


def test_percentiles_on_a_known_case() -> None:
    s = LatencyStats.of(np.arange(1.0, 101.0))  # 1..100: linear interpolation between order statistics
    assert (s.mean, s.p50, s.p90, s.p99) == pytest.approx((50.5, 50.5, 90.1, 99.01))
    assert s.to_ms()["p99"] == pytest.approx(99_010)
    assert np.isnan(LatencyStats.of(np.array([])).mean)


def test_poisson_arrivals_are_reproducible_and_at_the_rate() -> None:
    a = Poisson(4.0, seed=7).arrivals(20_000)
    assert a[0] == 0 and (np.diff(a) >= 0).all()
    np.testing.assert_array_equal(a, Poisson(4.0, seed=7).arrivals(20_000))
    assert not np.array_equal(a, Poisson(4.0, seed=8).arrivals(20_000))
    assert (a.size - 1) / a[-1] == pytest.approx(4.0, rel=0.03)
    wl = Workload(fixed_lengths(100, 20, 50), Poisson(2.0, seed=1))
    r1, r2 = simulate(wl, STEP, PLENTY), simulate(wl, STEP, PLENTY)
    np.testing.assert_array_equal(r1.requests.finish_s, r2.requests.finish_s)


def test_sparse_arrivals_see_no_queueing() -> None:
    # one request every ~100 s: each is alone, its TTFT is one prefill step
    r = simulate(Workload(fixed_lengths(100, 5, 20), Poisson(0.01, seed=2)), STEP, PLENTY)
    np.testing.assert_allclose(r.requests.ttft_s, 10e-3 + 100 * 10e-6)


def test_lengths_files(tmp_path: Path) -> None:
    jl = tmp_path / "l.jsonl"
    jl.write_text("\n".join(json.dumps(d) for d in [{"prompt_tokens": 10, "completion_tokens": 3, "x": 1},
                                                     {"input_len": 7, "output_len": 2}]) + "\n")
    got = read_lengths(jl)
    assert got.input_len.tolist() == [10, 7] and got.output_len.tolist() == [3, 2]
    cv = tmp_path / "l.csv"
    cv.write_text("Input_Len,output_len,other\n5,6,x\n8,9,y\n")
    got = read_lengths(cv)
    assert got.input_len.tolist() == [5, 8] and got.output_len.tolist() == [6, 9]
    s = sample_lengths(got, 100, seed=3)
    assert len(s) == 100 and set(zip(s.input_len.tolist(), s.output_len.tolist(), strict=True)) <= {(5, 6), (8, 9)}
    np.testing.assert_array_equal(s.input_len, sample_lengths(got, 100, seed=3).input_len)


def test_bad_lengths_files(tmp_path: Path) -> None:
    missing = tmp_path / "m.csv"
    missing.write_text("prompt,answer\n1,2\n")
    with pytest.raises(InputError, match="row 1 has none of the fields input_len"):
        read_lengths(missing)
    neg = tmp_path / "n.jsonl"
    neg.write_text('{"input_len": -3, "output_len": 2}\n')
    with pytest.raises(InputError, match="'input_len' must be a whole number of tokens >= 1, got -3"):
        read_lengths(neg)
    with pytest.raises(InputError, match="cannot read the lengths file"):
        read_lengths(tmp_path / "absent.jsonl")
    other = tmp_path / "l.txt"
    other.write_text("1 2\n")
    with pytest.raises(InputError, match=r"valid: \.jsonl, \.csv"):
        read_lengths(other)


@pytest.mark.parametrize(("make", "match"), [
    (lambda: fixed_lengths(0, 10, 5), "input_len must be a whole number of tokens >= 1, got 0"),
    (lambda: fixed_lengths(10, -1, 5), "output_len must be"),
    (lambda: fixed_lengths(10, 10, 0), "num_requests must be"),
    (lambda: Poisson(0.0), "rate_per_s must be a finite number > 0"),
    (lambda: Poisson(-2.0), "rate_per_s"),
    (lambda: ClosedLoop(0), "concurrency must be"),
    (lambda: SchedulerConfig(num_blocks=0), "num_blocks must be"),
    (lambda: SchedulerConfig(num_blocks=10, prefix_cache_hit_rate=1.0), "prefix_cache_hit_rate"),
])
def test_bad_workload_values(make: object, match: str) -> None:
    with pytest.raises(InputError, match=match):
        make()  # type: ignore[operator]


def test_request_latency_delays_the_scheduler_and_counts_in_ttft_not_in_tpot() -> None:
    lag = 30e-3
    cfg = SchedulerConfig(num_blocks=1000, request_latency_s=lag)
    base = simulate(closed(3, 1, 100, 10), STEP, SchedulerConfig(num_blocks=1000))
    r = simulate(closed(3, 1, 100, 10), STEP, cfg)
    # each request waits `lag` before its prefill step: TTFT and E2E grow by it, TPOT does not
    np.testing.assert_allclose(r.requests.ttft_s, base.requests.ttft_s + lag)
    np.testing.assert_allclose(r.requests.e2e_s, base.requests.e2e_s + lag)
    assert r.tpot.mean == pytest.approx(base.tpot.mean)
    # closed loop: the next request is sent when the previous one finishes, not when the scheduler sees it
    np.testing.assert_allclose(r.requests.arrival_s[1:], r.requests.finish_s[:-1])
    assert r.requests.arrival_s[1] == pytest.approx(base.requests.finish_s[0] + lag)


def test_request_latency_under_open_loop_arrivals() -> None:
    lag = 5e-3
    wl = Workload(fixed_lengths(50, 4, 20), Poisson(rate_per_s=50.0, seed=3))
    base = simulate(wl, STEP, PLENTY)
    r = simulate(wl, STEP, SchedulerConfig(num_blocks=100_000, max_num_seqs=256, max_num_batched_tokens=2048,
                                           request_latency_s=lag))
    np.testing.assert_allclose(r.requests.arrival_s, base.requests.arrival_s)  # sends as drawn
    # every arrival reaches the scheduler `lag` later: the whole schedule shifts, batching included
    np.testing.assert_allclose(r.requests.ttft_s, base.requests.ttft_s + lag, rtol=1e-9)


def test_a_negative_request_latency_is_refused() -> None:
    with pytest.raises(InputError, match="request_latency_s"):
        SchedulerConfig(num_blocks=10, request_latency_s=-1e-3)


def test_spread_lengths_draws_answers_around_the_mean_seeded() -> None:
    got = spread_lengths(500, 300, 30.0, 5000, seed=4)
    assert np.all(got.input_len == 500) and got.output_len.dtype == np.int64
    assert abs(got.output_len.mean() - 300) < 2 and 28 < got.output_len.std() < 32
    np.testing.assert_array_equal(got.output_len, spread_lengths(500, 300, 30.0, 5000, seed=4).output_len)
    assert not np.array_equal(got.output_len, spread_lengths(500, 300, 30.0, 5000, seed=5).output_len)
    assert spread_lengths(10, 2, 50.0, 200).output_len.min() >= 1  # clipped at one token
    np.testing.assert_array_equal(spread_lengths(10, 7, 0.0, 3).output_len, [7, 7, 7])  # 0: fixed
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(InputError, match="output_stddev"):
            spread_lengths(10, 7, bad, 3)


def test_sglang_keeps_room_for_the_running_answers_as_its_ratio_falls() -> None:
    # A (16-token prompt, 4,000-token answer) and B (16 + 3,000) arrive together; 300 blocks of 16
    # tokens = 4,800 tokens. SGLang admits A (16 + 4,000 = 4,016 < 4,800, leaving 784 in that step)
    # but not B (16 + 3,000 = 3,016 >= 784); vLLM's rule admits both (a block each).
    lengths = RequestLengths(np.array([16, 16]), np.array([4000, 3000]))
    wl = Workload(lengths, ClosedLoop(2))
    sg, vl = Recorder(), Recorder()  # one step at a time: the recorder sees exactly the steps taken
    cfg = SchedulerConfig(num_blocks=300, prefill_first=True, sglang_admission=True)
    slow = simulate(wl, sg, cfg, decode_runs=False)
    simulate(wl, vl, SchedulerConfig(num_blocks=300, prefill_first=True), decode_runs=False)
    assert vl.batches[0].prefill_tokens.tolist() == [16, 16]
    assert sg.batches[0].prefill_tokens.tolist() == [16]
    # After j decode steps A holds ceil((16 + j) / 16) blocks and has 4,000 - 1 - j tokens to go; B
    # starts at the first j where 3,016 < 16 x free blocks - ratio(j) x (3,999 - j), the ratio falling
    # from 0.7 by (0.7 - 0.098) / 600 a step to 0.098 (SGLang's defaults).
    def room(j: int) -> float:
        ratio = 0.7 if j == 0 else max(0.7 - j * (0.7 - 0.7 * 0.14) / 600, 0.7 * 0.14)
        return 16 * (300 - -(-(16 + j) // 16)) - ratio * (3999 - j)
    joins = next(j for j in range(4000) if room(j) > 3016)
    assert 100 < joins < 600  # neither at once nor only after A's answer
    b = next(i for i, x in enumerate(sg.batches) if i > 0 and x.prefill_tokens.size)  # the prefill after A's
    assert b == joins + 1  # A's prefill, then `joins` decode steps, then B's prefill
    assert sg.batches[b].prefill_tokens.tolist() == [16] and sg.batches[b].decode_context.size == 0
    fast = simulate(wl, STEP, cfg)  # the decode runs stop where B's room opens
    assert fast.requests.first_token_s[1] == pytest.approx(slow.requests.first_token_s[1], rel=1e-12)


def test_sglang_retracts_the_requests_with_the_fewest_tokens_to_the_back_of_the_queue() -> None:
    lengths = RequestLengths(np.array([100, 300, 200, 100, 50, 50]), np.array([400, 400, 400, 500, 10, 10]))
    eng = _Engine(Workload(lengths, ClosedLoop(6)), STEP,
                  SchedulerConfig(num_blocks=200, prefill_first=True, sglang_admission=True), True)
    eng.running, eng._run_ids = [0, 1, 2, 3], None
    eng.waiting.extend([5])
    eng.out[:4] = [50, 10, 10, 80]
    eng.held[:4] = 2
    eng.computed[:4] = 32
    eng.free = 0
    eng._retract()
    # fewest tokens generated first, the longest prompt first among equals: 1 (300 tokens), then 2;
    # after one, 2 free blocks = 32 tokens < 20 steps x 3 requests; after two, 64 >= 20 x 2
    assert eng.running == [0, 3] and list(eng.waiting) == [5, 1, 2]
    assert eng.free == 4 and eng.held[[1, 2]].tolist() == [0, 0] and eng.computed[[1, 2]].tolist() == [0, 0]
    assert eng.preempts[[1, 2]].tolist() == [1, 1] and eng.preempts[[0, 3]].tolist() == [0, 0]
    # the ratio becomes (tokens generated + 20 per request left) / their answers
    assert eng._ratio() == pytest.approx((50 + 80 + 2 * 20) / (400 + 500))
    # it never retracts the last request
    eng.running, eng._run_ids, eng.free = [0], None, 0
    eng._retract()
    assert eng.running == [0]


def test_sglang_admission_and_no_evict_are_exclusive() -> None:
    with pytest.raises(InputError, match="sglang_admission and no_evict"):
        SchedulerConfig(num_blocks=10, no_evict=True, sglang_admission=True)


# ---- TensorRT-LLM's attention-DP balancing (SchedulerConfig.adp_balance)
TRT = dict(num_blocks=100_000, max_num_seqs=64, max_num_batched_tokens=4096, no_evict=True, chunked_prefill=False)


def staggered(n: int = 120, c: int = 8, out: int = 200) -> Workload:
    """A closed loop whose clients drift apart (answers spread around ``out``): requests arrive one by one."""
    return Workload(spread_lengths(300, out, 0.3 * out, n, seed=4), ClosedLoop(c))


def test_adp_balance_releasing_every_step_changes_nothing() -> None:
    # a timeout of one step and no batching wait: the counter releases at every step, nothing is held
    off = simulate(staggered(), STEP, SchedulerConfig(**TRT, adp_groups=8))
    on = simulate(staggered(), STEP, SchedulerConfig(**TRT, adp_groups=8, adp_balance=(1, 0)))
    # (the same steps, summed in other runs: equal to rounding)
    np.testing.assert_allclose(off.requests.first_token_s, on.requests.first_token_s, rtol=1e-12)
    np.testing.assert_allclose(off.requests.finish_s, on.requests.finish_s, rtol=1e-12)
    # and one group alone never balances, whatever the knobs
    alone = simulate(staggered(), STEP, SchedulerConfig(**TRT, adp_groups=1, adp_balance=(50, 10)))
    np.testing.assert_array_equal(off.requests.first_token_s, alone.requests.first_token_s)


def test_adp_balance_holds_new_requests_up_to_its_timeout() -> None:
    rec = Recorder()
    off = simulate(staggered(), STEP, SchedulerConfig(**TRT, adp_groups=8))
    timeout = 40
    on = simulate(staggered(), rec, SchedulerConfig(**TRT, adp_groups=8, adp_balance=(timeout, 0)))
    waited = on.requests.first_token_s - on.requests.arrival_s
    # a request arriving while others decode waits for every group to hold one or for the counter's
    # timeout, which runs whatever waits: never more than the timeout's steps (+ its own prefill step)
    longest = max(STEP(b) for b in rec.batches)
    assert waited.max() <= (timeout + 1) * longest
    assert waited.mean() > (off.requests.first_token_s - off.requests.arrival_s).mean() + 5 * STEP.base_s
    # the steps that hold it decode only: fewer prefill steps, each with more prompts
    prefills = [b.prefill_tokens.size for b in rec.batches if b.prefill_tokens.size]
    assert np.mean(prefills) > 1.0
    longer = simulate(staggered(), STEP, SchedulerConfig(**TRT, adp_groups=8, adp_balance=(4 * timeout, 0)))
    assert (longer.requests.first_token_s - longer.requests.arrival_s).mean() > waited.mean()


def test_adp_balance_batching_wait_delays_each_release() -> None:
    # with every group holding requests (a long timeout: releases come when all do), the batching
    # wait adds up to its steps to each release while requests decode (less for those that arrive
    # during it: they join the release)
    base = simulate(staggered(), STEP, SchedulerConfig(**TRT, adp_groups=2, adp_balance=(10_000, 0)))
    waits = simulate(staggered(), STEP, SchedulerConfig(**TRT, adp_groups=2, adp_balance=(10_000, 10)))
    ttft = [(r.requests.first_token_s - r.requests.arrival_s).mean() for r in (base, waits)]
    assert ttft[0] + 3 * STEP.base_s < ttft[1] < ttft[0] + 11 * 1.1 * STEP.base_s


def test_adp_balance_leaves_the_first_burst_alone() -> None:
    # at the start every group holds requests and none decodes: the burst goes as without balancing
    w = closed(64, 32, 1000, 50)
    off = simulate(w, STEP, SchedulerConfig(**TRT, adp_groups=8))
    on = simulate(w, STEP, SchedulerConfig(**TRT, adp_groups=8, adp_balance=(500, 0)))
    np.testing.assert_array_equal(off.requests.first_token_s[:32], on.requests.first_token_s[:32])


@pytest.mark.parametrize("knobs, match", [
    (dict(adp_balance=(0, 0)), "timeout steps >= 1"),
    (dict(adp_balance=(5, -1)), "wait steps >= 0"),
    (dict(adp_balance=(5, 1), prefill_first=True), "mixed steps"),
    (dict(adp_groups=0), "adp_groups"),
])
def test_bad_adp_balance_knobs(knobs: dict[str, object], match: str) -> None:
    with pytest.raises(InputError, match=match):
        SchedulerConfig(num_blocks=100, **knobs)  # type: ignore[arg-type]


def test_sglang_recv_interval_takes_new_requests_in_every_n_decode_steps() -> None:
    # A (16 + 100 tokens) and B (16 + 10) are prefilled together in step 0; with an interval of 8 the
    # counter, full after that prefill, polls before step 1 and then every 8 decode steps: before
    # steps 9, 17, ... B has its 10th token at the end of decode step 9 and the closed loop sends C
    # then: polled before step 17, C is prefilled there, not in step 10 as with every-step polling.
    lengths = RequestLengths(np.array([16, 16, 16]), np.array([100, 10, 5]))
    wl = Workload(lengths, ClosedLoop(2))
    base = dict(num_blocks=1000, prefill_first=True, sglang_admission=True)
    got = {}
    for every in (1, 8):
        rec = Recorder()
        slow = simulate(wl, rec, SchedulerConfig(recv_interval=every, **base), decode_runs=False)
        prefills = [i for i, b in enumerate(rec.batches) if b.prefill_tokens.size]
        got[every] = prefills
        assert all(rec.batches[i].decode_context.size == 1 for i in range(10, prefills[1]))  # A decodes alone
        fast = simulate(wl, STEP, SchedulerConfig(recv_interval=every, **base))  # decode runs stop at the poll
        np.testing.assert_allclose(fast.requests.first_token_s, slow.requests.first_token_s, rtol=1e-12)
        np.testing.assert_allclose(fast.requests.finish_s, slow.requests.finish_s, rtol=1e-12)
    assert got[1] == [0, 10] and got[8] == [0, 17]


def test_recv_interval_runs_match_step_by_step_and_an_idle_engine_polls_at_once() -> None:
    wl = Workload(spread_lengths(300, 200, 40.0, 80, seed=3), ClosedLoop(8))
    for every in (2, 7, 30):
        cfg = SchedulerConfig(num_blocks=5000, max_num_batched_tokens=4096, prefill_first=True,
                              sglang_admission=True, recv_interval=every)
        fast, slow = simulate(wl, STEP, cfg), simulate(wl, STEP, cfg, decode_runs=False)
        np.testing.assert_allclose(fast.requests.first_token_s, slow.requests.first_token_s, rtol=1e-12)
        np.testing.assert_allclose(fast.requests.finish_s, slow.requests.finish_s, rtol=1e-12)
        assert fast.steps == slow.steps
    # the waits grow with the interval: a request sent mid-run waits for the next poll
    ttft = [simulate(wl, STEP, SchedulerConfig(num_blocks=5000, prefill_first=True, recv_interval=k)).ttft.mean
            for k in (1, 10, 30)]
    assert ttft[0] < ttft[1] < ttft[2]
    # one request at a time: each arrives at an idle engine, which polls at once
    one = Workload(fixed_lengths(50, 20, 5), ClosedLoop(1))
    a = simulate(one, STEP, SchedulerConfig(num_blocks=100))
    b = simulate(one, STEP, SchedulerConfig(num_blocks=100, recv_interval=30))
    np.testing.assert_allclose(a.requests.first_token_s, b.requests.first_token_s, rtol=1e-12)
    with pytest.raises(InputError, match="recv_interval"):
        SchedulerConfig(num_blocks=100, recv_interval=0)
