"""Raw records of a capture -> the trace's ops and memory events.

Ops of a repeated block (a transformer layer traced once) are counted once per copy; the
aten calls of one cuDNN RNN module call are merged into one fused op; allocation and free
events are re-indexed onto the final op list.
"""

from __future__ import annotations

from whichgpu.workload.recorder import CaptureState, RawOp
from whichgpu.workload.trace import MemEvent, Op


def block_of(module: str, repeats: dict[str, int]) -> str:
    """The template block (a key of `repeats`) a module path belongs to, or ""."""
    for pre in repeats:
        if module == pre or module.startswith(pre + "."):
            return pre
    return ""


def finalize(s: CaptureState, repeats: dict[str, int]) -> tuple[list[Op], dict[int, int]]:
    """(ops, raw record index -> op index): block counts, and RNN module calls merged into
    fused cuDNN kernels."""
    out: list[Op] = []
    index_map: dict[int, int] = {}
    i = 0
    raw = s.ops
    while i < len(raw):
        r = raw[i]
        if r.rnn:
            j = i
            while j < len(raw) and raw[j].rnn == r.rnn and raw[j].phase == r.phase:
                j += 1
            out.append(_merge_rnn(raw[i:j], repeats))
            for k in range(i, j):
                index_map[k] = len(out) - 1
            i = j
            continue
        block = block_of(r.module, repeats)
        count = 1 + repeats.get(block, 0) if block else 1
        out.append(Op(name=r.name, category=r.category, phase=r.phase, module=r.module, dtype=r.dtype,
                      flops=r.flops, bytes_read=r.bytes_read, bytes_written=r.bytes_written, count=count,
                      kernels=r.kernels, modelled=r.modelled, mm=r.mm, sparse=r.sparse, fusible=r.fusible,
                      block=block, tags=r.tags, shapes=r.shapes, ins=r.ins, in_bytes=r.in_bytes,
                      outs=r.outs, out_bytes=r.out_bytes))
        index_map[i] = len(out) - 1
        i += 1
    return out, index_map


def _merge_rnn(group: list[RawOp], repeats: dict[str, int]) -> Op:
    """A cuDNN RNN call: the per-timestep GEMMs launch one kernel each; gate math is fused."""
    mms = [g for g in group if g.category == "matmul"]
    flops = sum(g.flops for g in group)
    rd = sum(g.bytes_read for g in mms)
    wr = sum(g.bytes_written for g in mms)
    shape_counts: dict[tuple[int, int, int, int], int] = {}
    for g in mms:
        if g.mm:
            shape_counts[g.mm] = shape_counts.get(g.mm, 0) + 1
    mm = max(shape_counts, key=lambda k: shape_counts[k]) if shape_counts else None
    if mm:
        mm = (len(mms), mm[1], mm[2], mm[3])
    first = group[0]
    module = first.rnn
    block = block_of(module, repeats)
    count = 1 + repeats.get(block, 0) if block else 1
    produced = {i for g in group for i in g.outs}
    ins: dict[int, float] = {}
    for g in group:
        for i, b in zip(g.ins, g.in_bytes):
            if i not in produced:
                ins[i] = max(ins.get(i, 0.0), b)
    outs = {i: b for g in group for i, b in zip(g.outs, g.out_bytes)}
    return Op(name="cudnn_rnn" if first.phase == "forward" else "cudnn_rnn_backward", category="rnn",
              phase=first.phase, module=module, dtype=mms[0].dtype if mms else first.dtype, flops=flops,
              bytes_read=rd, bytes_written=wr, count=count, kernels=float(max(len(mms), 1)),
              modelled=all(g.modelled for g in group), mm=mm, sparse=False, fusible=False, block=block,
              tags=("cudnn", f"steps={len(mms)}"), shapes=f"{len(group)} aten ops merged",
              ins=tuple(ins), in_bytes=tuple(ins.values()), outs=tuple(outs), out_bytes=tuple(outs.values()))


def mem_events(s: CaptureState, repeats: dict[str, int], grad_sids: set[int], index_map: dict[int, int],
               n_ops: int) -> list[MemEvent]:
    """The state's allocation (delta > 0) and free events on the final op list, each with its
    role (a parameter gradient or an activation) and the template block it was allocated in."""
    last = n_ops - 1
    out: list[MemEvent] = []
    for raw_idx, delta, sid, module in s.events:
        op_index = index_map.get(raw_idx, last) if raw_idx >= 0 else 0
        role = "grad" if sid in grad_sids else "activation"
        owner = s.sid_module.get(sid, module if delta > 0 else "")
        out.append(MemEvent(op_index, delta, sid, role, block_of(owner, repeats)))
    return out
