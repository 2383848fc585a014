"""Pipeline-parallel schedules, simulated pass by pass on each stage.

Every pipeline rank (stage) runs a fixed order of passes: F (forward), B (backward) and, for the
zero-bubble schedules, W (weight gradient). A pass starts at
``max(stage free, end of each dependency + comm if that dependency ran on another rank)``:

- F(vs, j) needs F(vs-1, j);
- B(vs, j) needs B(vs+1, j), or F(vs, j) on the last virtual stage;
- W(vs, j) needs B(vs, j).

``vs`` is the virtual stage in model order: rank r with one chunk is vs = r; Megatron's
interleaved 1F1B puts chunk c of rank r at vs = c*p + r; ZB-V puts chunk 0 at vs = r and chunk 1
at vs = 2p-1-r. Nothing else is modelled: no memory limit stalls, no compute/comm contention, no
optimizer step. ``comm`` is one point-to-point transfer, paid on every hop between ranks.

Schedules (per-rank orders):

- ``gpipe``: all F, then all B (Huang et al. 2019).
- ``1f1b``: p-r-1 warm-up F, then F/B pairs, then the drain (PipeDream-flush, Narayanan et al.
  2021, "Efficient large-scale language model training on GPU clusters using Megatron-LM").
- ``interleaved-1f1b``: Megatron's interleaved schedule with v chunks per rank (same paper):
  warm-up of 2(p-r-1) + (v-1)p forward chunks (all of them when m == p), micro-batches taken in
  groups of p per chunk, backward chunks in reverse order; m must be a multiple of p.
- ``zb-h1``, ``zb-h2``: the handcrafted Zero Bubble schedules (Qi et al., "Zero Bubble Pipeline
  Parallelism", ICLR 2024, arXiv:2401.10241, Sec. 3): B split into B (input gradient) and W
  (weight gradient). Rank r has k(p-r-1) warm-up F (k = 1 for H1, 2 for H2), then F/B pairs in
  which W of micro-batch i - k*r follows B of micro-batch i, and the deferred W at the tail; this
  is the order of the authors' ``get_hand_schedule`` (their efficiency.py), which is what their
  Table 5 figures were computed with.
- ``zb-v``: the V-shaped Zero Bubble schedule (same authors, arXiv v2, Sec. 6) with two chunks per
  rank. Its order here is our own: a greedy list schedule at unit costs (F=B=W, no comm) that
  prefers B, then F (chunk 1 first), then W, admits at most p micro-batches per rank (so at most
  2p chunk activations, 1F1B's peak) and keeps at most 2 W pending before the next B; the
  order is then timed with the real costs. It is close to, not the same as, the authors' greedy.

gpipe, 1f1b and interleaved-1f1b do not split the backward: their B lasts ``b + w``.

Cost conventions: ``Timeline.makespan`` is one isolated iteration (from 0 to the last pass).
``Timeline.max_stage_span`` is the longest first-start-to-last-end of one rank: the time per
iteration when consecutive iterations overlap, which is the Zero Bubble paper's "cost" (their
ZB-H2 and automatic schedules measure it so, with post-update validation removing the optimizer
sync). For gpipe, 1f1b, interleaved-1f1b and zb-h1 the two are equal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from whichgpu.errors import InputError, UnknownNameError

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-v")
SPLIT_BACKWARD = frozenset({"zb-h1", "zb-h2", "zb-v"})  # schedules with separate W passes
KINDS = ("F", "B", "W")

Times = float | Sequence[float]


@dataclass(frozen=True, slots=True)
class Pass:
    """One pass of one micro-batch through one model chunk on one rank; times in seconds."""

    stage: int  # pipeline rank 0..p-1
    kind: str  # "F", "B" or "W"
    micro: int  # micro-batch 0..m-1
    chunk: int  # model chunk on this rank (0 unless interleaved / zb-v)
    start: float
    end: float


@dataclass(frozen=True)
class Timeline:
    """A simulated iteration: every pass with its times, and per-stage summaries."""

    schedule: str
    stages: int
    micro_batches: int
    chunks: int
    passes: tuple[Pass, ...]  # grouped by stage, each stage in start order
    makespan: float  # end of the last pass; the iteration starts at 0
    busy: tuple[float, ...]  # per stage: sum of its pass durations
    peak_activations: tuple[int, ...]  # per stage: max (micro, chunk) with F done, B not yet
    peak_pending_w: tuple[int, ...]  # per stage: max (micro, chunk) with B done, W not yet

    @property
    def bubble_fraction(self) -> float:
        """Idle share of all stages over the makespan: 1 - sum(busy) / (stages * makespan)."""
        if self.makespan <= 0:
            return 0.0
        return 1.0 - sum(self.busy) / (self.stages * self.makespan)

    def stage_bubble(self, stage: int) -> float:
        """Idle share of one stage over the makespan."""
        if self.makespan <= 0:
            return 0.0
        return 1.0 - self.busy[stage] / self.makespan

    def stage_span(self, stage: int) -> float:
        """First start to last end on one stage."""
        own = [q for q in self.passes if q.stage == stage]
        return max(q.end for q in own) - min(q.start for q in own) if own else 0.0

    @property
    def max_stage_span(self) -> float:
        """The Zero Bubble paper's cost: the longest per-stage span (see the module docstring)."""
        return max(self.stage_span(s) for s in range(self.stages))

    @property
    def paper_bubble_rate(self) -> float:
        """Qi et al. (2024) eq. of Table 5: (cost - m(T_F+T_B+T_W)) / cost, cost = max stage span.

        The work term is the busiest stage's busy time (= m(T_F+T_B+T_W) for uniform stages).
        """
        cost = self.max_stage_span
        return (cost - max(self.busy)) / cost if cost > 0 else 0.0


# ---------------------------------------------------------------- per-rank orders
# An order is, per rank, a tuple of (kind 0/1/2, chunk, micro).
Order = tuple[tuple[tuple[int, int, int], ...], ...]


def _order_1f1b(p: int, m: int) -> Order:
    out = []
    for r in range(p):
        warm = min(p - r - 1, m)
        o = [(0, 0, j) for j in range(warm)]
        for i in range(m - warm):
            o += [(0, 0, warm + i), (1, 0, i)]
        o += [(1, 0, j) for j in range(m - warm, m)]
        out.append(tuple(o))
    return tuple(out)


def _order_gpipe(p: int, m: int) -> Order:
    one = tuple([(0, 0, j) for j in range(m)] + [(1, 0, j) for j in range(m)])
    return tuple(one for _ in range(p))


def _order_zb_hand(p: int, m: int, k: int) -> Order:
    """ZB-H1 (k=1) / ZB-H2 (k=2): k(p-r-1) warm-up F; W of micro i - k*r after B of micro i."""
    out = []
    for r in range(p):
        warm = min(k * (p - r - 1), m)
        lag = k * (p - 1) - warm  # how many W each rank defers to the tail
        o = [(0, 0, j) for j in range(warm)]
        nw = 0
        for i in range(m):
            if warm + i < m:
                o.append((0, 0, warm + i))
            o.append((1, 0, i))
            if i >= lag:
                o.append((2, 0, nw))
                nw += 1
        o += [(2, 0, j) for j in range(nw, m)]
        out.append(tuple(o))
    return tuple(out)


def _order_interleaved(p: int, m: int, v: int) -> Order:
    """Megatron's interleaved 1F1B: micro-batches in groups of p per chunk."""
    total = m * v
    # the k-th forward / backward pass of a rank: chunk (k // p) % v (backward: the chunks in
    # reverse), micro-batch (k // (p v)) p + k % p; the same sequence on every rank
    micro = [(k // (p * v)) * p + k % p for k in range(total)]
    fwd = [(0, (k // p) % v, j) for k, j in enumerate(micro)]
    bwd = [(1, v - 1 - (k // p) % v, j) for k, j in enumerate(micro)]
    out = []
    for r in range(p):
        warm = total if m == p else min((p - r - 1) * 2 + (v - 1) * p, total)
        o = fwd[:warm]
        for i in range(total - warm):
            o += (fwd[warm + i], bwd[i])
        o += bwd[total - warm:]
        out.append(tuple(o))
    return tuple(out)


def _order_zbv(p: int, m: int) -> Order:
    """ZB-V order from a greedy list schedule at unit costs (see the module docstring)."""
    nv = 2 * p
    last = nv - 1
    # A virtual stage's F (B) passes run in micro-batch order, so "micro-batch j's F of virtual stage
    # vs has ended" is j < fseen[vs]. A pass placed in a tick is seen from the next one (unit cost):
    # fnext / bnext count the passes placed, fseen / bseen those seen, copied after each tick. Each
    # virtual stage belongs to one rank, so a tick's ranks decide independently. bseen[nv] = m: the
    # last stage's B follows its own F only.
    fnext = [0] * nv
    bnext = [0] * nv
    fseen = [0] * nv
    bseen = [0] * nv + [m]
    inflight = [0] * p  # micro-batches admitted on chunk 0, chunk-0 B not done
    orders: list[list[tuple[int, int, int]]] = [[] for _ in range(p)]
    pending: list[list[tuple[int, int, int]]] = [[] for _ in range(p)]  # W passes waiting, per rank
    # per rank r: its chunk-0 and chunk-1 virtual stages (r, 2p-1-r), its order's append, its W pending
    ranks = [(r, last - r, orders[r].append, pending[r]) for r in range(p)]
    remaining = 6 * p * m
    t = 0
    while remaining:
        for v0, v1, add, pend in ranks:  # v0 is the rank
            if len(pend) >= 2:  # keep W close behind B
                add(pend.pop(0))
                remaining -= 1
                continue
            # B: the oldest ready micro-batch, chunk 1 on a tie
            j1 = bnext[v1]
            ok1 = j1 < fseen[v1] and j1 < bseen[v1 + 1]
            j0 = bnext[v0]
            ok0 = j0 < fseen[v0] and j0 < bseen[v0 + 1]
            if ok1 and (not ok0 or j1 <= j0):
                bnext[v1] = j1 + 1
                pend.append((2, 1, j1))
                add((1, 1, j1))
            elif ok0:
                bnext[v0] = j0 + 1
                inflight[v0] -= 1
                pend.append((2, 0, j0))
                add((1, 0, j0))
            # F: chunk 1 first; chunk 0 admits at most p micro-batches
            elif fnext[v1] < fseen[v1 - 1]:
                j = fnext[v1]
                fnext[v1] = j + 1
                add((0, 1, j))
            elif fnext[v0] < m and inflight[v0] < p and (v0 == 0 or fnext[v0] < fseen[v0 - 1]):
                j = fnext[v0]
                fnext[v0] = j + 1
                inflight[v0] += 1
                add((0, 0, j))
            elif pend:
                add(pend.pop(0))
            else:
                continue
            remaining -= 1
        fseen[:] = fnext
        bseen[:nv] = bnext
        t += 1
        if t > 12 * p * m + 4 * p:  # pragma: no cover - a bug, never a user error
            raise RuntimeError("zb-v order generation did not converge")
    return tuple(tuple(o) for o in orders)


@lru_cache(maxsize=256)
def _orders(schedule: str, p: int, m: int, v: int) -> Order:
    if schedule == "gpipe":
        return _order_gpipe(p, m)
    if schedule == "1f1b":
        return _order_1f1b(p, m)
    if schedule == "zb-h1":
        return _order_zb_hand(p, m, 1)
    if schedule == "zb-h2":
        return _order_zb_hand(p, m, 2)
    if schedule == "interleaved-1f1b":
        return _order_interleaved(p, m, v)
    return _order_zbv(p, m)


def _vstage(schedule: str, p: int, rank: int, chunk: int) -> int:
    if schedule == "zb-v":
        return rank if chunk == 0 else 2 * p - 1 - rank
    return chunk * p + rank


@lru_cache(maxsize=256)
def _deps(schedule: str, p: int, m: int, v: int) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...],
                                                           tuple[bool, ...]]:
    """What `_direct` reads per shape: each rank's virtual stage per chunk, and per pass kind and
    virtual stage (index kind * V + vs) the row of its dependency (its index * m; -1: none) and
    whether that dependency ran on another rank (the rules of the module docstring)."""
    nv = p * v
    rank_of = [0] * nv
    for r in range(p):
        for c in range(v):
            rank_of[_vstage(schedule, p, r, c)] = r
    row = [-1] * (3 * nv)
    cross = [False] * (3 * nv)
    for vs in range(nv):
        r = rank_of[vs]
        if vs > 0:
            row[vs], cross[vs] = (vs - 1) * m, rank_of[vs - 1] != r
        if vs == nv - 1:
            row[nv + vs] = vs * m
        else:
            row[nv + vs], cross[nv + vs] = (nv + vs + 1) * m, rank_of[vs + 1] != r
        row[2 * nv + vs] = (nv + vs) * m
    vst = tuple(tuple(_vstage(schedule, p, r, c) for c in range(v)) for r in range(p))
    return vst, tuple(row), tuple(cross)


# ---------------------------------------------------------------- the compiled plan
@dataclass(frozen=True, slots=True)
class _Plan:
    """A schedule compiled to one global topological sequence of passes (structure only)."""

    stage: tuple[int, ...]
    key: tuple[int, ...]  # kind * V + vs: index into the duration table
    dep: tuple[int, ...]  # index of the dependency in the sequence, -1 if none
    cross: tuple[bool, ...]  # the dependency ran on another rank (pays comm)
    chunk: tuple[int, ...]
    micro: tuple[int, ...]
    peak_act: tuple[int, ...]
    peak_w: tuple[int, ...]
    pos: tuple[int, ...]  # sequence index of (kind * V + vs) * m + micro


@lru_cache(maxsize=256)
def _plan(schedule: str, p: int, m: int, v: int, paper_compat: bool = False) -> _Plan:
    orders = _orders(schedule, p, m, v)
    vst, dep_row, dep_cross = _deps(schedule, p, m, v)  # each rank's virtual stages; each pass's dependency
    nv = p * v
    # position in the sequence of each (kind, vs, micro); -1 = not placed yet
    pos = [-1] * (3 * nv * m)
    stage: list[int] = []
    key: list[int] = []
    dep: list[int] = []
    cross: list[bool] = []
    chunk: list[int] = []
    micro: list[int] = []
    ptr = [0] * p
    left = sum(len(o) for o in orders)
    direction = 1
    n = 0  # passes placed: the next one's index in the sequence
    add_stage, add_key, add_dep, add_cross, add_chunk, add_micro = (
        stage.append, key.append, dep.append, cross.append, chunk.append, micro.append)
    while left:
        progress = False
        for r in range(p)[::direction]:
            o = orders[r]
            i = ptr[r]
            size = len(o)
            row = vst[r]
            while i < size:
                kind, c, j = o[i]
                k = kind * nv + row[c]
                base = dep_row[k]
                d = pos[base + j] if base >= 0 else -2
                if paper_compat and j % p and d >= 0 and dep_cross[k] and \
                        ((kind == 0 and r == 0) or (kind == 1 and r == p - 1)):
                    d = -2  # the paper's simplification: see simulate()
                if d == -1:
                    break
                pos[k * m + j] = n
                n += 1
                add_stage(r)
                add_key(k)
                if d >= 0:
                    add_dep(d)
                    add_cross(dep_cross[k])
                else:
                    add_dep(-1)
                    add_cross(False)
                add_chunk(c)
                add_micro(j)
                i += 1
            if i != ptr[r]:
                left -= i - ptr[r]
                progress = True
            ptr[r] = i
        direction = -direction
        if not progress:  # pragma: no cover - a bug in an order, never a user error
            raise RuntimeError(f"{schedule}: deadlocked order (p={p}, m={m}, v={v})")
    peak_act, peak_w = order_peaks(schedule, p, m, v)
    return _Plan(tuple(stage), tuple(key), tuple(dep), tuple(cross), tuple(chunk), tuple(micro),
                 peak_act, peak_w, tuple(pos))


@lru_cache(maxsize=4096)
def order_peaks(schedule: str, p: int, m: int, v: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per rank: the most (micro-batch, chunk) activations held at once and the most weight-gradient
    passes pending. They depend on the order only (one rank runs one pass at a time), not on the
    pass times: what `simulate` reports as its peaks."""
    split = schedule in SPLIT_BACKWARD
    peak_act, peak_w = [], []
    for o in _orders(schedule, p, m, v):
        act = w = pa = pw = 0
        for kind, _, _ in o:
            if kind == 0:
                act += 1
                if act > pa:
                    pa = act
            elif kind == 1:
                act -= 1
                if split:
                    w += 1
                    if w > pw:
                        pw = w
            else:
                w -= 1
        peak_act.append(pa)
        peak_w.append(pw)
    return tuple(peak_act), tuple(peak_w)


def steady_peaks(schedule: str, p: int, m: int, v: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """`order_peaks` at m micro-batches, from the shortest run that has them. The counts depend on
    the order, not on the times, and stop growing once the steady state is reached, within 2p
    micro-batches (GPipe excepted: it holds all m); a run of min(m, 2p) gives them (whole groups of
    p for interleaved 1F1B). ZB-V's greedy order, from m = p on, holds on rank r the p chunk-0
    micro-batches it admits plus the r + 1 chunk-1 ones between it and the loss (virtual stages
    2p-1-r .. 2p-1), and at most 2 W pending (its rule); below p it is counted (tests check all of
    these against full simulations)."""
    if schedule == "gpipe":
        return tuple(m for _ in range(p)), tuple(0 for _ in range(p))
    if schedule == "zb-v" and m >= p:
        return tuple(p + r + 1 for r in range(p)), tuple(2 for _ in range(p))
    mm = m if schedule == "zb-v" else min(m, 2 * p)
    if schedule == "interleaved-1f1b" and mm != m:
        mm = max(p, mm - mm % p)
    return order_peaks(schedule, p, mm, v)


# ---------------------------------------------------------------- inputs
def _check(schedule: str, p: int, m: int, chunks: int, f: Times, b: Times, w: Times,
           comm: float) -> tuple[float, ...]:
    """Validate and return the duration table indexed by kind * V + vs."""
    if schedule not in SCHEDULES:
        raise UnknownNameError("pipeline schedule", schedule, SCHEDULES, field="schedule")
    if not isinstance(p, int) or p < 1:
        raise InputError(f"pipeline stages must be an integer >= 1, got {p!r}", field="pp")
    if not isinstance(m, int) or m < 1:
        raise InputError(f"micro-batches must be an integer >= 1, got {m!r}", field="micro_batches")
    if schedule == "interleaved-1f1b":
        if chunks < 2:
            raise InputError(f"interleaved-1f1b needs chunks >= 2 per rank, got {chunks}", field="vp")
        if m % p:
            raise InputError(f"interleaved-1f1b needs micro-batches ({m}) to be a multiple of the "
                             f"pipeline stages ({p}) (Megatron's rule)", field="micro_batches")
    elif schedule == "zb-v":
        if chunks != 2:
            raise InputError(f"zb-v runs exactly 2 chunks per rank, got chunks={chunks}", field="vp")
    elif chunks != 1:
        raise InputError(f"{schedule} runs one chunk per rank, got chunks={chunks}; use "
                         "interleaved-1f1b or zb-v for more", field="vp")
    nv = p * chunks
    table: list[float] = []
    for name, val in (("f", f), ("b", b), ("w", w)):
        vals = [float(val)] * nv if isinstance(val, (int, float)) else [float(x) for x in val]
        if len(vals) != nv:
            raise InputError(f"{name}: expected one time or {nv} per-virtual-stage times "
                             f"(stages * chunks), got {len(vals)}", field=name)
        if any(not math.isfinite(x) or x < 0 for x in vals):
            raise InputError(f"{name}: pass times must be finite and >= 0, got {vals}", field=name)
        table += vals
    if not math.isfinite(comm) or comm < 0:
        raise InputError(f"comm must be finite and >= 0 seconds, got {comm}", field="comm")
    if schedule not in SPLIT_BACKWARD:  # B includes W: fold w into b, drop W passes
        table = table[:nv] + [bb + ww for bb, ww in zip(table[nv:2 * nv], table[2 * nv:])] + \
            [0.0] * nv
    return tuple(table)


def _run(plan: _Plan, table: tuple[float, ...], comm: float, p: int) -> tuple[list[float], float]:
    """Time every pass of the sequence: returns end times and the makespan."""
    free = [0.0] * p
    end = [0.0] * len(plan.stage)
    dur = [table[k] for k in plan.key]
    for i, (s, d, x, du) in enumerate(zip(plan.stage, plan.dep, plan.cross, dur)):
        t = free[s]
        if d >= 0:
            e = end[d] + comm if x else end[d]
            if e > t:
                t = e
        t += du
        end[i] = t
        free[s] = t
    return end, max(free)


def simulate(schedule: str, stages: int, micro_batches: int, f: Times, b: Times, w: Times = 0.0,
             comm: float = 0.0, chunks: int = 1, *, paper_compat: bool = False) -> Timeline:
    """Simulate one iteration of ``schedule``; times in seconds (see the module docstring).

    ``f``, ``b``, ``w``: one time for every pass, or ``stages * chunks`` per-virtual-stage times in
    model order. Schedules without a W pass run B for ``b + w``.

    ``paper_compat`` (interleaved-1f1b only) reproduces the calculation behind Qi et al.'s Table 5
    1F1B-I column (their ``get_interleave_schedule``): the hop between chunks (rank p-1 to rank
    0 for F, rank 0 to rank p-1 for B) is waited for only by the first micro-batch of each group
    of p; the others may start before their input arrives. Off by default: the physical model
    gives bubble rates up to 0.0035 higher on those settings.
    """
    table = _check(schedule, stages, micro_batches, chunks, f, b, w, comm)
    plan = _plan(schedule, stages, micro_batches, chunks, paper_compat and schedule == "interleaved-1f1b")
    end, makespan = _run(plan, table, comm, stages)
    busy = [0.0] * stages
    per_stage: list[list[Pass]] = [[] for _ in range(stages)]
    for i, (s, k) in enumerate(zip(plan.stage, plan.key)):
        du = table[k]
        busy[s] += du
        per_stage[s].append(Pass(s, KINDS[k // (stages * chunks)], plan.micro[i], plan.chunk[i],
                                 end[i] - du, end[i]))
    passes = tuple(q for row in per_stage for q in row)
    return Timeline(schedule, stages, micro_batches, chunks, passes, makespan, tuple(busy),
                    plan.peak_act, plan.peak_w)


# ---------------------------------------------------------------- fast step time
def _direct(schedule: str, p: int, m: int, v: int, table: tuple[float, ...], comm: float
            ) -> tuple[list[float], float]:
    """(end time of every pass, indexed (kind * V + vs) * m + micro-batch, -1 where none runs; the
    makespan): the ranks' orders timed directly, each rank running its passes in order as far as
    their dependencies have ended, the ranks taken in turn (alternating direction) until all are
    done. The same times as `_run` over `_plan`'s compiled sequence, in one pass and without
    compiling it: what a shape's first timing uses (`_ends`)."""
    orders = _orders(schedule, p, m, v)
    vst, dep_row, dep_cross = _deps(schedule, p, m, v)
    nv = p * v
    pay = [comm if x else 0.0 for x in dep_cross]
    end = [-1.0] * (3 * nv * m)
    free = [0.0] * p
    ptr = [0] * p
    left = sum(len(o) for o in orders)
    direction = 1
    while left:
        progress = False
        for r in range(p)[::direction]:
            o = orders[r]
            i = start = ptr[r]
            size = len(o)
            chunk_vs = vst[r]
            t = free[r]
            while i < size:
                kind, c, j = o[i]
                k = kind * nv + chunk_vs[c]
                d = dep_row[k]
                if d >= 0:
                    e = end[d + j]
                    if e < 0.0:
                        break  # its dependency has not run yet: the next rank's turn
                    e += pay[k]
                    if e > t:
                        t = e
                t += table[k]
                end[k * m + j] = t
                i += 1
            if i != start:
                free[r] = t
                left -= i - start
                progress = True
                ptr[r] = i
        direction = -direction
        if not progress:  # pragma: no cover - a bug in an order, never a user error
            raise RuntimeError(f"{schedule}: deadlocked order (p={p}, m={m}, v={v})")
    return end, max(free)


# Shapes (schedule, p, m, v) timed so far: the first timing of a shape runs `_direct` (no compiled
# sequence to build: what a layout's first evaluation costs), later ones `_run` over `_plan`'s
# compiled sequence (compiled on the second, about twice as fast per run after that).
_TIMED: dict[tuple[str, int, int, int], None] = {}


def _ends(schedule: str, p: int, m: int, v: int, table: tuple[float, ...], comm: float
          ) -> tuple[list[float], tuple[int, ...] | None, float]:
    """(end times, where each pass's is, makespan) of one run of the shape: by `_direct` the first
    time a shape is timed (the end times indexed (kind * V + vs) * m + micro-batch, positions
    None), over the compiled sequence after (the end times in its order, `_Plan.pos` giving each
    pass's place in it)."""
    shape = (schedule, p, m, v)
    if shape not in _TIMED:
        if len(_TIMED) >= 4096:
            _TIMED.clear()
        _TIMED[shape] = None
        end, makespan = _direct(schedule, p, m, v, table, comm)
        return end, None, makespan
    plan = _plan(schedule, p, m, v)
    end, makespan = _run(plan, table, comm, p)
    return end, plan.pos, makespan


def clear_caches() -> None:
    """Forget every cached order, compiled sequence, result and timed shape (benchmarks of the cold case)."""
    for f in (_orders, _plan, _deps, order_peaks, _step_time, _max_peaks):
        f.cache_clear()
    _TIMED.clear()


def _periodic(schedule: str, p: int, m: int, v: int, d: int, j0: int, width: int,
              table: tuple[float, ...], comm: float) -> tuple[float, float] | None:
    """Makespan of m and its step per d more micro-batches, if the steady state is periodic.

    Proof by induction, checked on the simulation: no pass depends (through its rank's order or
    its data dependency) on a micro-batch more than ``width - d`` before its own, so if every
    pass of micro-batch j + d ends exactly ``step`` after the same pass of micro-batch j for
    all j in [j0, j0 + width), the same holds for every later steady period; the tail (drain) is
    then the same shifted, which the smaller size m - d confirms.
    """
    end, pos, makespan = _ends(schedule, p, m, v, table, comm)
    nkeys = (3 if schedule in SPLIT_BACKWARD else 2) * p * v
    at = range(len(end)) if pos is None else pos  # a pass's place among the end times
    step = end[at[j0 + d]] - end[at[j0]]
    tol = 1e-11 * makespan
    for k in range(nkeys):
        row = k * m
        for j in range(row + j0, row + j0 + width):
            if abs(end[at[j + d]] - end[at[j]] - step) > tol:
                return None
    _, _, before = _ends(schedule, p, m - d, v, table, comm)
    if abs(makespan - before - step) > tol:
        return None
    return makespan, step


def _period(schedule: str, p: int) -> int:
    """The steady state's period in micro-batches: interleaving takes micro-batches in groups of p,
    and the zb-v greedy order repeats every p micro-batches."""
    return p if schedule in ("interleaved-1f1b", "zb-v") else 1


@lru_cache(maxsize=65536)
def _step_time(schedule: str, p: int, m: int, v: int, table: tuple[float, ...], comm: float
               ) -> tuple[float, float, int]:
    """(makespan, bubble fraction, the smaller size whose periodic steady state gave them; 0: m
    simulated in full)."""
    work = m * sum(table)  # sum(busy): every (kind, virtual stage) runs m times
    d = _period(schedule, p)
    reach = 2 * p * v + 2 + d  # max micro-batch lag of a dependency, with margin
    j0, width = reach, reach + d
    found = None
    while not found and schedule != "gpipe":  # gpipe has no steady state: B waits for all F
        size = j0 + width + d + reach  # warm-up, checked window, one more period, drain
        size += (m - size) % d  # m - size: whole periods
        if 2 * size - d >= m:  # the two smaller runs would cost more than the full one
            break
        found = _periodic(schedule, p, size, v, d, j0, width, table, comm)
        j0, width = 2 * j0, 2 * width
    if found:
        makespan = found[0] + (m - size) // d * found[1]
    else:
        size, makespan = 0, _ends(schedule, p, m, v, table, comm)[2]
    bubble = 1.0 - work / (p * makespan) if makespan > 0 else 0.0
    return makespan, bubble, size


@lru_cache(maxsize=4096)
def _max_peaks(schedule: str, p: int, m: int, v: int) -> tuple[int, int]:
    """The most activations and pending W passes of any rank at m micro-batches (`steady_peaks`)."""
    peak_a, peak_w = steady_peaks(schedule, p, m, v)
    return max(peak_a), max(peak_w)


def step_time(schedule: str, stages: int, micro_batches: int, f: Times, b: Times, w: Times = 0.0,
              comm: float = 0.0, chunks: int = 1) -> tuple[float, float, int, int]:
    """(makespan, bubble_fraction, max peak_activations, max peak_pending_w) of ``simulate``.

    Fast for large m: it simulates a smaller size that keeps the steady state, checks that the
    steady state is periodic (every pass of micro-batch j + d ends a fixed step after that of j,
    d = p for interleaved and zb-v, 1 otherwise, see ``_periodic``) and extrapolates the makespan
    linearly in m; otherwise, and for small m, it simulates m in full. The peaks
    depend on the order only (`steady_peaks`). Cached.
    """
    makespan, bubble, _ = pipeline_time(schedule, stages, micro_batches, f, b, w, comm, chunks)
    return (makespan, bubble, *_max_peaks(schedule, stages, micro_batches, chunks))


def pipeline_time(schedule: str, stages: int, micro_batches: int, f: Times, b: Times, w: Times = 0.0,
                  comm: float = 0.0, chunks: int = 1) -> tuple[float, float, int]:
    """`step_time`'s makespan and bubble fraction without the peaks (the planner counts those per
    rank itself, `steady_peaks`), and the size its periodic shortcut simulated (0: none)."""
    table = _check(schedule, stages, micro_batches, chunks, f, b, w, comm)
    return _step_time(schedule, stages, micro_batches, chunks, table, float(comm))
