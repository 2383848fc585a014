"""Units and formatting in one place.

Conventions: memory sizes in the catalog are vendor GB (1e9 bytes); bandwidths in GB/s
(1e9 bytes/s); peaks in TFLOP/s (1e12). Internally the models use bytes, FLOPs and seconds.
"""

from __future__ import annotations

import functools

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
GiB = 1024.0**3
MiB = 1024.0**2
TFLOP = 1e12
US = 1e-6
MS = 1e-3


# A scale: (the least magnitude it applies to, the divisor, the format of the divided value).
# The first that applies wins; the last is for everything smaller (and NaN).
_Scale = tuple[float, float, str]

BYTE_SCALES: tuple[_Scale, ...] = (  # decimal, as vendors and nvidia-smi's GB columns (1 GB = 1e9 B)
    (TB, TB, "{:.2f} TB"), (GB, GB, "{:.2f} GB"), (MB, MB, "{:.1f} MB"), (KB, KB, "{:.1f} kB"), (0, 1, "{:.0f} B"))
TIME_SCALES: tuple[_Scale, ...] = (
    (86400, 86400, "{:.1f} d"), (3600, 3600, "{:.1f} h"), (60, 60, "{:.1f} min"), (1, 1, "{:.2f} s"),
    (MS, MS, "{:.2f} ms"), (0, US, "{:.1f} us"))
FLOP_SCALES: tuple[_Scale, ...] = (
    (1e18, 1e18, "{:.2f} EFLOP"), (1e15, 1e15, "{:.2f} PFLOP"), (1e12, 1e12, "{:.2f} TFLOP"),
    (1e9, 1e9, "{:.2f} GFLOP"), (1e6, 1e6, "{:.2f} MFLOP"), (0, 1, "{:.0f} FLOP"))
COUNT_SCALES: tuple[_Scale, ...] = (
    (1e12, 1e12, "{:.2f}T"), (1e9, 1e9, "{:.2f}B"), (1e6, 1e6, "{:.2f}M"), (1e3, 1e3, "{:.2f}k"), (0, 1, "{:.0f}"))
SI_SCALES: tuple[_Scale, ...] = (  # 1.23G, 4.56M, 12.3k, 456, 1.23
    (1e9, 1e9, "{:.2f}G"), (1e6, 1e6, "{:.2f}M"), (1e4, 1e3, "{:.1f}k"), (100, 1, "{:,.0f}"), (0, 1, "{:.3g}"))


def fmt_scaled(x: float, scales: tuple[_Scale, ...]) -> str:
    """x in the first of `scales` whose least magnitude |x| reaches."""
    _, div, spec = next((s for s in scales if abs(x) >= s[0]), scales[-1])
    return spec.format(x / div)


fmt_bytes = functools.partial(fmt_scaled, scales=BYTE_SCALES)
fmt_time = functools.partial(fmt_scaled, scales=TIME_SCALES)
fmt_flops = functools.partial(fmt_scaled, scales=FLOP_SCALES)
fmt_count = functools.partial(fmt_scaled, scales=COUNT_SCALES)
fmt_si = functools.partial(fmt_scaled, scales=SI_SCALES)


def fmt_rate(x: float, unit: str) -> str:
    return f"{fmt_si(x)} {unit}"


def fmt_usd(x: float) -> str:
    if abs(x) >= 100:
        return f"${x:,.0f}"
    return f"${x:,.2f}"
