"""Timings of the pipeline-schedule simulator (no assertions).

Run: ``python benchmarks/bench_schedule.py``. For every schedule, p in (4, 8, 16, 32, 64) and m in
(8, 32, 128, 512) it prints the time of one ``simulate`` (structure cached, as in a search) and of
``step_time``: cold (every cache cleared: orders, compiled plans, results; a shape's first timing
runs its orders directly) and warm-structure (after a second timing, which compiles the pass
sequence: plans cached, new pass times, the layout-search case). Uneven stages: the last is 20 %
slower.
"""

from __future__ import annotations

import time

from whichgpu.parallel import schedule as S

PS = (4, 8, 16, 32, 64)
MS = (8, 32, 128, 512)


def _clear() -> None:
    S.clear_caches()


def _times(p: int, v: int, scale: float) -> tuple[list[float], list[float], list[float]]:
    n = p * v
    f = [1e-3 * scale] * n
    b = [1.1e-3 * scale] * n
    w = [0.7e-3 * scale] * n
    last = n - 1  # the last virtual stage (LM head)
    f[last] *= 1.2
    b[last] *= 1.2
    return f, b, w


def main() -> None:
    print(f"{'schedule':18} {'p':>3} {'m':>4} {'simulate ms':>12} {'step cold ms':>13} "
          f"{'step new-times ms':>18} {'passes':>7}")
    for sched in S.SCHEDULES:
        v = 2 if sched in ("interleaved-1f1b", "zb-v") else 1
        for p in PS:
            for m in MS:
                if sched == "interleaved-1f1b" and m % p:
                    continue
                f, b, w = _times(p, v, 1.0)
                _clear()
                t0 = time.perf_counter()
                S.step_time(sched, p, m, f, b, w, comm=2e-5, chunks=v)
                cold = time.perf_counter() - t0
                f2, b2, w2 = _times(p, v, 0.99)  # the second timing of a shape compiles its pass sequence
                S.step_time(sched, p, m, f2, b2, w2, comm=2e-5, chunks=v)
                reps = 5
                t0 = time.perf_counter()
                for i in range(reps):  # new times each call: no result-cache hits
                    f2, b2, w2 = _times(p, v, 1.0 + 0.01 * (i + 1))
                    S.step_time(sched, p, m, f2, b2, w2, comm=2e-5, chunks=v)
                warm = (time.perf_counter() - t0) / reps
                S.simulate(sched, p, m, f, b, w, comm=2e-5, chunks=v)  # compile the full plan
                t0 = time.perf_counter()
                tl = S.simulate(sched, p, m, f, b, w, comm=2e-5, chunks=v)
                sim = time.perf_counter() - t0
                print(f"{sched:18} {p:3d} {m:4d} {sim * 1e3:12.2f} {cold * 1e3:13.2f} "
                      f"{warm * 1e3:18.3f} {len(tl.passes):7d}")


if __name__ == "__main__":
    main()
