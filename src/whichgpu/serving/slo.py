"""The highest request rate a serving setup sustains within latency targets (SLOs). Torch-free.

A target is a TTFT and/or a TPOT bound at one percentile (P50, P90 or P99, over the requests of a
run). Each probe is one open-loop simulation (`scheduler.simulate`) of the same requests with
Poisson arrivals at a candidate rate; the answer is the largest rate whose probe meets every bound.

Search (`search_max_rate`):

1. **Ceiling.** The rate the engine can serve at all: the throughput (requests/s) of a closed loop
   at the largest useful concurrency (`saturation_rate`). Poisson arrivals faster than that only
   grow the queue, so the search never looks higher. If the ceiling itself meets the targets the
   answer is the ceiling, flagged ``capped``: the engine saturates before the latency targets bind.
2. **Floor.** Latency cannot fall below that of each request served alone (`idle_run`: a closed
   loop of one). If that misses the targets, no rate meets them and the answer is "none" at once
   (the prompt's prefill alone is longer than the TTFT bound, or a lone request's decode step is
   longer than the TPOT bound).
3. **Bracket.** The idle run stands for rate 0, the ceiling probe for the top: a bracket whose low
   end meets the targets and whose top misses them. (Without an idle run: halve the rate from the
   ceiling until a probe meets the targets, a known-good ``lo`` below the known-bad ``hi``.)
4. **Narrowing** (the Illinois variant of regula falsi) until ``lo`` is a probe and
   ``hi - lo <= rel_tol x hi``; the answer is ``lo`` (a rate that was simulated and met the
   targets), with that probe's result. Each probe goes where the straight line between the ends'
   margins crosses zero (the margin: the log of the worst ratio of a statistic to its bound,
   <= 0 where the targets are met), kept 2 % of the bracket inside its ends; an end that stays
   twice in a row has its margin halved, so the other end moves too; where that crossing lies
   within the tolerance of an end, the probe goes just inside the tolerance from it (`CLOSE`), so
   that the expected outcome closes the bracket; a bracket that three probes did not halve is
   bisected. Latency against rate is flat, then steep near saturation: a straight line places
   probes near the boundary where halving the bracket would need more of them (on seven setups of
   8B-235B models that have an answer: 5-8 probes at 1 % where bisection took 8-11, 4-7 at 5 %
   for 6-9, the answers within the tolerance of bisection's). A probe below ceiling / 2**10 that
   fails ends the search with no answer.

Steady state: a probe starts with an idle engine and ends with a drain, so its first and last
requests see less load than a sustained rate gives. A probe's latency statistics are therefore taken
over the middle half of its requests by arrival (``STEADY``; throughput and preemptions stay those
of the whole run). With ``probe_requests`` at least 4 x the concurrency the engine can hold, the
load has built up by the first measured arrival. (For an 8B model on one H100 with 1,000-token
prompts and answers, P90 TPOT over the middle half of 1,000 requests is within about 10 % of that of
4,000 requests up to the saturation rate; over all of 500 requests it is up to 40 % low.)

Assumption: latency does not fall as the rate grows (true of a FCFS continuous-batching engine up
to simulation noise). Reproducible: every probe draws its exponential gaps from one seeded
generator, so the arrival times of two probes are the same draws scaled by 1 / rate, and probes
differ only in the rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from whichgpu.errors import InputError
from whichgpu.serving.batch import StepTime
from whichgpu.serving.kv import KvCapacity
from whichgpu.serving.results import LatencyStats, RequestTimes, ServingResult
from whichgpu.serving.scheduler import SchedulerConfig, simulate
from whichgpu.serving.workload import ClosedLoop, Poisson, RequestLengths, Workload

PERCENTILES = (50, 90, 99)
MAX_HALVINGS = 10
"""The search goes no lower than ceiling / 2**10: below it the engine is as idle as it gets."""
DEFAULT_REL_TOL = 0.01
"""The search stops when the bracket is within 1 % of its top."""
INSIDE = 0.02
"""Each narrowing probe lies at least this share of the bracket inside its ends."""
CLOSE = 0.98
"""Where the boundary looks within the tolerance of an end, the probe goes this share of the
tolerance from it: the bracket closes if that probe comes out as expected."""
PROBE_REQUESTS = 1000
"""Least requests per probe (`probe_requests`): a probe of an 8B model on one H100 with 1,000-token
prompts and answers takes about 0.1-0.2 s (benchmarks/bench_serving_slo.py)."""
STEADY = (0.25, 0.75)
"""The share of a probe's requests, by arrival order, whose latencies count (the middle half)."""

Simulate = Callable[[Workload, StepTime, SchedulerConfig], ServingResult]
"""How a probe is simulated: `scheduler.simulate`, or a setup's own (`model.ServingModel.simulator`:
pipeline-parallel virtual engines)."""


@dataclass(frozen=True)
class Slo:
    """Latency targets at one percentile over the requests of a run."""

    ttft_s: float | None = None
    """Time to first token bound, seconds (None: no bound)."""
    tpot_s: float | None = None
    """Time per output token (after the first) bound, seconds (None: no bound)."""
    percentile: int = 90
    """Which statistic must meet the bounds: 50, 90 or 99."""

    def __post_init__(self) -> None:
        if self.ttft_s is None and self.tpot_s is None:
            raise InputError("an SLO needs a TTFT or a TPOT bound (or both)", field="slo_ttft_ms")
        for name, v in (("slo_ttft_ms", self.ttft_s), ("slo_tpot_ms", self.tpot_s)):
            if v is not None and not (np.isfinite(v) and v > 0):
                raise InputError(f"{name} must be a finite number > 0, got {v}", field=name)
        if self.percentile not in PERCENTILES:
            raise InputError(f"percentile must be one of 50, 90, 99, got {self.percentile}", field="slo_percentile")

    def stat(self, s: LatencyStats) -> float:
        """The statistic of ``s`` the targets apply to (seconds)."""
        v: float = getattr(s, f"p{self.percentile}")
        return v

    def margin(self, r: ServingResult) -> float:
        """The log of the worst ratio of the statistic to its bound: <= 0 exactly when `met`
        (a NaN TPOT counts as met, -inf; a zero statistic too)."""
        worst = -math.inf
        for bound, stats in ((self.ttft_s, r.ttft), (self.tpot_s, r.tpot)):
            v = self.stat(stats) if bound is not None else math.nan
            if v > 0:  # NaN compares False
                worst = max(worst, math.log(v / bound))  # type: ignore[operator]
        return worst

    def met(self, r: ServingResult) -> bool:
        """Whether run ``r`` meets every bound. A TPOT of no request (every answer one token long)
        is NaN and meets any bound: there is no inter-token latency."""
        return not (self.ttft_s is not None and self.stat(r.ttft) > self.ttft_s) and \
            not (self.tpot_s is not None and self.stat(r.tpot) > self.tpot_s)


@dataclass(frozen=True)
class Probe:
    """One simulated rate of a search."""

    rate_per_s: float
    ttft_s: float
    """TTFT at the SLO's percentile."""
    tpot_s: float
    """TPOT at the SLO's percentile."""
    ok: bool


@dataclass(frozen=True)
class SloSearch:
    """The answer of a rate search."""

    slo: Slo
    ceiling_per_s: float
    """The highest rate searched (the closed-loop saturation throughput)."""
    max_rate_per_s: float | None
    """The largest rate found to meet the targets; None: no rate does (down to the ceiling / 1024)."""
    at_rate: ServingResult | None
    """The probe at ``max_rate_per_s`` (None with no answer)."""
    capped: bool
    """The ceiling itself meets the targets: the engine's throughput, not latency, is the limit."""
    probes: tuple[Probe, ...]
    """Every probe in the order simulated."""
    lowest: ServingResult | None = None
    """With no answer: the probe at the lowest rate tried, or the idle run (why it fails)."""
    idle_misses: bool = False
    """No answer because each request served alone already misses the targets."""


def search_max_rate(run: Callable[[float], ServingResult], slo: Slo, ceiling_per_s: float, *,
                    idle: ServingResult | None = None, rel_tol: float = DEFAULT_REL_TOL) -> SloSearch:
    """The largest rate in (0, ``ceiling_per_s``] whose ``run(rate)`` meets ``slo`` (see the module
    docstring). ``run`` simulates the workload at a Poisson rate (`poisson_runner`); ``idle``, the
    requests served alone (`idle_run`), answers "none" early when even it misses the targets."""
    if not (np.isfinite(ceiling_per_s) and ceiling_per_s > 0):
        raise InputError(f"the ceiling rate must be a finite number > 0, got {ceiling_per_s}", field="rate")
    if not 0 < rel_tol < 1:
        raise InputError(f"rel_tol must be in (0, 1), got {rel_tol}", field="rel_tol")
    probes: list[Probe] = []

    def probe(rate: float) -> tuple[bool, ServingResult]:
        r = run(rate)
        ok = slo.met(r)
        probes.append(Probe(rate, slo.stat(r.ttft), slo.stat(r.tpot), ok))
        return ok, r

    ok, r = probe(ceiling_per_s)
    if ok:
        return SloSearch(slo, ceiling_per_s, ceiling_per_s, r, True, tuple(probes))
    if idle is not None and not slo.met(idle):
        return SloSearch(slo, ceiling_per_s, None, None, False, tuple(probes), lowest=idle, idle_misses=True)
    floor = ceiling_per_s / 2**MAX_HALVINGS
    hi, g_hi = ceiling_per_s, slo.margin(r)
    best: ServingResult | None = None
    if idle is not None:
        lo, g_lo = 0.0, slo.margin(idle)  # the requests served alone stand for rate 0
    else:  # halve from the ceiling until a probe meets the targets
        lo = ceiling_per_s / 2
        for _ in range(MAX_HALVINGS):
            ok, r = probe(lo)
            if ok:
                break
            hi, g_hi, lo = lo, slo.margin(r), lo / 2
        else:
            return SloSearch(slo, ceiling_per_s, None, None, False, tuple(probes), lowest=r)
        g_lo, best = slo.margin(r), r
    kept = 0  # which end the last probe left in place: -1 the low end, 1 the top, 0 neither yet
    widths: list[float] = []  # the bracket before each probe: one that three probes did not halve is bisected
    while best is None or hi - lo > rel_tol * hi:
        w = hi - lo
        slow = len(widths) >= 3 and w > 0.5 * widths[-3]
        widths.append(w)
        x = lo + w * g_lo / (g_lo - g_hi) if math.isfinite(g_lo) and g_hi > g_lo and not slow else lo + 0.5 * w
        if best is not None:  # a boundary within the tolerance of an end: the probe that would close the bracket
            up, down = CLOSE * rel_tol * lo / (1 - rel_tol), CLOSE * rel_tol * hi
            x = lo + up if x - lo < up else hi - down if hi - x < down else x
        x = min(max(x, lo + INSIDE * w, floor), hi - INSIDE * w)
        ok, r = probe(x)
        if ok:
            lo, g_lo, best = x, slo.margin(r), r
            if kept == 1:
                g_hi *= 0.5
            kept = 1
        else:
            if x <= floor:
                return SloSearch(slo, ceiling_per_s, None, None, False, tuple(probes), lowest=r)
            hi, g_hi = x, slo.margin(r)
            if kept == -1:
                g_lo *= 0.5
            kept = -1
    return SloSearch(slo, ceiling_per_s, lo, best, False, tuple(probes))


def held_concurrency(capacity: KvCapacity, max_num_seqs: int) -> int:
    """The most requests the engine runs at once: its sequence cap or what its KV cache holds at
    the longest length (at least one): the saturation closed loop's concurrency."""
    return max(1, min(max_num_seqs, int(capacity.max_concurrency)))


def probe_requests(concurrency: int, least: int = PROBE_REQUESTS) -> int:
    """Requests per probe: at least `least` and 4 x the concurrency the engine holds, so that the
    measured middle half arrives after the load has built up."""
    return max(least, 4 * concurrency)


def steady_state(r: ServingResult, window: tuple[float, float] = STEADY) -> ServingResult:
    """``r`` with its TTFT, TPOT and E2E statistics over the requests in ``window`` (fractions of
    the requests in sending order); everything else as it was."""
    q = r.requests
    n = q.arrival_s.size
    lo, hi = int(n * window[0]), max(int(n * window[0]) + 1, int(n * window[1]))
    sl = slice(lo, hi)
    mid = RequestTimes(q.arrival_s[sl], q.first_token_s[sl], q.finish_s[sl], q.input_tokens[sl],
                       q.output_tokens[sl], q.preemptions[sl])
    return replace(r, ttft=LatencyStats.of(mid.ttft_s), tpot=LatencyStats.of(mid.tpot_s), e2e=LatencyStats.of(mid.e2e_s))


def poisson_runner(lengths: RequestLengths, step_time: StepTime, config: SchedulerConfig,
                   seed: int = 0, window: tuple[float, float] | None = STEADY, *,
                   simulate_fn: Simulate = simulate) -> Callable[[float], ServingResult]:
    """``rate -> simulate(lengths at Poisson(rate, seed))``, latency over the ``window`` of the
    requests (`steady_state`; None: all of them): the probe of a rate search."""
    def run(rate: float) -> ServingResult:
        r = simulate_fn(Workload(lengths, Poisson(rate, seed)), step_time, config)
        return r if window is None else steady_state(r, window)
    return run


def saturation_rate(lengths: RequestLengths, step_time: StepTime, config: SchedulerConfig,
                    concurrency: int, *, simulate_fn: Simulate = simulate) -> ServingResult:
    """A closed loop at ``concurrency`` over at least 4 x ``concurrency`` requests (``lengths``
    repeated as needed, so the ramp-up and the drain are a small part of the window); its
    ``requests_per_s`` is the ceiling of a rate search."""
    n = max(len(lengths), 4 * concurrency)
    tiled = RequestLengths(np.resize(lengths.input_len, n), np.resize(lengths.output_len, n))
    return simulate_fn(Workload(tiled, ClosedLoop(concurrency)), step_time, config)


def idle_run(lengths: RequestLengths, step_time: StepTime, config: SchedulerConfig, *,
             simulate_fn: Simulate = simulate) -> ServingResult:
    """Each request served alone (a closed loop of one): the least latency any rate can give. When
    every request has the same lengths one request stands for all."""
    same = bool((lengths.input_len == lengths.input_len[0]).all() and (lengths.output_len == lengths.output_len[0]).all())
    if same:
        lengths = RequestLengths(lengths.input_len[:1], lengths.output_len[:1])
    return simulate_fn(Workload(lengths, ClosedLoop(1)), step_time, config)


def rate_sweep(run: Callable[[float], ServingResult], rates: Sequence[float]) -> list[tuple[float, ServingResult]]:
    """``run`` at each rate, in order (the latency-throughput curve of a report)."""
    return [(float(r), run(float(r))) for r in rates]
