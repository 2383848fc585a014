"""Pipeline schedules simulated pass by pass (whichgpu.parallel.schedule)."""

from __future__ import annotations

import csv
import itertools
import random
from pathlib import Path

import pytest

from whichgpu.errors import InputError
from whichgpu.parallel import schedule as S
from whichgpu.parallel.schedule import SCHEDULES, Timeline, simulate, step_time

DATA = Path(__file__).resolve().parents[1] / "planner_data" / "planner_dev"
CHUNKS = {"interleaved-1f1b": 2, "zb-v": 2}


def _sim(name: str, p: int, m: int, f: float = 1.0, b: float = 1.0, w: float = 1.0,
         comm: float = 0.0) -> Timeline:
    return simulate(name, p, m, f, b, w, comm=comm, chunks=CHUNKS.get(name, 1))


# ---------------------------------------------------------------- Zero Bubble paper, Table 5
def _table5() -> list[tuple[str, int, int, float, float, float, float, dict[str, float]]]:
    want: dict[tuple[str, int], dict[str, float]] = {}
    with open(DATA / "zero_bubble_tables.csv") as fh:
        for r in csv.DictReader(fh):
            if r["table"] == "5" and r["metric"] == "bubble_rate":
                want.setdefault((r["model"], int(r["microbatches_m"])), {})[r["schedule"]] = \
                    float(r["value"])
    rows = []
    with open(DATA / "zero_bubble_profiled_times.csv") as fh:
        for r in csv.DictReader(fh):
            m = int(r["microbatches_m"])
            rows.append((r["model"], int(r["stages_p"]), m, float(r["T_F"]), float(r["T_B"]),
                         float(r["T_W"]), float(r["T_comm"]), want[(r["model"], m)]))
            # the paper's interleaved runs use one layer per chunk with the layer count of its
            # code (Table 3's, plus the 2 removed from the first and last stage): v = 24/8 = 3
            # (1.5B), 32/8 = 4 (6.2B), 48/16 = 3 (14.6B), 64/32 = 2 (28.3B)
            rows[-1][7]["v"] = (int(r["layers"]) + 2) // int(r["stages_p"])
    assert len(rows) == 12
    return rows


@pytest.mark.parametrize("row", _table5(), ids=lambda r: f"{r[0]}-m{r[2]}")
def test_table5_bubble_rates(row: tuple[str, int, int, float, float, float, float, dict[str, float]]) -> None:
    # bubble rate = (cost - m(T_F + T_B + T_W)) / cost, cost = the longest stage span
    # (Qi et al. 2024, Sec. 5.3 / Table 5); times in ms, comm paid on every hop between ranks
    _, p, m, f, b, w, c, want = row
    v = int(want["v"])
    got = {
        "1F1B": simulate("1f1b", p, m, f, b + w, comm=c),
        "ZB-H1": simulate("zb-h1", p, m, f, b, w, comm=c),
        "ZB-H2": simulate("zb-h2", p, m, f, b, w, comm=c),
        "1F1B-I": simulate("interleaved-1f1b", p, m, f / v, (b + w) / v, comm=c, chunks=v,
                           paper_compat=True),
    }
    for name, tl in got.items():
        assert tl.paper_bubble_rate == pytest.approx(want[name], abs=1e-3), name
    # without the paper's shortcut, interleaved is a little worse: at most 0.0036 higher
    strict = simulate("interleaved-1f1b", p, m, f / v, (b + w) / v, comm=c, chunks=v)
    assert 0 <= strict.paper_bubble_rate - want["1F1B-I"] <= 0.0036
    # the per-stage span equals the makespan, except it can be shorter for ZB-H2 (parallelogram)
    assert got["ZB-H1"].max_stage_span == pytest.approx(got["ZB-H1"].makespan)
    assert got["ZB-H2"].max_stage_span <= got["ZB-H2"].makespan


# ---------------------------------------------------------------- textbook bubbles
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16), (8, 32), (8, 8)])
def test_gpipe_and_1f1b_bubble_is_textbook(p: int, m: int) -> None:
    # uniform stages, no comm: bubble = (p - 1) / (m + p - 1)
    for name in ("gpipe", "1f1b"):
        tl = simulate(name, p, m, 1.0, 2.0)
        assert tl.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), rel=1e-12)
        assert tl.makespan == pytest.approx((m + p - 1) * 3.0)


@pytest.mark.parametrize("p,m,v", [(4, 8, 2), (4, 16, 3), (8, 32, 2), (8, 16, 4)])
def test_interleaved_bubble_is_megatrons(p: int, m: int, v: int) -> None:
    # Narayanan et al. 2021: bubble time (p - 1)(t_f + t_b) / v, so fraction (p-1)/(v m + p - 1);
    # the simulation gives it exactly for uniform chunks and no comm
    tl = simulate("interleaved-1f1b", p, m, 1.0 / v, 2.0 / v, chunks=v)
    assert tl.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1), rel=1e-12)


@pytest.mark.parametrize("p,m", [(4, 8), (8, 16), (8, 32)])
def test_zb_h1_bubble_is_a_third_of_1f1b(p: int, m: int) -> None:
    # F = B = W: 1F1B's bubble (p-1)(F+B+W) shrinks to (p-1)(F+B-W) (Qi et al. Sec. 3.1)
    h1 = simulate("zb-h1", p, m, 1.0, 1.0, 1.0)
    f1 = simulate("1f1b", p, m, 1.0, 2.0)
    assert h1.makespan - 3 * m == pytest.approx((f1.makespan - 3 * m) / 3)


@pytest.mark.parametrize("p,m", [(4, 8), (8, 16), (8, 32), (16, 64)])
def test_zb_h2_and_zb_v_bubbles(p: int, m: int) -> None:
    h2 = simulate("zb-h2", p, m, 1.0, 1.0, 1.0)
    assert h2.paper_bubble_rate == pytest.approx(0.0, abs=1e-12)  # (p-1)(F+B-2W) = 0
    # our ZB-V order (a unit-cost greedy, not the authors'): between p + 1 and 2p units of idle
    # for m >= 2p, so below ZB-H1 and far below 1F1B, but not zero
    zv = _sim("zb-v", p, m)
    h1 = _sim("zb-h1", p, m)
    f1 = simulate("1f1b", p, m, 1.0, 2.0)
    assert zv.bubble_fraction < h1.bubble_fraction < f1.bubble_fraction
    assert zv.makespan - 6 * m <= 2 * p


# ---------------------------------------------------------------- memory
def test_peak_activations() -> None:
    p, m = 4, 12
    assert simulate("gpipe", p, m, 1.0, 1.0).peak_activations[0] == m
    assert simulate("1f1b", p, m, 1.0, 1.0).peak_activations == (4, 3, 2, 1)  # p - i
    assert simulate("1f1b", 8, 3, 1.0, 1.0).peak_activations[0] == 3  # at most m
    for v in (2, 3):  # Megatron's warm-up: (p - 1) * 2 + (v - 1) * p + 1 chunks on stage 0
        tl = simulate("interleaved-1f1b", p, 4 * p, 1.0, 1.0, chunks=v)
        assert tl.peak_activations[0] == (p - 1) * 2 + (v - 1) * p + 1
    f1 = simulate("1f1b", p, m, 1.0, 2.0).peak_activations
    h1 = simulate("zb-h1", p, m, 1.0, 1.0, 1.0)
    assert all(a <= b for a, b in zip(h1.peak_activations, f1))
    assert h1.peak_pending_w == (1, 2, 3, 4)  # W of micro i - r follows B of micro i
    h2 = simulate("zb-h2", p, m, 1.0, 1.0, 1.0).peak_activations
    assert h2 == tuple(2 * (p - i) - 1 for i in range(p))  # about twice 1F1B
    zv = simulate("zb-v", p, m, 1.0, 1.0, 1.0, chunks=2)
    assert max(zv.peak_activations) <= 2 * p  # chunk-halves: 1F1B's p full micro-batches
    assert max(zv.peak_pending_w) <= 2
    assert simulate("1f1b", p, m, 1.0, 1.0, 1.0).peak_pending_w == (0,) * p


# ---------------------------------------------------------------- dependencies
def _check_dependencies(tl: Timeline, comm: float) -> None:
    p, v = tl.stages, tl.chunks
    nv = p * v
    if tl.schedule == "zb-v":
        def vs(q: S.Pass) -> int:
            return q.stage if q.chunk == 0 else 2 * p - 1 - q.stage
    else:
        def vs(q: S.Pass) -> int:
            return q.chunk * p + q.stage
    at = {(q.kind, vs(q), q.micro): q for q in tl.passes}
    assert len(at) == len(tl.passes)
    eps = 1e-9
    for q in tl.passes:
        x = vs(q)

        def after(dep: S.Pass, q: S.Pass = q) -> None:
            gap = comm if dep.stage != q.stage else 0.0
            assert q.start >= dep.end + gap - eps, (q, dep)

        if q.kind == "F" and x > 0:
            after(at[("F", x - 1, q.micro)])
        if q.kind == "B":
            after(at[("F", x, q.micro)])
            if x < nv - 1:
                after(at[("B", x + 1, q.micro)])
        if q.kind == "W":
            after(at[("B", x, q.micro)])
    for s in range(p):
        own = sorted((q for q in tl.passes if q.stage == s), key=lambda q: q.start)
        for a, b in itertools.pairwise(own):
            assert b.start >= a.end - eps
        assert tl.busy[s] == pytest.approx(sum(q.end - q.start for q in own))


@pytest.mark.parametrize("name", SCHEDULES)
def test_dependencies_honoured(name: str) -> None:
    rng = random.Random(7)
    for p in (1, 2, 3, 4):
        for m in (p, 2 * p, 3 * p + 1):
            if name == "interleaved-1f1b" and m % p:
                continue
            n = p * CHUNKS.get(name, 1)
            f = [rng.uniform(0.5, 2) for _ in range(n)]
            b = [rng.uniform(0.5, 2) for _ in range(n)]
            w = [rng.uniform(0, 1) for _ in range(n)]
            tl = simulate(name, p, m, f, b, w, comm=0.1, chunks=CHUNKS.get(name, 1))
            _check_dependencies(tl, 0.1)
            assert len(tl.passes) == m * n * (3 if name in S.SPLIT_BACKWARD else 2)


def test_small_m_never_deadlocks() -> None:
    for name in SCHEDULES:
        for p in (1, 2, 3, 5, 8):
            for m in range(1, 3 * p + 2):
                if name == "interleaved-1f1b" and m % p:
                    continue
                tl = _sim(name, p, m)
                assert tl.makespan > 0


# ---------------------------------------------------------------- uneven stages
def test_slow_last_stage_sets_the_steady_state() -> None:
    p = 4
    f = [1.0, 1.0, 1.0, 1.5]  # LM head on the last stage
    b = [2.0, 2.0, 2.0, 3.0]
    even = simulate("1f1b", p, 32, 1.0, 2.0)
    slow = simulate("1f1b", p, 32, f, b)
    assert slow.makespan > even.makespan
    step = simulate("1f1b", p, 33, f, b).makespan - slow.makespan
    assert step == pytest.approx(4.5)  # one more micro-batch costs the slow stage's F + B
    assert slow.stage_bubble(p - 1) < slow.stage_bubble(0)


# ---------------------------------------------------------------- step_time
def test_step_time_matches_simulate_on_random_inputs() -> None:
    rng = random.Random(2024)
    for _ in range(150):
        name = rng.choice(SCHEDULES)
        v = CHUNKS.get(name, 1)
        p = rng.choice([1, 2, 3, 4, 6])
        m = p * rng.randint(1, 25) if name == "interleaved-1f1b" else rng.randint(1, 120)
        uneven = rng.random() < 0.6

        def t(lo: float, n: int, uneven: bool) -> float | list[float]:
            return [rng.uniform(lo, 2) for _ in range(n)] if uneven else rng.uniform(lo, 2)

        f, b, w = t(0.2, p * v, uneven), t(0.2, p * v, uneven), t(0.0, p * v, uneven)
        comm = rng.choice([0.0, rng.uniform(0, 0.5)])
        tl = simulate(name, p, m, f, b, w, comm=comm, chunks=v)
        got = step_time(name, p, m, f, b, w, comm=comm, chunks=v)
        assert got[0] == pytest.approx(tl.makespan, rel=1e-9)
        assert got[1] == pytest.approx(tl.bubble_fraction, rel=1e-9, abs=1e-12)
        assert got[2:] == (max(tl.peak_activations), max(tl.peak_pending_w))


@pytest.mark.parametrize("name", [s for s in SCHEDULES if s != "gpipe"])
def test_step_time_extrapolates_large_m(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the periodic shortcut (no order is built, no pass timed at the full m) against the full simulation
    v = CHUNKS.get(name, 1)
    p, m = 4, 400
    f = [1.0, 0.9, 1.1, 1.3, 0.7, 1.0, 1.2, 0.8][: p * v]
    b = [x * 1.9 for x in f]
    w = [x * 0.8 for x in f]
    sizes: list[int] = []
    real = S._orders

    def spy(schedule: str, p: int, m: int, v: int) -> S.Order:
        sizes.append(m)
        return real(schedule, p, m, v)

    S.clear_caches()
    monkeypatch.setattr(S, "_orders", spy)
    got = step_time(name, p, m, f, b, w, comm=0.05, chunks=v)
    assert sizes and max(sizes) < m / 2
    monkeypatch.undo()
    tl = simulate(name, p, m, f, b, w, comm=0.05, chunks=v)
    assert got[0] == pytest.approx(tl.makespan, rel=1e-9)
    assert got[2:] == (max(tl.peak_activations), max(tl.peak_pending_w))


def test_a_shapes_first_timing_runs_the_orders_directly_and_later_ones_the_compiled_sequence() -> None:
    # the first step_time of a shape times the ranks' orders in one pass (no compiled sequence: a
    # layout's first evaluation is cheaper); the next compiles it once; both give simulate's times
    S.clear_caches()
    p, m = 4, 12
    for name in SCHEDULES:
        v = CHUNKS.get(name, 1)
        f = [1.0, 0.9, 1.1, 1.3, 0.7, 1.0, 1.2, 0.8][: p * v]
        b, w = [x * 1.9 for x in f], [x * 0.8 for x in f]
        first = step_time(name, p, m, f, b, w, comm=0.05, chunks=v)
        assert S._plan.cache_info().currsize == 0, name
        # the planner's call: the same makespan and bubble without the peaks (m in full here: size 0)
        assert S.pipeline_time(name, p, m, f, b, w, comm=0.05, chunks=v) == (*first[:2], 0), name
        second = step_time(name, p, m, b, f, w, comm=0.05, chunks=v)  # new times: no result-cache hit
        assert S._plan.cache_info().currsize == 1, name
        S._plan.cache_clear()
        for got, (ff, bb) in ((first, (f, b)), (second, (b, f))):
            tl = simulate(name, p, m, ff, bb, w, comm=0.05, chunks=v)
            assert got[0] == pytest.approx(tl.makespan, rel=1e-12), name
            assert got[2:] == (max(tl.peak_activations), max(tl.peak_pending_w)), name
        S._plan.cache_clear()


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize("args,kwargs,match", [
    (("1fb1", 4, 8, 1.0, 1.0), {}, "did you mean"),
    (("1f1b", 4, 0, 1.0, 1.0), {}, "micro-batches"),
    (("1f1b", 0, 8, 1.0, 1.0), {}, "stages"),
    (("interleaved-1f1b", 4, 6, 1.0, 1.0), {"chunks": 2}, "multiple"),
    (("interleaved-1f1b", 4, 8, 1.0, 1.0), {}, "chunks >= 2"),
    (("zb-v", 4, 8, 1.0, 1.0), {"chunks": 3}, "exactly 2"),
    (("1f1b", 4, 8, 1.0, 1.0), {"chunks": 2}, "one chunk"),
    (("1f1b", 4, 8, -1.0, 1.0), {}, ">= 0"),
    (("1f1b", 4, 8, [1.0, 1.0], 1.0), {}, "4 per-virtual-stage"),
    (("1f1b", 4, 8, 1.0, float("nan")), {}, "finite"),
    (("1f1b", 4, 8, 1.0, 1.0), {"comm": -0.1}, "comm"),
])
def test_bad_input(args: tuple[object, ...], kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InputError, match=match):
        simulate(*args, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=match):
        step_time(*args, **kwargs)  # type: ignore[arg-type]
