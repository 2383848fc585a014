"""Speculative decoding's inputs and its expected progress per verification step. Torch-free.

A drafter proposes ``draft_len`` (k) tokens per decoding request; the target model verifies them
and one more position in a single forward pass over k + 1 tokens per request, keeping the longest
accepted prefix plus one token of its own (the correction, or a bonus token when every draft is
accepted). With each draft token accepted independently with probability a (the "acceptance
rate"), the expected tokens a request gains per verification step is (Leviathan, Kalman and
Matias 2023, "Fast Inference from Transformers via Speculative Decoding", eq. 1):

    E(k, a) = (1 - a^(k+1)) / (1 - a)        (= k + 1 when a = 1)

How a step is timed (the verification pass and the drafter's k passes) is `step.StepModel`'s;
how requests progress and reserve KV slots is the scheduler's (`scheduler.py`).

Progress is kept deterministic: each request carries an accumulator of expected tokens in units
of 1 / `PROGRESS_UNIT` (E rounded to 2^-20), so after j verification steps of k drafts a request
has gained floor(j x E) tokens, at least one per step (E >= 1).
"""

from __future__ import annotations

from dataclasses import dataclass

from whichgpu.errors import InputError

MAX_DRAFT_LEN = 16
PROGRESS_UNIT = 1 << 20
"""Fixed-point unit of the per-request progress accumulator (expected tokens x 2^20)."""


def expected_tokens(draft_len: int, acceptance: float) -> float:
    """Expected tokens per verification step per request, E = (1 - a^(k+1)) / (1 - a) (Leviathan
    et al. 2023, eq. 1); k + 1 when every draft is accepted (a = 1), 1 with no drafts (k = 0)."""
    k, a = draft_len, acceptance
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def expected_units(draft_len: int, acceptance: float) -> int:
    """`expected_tokens` in accumulator units (an integer >= `PROGRESS_UNIT`)."""
    return max(PROGRESS_UNIT, round(expected_tokens(draft_len, acceptance) * PROGRESS_UNIT))


@dataclass(frozen=True)
class SpecDecode:
    """Speculative decoding as the engine runs it (vLLM ``--speculative-config``)."""

    draft_len: int
    """Draft tokens proposed per decoding request per step (vLLM ``num_speculative_tokens``), 1-16."""
    acceptance: float
    """Probability that a draft token is accepted, each independently, in (0, 1]."""
    draft_model: str | None = None
    """A zoo model name drafting with its own full forward pass per draft token (weights in the
    serving precision, its own KV cache); None: a one-layer draft head (EAGLE, DeepSeek MTP: one
    decoder layer of the target's shape plus the target's LM head per draft token)."""

    def __post_init__(self) -> None:
        k = self.draft_len
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_DRAFT_LEN:
            raise InputError(f"draft length must be a whole number from 1 to {MAX_DRAFT_LEN}, got {k!r}",
                             field="spec_draft_len")
        a = self.acceptance
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 < a <= 1:
            raise InputError(f"acceptance rate must be in (0, 1], got {a!r}", field="spec_acceptance")
        if self.draft_model is not None and not (isinstance(self.draft_model, str) and self.draft_model.strip()):
            raise InputError(f"draft model must be a model name or None, got {self.draft_model!r}",
                             field="spec_draft_model")

    @property
    def expected_tokens(self) -> float:
        """Tokens a request gains per verification step on average (`expected_tokens`)."""
        return expected_tokens(self.draft_len, self.acceptance)

    def units(self, drafts: int) -> int:
        """Accumulator units gained by a step that verifies ``drafts`` (<= draft_len) tokens."""
        return expected_units(drafts, self.acceptance)

    @property
    def label(self) -> str:
        drafter = f"draft model {self.draft_model}" if self.draft_model else "a one-layer draft head"
        return (f"speculative decoding: {self.draft_len} draft tokens from {drafter}, acceptance "
                f"{self.acceptance:g}, {self.expected_tokens:.2f} tokens per verification step")
