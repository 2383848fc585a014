"""The SLO rate search (serving/slo.py): the boundary it finds against an analytic latency curve
and a brute-force scan of the simulator, monotonicity in the targets, reproducibility, the
no-answer and capped cases, the steady-state window and the saturation ceiling."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from whichgpu.errors import InputError
from whichgpu.serving import AffineStepTime, SchedulerConfig, fixed_lengths
from whichgpu.serving.results import LatencyStats, RequestTimes, ServingResult
from whichgpu.serving.slo import (
    DEFAULT_REL_TOL,
    MAX_HALVINGS,
    Slo,
    idle_run,
    poisson_runner,
    probe_requests,
    rate_sweep,
    saturation_rate,
    search_max_rate,
    steady_state,
)

ROOMY = SchedulerConfig(num_blocks=100_000, max_num_seqs=256, max_num_batched_tokens=4096)
STEP = AffineStepTime(base_s=5e-3, per_token_s=40e-6, per_context_s=1e-8)


def fake_result(ttft_s: float, tpot_s: float) -> ServingResult:
    """A run whose every statistic of TTFT is ``ttft_s`` and of TPOT ``tpot_s``."""
    one = np.ones(1)
    req = RequestTimes(np.zeros(1), one * ttft_s, one * ttft_s + tpot_s, np.ones(1, np.int64) * 10,
                       np.ones(1, np.int64) * 2, np.zeros(1, np.int64))
    t, p = LatencyStats(ttft_s, ttft_s, ttft_s, ttft_s), LatencyStats(tpot_s, tpot_s, tpot_s, tpot_s)
    return ServingResult(req, t, p, p, 1.0, 1.0, 2.0, 12.0, 1, 1, 1, 0, 1.0)


def queue_like(rate: float) -> ServingResult:
    """An M/M/1-like curve with capacity 10 requests/s: TPOT = 10 ms / (1 - rate / 10), TTFT 50 ms
    x the same factor. TPOT <= 25 ms holds up to rate 6 exactly (1 - 6/10 = 0.4, 10 / 0.4 = 25)."""
    f = 1.0 / (1.0 - rate / 10.0) if rate < 10 else 1e9
    return fake_result(0.05 * f, 0.010 * f)


def test_finds_the_analytic_boundary() -> None:
    res = search_max_rate(queue_like, Slo(tpot_s=0.025), ceiling_per_s=9.5)
    assert res.max_rate_per_s is not None and not res.capped
    # the answer meets the target, and lies within the bisection tolerance below the boundary 6
    assert res.max_rate_per_s <= 6.0
    assert 6.0 - res.max_rate_per_s <= DEFAULT_REL_TOL * 9.5
    assert res.at_rate is not None and res.slo.met(res.at_rate)
    # ceiling, one halving (4.75 meets), then ~7 bisections
    assert len(res.probes) <= 2 + int(np.ceil(np.log2(1 / DEFAULT_REL_TOL))) + 1
    assert res.probes[0].rate_per_s == 9.5 and not res.probes[0].ok


def bisection_probes(slo: Slo, ceiling: float, tol: float) -> int:
    """Probes of halving from the ceiling, then bisecting to ``tol``: what the search replaces."""
    n, hi, lo = 1, ceiling, ceiling / 2
    while n := n + 1:
        if slo.met(queue_like(lo)):
            break
        hi, lo = lo, lo / 2
    while hi - lo > tol * hi:
        n += 1
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if slo.met(queue_like(mid)) else (lo, mid)
    return n


def test_with_the_idle_run_as_the_low_end_fewer_probes_find_the_boundary() -> None:
    # the idle run (rate 0) and the ceiling bracket the boundary at once: no halvings, and the
    # margins' straight line puts the probes near 6
    for tol, fewer in ((DEFAULT_REL_TOL, 2), (0.05, 0)):
        slo = Slo(tpot_s=0.025)
        res = search_max_rate(queue_like, slo, ceiling_per_s=9.5, idle=queue_like(0.0), rel_tol=tol)
        assert res.max_rate_per_s is not None and 6.0 - tol * 9.5 <= res.max_rate_per_s <= 6.0
        assert res.at_rate is not None and res.slo.met(res.at_rate)
        assert len(res.probes) <= bisection_probes(slo, 9.5, tol) - fewer
        ok = [p.rate_per_s for p in res.probes if p.ok]
        bad = [p.rate_per_s for p in res.probes if not p.ok]
        assert max(ok) == res.max_rate_per_s and min(bad) - res.max_rate_per_s <= tol * min(bad)


def latency_curve(cap: float, a: float, b: float, p: float, step_at: float | None) -> Callable[[float], ServingResult]:
    """A monotone latency curve: a step at ``step_at`` (1x, then 50x), else a + b / (1 - rate / cap)^p."""
    def curve(rate: float) -> ServingResult:
        if step_at is not None:
            f = 1.0 if rate < step_at else 50.0
        else:
            f = a + b / max(1e-9, 1.0 - rate / cap) ** p if rate < cap else 1e9
        return fake_result(0.01 * f, 0.001 * f)
    return curve


def test_search_ends_within_the_tolerance_on_many_latency_curves() -> None:
    # random monotone curves: smooth hockey sticks (a + b / (1 - rate / cap)^p) and steps, each
    # searched from its idle value; the answer meets the targets and the first failing rate found
    # lies within the tolerance above it, in a bounded number of probes
    rng = np.random.default_rng(9)
    searched = 0
    for _ in range(300):
        cap, a, b, p = float(rng.uniform(1, 50)), float(rng.uniform(0.2, 1)), float(rng.uniform(0.01, 1)), \
            float(rng.uniform(0.5, 3))
        step_at = float(rng.uniform(0.05, 0.95)) * cap if rng.random() < 0.3 else None
        curve = latency_curve(cap, a, b, p, step_at)
        tol = float(rng.choice([0.01, 0.05]))
        top = cap * float(rng.uniform(0.5, 1.0))
        idle, busy = curve(0.0).tpot.p90, curve(top).tpot.p90
        slo = Slo(tpot_s=idle + (busy - idle) * float(rng.uniform(0.0, 1.0)) ** 2)  # between the two
        res = search_max_rate(curve, slo, ceiling_per_s=top, idle=curve(0.0), rel_tol=tol)
        searched += not res.capped
        if res.capped:
            continue
        assert len(res.probes) <= 30
        if res.max_rate_per_s is None:
            assert res.probes[-1].rate_per_s <= res.ceiling_per_s / 2**MAX_HALVINGS
            continue
        assert res.at_rate is not None and slo.met(res.at_rate)
        above = min(pr.rate_per_s for pr in res.probes if not pr.ok)
        assert res.max_rate_per_s < above and above - res.max_rate_per_s <= tol * above
    assert searched > 250


def test_margin_is_at_most_zero_exactly_when_the_targets_are_met() -> None:
    rng = np.random.default_rng(4)
    for _ in range(500):
        slo = Slo(ttft_s=float(rng.uniform(0.05, 0.5)) if rng.random() < 0.7 else None,
                  tpot_s=float(rng.uniform(0.005, 0.05)), percentile=int(rng.choice([50, 90, 99])))
        r = fake_result(float(rng.uniform(0.01, 1.0)), float(rng.uniform(0.001, 0.1)) if rng.random() < 0.9 else np.nan)
        assert (slo.margin(r) <= 0) == slo.met(r)


def test_no_answer_when_only_an_idle_engine_meets_the_targets() -> None:
    # TPOT 10 ms alone and more at any rate: the probes fall to ceiling / 2**10 and fail there
    res = search_max_rate(queue_like, Slo(tpot_s=0.010), ceiling_per_s=9.0, idle=queue_like(0.0))
    assert res.max_rate_per_s is None and not res.idle_misses and res.lowest is not None
    assert res.probes[-1].rate_per_s <= 9.0 / 2**MAX_HALVINGS and not any(p.ok for p in res.probes)
    assert len(res.probes) <= 6


def test_both_bounds_the_tighter_wins() -> None:
    # TTFT 50 ms x f <= 100 ms holds to rate 5; TPOT <= 25 ms to rate 6: the answer is near 5
    res = search_max_rate(queue_like, Slo(ttft_s=0.1, tpot_s=0.025), ceiling_per_s=9.5)
    assert res.max_rate_per_s is not None and 5.0 - DEFAULT_REL_TOL * 9.5 <= res.max_rate_per_s <= 5.0


def test_capped_when_the_ceiling_meets_the_targets() -> None:
    res = search_max_rate(queue_like, Slo(tpot_s=1.0), ceiling_per_s=9.0)
    assert res.capped and res.max_rate_per_s == 9.0 and len(res.probes) == 1


def test_no_answer_when_even_an_idle_engine_misses() -> None:
    res = search_max_rate(queue_like, Slo(tpot_s=0.005), ceiling_per_s=9.0)
    assert res.max_rate_per_s is None and res.at_rate is None and not res.capped
    assert len(res.probes) == 1 + MAX_HALVINGS  # the ceiling and ten halvings, all failing
    assert res.probes[-1].rate_per_s == pytest.approx(9.0 / 2**MAX_HALVINGS)
    assert res.lowest is not None and res.lowest.tpot.p90 > 0.005


def test_no_answer_at_once_when_a_lone_request_misses() -> None:
    # served alone, a request has TPOT 10 ms (queue_like at rate 0): a 5 ms bound is out of reach
    res = search_max_rate(queue_like, Slo(tpot_s=0.005), ceiling_per_s=9.0, idle=queue_like(0.0))
    assert res.max_rate_per_s is None and res.idle_misses and len(res.probes) == 1
    # a lone request that meets the bound does not end the search
    res = search_max_rate(queue_like, Slo(tpot_s=0.025), ceiling_per_s=9.5, idle=queue_like(0.0))
    assert res.max_rate_per_s is not None and not res.idle_misses


def test_idle_run_is_the_latency_floor() -> None:
    # constant 10 ms steps: alone, a request's prefill step gives its first token (TTFT 10 ms) and
    # every later token takes one step (TPOT 10 ms); one request stands for identical ones
    step = AffineStepTime(base_s=0.01)
    r = idle_run(fixed_lengths(100, 20, 50), step, ROOMY)
    assert r.requests.arrival_s.size == 1
    assert r.ttft.p90 == pytest.approx(0.01) and r.tpot.p90 == pytest.approx(0.01)
    low = poisson_runner(fixed_lengths(100, 20, 50), STEP, ROOMY)(0.5)
    alone = idle_run(fixed_lengths(100, 20, 50), STEP, ROOMY)
    assert alone.ttft.p90 <= low.ttft.p90 + 1e-12 and alone.tpot.p90 <= low.tpot.p90 + 1e-12


def test_percentile_selects_the_statistic() -> None:
    r = fake_result(0.1, 0.02)
    r = ServingResult(r.requests, LatencyStats(0.1, 0.05, 0.1, 0.3), r.tpot, r.e2e, *(
        getattr(r, f) for f in ("duration_s", "requests_per_s", "output_tokens_per_s", "total_tokens_per_s",
                                "num_blocks", "peak_blocks_used", "steps", "preemptions", "mean_batch_seqs")))
    assert Slo(ttft_s=0.2, percentile=90).met(r)
    assert not Slo(ttft_s=0.2, percentile=99).met(r)
    assert Slo(ttft_s=0.06, percentile=50).met(r)


@pytest.mark.parametrize("kw", [{}, {"ttft_s": -1.0}, {"tpot_s": float("nan")}, {"ttft_s": 1.0, "percentile": 95}])
def test_bad_slo_is_an_input_error(kw: dict[str, float]) -> None:
    with pytest.raises(InputError):
        Slo(**kw)  # type: ignore[arg-type]


def test_bad_ceiling_is_an_input_error() -> None:
    with pytest.raises(InputError):
        search_max_rate(queue_like, Slo(tpot_s=0.02), ceiling_per_s=0.0)


# ---- on the simulator ------------------------------------------------------------------------------

LENGTHS = fixed_lengths(200, 40, 300)


def ceiling() -> float:
    return saturation_rate(LENGTHS, STEP, ROOMY, 64).requests_per_s


def test_saturation_rate_of_a_constant_step_is_analytic() -> None:
    # constant 10 ms steps, 1-token prompts and 20-token answers: each request holds its slot for
    # 20 steps (prefill samples the first token, 19 decode steps) and is replaced at once, so
    # C = 8 slots serve 8 / (20 x 10 ms) = 40 requests/s; 4 x 8 = 32 requests, 4 waves exactly
    r = saturation_rate(fixed_lengths(1, 20, 8), AffineStepTime(base_s=0.01), ROOMY, 8)
    assert r.requests.arrival_s.size == 32
    assert r.requests_per_s == pytest.approx(40.0, rel=1e-9)


def test_search_matches_brute_force_on_the_simulator() -> None:
    top = ceiling()
    run = poisson_runner(LENGTHS, STEP, ROOMY, seed=3)
    slo = Slo(tpot_s=0.0075, percentile=90)
    grid = np.linspace(top / 40, top, 40)
    ok = [slo.met(run(float(r))) for r in grid]
    # a threshold: once a grid rate fails, every higher one fails (the search's assumption holds)
    first_fail = ok.index(False)
    assert first_fail > 0 and not any(ok[first_fail:])
    res = search_max_rate(run, slo, top)
    assert res.max_rate_per_s is not None and not res.capped
    assert grid[first_fail - 1] - DEFAULT_REL_TOL * top <= res.max_rate_per_s <= grid[first_fail]
    assert res.at_rate is not None and slo.met(res.at_rate)


def test_max_rate_is_monotone_in_the_targets() -> None:
    top = ceiling()
    run = poisson_runner(LENGTHS, STEP, ROOMY, seed=0)
    rates = []
    for tpot_ms in (6.6, 7.5, 9.0):
        res = search_max_rate(run, Slo(tpot_s=tpot_ms / 1e3), top)
        rates.append(res.max_rate_per_s or 0.0)
    assert rates == sorted(rates) and rates[0] < rates[-1]


def test_search_is_reproducible() -> None:
    top = ceiling()
    a = search_max_rate(poisson_runner(LENGTHS, STEP, ROOMY, seed=7), Slo(ttft_s=0.05, tpot_s=0.008), top)
    b = search_max_rate(poisson_runner(LENGTHS, STEP, ROOMY, seed=7), Slo(ttft_s=0.05, tpot_s=0.008), top)
    assert a.probes == b.probes and a.max_rate_per_s == b.max_rate_per_s


def test_steady_state_window() -> None:
    r = poisson_runner(LENGTHS, STEP, ROOMY, seed=0, window=None)(50.0)
    mid = steady_state(r, (0.25, 0.75))
    q = r.requests
    assert mid.ttft.p90 == pytest.approx(float(np.percentile(q.ttft_s[75:225], 90)))
    assert mid.requests_per_s == r.requests_per_s and mid.preemptions == r.preemptions
    assert poisson_runner(LENGTHS, STEP, ROOMY, seed=0)(50.0).ttft == mid.ttft


def test_probe_requests_cover_the_ramp() -> None:
    assert probe_requests(10) == 1000 and probe_requests(400) == 1600


def test_rate_sweep_in_order() -> None:
    run = poisson_runner(LENGTHS, STEP, ROOMY)
    out = rate_sweep(run, [5.0, 10.0])
    assert [r for r, _ in out] == [5.0, 10.0]
    assert out[0][1].tpot.p90 <= out[1][1].tpot.p90
