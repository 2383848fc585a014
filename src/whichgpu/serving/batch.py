"""One engine step's batch, and the step-time functions the scheduler simulation calls.

A step of a continuous-batching engine runs one forward pass over a mix of prefill chunks (a
slice of a prompt, attending to the tokens already cached plus itself) and decode requests (one
new token each, attending to the whole context). The scheduler (`scheduler.py`) describes each
step as a `StepBatch`; a caller-supplied function maps it to seconds of GPU time. The
performance model plugs in here; `AffineStepTime` is a simple analytic one for tests and
benchmarks.

Speed: long runs of identical pure-decode steps are simulated in one go. A step-time function
may offer ``decode_run(decode_context, steps)``, the per-step seconds of ``steps`` successive
pure-decode steps whose contexts all grow by one per step (`DecodeRunStepTime`); without it the
scheduler calls the function once per step (exact, slower). Under speculative decoding the
contexts of a run grow by each request's accepted tokens, not by one: ``spec_decode_run`` times
such a run from the per-step sums of the contexts (`SpecRunStepTime`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Protocol, runtime_checkable

import numpy as np

_EMPTY = np.zeros(0, np.int64)


@dataclass(frozen=True, eq=False)
class StepBatch:
    """The work of one engine step (token counts, not tensors). The prefill chunks' totals are
    computed once and kept (a step's time reads them several times, a pipeline's once per stage):
    the arrays are not to be changed after it is built."""

    prefill_tokens: np.ndarray
    """int64 per prefill chunk: prompt tokens computed this step."""
    prefill_context: np.ndarray
    """int64 per prefill chunk: tokens it attends to (cached before it + the chunk itself)."""
    decode_context: np.ndarray
    """int64 per decode request: its context length including the token fed this step."""
    decode_drafts: np.ndarray | None = None
    """Speculative decoding: int64 per decode request, the draft tokens it verifies this step
    (each then runs 1 + drafts query tokens); None: no speculation."""

    @classmethod
    def decode_only(cls, decode_context: np.ndarray, drafts: np.ndarray | None = None) -> StepBatch:
        return cls(_EMPTY, _EMPTY, decode_context, drafts)

    @cached_property
    def _prefill(self) -> tuple[int, int, int, int]:
        """(tokens, attention pairs, longest context, context sum) of the prefill chunks, in
        Python integers (a step has a few chunks: cheaper than numpy calls on tiny arrays). Read
        only when there are chunks (a pure-decode step, most steps, touches none of this)."""
        toks = self.prefill_tokens.tolist()
        ctxs = self.prefill_context.tolist()
        pairs = sum(t * (c - t) + t * (t + 1) // 2 for t, c in zip(toks, ctxs))
        return sum(toks), pairs, max(ctxs), sum(ctxs)

    @property
    def num_prefill_tokens(self) -> int:
        return self._prefill[0] if self.prefill_tokens.size else 0

    @property
    def num_decode(self) -> int:
        return int(self.decode_context.size)

    @property
    def num_tokens(self) -> int:
        """Tokens in the forward pass: prefill chunk tokens + one per decode request (+ the
        draft tokens verified, under speculative decoding)."""
        if self.decode_drafts is not None:
            return self.num_prefill_tokens + self.num_decode + int(self.decode_drafts.sum())
        return self.num_prefill_tokens + self.num_decode

    @property
    def num_seqs(self) -> int:
        return int(self.prefill_tokens.size + self.decode_context.size)

    @property
    def decode_context_sum(self) -> int:
        """KV positions the decode requests read (their attention's memory traffic)."""
        return int(self.decode_context.sum())

    @property
    def prefill_attention_pairs(self) -> int:
        """Query x key pairs of the prefill chunks' attention, causal within the chunk:
        sum over chunks of tokens x (context - tokens) + tokens x (tokens + 1) / 2."""
        return self._prefill[1] if self.prefill_tokens.size else 0

    @property
    def prefill_context_max(self) -> int:
        """The longest context a prefill chunk attends to (0 without prefill)."""
        return self._prefill[2] if self.prefill_tokens.size else 0

    @property
    def prefill_context_sum(self) -> int:
        """Tokens the prefill chunks attend to, summed (their KV reads)."""
        return self._prefill[3] if self.prefill_tokens.size else 0


class StepTime(Protocol):
    """Seconds of GPU time one engine step takes (CPU scheduling overhead excluded)."""

    def __call__(self, batch: StepBatch) -> float: ...


@runtime_checkable
class DecodeRunStepTime(Protocol):
    """A step-time function that can also time a run of pure-decode steps at once."""

    def __call__(self, batch: StepBatch) -> float: ...

    def decode_run(self, decode_context: np.ndarray, steps: int) -> np.ndarray:
        """Seconds of each of ``steps`` pure-decode steps; step j's contexts are
        ``decode_context + j``. Must equal calling ``self`` on each of those batches."""
        ...


@runtime_checkable
class SpecRunStepTime(Protocol):
    """A step-time function that can time a run of pure-decode speculative steps at once."""

    def __call__(self, batch: StepBatch) -> float: ...

    def spec_decode_run(self, num_decode: int, context_sums: np.ndarray, drafts: int) -> np.ndarray:
        """Seconds of pure-decode steps of ``num_decode`` requests, each verifying ``drafts``
        draft tokens, whose decode contexts sum to each of ``context_sums``. Must equal calling
        ``self`` on such batches (the step time depends on the contexts through their sum only)."""
        ...


@dataclass(frozen=True)
class AffineStepTime:
    """An analytic step time, affine in the batch's totals:

    ``base_s + per_token_s x tokens + per_context_s x decode context sum
    + per_attention_pair_s x prefill attention pairs``.

    A fixed cost (weights read once per step, launches), a per-token cost (matmul work), a
    per-cached-position cost of decode attention (KV reads) and prefill attention's quadratic
    term. Not a hardware model: the caller picks the coefficients.
    """

    base_s: float
    per_token_s: float = 0.0
    per_context_s: float = 0.0
    per_attention_pair_s: float = 0.0

    def __call__(self, batch: StepBatch) -> float:
        return (self.base_s + self.per_token_s * batch.num_tokens + self.per_context_s * batch.decode_context_sum
                + self.per_attention_pair_s * batch.prefill_attention_pairs)

    def decode_run(self, decode_context: np.ndarray, steps: int) -> np.ndarray:
        n = decode_context.size
        s0 = float(decode_context.sum())
        j = np.arange(steps, dtype=np.float64)
        return self.base_s + self.per_token_s * n + self.per_context_s * (s0 + n * j)

    def spec_decode_run(self, num_decode: int, context_sums: np.ndarray, drafts: int) -> np.ndarray:
        return self.base_s + self.per_token_s * num_decode * (1 + drafts) + self.per_context_s * context_sums
