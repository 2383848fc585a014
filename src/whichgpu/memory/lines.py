"""A line of a memory breakdown and the small helpers the training and inference models share."""

from __future__ import annotations

from dataclasses import dataclass

from whichgpu.errors import InputError
from whichgpu.units import GB
from whichgpu.workload.precision import POLICIES, Precision, get_precision
from whichgpu.workload.trace import Trace


@dataclass(frozen=True)
class MemoryLine:
    bytes: float  # on each GPU
    assumption: str
    host_bytes: float = 0.0  # in CPU RAM (offload)


ZERO = MemoryLine(0.0, "")


def gb(x: float) -> str:
    return f"{x / GB:.2f} GB"


def count(n: float) -> str:
    return f"{n / 1e6:,.1f}M" if n < 1e9 else f"{n / 1e9:,.2f}B"


def snap(x: float) -> float:
    """Bytes per value from a ratio: the nearest of 1, 2, 4 when within 2%."""
    for b in (1.0, 2.0, 4.0):
        if abs(x - b) <= 0.02 * b:
            return b
    return x


def precision_of(trace: Trace) -> Precision:
    if trace.precision not in POLICIES:
        raise InputError(f"trace precision {trace.precision!r} is unknown; valid: {', '.join(POLICIES)}")
    return get_precision(trace.precision, trace.task)

