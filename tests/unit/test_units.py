"""Number formatting (whichgpu.units): each scale's boundary and the smallest unit."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from whichgpu.units import fmt_bytes, fmt_count, fmt_flops, fmt_si, fmt_time, fmt_usd


@pytest.mark.parametrize(("fmt", "x", "text"), [
    (fmt_bytes, 80e9, "80.00 GB"), (fmt_bytes, 1.5e12, "1.50 TB"), (fmt_bytes, 2048, "2.0 kB"),
    (fmt_bytes, 999, "999 B"), (fmt_bytes, -3e6, "-3.0 MB"),
    (fmt_time, 2 * 86400, "2.0 d"), (fmt_time, 5400, "1.5 h"), (fmt_time, 90, "1.5 min"),
    (fmt_time, 1.5, "1.50 s"), (fmt_time, 0.0125, "12.50 ms"), (fmt_time, 3e-6, "3.0 us"),
    (fmt_flops, 3.2e18, "3.20 EFLOP"), (fmt_flops, 1e12, "1.00 TFLOP"), (fmt_flops, 12, "12 FLOP"),
    (fmt_count, 7.24e9, "7.24B"), (fmt_count, 1500, "1.50k"), (fmt_count, 12, "12"),
    (fmt_si, 1.234e9, "1.23G"), (fmt_si, 12345, "12.3k"), (fmt_si, 9999, "9,999"), (fmt_si, 1.234, "1.23"),
    (fmt_usd, 1650, "$1,650"), (fmt_usd, 0.69, "$0.69"),
])
def test_golden(fmt: Callable[[float], str], x: float, text: str) -> None:
    assert fmt(x) == text


def test_nan_takes_the_smallest_unit() -> None:
    assert fmt_bytes(math.nan) == "nan B"
    assert fmt_time(math.nan) == "nan us"
