"""torch.compile's effect on the op list: chains of elementwise/reduction kernels fuse.

A maximal run of consecutive fusible ops (same phase, same repeat count; metadata-only views
do not break a run) becomes one kernel per reduction it contains (at least one), as Inductor
generates. Its memory traffic is the run's external inputs (tensors not produced inside the
run, read once) plus the outputs that outlive the run (read by a later op, or never read:
results such as gradients). Intermediates stay in registers. GEMMs, convolutions and
attention stay separate kernels (their epilogues are not fused: a conservative choice).
"""

from __future__ import annotations

from whichgpu.workload.trace import Op

FUSIBLE = frozenset({"pointwise", "reduction", "norm", "softmax", "copy", "memset", "loss"})
REDUCING = frozenset({"reduction", "norm", "softmax", "loss"})


def last_uses(ops: list[Op]) -> dict[int, int]:
    last: dict[int, int] = {}
    for i, o in enumerate(ops):
        for t in o.ins:
            if t:
                last[t] = i
    return last


def fuse(ops: list[Op]) -> tuple[list[Op], dict[int, list[Op]]]:
    """The op list as a compiler would launch it (order preserved), and for each fused op
    (by position in that list) the ops it replaces."""
    last = last_uses(ops)
    out: list[Op] = []
    parts: dict[int, list[Op]] = {}
    run: list[tuple[int, Op]] = []

    def flush() -> None:
        if not run:
            return
        if len(run) == 1:
            out.append(run[0][1])
        else:
            parts[len(out)] = [o for _, o in run]
            out.append(_merge(run, last))
        run.clear()

    for i, o in enumerate(ops):
        if o.category == "view":
            out.append(o)
            continue
        if o.category in FUSIBLE and o.fusible:
            if run and (run[-1][1].phase != o.phase or run[-1][1].count != o.count):
                flush()
            run.append((i, o))
        else:
            flush()
            out.append(o)
    flush()
    return out, parts


def _merge(run: list[tuple[int, Op]], last: dict[int, int]) -> Op:
    end = run[-1][0]
    produced: set[int] = set()
    for _, o in run:
        produced.update(o.outs)
    read = 0.0
    seen: set[int] = set()
    for _, o in run:
        for t, b in zip(o.ins, o.in_bytes):
            if t in produced:
                continue
            if t and t in seen:
                continue
            seen.add(t)
            read += b
    written = 0.0
    for _, o in run:
        for t, b in zip(o.outs, o.out_bytes):
            if not t or last.get(t, end + 1) > end:
                written += b
    first = run[0][1]
    reductions = sum(1 for _, o in run if o.category in REDUCING)
    flops = sum(o.flops for _, o in run)
    ins = tuple(sorted(seen))
    return Op(
        name=f"fused[{len(run)}]", category="pointwise", phase=first.phase, module=first.module,
        dtype=first.dtype, flops=flops, bytes_read=read, bytes_written=written, count=first.count,
        kernels=float(max(1, reductions)), modelled=all(o.modelled for _, o in run), mm=None,
        sparse=False, fusible=True, block=first.block, tags=("fused", *tuple(sorted({o.name.split(".")[-1] for _, o in run}))[:6]),
        shapes=f"{len(run)} ops fused", ins=ins, in_bytes=(), outs=(), out_bytes=(),
    )
