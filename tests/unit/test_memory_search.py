"""The search arithmetic shared by fit and recommend (memory/search.py)."""

from __future__ import annotations

from whichgpu.memory.search import doubling, fewest, line_aim


def test_line_aim_reaches_capacity() -> None:
    # 10 GB at batch 1, 14 GB at batch 5: 1 GB a sample; 24 GB of capacity -> batch 1 + 14 = 15
    assert line_aim(1, 10.0, 5, 14.0, 24.0) == 15
    assert line_aim(1, 10.0, 5, 10.0, 24.0) is None  # flat: no aim
    assert line_aim(3, 10.0, 3, 12.0, 24.0) is None  # one point: no line


def test_fewest_bisects_the_last_doubling() -> None:
    calls: list[int] = []

    def fits(n: int) -> bool:
        calls.append(n)
        return n >= 11

    assert fewest(fits, 1, 4096) == 11
    assert calls[:5] == [2, 4, 8, 16, 12]  # doubling to 16, then bisection inside (8, 16]
    assert fewest(lambda n: False, 1, 64) is None
    assert fewest(lambda n: True, 4, 64) == 4  # the current count, when it fits


def test_doubling_keeps_powers_of_the_start() -> None:
    assert doubling(lambda n: n >= 20, 2, 64) == 32
    assert doubling(lambda n: n >= 200, 2, 64) is None
