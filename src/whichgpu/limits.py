"""The valid range of every number a user can give, in one place.

The CLI's flags show these ranges in `--help` and refuse values outside them with a one-line
error; the library's validators (Plan, WorkloadSpec) check the same figures. The bounds are
generous: they exist to catch typos, overflow (integers past 64 bits, sizes whose tensors cannot
be stored) and non-numbers (NaN, infinity), not to second-guess a plausible request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Bound:
    """A closed range [lo, hi]; ``lo_open`` makes the lower end exclusive (a value > lo)."""

    lo: float
    hi: float
    lo_open: bool = False

    def ok(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):
            return False
        above = value > self.lo if self.lo_open else value >= self.lo
        return above and value <= self.hi

    def describe(self, noun: str = "a number", integer: bool = False) -> str:
        """The range in words: "a number > 0 and <= 5000", "an integer >= 1 and <= 65536"."""
        lo = f"> {self.lo:g}" if self.lo_open else f">= {self.lo:g}"
        return f"{noun} {lo} and <= {int(self.hi) if integer else f'{self.hi:g}'}"

    def parse(self, text: object, integer: bool = False) -> int | float:
        """`text` as a number in range; ValueError (one line, with what is valid) otherwise. A
        number (a flag's default) is only checked."""
        valid = self.describe("an integer" if integer else "a finite number", integer)
        if isinstance(text, (int, float)) and not isinstance(text, bool):
            value: int | float = text
        else:
            try:
                value = int(str(text), 10) if integer else float(str(text))
            except ValueError:
                raise ValueError(f"{text!r} is not {'an integer' if integer else 'a number'}; valid: {valid}") from None
        if not self.ok(value):
            raise ValueError(f"{text} is out of range; valid: {valid}")
        return value


# ---- parallel layout and step ------------------------------------------------------------------
GPUS = Bound(1, 65536)                 # data-parallel degree / GPUs in a job
TP = Bound(1, 1024)
GRAD_ACCUM = Bound(1, 65536)
MAX_GPUS = Bound(1, 65536)             # recommend's largest count
STEP_HOST_MS = Bound(0, 100_000)       # host work per step outside kernel issue (the engine files' bound)
# ---- workload sizes ---------------------------------------------------------------------------------
BATCH = Bound(1, 1 << 20)              # samples per GPU per step
SEQ_LEN = Bound(1, 1 << 24)            # 16M tokens
CONTEXT = Bound(1, 1 << 24)
IMAGE_SIZE = Bound(1, 16384)           # pixels per side: 16k x 16k x 3 is 805M values per image
LORA_RANK = Bound(1, 65536)
# ---- power, money, time --------------------------------------------------------------------------------
POWER_W = Bound(0, 5000, lo_open=True)             # per GPU (the catalog's largest TDP: MI355X, 1400 W)
POWER_BUDGET_W = Bound(0, 1e9, lo_open=True)       # all GPUs together
BUDGET_USD = Bound(0, 1e12, lo_open=True)
HOURS_PER_MONTH = Bound(0, 744, lo_open=True)      # 31 days x 24 h
YEARS = Bound(0, 30, lo_open=True)
USD_PER_KWH = Bound(0, 10)
MEMORY_GB = Bound(0, 65536)
JOB_TOKENS = Bound(0, 1e18, lo_open=True)          # tokens in one job
JOB_EPOCHS = Bound(0, 1e6, lo_open=True)
DATASET_SIZE = Bound(0, 1e15, lo_open=True)
# ---- output ----------------------------------------------------------------------------------------
TOP = Bound(0, 100000)
ROWS = Bound(1, 100000)
