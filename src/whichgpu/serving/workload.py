"""Serving workloads: how long the requests are and when they arrive.

Lengths are token counts: fixed (every request ``input_len`` in, ``output_len`` out, as
``vllm bench serve --dataset-name random --random-range-ratio 0`` and the serving validation rows)
or drawn from a file of measured pairs (JSONL, one object per line, or CSV with a header), with a
seeded NumPy generator so a run is reproducible.

Arrivals follow the two modes of vLLM's ``benchmarks/benchmark_serving.py`` (``vllm bench serve``):

- closed loop (``--max-concurrency C``): C requests in flight; each finished request is replaced
  at once by the next, until all are sent;
- open loop (``--request-rate R``): a Poisson process, exponential gaps of mean 1/R seconds; the
  first request is sent at time 0 (benchmark_serving sends, then sleeps).

Assumptions: the engine stops each request at exactly its output length (``ignore_eos``, as those
benchmarks run); tokenisation is outside the model (lengths are already token counts).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whichgpu.errors import InputError

INPUT_KEYS = ("input_len", "input_tokens", "prompt_tokens", "prompt_len", "input_length", "isl")
"""Accepted names (case-insensitive) of the prompt-length field of a lengths file."""
OUTPUT_KEYS = ("output_len", "output_tokens", "completion_tokens", "output_length", "osl")
"""Accepted names (case-insensitive) of the answer-length field of a lengths file."""


@dataclass(frozen=True, eq=False)
class RequestLengths:
    """Prompt and answer lengths (tokens) of each request, in sending order."""

    input_len: np.ndarray
    """int64, >= 1."""
    output_len: np.ndarray
    """int64, >= 1."""

    def __post_init__(self) -> None:
        inp = np.asarray(self.input_len, dtype=np.int64)
        out = np.asarray(self.output_len, dtype=np.int64)
        if inp.ndim != 1 or inp.shape != out.shape:
            raise InputError(f"input and output lengths must be two lists of equal size, got "
                             f"{inp.shape} and {out.shape}", field="lengths")
        if inp.size == 0:
            raise InputError("the workload has no requests; give at least one", field="requests")
        for name, a in (("input_len", inp), ("output_len", out)):
            if (a < 1).any():
                raise InputError(f"{name} must be >= 1 token, got {int(a.min())}", field=name)
        object.__setattr__(self, "input_len", inp)
        object.__setattr__(self, "output_len", out)

    def __len__(self) -> int:
        return int(self.input_len.size)


def fixed_lengths(input_len: int, output_len: int, num_requests: int) -> RequestLengths:
    """``num_requests`` requests of ``input_len`` prompt and ``output_len`` answer tokens."""
    _check_count("num_requests", num_requests)
    for name, v in (("input_len", input_len), ("output_len", output_len)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"{name} must be a whole number of tokens >= 1, got {v}", field=name)
    return RequestLengths(np.full(num_requests, input_len, np.int64), np.full(num_requests, output_len, np.int64))


def spread_lengths(input_len: int, output_len: int, output_stddev: float, num_requests: int,
                   seed: int = 0) -> RequestLengths:
    """``num_requests`` prompts of ``input_len`` tokens and answers drawn normal around ``output_len``
    with ``output_stddev`` tokens of standard deviation (seeded, rounded, at least 1 token), as a
    benchmark client's output-length spread draws them (aiperf ``--osl-stddev``). 0: fixed lengths."""
    if not (isinstance(output_stddev, (int, float, np.floating)) and np.isfinite(output_stddev)
            and output_stddev >= 0):
        raise InputError(f"output_stddev must be a finite number of tokens >= 0, got {output_stddev}",
                         field="output_len_stddev")
    base = fixed_lengths(input_len, output_len, num_requests)
    if output_stddev == 0:
        return base
    z = np.random.default_rng(seed).standard_normal(num_requests)
    out = np.maximum(1, np.rint(output_len + output_stddev * z)).astype(np.int64)
    return RequestLengths(base.input_len, out)


def read_lengths(path: str | Path) -> RequestLengths:
    """Every (input, output) pair of a lengths file, in file order.

    ``.jsonl``: one JSON object per line; ``.csv``: a header row. The fields may be named any of
    `INPUT_KEYS` and `OUTPUT_KEYS` (case-insensitive); other fields are ignored.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: cannot read the lengths file ({e.__class__.__name__}: {e})", field="lengths") from e
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        rows = _jsonl_rows(p, text)
    elif suffix == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
    else:
        raise InputError(f"{p}: unknown lengths file type {suffix!r}; valid: .jsonl, .csv", field="lengths")
    if not rows:
        raise InputError(f"{p}: no rows", field="lengths")
    ins: list[int] = []
    outs: list[int] = []
    for i, row in enumerate(rows, start=1):
        ins.append(_field(p, i, row, INPUT_KEYS))
        outs.append(_field(p, i, row, OUTPUT_KEYS))
    return RequestLengths(np.array(ins, np.int64), np.array(outs, np.int64))


def sample_lengths(pool: RequestLengths, num_requests: int, seed: int = 0) -> RequestLengths:
    """``num_requests`` pairs drawn from ``pool`` uniformly with replacement (pairs stay together)."""
    _check_count("num_requests", num_requests)
    idx = np.random.default_rng(seed).integers(0, len(pool), size=num_requests)
    return RequestLengths(pool.input_len[idx], pool.output_len[idx])


@dataclass(frozen=True)
class ClosedLoop:
    """Fixed concurrency: ``concurrency`` requests in flight, a new one sent when one finishes."""

    concurrency: int

    def __post_init__(self) -> None:
        _check_count("concurrency", self.concurrency)


@dataclass(frozen=True)
class Poisson:
    """Open loop: Poisson arrivals at ``rate_per_s`` requests per second, seeded."""

    rate_per_s: float
    seed: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.rate_per_s, (int, float)) and np.isfinite(self.rate_per_s) and self.rate_per_s > 0):
            raise InputError(f"rate_per_s must be a finite number > 0 requests/s, got {self.rate_per_s}",
                             field="rate")

    def arrivals(self, num_requests: int) -> np.ndarray:
        """Send times (s) of ``num_requests`` requests: 0, then exponential gaps of mean 1/rate."""
        _check_count("num_requests", num_requests)
        gaps = np.random.default_rng(self.seed).exponential(1.0 / self.rate_per_s, size=num_requests)
        gaps[0] = 0.0
        return np.cumsum(gaps)


@dataclass(frozen=True, eq=False)
class Arrivals:
    """Open loop at given send times (seconds, non-decreasing): a share of another arrival
    sequence (a pipeline's virtual engine, `pipeline.py`) or a recorded trace."""

    times_s: np.ndarray

    def __post_init__(self) -> None:
        t = np.asarray(self.times_s, dtype=np.float64)
        if t.ndim != 1 or t.size == 0 or not np.isfinite(t).all() or (t < 0).any() or (np.diff(t) < 0).any():
            raise InputError("arrival times must be a non-empty list of finite, non-decreasing seconds >= 0",
                             field="arrivals")
        object.__setattr__(self, "times_s", t)

    def arrivals(self, num_requests: int) -> np.ndarray:
        """The send times of the first ``num_requests`` requests."""
        _check_count("num_requests", num_requests)
        if num_requests > self.times_s.size:
            raise InputError(f"{num_requests} requests but {self.times_s.size} arrival times", field="arrivals")
        times: np.ndarray = self.times_s[:num_requests].copy()
        return times


Arrival = ClosedLoop | Poisson | Arrivals


@dataclass(frozen=True)
class Workload:
    """The requests (lengths, in sending order) and how they arrive."""

    lengths: RequestLengths
    arrival: Arrival

    @property
    def num_requests(self) -> int:
        return len(self.lengths)


def _check_count(name: str, v: object) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise InputError(f"{name} must be a whole number >= 1, got {v}", field=name)


def _jsonl_rows(p: Path, text: str) -> list[Mapping[str, object]]:
    rows: list[Mapping[str, object]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{p}: line {n} is not JSON ({e.msg})", field="lengths") from e
        if not isinstance(obj, dict):
            raise InputError(f"{p}: line {n} must be a JSON object with input/output token counts", field="lengths")
        rows.append(obj)
    return rows


def _field(p: Path, row_no: int, row: Mapping[str, object], keys: Iterable[str]) -> int:
    names = tuple(keys)
    lower = {str(k).strip().lower(): v for k, v in row.items() if k is not None}
    for k in names:
        if k in lower:
            v = lower[k]
            try:
                f = float(str(v)) if not isinstance(v, (int, float)) else float(v)
            except ValueError:
                f = float("nan")
            if not (np.isfinite(f) and f == int(f) and f >= 1):
                raise InputError(f"{p}: row {row_no} field {k!r} must be a whole number of tokens >= 1, got {v!r}",
                                 field="lengths")
            return int(f)
    raise InputError(f"{p}: row {row_no} has none of the fields {', '.join(names)}", field="lengths")
