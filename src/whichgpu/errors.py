"""User-facing errors.

Every error a user can cause (a bad name, a malformed file, an impossible plan) is a
`WhichGPUError`. The CLI prints its one-line message and exits non-zero; it never shows a
traceback for these. Messages name what was wrong and what would be valid.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class WhichGPUError(Exception):
    """Base class: a problem with the user's input, shown as one line."""

    exit_code = 2


class InputError(WhichGPUError):
    """A bad value or combination (negative batch, impossible plan, ...), in the library's terms.

    ``field`` names the library field at fault (a Plan or WorkloadSpec field, e.g. "dp"); the CLI
    maps it to its flag (report/flags.py FLAGS) when it prints the message.
    """

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class NotModelledError(InputError):
    """A valid request the models do not cover yet (e.g. pipeline parallelism before the planner)."""


class UnknownNameError(InputError):
    """A GPU, model, optimizer, ... name that matches nothing."""

    def __init__(self, kind: str, name: str, candidates: Iterable[str], hint: str = "", field: str = "") -> None:
        cands = sorted(set(candidates))
        close = difflib.get_close_matches(name, cands, n=3, cutoff=0.5)
        if not close:
            low = name.lower()
            close = [c for c in cands if low and (low in c.lower() or c.lower() in low)][:3]
        if close:
            tail = "did you mean " + ", ".join(repr(c) for c in close) + "?"
        elif len(cands) <= 12:
            tail = "valid: " + ", ".join(cands)
        else:
            tail = f"see {hint}" if hint else f"{len(cands)} known"
        super().__init__(f"unknown {kind} {name!r}; {tail}", field=field)
        self.kind = kind
        self.name = name
        self.suggestions = close


class AmbiguousNameError(WhichGPUError):
    """A name that matches more than one entry."""

    def __init__(self, kind: str, name: str, matches: Iterable[str]) -> None:
        ms = sorted(set(matches))
        super().__init__(f"ambiguous {kind} {name!r}: matches " + ", ".join(ms) + "; be more specific")
        self.matches = ms


class NoAnswerError(WhichGPUError):
    """A valid question whose answer is "no": the model does not fit, no GPU or layout can run the
    job within the constraints, the latency target cannot be met. Exit code 1 (bad input is 2)."""

    exit_code = 1


class CatalogError(WhichGPUError):
    """A malformed catalog (or user override) file."""

    def __init__(self, path: str, field: str, problem: str) -> None:
        where = f"{path}: field {field!r}" if field else path
        super().__init__(f"{where}: {problem}")
        self.path = path
        self.field = field


class CaptureError(WhichGPUError):
    """A model that cannot be built or traced."""


class BatchTooSmallError(CaptureError):
    """A training step that cannot run at this batch: batch norm over a single value per channel
    (a batch of 1 whose feature map has shrunk to 1 x 1). ``min_batch`` is the smallest that can."""

    def __init__(self, message: str, min_batch: int) -> None:
        super().__init__(message)
        self.min_batch = min_batch


class MissingExtraError(WhichGPUError):
    """An optional dependency that the requested feature needs is not installed."""

    def __init__(self, feature: str, extra: str, module: str) -> None:
        super().__init__(
            f"{feature} needs the optional package {module!r}; install it with "
            f"pip install 'whichgpu[{extra}]'"
        )


def require_positive(name: str, value: float | int | None, allow_zero: bool = False) -> None:
    """Raise InputError unless value is positive (or zero when allowed)."""
    if value is None:
        return
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InputError(f"{name} must be {bound}, got {value}")
