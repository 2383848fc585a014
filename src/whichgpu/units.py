"""Units and formatting in one place.

Conventions: memory sizes in the catalog are vendor GB (1e9 bytes); bandwidths in GB/s
(1e9 bytes/s); peaks in TFLOP/s (1e12). Internally the models use bytes, FLOPs and seconds.
"""

from __future__ import annotations

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
GiB = 1024.0**3
MiB = 1024.0**2
TFLOP = 1e12
US = 1e-6
MS = 1e-3


def fmt_bytes(n: float) -> str:
    """Decimal units, as vendors and nvidia-smi's GB columns do (1 GB = 1e9 bytes)."""
    a = abs(n)
    if a >= TB:
        return f"{n / TB:.2f} TB"
    if a >= GB:
        return f"{n / GB:.2f} GB"
    if a >= MB:
        return f"{n / MB:.1f} MB"
    if a >= KB:
        return f"{n / KB:.1f} kB"
    return f"{n:.0f} B"


def fmt_time(s: float) -> str:
    a = abs(s)
    if a >= 3600 * 24:
        return f"{s / 86400:.1f} d"
    if a >= 3600:
        return f"{s / 3600:.1f} h"
    if a >= 60:
        return f"{s / 60:.1f} min"
    if a >= 1:
        return f"{s:.2f} s"
    if a >= MS:
        return f"{s / MS:.2f} ms"
    return f"{s / US:.1f} us"


def fmt_flops(f: float) -> str:
    a = abs(f)
    for unit, scale in (("EFLOP", 1e18), ("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if a >= scale:
            return f"{f / scale:.2f} {unit}"
    return f"{f:.0f} FLOP"


def fmt_count(n: float) -> str:
    a = abs(n)
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if a >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def fmt_si(x: float) -> str:
    """A plain number with an SI suffix: 1.23G, 4.56M, 12.3k, 456, 1.23."""
    a = abs(x)
    if a >= 1e9:
        return f"{x / 1e9:.2f}G"
    if a >= 1e6:
        return f"{x / 1e6:.2f}M"
    if a >= 1e4:
        return f"{x / 1e3:.1f}k"
    if a >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def fmt_rate(x: float, unit: str) -> str:
    return f"{fmt_si(x)} {unit}"


def fmt_usd(x: float) -> str:
    if abs(x) >= 100:
        return f"${x:,.0f}"
    return f"${x:,.2f}"
