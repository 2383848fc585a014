"""Results of a serving simulation: per-request times and the aggregates a serving benchmark prints.

Definitions follow vLLM's ``benchmarks/benchmark_serving.py`` (``vllm bench serve``):

- TTFT: first token time - arrival (send) time;
- TPOT: (finish - first token) / (output tokens - 1), for requests of more than one output token;
- E2E latency: finish - arrival;
- percentiles: ``numpy.percentile`` (linear interpolation between order statistics);
- throughput over the measured window, from the first arrival to the last finish: completed
  requests, output tokens and input + output tokens per second.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LatencyStats:
    """Mean and percentiles of one latency, in seconds."""

    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: np.ndarray) -> LatencyStats:
        """Statistics of ``values``; NaN everywhere when empty."""
        if values.size == 0:
            nan = float("nan")
            return cls(nan, nan, nan, nan)
        p50, p90, p99 = np.percentile(values, (50, 90, 99))
        return cls(float(values.mean()), float(p50), float(p90), float(p99))

    def to_ms(self) -> dict[str, float]:
        """The statistics in milliseconds, keyed mean/p50/p90/p99 (the serve JSON's shape)."""
        return {"mean": self.mean * 1e3, "p50": self.p50 * 1e3, "p90": self.p90 * 1e3, "p99": self.p99 * 1e3}


@dataclass(frozen=True, eq=False)
class RequestTimes:
    """Per request, in sending order (arrays of equal length)."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    preemptions: np.ndarray

    @property
    def ttft_s(self) -> np.ndarray:
        ttft: np.ndarray = self.first_token_s - self.arrival_s
        return ttft

    @property
    def tpot_s(self) -> np.ndarray:
        """Per request with more than one output token (the others are left out)."""
        many = self.output_tokens > 1
        tpot: np.ndarray = (self.finish_s[many] - self.first_token_s[many]) / (self.output_tokens[many] - 1)
        return tpot

    @property
    def e2e_s(self) -> np.ndarray:
        e2e: np.ndarray = self.finish_s - self.arrival_s
        return e2e

    def middle_rates(self) -> tuple[float, float]:
        """(arrivals, first tokens) per second over the middle half of the arrivals (from the
        first quarter's last arrival to the third quarter's): where first tokens come slower than
        requests arrive, the queue grows through the run, and its latencies grow with its length
        (no steady state). (0, 0) with fewer than 8 requests or a window of no length."""
        n = self.arrival_s.size
        if n < 8:
            return 0.0, 0.0
        arrivals = np.sort(self.arrival_s)
        lo, hi = float(arrivals[n // 4]), float(arrivals[(3 * n) // 4])
        span = hi - lo
        if span <= 0:
            return 0.0, 0.0
        arrived = int(np.count_nonzero((arrivals >= lo) & (arrivals < hi)))
        first = int(np.count_nonzero((self.first_token_s >= lo) & (self.first_token_s < hi)))
        return arrived / span, first / span


@dataclass(frozen=True)
class ServingResult:
    """What a serving simulation measured."""

    requests: RequestTimes
    ttft: LatencyStats
    tpot: LatencyStats
    e2e: LatencyStats
    duration_s: float
    """The measured window: first arrival to last finish."""
    requests_per_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    """(input + output tokens) per second."""
    num_blocks: int
    peak_blocks_used: int
    steps: int
    preemptions: int
    mean_batch_seqs: float
    """Sequences per step, averaged over steps."""


def summarise(requests: RequestTimes, *, num_blocks: int, peak_blocks_used: int, steps: int,
              seq_steps: int) -> ServingResult:
    """Aggregate per-request times (``seq_steps``: sum over steps of the sequences in each)."""
    duration = float(requests.finish_s.max() - requests.arrival_s.min())
    per_s = 1.0 / duration if duration > 0 else float("nan")
    n_out = int(requests.output_tokens.sum())
    n_in = int(requests.input_tokens.sum())
    return ServingResult(
        requests=requests,
        ttft=LatencyStats.of(requests.ttft_s),
        tpot=LatencyStats.of(requests.tpot_s),
        e2e=LatencyStats.of(requests.e2e_s),
        duration_s=duration,
        requests_per_s=requests.arrival_s.size * per_s,
        output_tokens_per_s=n_out * per_s,
        total_tokens_per_s=(n_in + n_out) * per_s,
        num_blocks=num_blocks,
        peak_blocks_used=peak_blocks_used,
        steps=steps,
        preemptions=int(requests.preemptions.sum()),
        mean_batch_seqs=seq_steps / steps if steps else 0.0,
    )
