"""The arithmetic of the memory searches, in one place: where a line reaches capacity, and the
fewest GPUs that fit. Used by the largest-batch search and the suggestions (memory/fit.py) and
by recommend's layouts (recommend/search.py, recommend/evaluate.py). Torch-free.

Memory per GPU is close to affine in the batch, so a search aims where the line through two
measured batches reaches capacity instead of bisecting blindly.
"""

from __future__ import annotations

from collections.abc import Callable


def line_aim(b1: int, m1: float, b2: int, m2: float, capacity: float) -> int | None:
    """The batch where the line through (b1, m1) and (b2, m2) reaches `capacity` (rounded down);
    None when the line does not rise."""
    if b2 == b1 or m2 <= m1:
        return None
    return b1 + int((capacity - m1) * (b2 - b1) / (m2 - m1))


def doubling(fits: Callable[[int], bool], start: int, limit: int) -> int | None:
    """The first of start, 2 start, 4 start, ... (at most `limit`) that fits; None if none does."""
    n = max(start, 1)
    while n <= limit:
        if fits(n):
            return n
        n *= 2
    return None


def fewest(fits: Callable[[int], bool], start: int, limit: int) -> int | None:
    """The fewest GPUs from `start` up to `limit` that fit, when more never hurt: double until one
    fits, then bisect the last doubling; None if not even `limit` fits."""
    lo = max(start, 1)
    hi = max(2, lo)
    while not fits(hi):
        if hi >= limit:
            return None
        lo, hi = hi, min(hi * 2, limit)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi
