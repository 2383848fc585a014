"""Lifetime simulation: live bytes of the step's tensors over time, from the trace's events.

The trace records every storage the step allocates and frees, in program order (parameters and
model inputs exist before the step and are not events). Walking the events gives the live bytes
after each one; the peak is that of the real program, not a formula. Two channels are kept:

* activations: everything the step allocates and frees (saved tensors, temporaries, activation
  gradients, the loss);
* parameter gradients: storages allocated in backward and never freed (``param.grad``).

Repeated blocks (``trace.repeats``) are traced twice; the template copy stands for ``1 + extra``
copies. With S the bytes one copy holds for backward (allocated in its forward, still live when
the backward pass starts: saved tensors plus its output, which the next copy saves) and G its
parameter-gradient bytes, the other ``extra`` copies add (exact for identical blocks run in
sequence; checked against untruncated captures in the tests):

* from the template's forward to the start of the backward pass: ``extra * S`` (the last copy's
  forward sees all earlier copies' saved tensors, and they stay until backward). During the
  forward, S also counts what lives to the end of the forward only (autocast's weight-cast cache);
* from there to the end of the template's backward: ``extra * max(S, w * G)``: while copy k of the
  backward runs, k copies hold their gradients and ``extra - k`` their saved tensors; a sum
  linear in k peaks at an end (w: the weight of gradients, 1/N when they are sharded);
* after its backward: ``extra * G`` (all copies' gradients).

S is measured on the traced copy *before* the template (same block type, followed by a copy of
itself as every extra copy is); the template itself is followed by the model's head.

Allocations are paired with the free of the same id (ids are allocation numbers), and roles
are derived from that pairing: a parameter gradient is allocated in backward and never freed.
"""

from __future__ import annotations

from dataclasses import dataclass

from whichgpu.memo import IdentityMemo
from whichgpu.workload.trace import Trace


@dataclass(frozen=True)
class BlockWindow:
    """A repeated block's template: where it runs and what each extra copy adds."""

    block: str
    extra: int  # copies beyond the traced template
    fwd: tuple[int, int]  # first/last op index of the template's forward
    bwd: tuple[int, int] | None  # ... of its backward (None at inference)
    saved_bytes: float  # S: one copy's bytes allocated in its forward, live when the backward starts
    grad_bytes: float  # G: parameter gradients allocated in the template's backward
    forward_bytes: float = 0.0  # one copy's bytes allocated in its forward, live when the forward ends
    backward_start: int | None = None  # first op of the backward pass


@dataclass(frozen=True)
class Peak:
    """The worst moment of the forward/backward pass, for a given weight on gradients."""

    bytes: float  # activations + grad_weight * gradients, with block extrapolation
    activations: float
    gradients: float  # unweighted parameter-gradient bytes live at that moment
    op_index: int
    phase: str  # phase of the op after which the peak occurs
    module: str


@dataclass(frozen=True)
class Timeline:
    """Per-event live bytes of the traced program (no extrapolation) and the block windows."""

    op_index: tuple[int, ...]
    activations: tuple[float, ...]
    gradients: tuple[float, ...]
    where: tuple[tuple[str, str], ...]  # (phase, module) of each event's op
    windows: tuple[BlockWindow, ...]
    param_grad_bytes: float  # all parameter gradients of the full model (with block copies)
    end_activation_bytes: float  # activations still live at the end of the step
    weight_cast_bytes: float  # forward casts of parameters (autocast weight copies) left out
    grad_tensors: tuple[tuple[float, int], ...] = ()  # (bytes, copies) of each parameter gradient

    def peak(self, grad_weight: float = 1.0) -> Peak:
        """Peak of activations + grad_weight x gradients over the step, with block copies."""
        cache: dict[float, Peak] = self.__dict__.setdefault("_peaks", {})
        hit = cache.get(grad_weight)
        if hit is None:
            hit = cache[grad_weight] = self._peak(grad_weight)
        return hit

    def _peak(self, grad_weight: float) -> Peak:
        best = Peak(0.0, 0.0, 0.0, 0, "forward", "")
        for i, k in enumerate(self.op_index):
            act, grad = self.activations[i], self.gradients[i]
            for w in self.windows:
                a, g = _extra(w, k, grad_weight)
                act += a
                grad += g
            total = act + grad_weight * grad
            if total > best.bytes:
                phase, module = self.where[i]
                best = Peak(total, act, grad, k, phase, module)
        return best

    def activation_peak(self) -> Peak:
        return self.peak(0.0)


def _extra(w: BlockWindow, k: int, grad_weight: float) -> tuple[float, float]:
    """(activation bytes, gradient bytes) the extra copies of block `w` add after op k."""
    if w.extra <= 0 or k < w.fwd[0]:
        return 0.0, 0.0
    if w.backward_start is None or k < w.backward_start:
        return w.extra * max(w.forward_bytes, w.saved_bytes), 0.0
    if w.bwd is None or k < w.bwd[0]:
        return w.extra * w.saved_bytes, 0.0
    if k <= w.bwd[1]:
        if w.saved_bytes >= grad_weight * w.grad_bytes:
            return w.extra * w.saved_bytes, 0.0
        return 0.0, w.extra * w.grad_bytes
    return 0.0, w.extra * w.grad_bytes


_CAST_OPS = ("aten._to_copy", "aten.to", "aten._to_copy.default")


def _is_weight_cast(trace: Trace, k: int) -> bool:
    o = trace.ops[k]
    return (o.phase == "forward" and o.name in _CAST_OPS and bool(o.ins) and all(i == 0 for i in o.ins))


_Ev = tuple[int, int, int]  # (op index, delta, storage id)


def _pair(ev: list[_Ev]) -> list[int | None]:
    """Event index of the free matching each allocation (None: never freed)."""
    freed_at: list[int | None] = [None] * len(ev)
    open_: dict[int, int] = {}
    for i, (_k, d, sid) in enumerate(ev):
        if d > 0:
            open_[sid] = i
        elif sid in open_:
            freed_at[open_.pop(sid)] = i
    return freed_at


_TIMELINES: IdentityMemo[Timeline] = IdentityMemo(64)


def simulate(trace: Trace, grads_in_step: bool = True, drop_weight_casts: bool = False) -> Timeline:
    """Walk the trace's memory events (memoised per trace object: a search asks for the same
    timeline for every GPU count and card).

    grads_in_step: parameter gradients are allocated during backward (``zero_grad(set_to_none=
    True)``, PyTorch's default); False keeps them out of the timeline (the caller counts them as
    always live: gradient accumulation, ``set_to_none=False``).
    drop_weight_casts: leave out forward casts of parameters (autocast's low-precision weight
    copies), which FSDP/ZeRO-3 mixed precision replaces by its gathered low-precision parameters.
    """
    return _TIMELINES.get((trace,), (grads_in_step, drop_weight_casts),
                          lambda: _simulate(trace, grads_in_step, drop_weight_casts))


def _simulate(trace: Trace, grads_in_step: bool, drop_weight_casts: bool) -> Timeline:
    ops = trace.ops
    ev = [(e.op_index, e.delta, e.sid) for e in trace.mem_events]
    freed_at = _pair(ev)
    valid = [0 <= k < len(ops) for k, _d, _s in ev]
    # A parameter gradient: allocated in backward (not by a recomputed forward op), never freed.
    is_grad = [d > 0 and freed_at[i] is None and valid[i] and ops[k].phase == "backward"
               and "recompute" not in ops[k].tags for i, (k, d, _s) in enumerate(ev)]
    casts = [d > 0 and valid[i] and drop_weight_casts and _is_weight_cast(trace, k)
             for i, (k, d, _s) in enumerate(ev)]
    dropped = casts
    cast_bytes = float(sum(d for (_k, d, _s), c in zip(ev, casts, strict=True) if c))

    # ---- walk ---------------------------------------------------------------------------
    alloc_of: dict[int, int] = {}  # free event index -> alloc event index
    for i, f in enumerate(freed_at):
        if f is not None:
            alloc_of[f] = i
    act = grad = 0.0
    op_idx: list[int] = []
    acts: list[float] = []
    grads: list[float] = []
    where: list[tuple[str, str]] = []
    for i, (k, d, _sid) in enumerate(ev):
        if d > 0:
            if dropped[i]:
                pass
            elif is_grad[i]:
                if grads_in_step:
                    grad += d
            else:
                act += d
        else:
            j = alloc_of.get(i)
            if j is None or dropped[j]:
                continue  # a free of something allocated before the step (or left out)
            act += d
        op_idx.append(k)
        acts.append(act)
        grads.append(grad)
        o = ops[min(max(k, 0), len(ops) - 1)] if ops else None
        where.append((o.phase, o.module) if o is not None else ("forward", ""))

    windows = tuple(_windows(trace, ev, freed_at, is_grad, dropped))
    tensors = tuple((float(d), 1 + int(trace.repeats.get(ops[k].block, 0)))
                    for (k, d, _s), g in zip(ev, is_grad, strict=True) if g)
    total_grads = sum(b * n for b, n in tensors)
    return Timeline(tuple(op_idx), tuple(acts), tuple(grads), tuple(where), windows, total_grads, act,
                    cast_bytes, tensors)


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _sibling(trace: Trace, block: str) -> str:
    """The traced copy just before the template ("model.layers.1" -> "model.layers.0"), if any."""
    parent, _, idx = block.rpartition(".")
    if not idx.isdigit() or int(idx) < 1:
        return ""
    sib = f"{parent}.{int(idx) - 1}" if parent else str(int(idx) - 1)
    return sib if any(o.phase == "forward" and _under(o.module, sib) for o in trace.ops) else ""


def _windows(trace: Trace, ev: list[_Ev], freed_at: list[int | None], is_grad: list[bool],
             dropped: list[bool]) -> list[BlockWindow]:
    out: list[BlockWindow] = []
    backward_start = next((i for i, o in enumerate(trace.ops) if o.phase == "backward"), None)
    forward_end = max((i for i, o in enumerate(trace.ops) if o.phase == "forward"), default=0)
    for block, extra in trace.repeats.items():
        fwd = [i for i, o in enumerate(trace.ops) if o.block == block and o.phase == "forward"]
        if not fwd:
            continue
        bwd = [i for i, o in enumerate(trace.ops) if o.block == block and o.phase == "backward"]
        f0, f1 = fwd[0], fwd[-1]
        b = (bwd[0], bwd[-1]) if bwd else None
        # S: what one copy holds while later copies run: allocated in its forward and still
        # live when the backward pass starts (saved for backward; the block's output is saved by
        # the next block). Measured on the traced copy *before* the template (same block type,
        # followed by a copy of itself, as every extra copy is); the template's own consumer is
        # the model's head. The forward-time share also counts what lives to the end of the
        # forward only (autocast's weight-cast cache, cleared when autocast exits). At inference:
        # live at the end of the step (nothing but leaks: each block's output is freed once the
        # next block has used it).
        ref = _sibling(trace, block)
        saved = fwd_live = grads = 0.0
        for i, (k, d, _s) in enumerate(ev):
            if d <= 0 or dropped[i] or not 0 <= k < len(trace.ops):
                continue
            o = trace.ops[k]
            in_ref = (o.phase == "forward" and _under(o.module, ref)) if ref else f0 <= k <= f1
            if in_ref and not is_grad[i]:
                f = freed_at[i]
                if f is None or (backward_start is not None and ev[f][0] >= backward_start):
                    saved += d
                if f is None or ev[f][0] >= forward_end:
                    fwd_live += d
            elif b is not None and b[0] <= k <= b[1] and is_grad[i]:
                grads += d
        out.append(BlockWindow(block, int(extra), (f0, f1), b, saved, grads, fwd_live, backward_start))
    return out
