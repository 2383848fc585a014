"""The dispatch mode that records one `RawOp` per aten call of a step on the meta device.

For each call: its registry entry (`registry.kind_of`: a formula, or a category with FLOPs per
element), the bytes it reads and writes (each distinct input once, each output once, unless
the formula says otherwise), its compute dtype under the precision policy, and the storages it
allocates and frees (for the lifetime simulation and the dataflow used to model fusion).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import whichgpu.workload.costs
import whichgpu.workload.ops  # noqa: F401  (registers whichgpu::attention and its cost)
from whichgpu.errors import CaptureError
from whichgpu.workload.precision import SHORT, Precision
from whichgpu.workload.registry import Cost, kind_of
from whichgpu.workload.trace import FUSIBLE_CATEGORIES
from whichgpu.workload.tracker import Tracker

_SHORT = {getattr(torch, k): v for k, v in SHORT.items() if hasattr(torch, k)}
_MM_CATS = ("matmul", "conv", "attention")
_POINTWISE_TAG = torch.Tag.pointwise


def _short(dt: torch.dtype) -> str:
    return _SHORT.get(dt, str(dt).replace("torch.", ""))


def _touched_bytes(t: torch.Tensor) -> float:
    """Bytes a kernel reads/writes for this (possibly strided/broadcast) tensor: unique elements."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            n *= int(size)
    return float(n * t.element_size())


@dataclass(frozen=True, kw_only=True, slots=True)
class RawOp:
    """One recorded call, before repeated blocks are counted and RNN calls merged (`finalize`).
    Fields as `trace.Op`'s, plus the RNN module the call ran in."""

    name: str
    category: str
    phase: str
    module: str
    dtype: str = ""
    flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    kernels: float = 1.0
    modelled: bool = True
    mm: tuple[int, int, int, int] | None = None
    sparse: bool = False
    fusible: bool = False
    tags: tuple[str, ...] = ()
    shapes: str = ""
    rnn: str = ""  # the nn.RNNBase module this call belongs to ("" if none): merged into one cuDNN op
    ins: tuple[int, ...] = ()
    in_bytes: tuple[float, ...] = ()
    outs: tuple[int, ...] = ()
    out_bytes: tuple[float, ...] = ()


@dataclass
class CaptureState:
    precision: Precision
    sparsity: bool
    param_storages: dict[int, str] = field(default_factory=dict)  # storage cdata -> param name
    phase: str = "forward"
    ops: list[RawOp] = field(default_factory=list)
    events: list[tuple[int, int, int, str]] = field(default_factory=list)  # (op index, delta, sid, module)
    live: dict[int, Any] = field(default_factory=dict)
    sid_module: dict[int, str] = field(default_factory=dict)  # allocation id -> module
    external: set[int] = field(default_factory=set)  # storages that exist before the step (inputs, buffers)
    rnn_modules: frozenset[str] = frozenset()
    alloc_id: dict[int, int] = field(default_factory=dict)  # storage cdata -> allocation number
    next_id: int = 1
    recompute: bool = False
    memory_format: str = "channels_first"
    quantized: set[int] = field(default_factory=set)  # parameter storages stored quantised (inference)
    kv_storages: dict[int, float] = field(default_factory=dict)  # KV cache storage -> bytes scale (FP8 cache)


class Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Nothing is compiled inside a capture: no disable-dynamo shim around __torch_dispatch__
        # (its first call would import torch._dynamo; see nodynamo.py).
        return False

    def __init__(self, state: CaptureState, tracker: Tracker) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.s = state
        self.tracker = tracker

    def _module(self) -> str:
        return self.tracker.current(self.s.phase == "backward")

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        try:
            self._record(func, args, kwargs, out)
        except CaptureError:
            raise
        except Exception as e:  # a formula that cannot read this call: keep the op, unmodelled
            self.s.ops.append(RawOp(name=str(func), category="other", phase=self.s.phase, module=self._module(),
                                    modelled=False, tags=("formula-error:" + type(e).__name__,)))
        return out

    def _record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        s = self.s
        full = str(func)
        packet = str(func.overloadpacket) if hasattr(func, "overloadpacket") else full
        kind = kind_of(full, packet, _POINTWISE_TAG in getattr(func, "tags", ()))
        ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outs = [a for a in tree_flatten(out)[0] if isinstance(a, torch.Tensor)]
        module = self._module()
        if kind is not None and kind.formula is not None:
            cost = kind.formula(args, kwargs, out)
            category, modelled = cost.category, True
        else:
            category, modelled = (kind.category, True) if kind is not None else ("other", False)
            per_elem = kind.flops_per_element if kind is not None else 0.0
            # Reductions: per element read; everything else: per element written.
            n = sum(i.numel() for i in ins) if category == "reduction" else sum(o.numel() for o in outs)
            cost = Cost(per_elem * n, category)
        if category == "optimizer" and s.phase != "optimizer":
            category = "pointwise"

        # ---- bytes: each distinct input read once, each output written once ---------------
        weight_idx: set[int] = set()
        quantized_read = False
        flow_in: dict[int, float] = {}
        if category == "view":
            rd = wr = 0.0
            kernels = 0.0
        else:
            seen: set[tuple[Any, ...]] = set()
            rd = 0.0
            for i, t in enumerate(ins):
                cd = t.untyped_storage()._cdata
                key = (cd, t.storage_offset(), tuple(t.shape), t.stride())
                if key in seen:
                    continue
                seen.add(key)
                b = _touched_bytes(t) * (cost.read_share[i] if i < len(cost.read_share) else 1.0)
                if cd in s.kv_storages:
                    b *= s.kv_storages[cd]  # a KV cache stored narrower than the activations
                if cd in s.param_storages:
                    weight_idx.add(i)
                    if category in _MM_CATS:
                        b = self._weight_bytes(t, b, category, cd in s.quantized)
                        quantized_read = quantized_read or cd in s.quantized
                rd += b
                aid = s.alloc_id.get(cd, 0)
                flow_in[aid] = flow_in.get(aid, 0.0) + b
            wr = sum(float(o.numel() * o.element_size()) for o in outs)
            if cost.bytes_read is not None:
                rd = cost.bytes_read
            if cost.bytes_written is not None:
                wr = cost.bytes_written
            if category == "memset":
                rd = 0.0
            kernels = cost.kernels

        # ---- compute dtype ------------------------------------------------------------------
        dtype = _short(outs[0].dtype) if outs else (_short(ins[0].dtype) if ins else "")
        sparse = False
        tags = cost.tags
        if quantized_read and s.precision.weight_bits and not s.precision.fp8:
            tags = (*tags, "wq")  # a weight-only quantised GEMM: dequantises its weights as it reads them
        if category in _MM_CATS and ins:
            src = ins[min(cost.matmul_dtype_from or 0, len(ins) - 1)]
            # FP8 inference runs FP8 GEMMs on the weights stored in FP8; a weight kept in 16 bits
            # (the LM head) multiplies in 16 bits. Training casts every weight per GEMM.
            fp8_weight = bool(weight_idx) and (not s.precision.weight_bits or quantized_read)
            dtype = self._compute_dtype(src.dtype, category, fp8_weight)
            if dtype == "fp8" and category == "matmul":
                # FP8 GEMM reads 1-byte operands; the casts to FP8 are separate kernels.
                rd, extra = self._fp8_operands(ins, rd)
                for ex in extra:
                    s.ops.append(ex)
            if s.sparsity and weight_idx and category == "matmul":
                sparse = True
        shapes = _shapes(ins, outs)
        if category == "conv" and any(t in ("nchw", "nhwc") for t in tags):
            # The layout the program asked for (meta kernels do not propagate channels-last).
            layout = "nhwc" if s.memory_format == "channels_last" else "nchw"
            tags = (*(t for t in tags if t not in ("nchw", "nhwc")), layout)
        if s.recompute:
            tags = (*tags, "recompute")
        rnn = next((m for m in s.rnn_modules if module == m or module.startswith(m + ".")), "")
        idx = len(s.ops)
        # ---- storage lifetimes and dataflow ids --------------------------------------------------
        flow_out: dict[int, float] = {}
        for o in outs:
            st = o.untyped_storage()
            sid = st._cdata
            if sid not in s.live and sid not in s.param_storages and sid not in s.external:
                # Events are keyed by allocation number: storage addresses are reused after frees.
                nbytes = int(st.nbytes())
                aid_new = s.next_id
                s.next_id += 1
                s.events.append((idx, nbytes, aid_new, module))
                s.sid_module[aid_new] = module
                s.live[sid] = weakref.ref(st, _free_cb(s, sid, aid_new, nbytes))
                s.alloc_id[sid] = aid_new
            if category != "view":
                aid = s.alloc_id.get(sid, 0)
                flow_out[aid] = flow_out.get(aid, 0.0) + float(o.numel() * o.element_size())
        s.ops.append(RawOp(
            name=packet, category=category, phase=s.phase, module=module, dtype=dtype, flops=float(cost.flops),
            bytes_read=rd, bytes_written=wr, kernels=kernels, modelled=modelled, mm=cost.mm, sparse=sparse,
            fusible=category in FUSIBLE_CATEGORIES, tags=tags, shapes=shapes, rnn=rnn,
            ins=tuple(flow_in), in_bytes=tuple(flow_in.values()), outs=tuple(flow_out), out_bytes=tuple(flow_out.values())))

    def _compute_dtype(self, dt: torch.dtype, category: str, has_weight: bool) -> str:
        p = self.s.precision
        if dt == torch.float32:
            return "tf32" if p.matmul_dtype == "tf32" else "fp32"
        if p.fp8 and has_weight and category == "matmul":
            return "fp8"
        return _short(dt)

    def _weight_bytes(self, t: torch.Tensor, b: float, category: str, quantized: bool) -> float:
        p = self.s.precision
        if p.weight_bits and quantized:
            b = b * p.weight_bits / (8 * t.element_size())  # stored quantised (scales included)
        elif p.fp8 and category == "matmul":
            b = b / t.element_size()
        if self.s.sparsity and category == "matmul" and t.dim() == 2:
            # 2:4 compressed weights: half the values plus 2-bit metadata per kept value.
            b = b * 0.5 + (t.numel() / 2) * 2 / 8
        return b

    def _fp8_operands(self, ins: list[torch.Tensor], rd: float) -> tuple[float, list[RawOp]]:
        s = self.s
        extra: list[RawOp] = []
        total = 0.0
        for t in ins[:3]:
            if t.dim() < 2:
                total += _touched_bytes(t)
                continue
            n = float(t.numel())
            if t.untyped_storage()._cdata in s.quantized:
                total += n * (s.precision.weight_bits or 8.0) / 8  # stored in FP8 (inference): no cast
                continue
            total += n  # 1 byte per element
            # cast_to_fp8 (Transformer Engine): read the 16/32-bit tensor, write FP8 + amax.
            extra.append(RawOp(name="te.cast_to_fp8", category="pointwise", phase=s.phase, module=self._module(),
                               dtype="fp8", flops=2 * n, bytes_read=n * t.element_size(), bytes_written=n,
                               fusible=True, tags=("fp8-cast",)))
        return total, extra


def _free_cb(s: CaptureState, sid: int, aid: int, nbytes: int) -> Callable[[Any], None]:
    def cb(_: Any) -> None:
        s.live.pop(sid, None)
        if s.alloc_id.get(sid) == aid:
            s.alloc_id.pop(sid, None)
        s.events.append((len(s.ops) - 1, -nbytes, aid, ""))
    return cb


def _shapes(ins: list[torch.Tensor], outs: list[torch.Tensor]) -> str:
    def f(ts: list[torch.Tensor]) -> str:
        return ",".join("x".join(str(int(d)) for d in t.shape) or "()" for t in ts[:3])
    return f"{f(ins)} -> {f(outs)}"
