"""A fusing engine's effect on the op list (torch.compile, XLA, TensorRT-LLM, vLLM).

A maximal run of consecutive fusible ops (same phase, same repeat count; metadata-only views
do not break a run) becomes one kernel per reduction it contains (at least one), as Inductor
generates. Its memory traffic is the run's external inputs (tensors not produced inside the
run, read once) plus the outputs that outlive the run (read by a later op, or never read:
results such as gradients). Intermediates stay in registers.

With epilogue fusion (TensorRT's GEMM/convolution + bias + activation + residual fusions), the
leading elementwise ops of a run that consumes a GEMM's or convolution's output run in that
kernel's epilogue: the GEMM's output is not written and read back unless something later
needs it. Reductions (norms, softmax) stay separate kernels: they need a whole row.
Otherwise GEMMs, convolutions and attention stay library calls with plain epilogues (Inductor's
default mode).
"""

from __future__ import annotations

from dataclasses import replace

from whichgpu.workload.trace import FUSIBLE_CATEGORIES, Op

REDUCING = frozenset({"reduction", "norm", "softmax", "loss"})


def last_uses(ops: list[Op]) -> dict[int, int]:
    last: dict[int, int] = {}
    for i, o in enumerate(ops):
        for t in o.ins:
            if t:
                last[t] = i
    return last


def fuse(ops: list[Op], epilogue: bool = False) -> tuple[list[Op], dict[int, list[Op]]]:
    """The op list as the engine would launch it (order preserved), and for each fused op
    (by position in that list) the ops it replaces."""
    last = last_uses(ops)
    out: list[Op] = []
    parts: dict[int, list[Op]] = {}
    run: list[tuple[int, Op]] = []
    gemm: list[tuple[int, int, Op]] = []  # (position in out, index in ops, op) of the last GEMM/conv

    def flush() -> None:
        if not run:
            gemm.clear()
            return
        if epilogue and gemm and _feeds(gemm[0][2], run):
            pos, gi, g = gemm[0]
            k = 0
            while k < len(run) and run[k][1].category not in REDUCING:
                k += 1
            if k:
                head = run[:k]
                merged = _merge([(gi, g), *head], last)
                out[pos] = replace(g, bytes_read=g.bytes_read + merged.bytes_read - _ext_read(g, head),
                                   bytes_written=merged.bytes_written, tags=(*g.tags, "epilogue"))
                parts.setdefault(pos, [g]).extend(o for _, o in head)
                del run[:k]
        gemm.clear()
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
        if o.category in FUSIBLE_CATEGORIES and o.fusible:
            if run and (run[-1][1].phase != o.phase or run[-1][1].count != o.count):
                flush()
            run.append((i, o))
        else:
            flush()
            out.append(o)
            if o.category in EPILOGUE_HOSTS and o.outs:
                gemm.append((len(out) - 1, i, o))
    flush()
    return out, parts


EPILOGUE_HOSTS = frozenset({"matmul", "conv"})


def _feeds(g: Op, run: list[tuple[int, Op]]) -> bool:
    """The run starts with an op of the GEMM's phase and repeat count that reads its output."""
    first = run[0][1]
    return first.phase == g.phase and first.count == g.count and any(t in g.outs for t in first.ins if t)


def _ext_read(g: Op, head: list[tuple[int, Op]]) -> float:
    """What `_merge` counts as read for the GEMM itself (its dataflow inputs): the GEMM's own
    bytes_read already holds them (with quantised weights as stored)."""
    produced: set[int] = set()
    for _, o in head:
        produced.update(o.outs)
    seen: set[int] = set()
    total = 0.0
    for t, b in zip(g.ins, g.in_bytes):
        if t and (t in seen or t in produced):
            continue
        seen.add(t)
        total += b
    return total


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
    # Each surviving tensor is written once, however many ops of the run wrote it (in-place
    # chains such as batch_norm -> relu_ -> add_ update one buffer).
    written = 0.0
    out_bytes: dict[int, float] = {}
    for _, o in run:
        for t, b in zip(o.outs, o.out_bytes):
            if not t:
                written += b
            elif last.get(t, end + 1) > end:
                out_bytes[t] = max(out_bytes.get(t, 0.0), b)
    written += sum(out_bytes.values())
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
