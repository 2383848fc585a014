"""The trace: a hardware-independent record of one training or inference step.

Torch-free. Produced by `workload.capture`, consumed by `perf/`, `memory/`, `parallel/`.
Serialised to JSON (schema ``whichgpu.trace/3``) for the on-disk cache.

An `Op` is one aten call (or a synthetic optimizer / loss-scaling kernel) with its FLOPs and
bytes. ``count`` is how many times it occurs per step: ops of a repeated block (transformer
layers traced once) carry the number of layers. Totals always multiply by ``count``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from whichgpu.workload.shape import ModelShape

__all__ = ["CATEGORIES", "FUSIBLE_CATEGORIES", "PHASES", "SCHEMA", "MemEvent", "ModelShape", "Op", "Trace", "summarize"]

# Version of the on-disk trace format: a cached trace of another version is recaptured.
# 2: `Trace.shape` (a ModelShape) replaces the `model_meta` dict.
# 3: ModelShape describes today's attention and MoE variants; `input_bytes` leaves out the KV cache.
SCHEMA = "whichgpu.trace/3"

CATEGORIES: tuple[str, ...] = (
    "matmul",      # mm/bmm/addmm/linear: tensor-core eligible GEMMs
    "conv",        # convolutions (forward and backward)
    "attention",   # fused attention kernels (flash / memory-efficient)
    "rnn",         # fused recurrent layers (cuDNN LSTM/GRU)
    "norm",        # batch/layer/group/RMS norm
    "softmax",     # softmax, log-softmax and their backward
    "pointwise",   # elementwise math (activations, adds, muls, dropout, casts of values)
    "reduction",   # sums, means, max over dims
    "embedding",   # gathers from tables, index ops
    "loss",        # loss kernels (nll, cross entropy, mse, ...)
    "optimizer",   # optimizer step kernels (incl. loss-scaling bookkeeping)
    "copy",        # data movement without math: cat, contiguous, dtype casts, pads, copies
    "memset",      # zeros/ones/fill/empty-like allocations that write memory
    "view",        # metadata only: no kernel, no memory traffic
    "comm",        # collectives between GPUs (tensor-parallel all-reduce / all-gather): tags name them
    "other",       # everything else (unmodelled FLOPs, bytes still counted)
)
PHASES: tuple[str, ...] = ("forward", "backward", "optimizer")
# Categories whose kernels a fusing compiler (Inductor, XLA, TensorRT) can merge with their
# neighbours' (perf/fusion.py); the capture flags such ops `Op.fusible`.
FUSIBLE_CATEGORIES = frozenset({"pointwise", "reduction", "norm", "softmax", "copy", "memset", "loss"})


@dataclass(frozen=True, slots=True)
class Op:
    name: str
    category: str
    phase: str
    module: str
    dtype: str  # compute dtype: fp32|tf32|fp16|bf16|fp8|int8|int4, or storage dtype for non-math ops
    flops: float
    bytes_read: float
    bytes_written: float
    count: int = 1
    kernels: float = 1.0  # kernel launches per occurrence
    modelled: bool = True  # False: no FLOP formula for this op (FLOPs unknown, bytes counted)
    mm: tuple[int, int, int, int] | None = None  # (batch, M, N, K) of the GEMM (conv as implicit GEMM)
    sparse: bool = False  # weight matmul eligible for 2:4 structured sparsity
    fusible: bool = False  # elementwise/reduction a compiler could fuse with neighbours (FUSIBLE_CATEGORIES)
    block: str = ""  # template block path when the op belongs to a repeated block
    tags: tuple[str, ...] = ()
    shapes: str = ""  # compact "in -> out" shapes, for reports
    # Dataflow: ids of the tensors (storages) read and written, and bytes of each. Ids are
    # allocation numbers, unique within a trace; 0 = a tensor from outside the step (parameters,
    # inputs). Used to model kernel fusion (--compile).
    ins: tuple[int, ...] = ()
    in_bytes: tuple[float, ...] = ()
    outs: tuple[int, ...] = ()
    out_bytes: tuple[float, ...] = ()

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written

    @property
    def total_flops(self) -> float:
        return self.flops * self.count

    @property
    def total_bytes(self) -> float:
        return (self.bytes_read + self.bytes_written) * self.count

    @property
    def intensity(self) -> float:
        b = self.bytes_read + self.bytes_written
        return self.flops / b if b else float("inf")


@dataclass(frozen=True, slots=True)
class MemEvent:
    """A storage allocated (``delta > 0``) or freed (``delta < 0``) after op ``op_index``.

    ``role``: activation | grad | input | temp | param | optimizer. ``block`` is the template
    block path for storages allocated inside a repeated block (see Trace.repeats).
    """

    op_index: int
    delta: int
    sid: int
    role: str
    block: str = ""


@dataclass
class Trace:
    model: str
    task: str
    phase: str
    batch_size: int
    seq_len: int | None
    image_size: int | None
    context: int | None
    precision: str
    optimizer: str
    sparsity: str
    samples: int
    tokens: int
    params: int  # full model parameter count (with repeated blocks)
    trainable_params: int
    param_bytes: int  # bytes of the parameters as stored (full model)
    buffer_bytes: int
    input_bytes: int
    ops: list[Op]
    mem_events: list[MemEvent] = field(default_factory=list)
    repeats: dict[str, int] = field(default_factory=dict)
    shape: ModelShape = field(default_factory=ModelShape)
    notes: list[str] = field(default_factory=list)
    key: str = ""
    capture_seconds: float = 0.0
    finetune: str = "full"
    checkpointing: str = "none"
    schema: str = SCHEMA

    # ---- summaries -------------------------------------------------------------------
    def total_flops(self, phase: str | None = None) -> float:
        return sum(o.flops * o.count for o in self.ops if phase is None or o.phase == phase)

    def total_bytes(self, phase: str | None = None) -> float:
        return sum((o.bytes_read + o.bytes_written) * o.count for o in self.ops
                   if phase is None or o.phase == phase)

    def kernel_count(self) -> float:
        return sum(o.kernels * o.count for o in self.ops)

    def coverage(self) -> dict[str, Any]:
        """How much of the step has a cost formula (an op without one counts zero FLOPs).

        ops, bytes: the shares of the ops (by occurrence) and of their bytes that have a formula;
        unmodelled_ops, unmodelled_names: the ops that have none; bytes_uncovered: their bytes
        over all bytes (1 - bytes).

        flops_uncovered: how far the traced GEMM FLOPs fall short of the matmul work the model's
        shape implies, as a share of that work (0 when they reach it; None without a transformer
        description). The work is PaLM's (appendix B) without its attention term: 2 N FLOPs per
        token forward, x3 for a training step (backward = input and weight gradients), x2 under
        LoRA/QLoRA (a frozen base has no weight gradients); N = `perf.mfu.matmul_params_per_token`
        (the weights a token goes through, routed experts its top-k), the LM head once per sample
        in a prefill (which computes the logits of the last position only). Traced: the matmul and conv
        ops of forward and backward, recomputation left out. Fused attention kernels are left out
        on both sides (their work depends on masks and windows the shape gives only in words);
        eager attention's batched matmuls are matmul ops, which can only lower the shortfall.
        Routed experts' grouped GEMMs that have a formula count on both sides as traced: their
        rows follow the routing (a capacity factor pads or drops them), not the shape. A grouped
        GEMM or projection with no formula shows here. flops_expected, flops_traced: the two sides.
        """
        real = [o for o in self.ops if o.category != "view"]
        n = sum(o.count for o in real) or 1
        n_mod = sum(o.count for o in real if o.modelled)
        b = sum(o.total_bytes for o in real)
        b_unmod = sum(o.total_bytes for o in real if not o.modelled)
        unmodelled = sorted({o.name for o in real if not o.modelled})
        gemms = [o for o in real if o.category in ("matmul", "conv") and o.phase in ("forward", "backward")
                 and "recompute" not in o.tags]
        traced = sum(o.total_flops for o in gemms)
        expected = self.expected_matmul_flops(sum(o.total_flops for o in gemms if o.modelled and _routed(o)))
        return {
            "ops": n_mod / n,
            "bytes": 1.0 - b_unmod / b if b else 1.0,
            "unmodelled_ops": float(n - n_mod),
            "unmodelled_names": unmodelled,
            "bytes_uncovered": b_unmod / b if b else 0.0,
            "flops_expected": expected,
            "flops_traced": traced,
            "flops_uncovered": max(0.0, expected - traced) / expected if expected else None,
        }

    def expected_matmul_flops(self, routed_flops: float = 0.0) -> float | None:
        """The weight-matmul FLOPs of this step that the model's shape implies (see `coverage`);
        None without a transformer description or tokens. `routed_flops`: the traced FLOPs of the
        routed experts' GEMMs, which then replace the shape's share of those experts."""
        # torch-free; imported here as perf imports this module
        from whichgpu.perf.mfu import matmul_params_per_token

        n = matmul_params_per_token(self.shape)
        if n is None or not self.tokens:
            return None
        passes = 1.0
        if self.task == "train":
            passes = 2.0 if (self.finetune or "full").split()[0] in ("lora", "qlora") else 3.0
        s = self.shape
        work = n * self.tokens
        if self.phase == "prefill":  # logits of the last position only: the LM head once per sample
            head = s.vocab * s.hidden / (s.tp if s.tp > 1 and s.tp_head else 1)  # as perf.mfu counts it
            work -= head * (self.tokens - self.samples)
        if routed_flops and s.experts > s.active_experts > 0 and s.block_params > s.matmul_params > 0:
            # every expert's weights less the top-k's = (E - k) experts' worth; a token uses k of them
            routed = s.active_experts * (s.block_params - s.matmul_params) / (s.experts - s.active_experts)
            return 2.0 * (work - routed * self.tokens) * passes + routed_flops
        return 2.0 * work * passes

    # ---- serialisation -----------------------------------------------------------------

    def to_json(self) -> str:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("ops", "mem_events", "shape")}
        d["shape"] = self.shape.to_dict()
        # Columnar, string-interned ops: compact and fast to load.
        strings: dict[str, int] = {}

        def s(x: str) -> int:
            if x not in strings:
                strings[x] = len(strings)
            return strings[x]

        rows = []
        for o in self.ops:
            rows.append([s(o.name), s(o.category), s(o.phase), s(o.module), s(o.dtype), o.flops,
                         o.bytes_read, o.bytes_written, o.count, o.kernels, int(o.modelled),
                         list(o.mm) if o.mm else None, int(o.sparse), int(o.fusible), s(o.block),
                         [s(t) for t in o.tags], s(o.shapes), list(o.ins), list(o.in_bytes),
                         list(o.outs), list(o.out_bytes)])
        d["ops"] = rows
        d["mem_events"] = [[e.op_index, e.delta, e.sid, s(e.role), s(e.block)] for e in self.mem_events]
        d["strings"] = list(strings)
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Trace:
        d = json.loads(text)
        if d.get("schema") != SCHEMA:
            raise ValueError(f"trace schema {d.get('schema')!r} is not {SCHEMA!r}")
        st = d.pop("strings")
        ops = [
            Op(name=st[r[0]], category=st[r[1]], phase=st[r[2]], module=st[r[3]], dtype=st[r[4]],
               flops=r[5], bytes_read=r[6], bytes_written=r[7], count=r[8], kernels=r[9],
               modelled=bool(r[10]), mm=tuple(r[11]) if r[11] else None, sparse=bool(r[12]),
               fusible=bool(r[13]), block=st[r[14]], tags=tuple(st[t] for t in r[15]), shapes=st[r[16]],
               ins=tuple(r[17]), in_bytes=tuple(r[18]), outs=tuple(r[19]), out_bytes=tuple(r[20]))
            for r in d.pop("ops")
        ]
        ev = [MemEvent(op_index=e[0], delta=e[1], sid=e[2], role=st[e[3]], block=st[e[4]]) for e in d.pop("mem_events")]
        shape = ModelShape.from_dict(d.pop("shape"))
        return cls(ops=ops, mem_events=ev, shape=shape, **d)


def _routed(o: Op) -> bool:
    """A routed experts' grouped GEMM (its formula tags it with the expert count)."""
    return any(t.startswith("experts=") for t in o.tags)


def summarize(ops: Iterable[Op], by: str = "category") -> dict[str, dict[str, float]]:
    """Totals (flops, bytes, kernels, ops) grouped by 'category', 'phase', 'module' or 'op'."""
    out: dict[str, dict[str, float]] = {}
    for o in ops:
        key = {"category": o.category, "phase": o.phase, "module": o.module or "(top)",
               "op": o.name}[by]
        agg = out.setdefault(key, {"flops": 0.0, "bytes": 0.0, "kernels": 0.0, "ops": 0.0})
        agg["flops"] += o.flops * o.count
        agg["bytes"] += (o.bytes_read + o.bytes_written) * o.count
        agg["kernels"] += o.kernels * o.count
        agg["ops"] += o.count
    return out
