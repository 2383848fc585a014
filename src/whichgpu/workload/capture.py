"""Trace a model on the meta device: every aten op with FLOPs, bytes, module, phase, dtype.

The engine stacks three things around one training (or inference) step:
* `PolicyMode` (TorchFunctionMode): the precision policy and fused-attention routing;
* `Tracker`: which module (forward and backward) each op belongs to;
* `_Recorder` (TorchDispatchMode): one `Op` per aten call, plus storage alloc/free events.

Nothing is computed: tensors live on ``meta``. The optimizer step is synthesised (`optim.py`).
"""

from __future__ import annotations

import contextlib
import math
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

import whichgpu.workload.ops  # noqa: F401  (registers whichgpu::attention and its cost)
from whichgpu.errors import CaptureError
from whichgpu.workload.autocast import PolicyMode
from whichgpu.workload.costs import REGISTRY, Cost, fallback_category
from whichgpu.workload.nodynamo import preresolve_dynamo_shims
from whichgpu.workload.optim import OptimizerSpec, ParamGroup, optimizer_ops
from whichgpu.workload.precision import SHORT, Precision
from whichgpu.workload.trace import MemEvent, Op, Trace
from whichgpu.workload.tracker import Tracker
from whichgpu.workload.zoo.base import Built

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


@dataclass
class _Raw:
    name: str
    cost: Cost | None
    category: str
    phase: str
    module: str
    dtype: str
    flops: float
    bytes_read: float
    bytes_written: float
    kernels: float
    modelled: bool
    mm: tuple[int, int, int, int] | None
    sparse: bool
    fusible: bool
    tags: tuple[str, ...]
    shapes: str
    rnn: str = ""
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
    ops: list[_Raw] = field(default_factory=list)
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


class _Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
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
            self.s.ops.append(_Raw(str(func), None, "other", self.s.phase, self._module(), "", 0.0,
                                   0.0, 0.0, 1.0, False, None, False, False, ("formula-error:" + type(e).__name__,), ""))
        return out

    def _record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        s = self.s
        full = str(func)
        packet = str(func.overloadpacket) if hasattr(func, "overloadpacket") else full
        handler = REGISTRY.get(full) or REGISTRY.get(packet)
        ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outs = [a for a in tree_flatten(out)[0] if isinstance(a, torch.Tensor)]
        module = self._module()
        cost: Cost | None = handler(args, kwargs, out) if handler else None
        if cost is not None:
            category, modelled = cost.category, True
        else:
            category, per_elem, modelled = fallback_category(packet, _POINTWISE_TAG in getattr(func, "tags", ()))
            n_out = sum(o.numel() for o in outs)
            flops = per_elem * (n_out if category != "reduction" else sum(i.numel() for i in ins))
            cost = Cost(flops, category)
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
                b = _touched_bytes(t)
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
        s.ops.append(_Raw(packet, cost, category, s.phase, module, dtype, float(cost.flops), rd, wr,
                          kernels, modelled, cost.mm, sparse,
                          category in ("pointwise", "reduction", "softmax", "norm", "copy", "memset")
                          or (category == "loss"), tags, shapes, rnn, tuple(flow_in), tuple(flow_in.values()),
                          tuple(flow_out), tuple(flow_out.values())))

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

    def _fp8_operands(self, ins: list[torch.Tensor], rd: float) -> tuple[float, list[_Raw]]:
        s = self.s
        extra: list[_Raw] = []
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
            extra.append(_Raw("te.cast_to_fp8", None, "pointwise", s.phase, self._module(), "fp8",
                              2 * n, n * t.element_size(), n, 1.0, True, None, False, True,
                              ("fp8-cast",), ""))
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


def _mult(name: str, repeats: dict[str, int]) -> int:
    return 1 + next((extra for pre, extra in repeats.items() if name.startswith(pre + ".")), 0)


_HEADS = ("lm_head", "output", "embed_out")


def quantized_storages(model: nn.Module, precision: Precision) -> set[int]:
    """Storages of the parameters a weight-only / FP8 inference format stores quantised: the
    weights of every nn.Linear, except the output head unless the format quantises it too
    (GPTQ, AWQ and TensorRT-LLM FP8 keep the head in 16 bits; gpt-fast and GGUF quantise it),
    and the embedding table when the format quantises it (GGUF)."""
    if not precision.weight_bits:
        return set()
    out: set[int] = set()
    for name, mod in model.named_modules():
        w = getattr(mod, "weight", None)
        if not isinstance(w, nn.Parameter):
            continue
        head = name.split(".")[-1] in _HEADS
        linear = isinstance(mod, nn.Linear) and (precision.quantize_head or not head)
        if linear or (isinstance(mod, nn.Embedding) and precision.quantize_embedding):
            out.add(w.untyped_storage()._cdata)
    return out


def _count_params(model: nn.Module, repeats: dict[str, int], quantized: set[int] | None = None,
                  weight_bits: float | None = None,
                  ) -> tuple[int, int, int, int, list[tuple[str, int, int, torch.dtype, bool]]]:
    """(parameters, trainable, parameter bytes as stored, buffer bytes, per-parameter rows), full model."""
    total = trainable = pbytes = 0
    rows = []
    for name, p in model.named_parameters():
        mult = _mult(name, repeats)
        total += p.numel() * mult
        if quantized and weight_bits and p.untyped_storage()._cdata in quantized:
            pbytes += round(p.numel() * weight_bits / 8) * mult
        else:
            pbytes += p.numel() * p.element_size() * mult
        if p.requires_grad:
            trainable += p.numel() * mult
        rows.append((name, p.numel(), mult, p.dtype, p.requires_grad))
    bbytes = sum(b.numel() * b.element_size() * _mult(n, repeats) for n, b in model.named_buffers())
    return total, trainable, pbytes, bbytes, rows


def _to_dtype(x: Any, dtype: torch.dtype) -> Any:
    return tree_map(lambda a: a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a, x)


def _loss_of(built: Built, out: Any) -> torch.Tensor:
    if built.loss_fn is not None:
        loss = built.loss_fn(out, built.inputs)
    elif isinstance(out, torch.Tensor):
        loss = out if out.dim() == 0 else out.float().mean()
    elif getattr(out, "loss", None) is not None:
        loss = out.loss
    else:
        first = tree_flatten(out)[0]
        tensors = [t for t in first if isinstance(t, torch.Tensor) and t.is_floating_point()]
        if not tensors:
            raise CaptureError("cannot train: the model output has no floating tensor to use as a loss; "
                               "return (model, inputs, loss_fn) from the factory")
        loss = tensors[0].float().mean()
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        raise CaptureError("the training loss must be a scalar tensor")
    return loss


def capture(built: Built, *, name: str, task: str, precision: Precision, optimizer: OptimizerSpec,
            sparsity: bool = False, phase: str = "full", batch_size: int = 1,
            seq_len: int | None = None, image_size: int | None = None, context: int | None = None,
            model_meta: dict[str, Any] | None = None, finetune: str = "full", lora_rank: int = 16,
            checkpointing: str = "none", memory_format: str = "channels_first") -> Trace:
    """Run one step of `built` on meta and return its trace."""
    from whichgpu.workload.checkpointing import apply_checkpointing
    from whichgpu.workload.finetune import apply_finetune

    t0 = time.perf_counter()
    preresolve_dynamo_shims()
    model: nn.Module = built.model
    inputs = built.inputs
    base_params = built.full_params
    if precision.param_dtype != "float32":
        dt = getattr(torch, precision.param_dtype)
        model = model.to(dt)
        inputs = _to_dtype(inputs, dt)
    base = getattr(torch, precision.autocast) if precision.autocast else None
    adapted = apply_finetune(model, finetune, lora_rank, base)
    built.inputs = inputs
    if task == "train":
        model.train()
    else:
        model.eval()
    repeats = dict(built.repeats)
    quantized = quantized_storages(model, precision) if task == "infer" else set()
    params, trainable, pbytes, bbytes, prow = _count_params(model, repeats, quantized, precision.weight_bits)
    if finetune != "full" and base_params:
        params = base_params + trainable  # base weights (NF4 buffers for QLoRA) + adapters
    elif base_params:
        params = base_params
    state = CaptureState(precision=precision, sparsity=sparsity, memory_format=memory_format, quantized=quantized)
    policy = PolicyMode(precision)
    if task == "train":
        def _set_recompute(flag: bool) -> None:
            state.recompute = flag
            if not flag:
                policy.clear_cache()  # casts made for a recomputation die with it, as autocast's do

        def _policy_ctx() -> Any:
            from torch.overrides import _get_current_function_mode_stack

            active = any(m is policy for m in _get_current_function_mode_stack())  # type: ignore[no-untyped-call]
            return contextlib.nullcontext() if active else policy

        apply_checkpointing(model, checkpointing, repeats, _set_recompute, _policy_ctx)
    for pname, p in model.named_parameters():
        state.param_storages[p.untyped_storage()._cdata] = pname
    if built.kv_bytes and built.kv_key and isinstance(inputs, dict):
        for t in tree_flatten(inputs.get(built.kv_key))[0]:
            if isinstance(t, torch.Tensor):
                state.kv_storages[t.untyped_storage()._cdata] = built.kv_bytes / t.element_size()
    state.rnn_modules = frozenset(n for n, m in model.named_modules() if isinstance(m, nn.RNNBase))
    input_tensors = [t for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor)]
    # Inputs (including KV caches written in place) and buffers exist before the step.
    state.external = {t.untyped_storage()._cdata for t in input_tensors} | {
        b.untyped_storage()._cdata for b in model.buffers()}
    input_bytes = sum(t.untyped_storage().nbytes() for t in {t.untyped_storage()._cdata: t for t in input_tensors}.values())
    for t in input_tensors:
        if t.device.type != "meta":
            raise CaptureError(f"example input of shape {tuple(t.shape)} is on {t.device}, not 'meta'; "
                               "build inputs with device='meta' (nothing may allocate real memory)")
    for p in model.parameters():
        if p.device.type != "meta":
            raise CaptureError("the model has parameters on " + str(p.device) + ", not 'meta'; build it under "
                               "`with torch.device('meta'):` so no weights are allocated")

    tracker = Tracker(model)
    recorder = _Recorder(state, tracker)
    grad_sids: set[int] = set()
    # nn.LSTM refuses low-precision inputs with FP32 weights unless autocast is on; turning on
    # CPU autocast flips that check (meta tensors have no autocast kernels, so nothing else moves).
    ac = (torch.autocast("cpu", dtype=getattr(torch, precision.autocast)) if precision.autocast
          else contextlib.nullcontext())
    try:
        with tracker, policy, recorder, ac:
            if task == "train":
                with torch.enable_grad():
                    out = model(**inputs) if isinstance(inputs, dict) else model(*inputs)
                    loss = _loss_of(built, out)
                    if precision.loss_scaling:
                        loss = loss * 65536.0  # GradScaler.scale(loss)
                    del out
                    policy.clear_cache()
                    state.phase = "backward"
                    loss.backward()  # type: ignore[no-untyped-call]
                    del loss
                for p in model.parameters():
                    if p.grad is not None:
                        aid = state.alloc_id.get(p.grad.untyped_storage()._cdata)
                        if aid is not None:
                            grad_sids.add(aid)
            else:
                with torch.no_grad():
                    out = model(**inputs) if isinstance(inputs, dict) else model(*inputs)
                    del out
    except CaptureError:
        raise
    except NotImplementedError as e:
        raise CaptureError(f"model {name!r} uses an op that cannot run on the meta device: {_first_line(e)}") from None
    except Exception as e:  # the model's own code raised (ValueError, TypeError, ...)
        raise CaptureError(f"model {name!r} failed to trace at batch {batch_size}: "
                           f"{type(e).__name__}: {_first_line(e)}") from None

    ops = _finalize(state, repeats)
    if task == "train":
        groups = _param_groups(prow)
        ops += optimizer_ops(optimizer, groups, loss_scaling=precision.loss_scaling)
    events = _events(state, repeats, grad_sids, ops)
    opt_name = optimizer.name + ("-8bit" if optimizer.state_bytes == 1.0 else "") + (
        f"/{optimizer.impl}" if task == "train" else "")
    trace = Trace(
        model=name, task=task, phase=phase, batch_size=batch_size, seq_len=seq_len, image_size=image_size,
        context=context, precision=precision.name, optimizer=opt_name if task == "train" else "none",
        sparsity="2:4" if sparsity else "none", samples=built.samples or batch_size,
        tokens=built.tokens, params=params, trainable_params=trainable,
        param_bytes=pbytes, buffer_bytes=bbytes, input_bytes=int(input_bytes), ops=ops,
        mem_events=events, repeats=repeats, model_meta=dict(model_meta or {}), notes=list(built.notes),
        finetune=finetune if not adapted else f"{finetune} (rank {lora_rank}, {adapted} layers)",
        checkpointing=checkpointing,
    )
    trace.capture_seconds = time.perf_counter() - t0
    return trace


def _first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return msg[0][:300] if msg else type(e).__name__


def _block_of(module: str, repeats: dict[str, int]) -> str:
    for pre in repeats:
        if module == pre or module.startswith(pre + "."):
            return pre
    return ""


def _finalize(s: CaptureState, repeats: dict[str, int]) -> list[Op]:
    """Raw records -> Ops: block counts, and RNN module calls merged into fused cuDNN kernels."""
    out: list[Op] = []
    i = 0
    raw = s.ops
    s.index_map = {}  # type: ignore[attr-defined]
    while i < len(raw):
        r = raw[i]
        if r.rnn:
            j = i
            while j < len(raw) and raw[j].rnn == r.rnn and raw[j].phase == r.phase:
                j += 1
            group = raw[i:j]
            out.append(_merge_rnn(group, repeats))
            for k in range(i, j):
                s.index_map[k] = len(out) - 1  # type: ignore[attr-defined]
            i = j
            continue
        block = _block_of(r.module, repeats)
        count = 1 + repeats.get(block, 0) if block else 1
        out.append(Op(r.name, r.category, r.phase, r.module, r.dtype, r.flops, r.bytes_read,
                      r.bytes_written, count, r.kernels, r.modelled, r.mm, r.sparse, r.fusible, block,
                      r.tags, r.shapes, r.ins, r.in_bytes, r.outs, r.out_bytes))
        s.index_map[i] = len(out) - 1  # type: ignore[attr-defined]
        i += 1
    return out


def _merge_rnn(group: list[_Raw], repeats: dict[str, int]) -> Op:
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
    block = _block_of(module, repeats)
    count = 1 + repeats.get(block, 0) if block else 1
    dtype = mms[0].dtype if mms else first.dtype
    name = "cudnn_rnn" if first.phase == "forward" else "cudnn_rnn_backward"
    produced = {i for g in group for i in g.outs}
    ins: dict[int, float] = {}
    for g in group:
        for i, b in zip(g.ins, g.in_bytes):
            if i not in produced:
                ins[i] = max(ins.get(i, 0.0), b)
    outs = {i: b for g in group for i, b in zip(g.outs, g.out_bytes)}
    return Op(name, "rnn", first.phase, module, dtype, flops, rd, wr, count, float(max(len(mms), 1)),
              all(g.modelled for g in group), mm, False, False, block, ("cudnn", f"steps={len(mms)}"),
              f"{len(group)} aten ops merged", tuple(ins), tuple(ins.values()), tuple(outs), tuple(outs.values()))


def _param_groups(prow: list[tuple[str, int, int, torch.dtype, bool]]) -> list[ParamGroup]:
    by: dict[torch.dtype, list[int]] = {}
    for _name, n, mult, dt, req in prow:
        if req:
            by.setdefault(dt, []).extend([n] * mult)
    out = []
    for dt, numels in by.items():
        eb = float(torch.empty((), dtype=dt, device="meta").element_size())
        out.append(ParamGroup(tuple(numels), eb, eb))
    return out


def _events(s: CaptureState, repeats: dict[str, int], grad_sids: set[int], ops: list[Op]) -> list[MemEvent]:
    idx_map: dict[int, int] = s.index_map  # type: ignore[attr-defined]
    last = len(ops) - 1
    out: list[MemEvent] = []
    for raw_idx, delta, sid, module in s.events:
        op_index = idx_map.get(raw_idx, last) if raw_idx >= 0 else 0
        if delta > 0:
            role = "grad" if sid in grad_sids else "activation"
            out.append(MemEvent(op_index, delta, sid, role, _block_of(s.sid_module.get(sid, module), repeats)))
        else:
            role = "grad" if sid in grad_sids else "activation"
            out.append(MemEvent(op_index, delta, sid, role, _block_of(s.sid_module.get(sid, ""), repeats)))
    return out


def model_flops_per_token(params: int) -> float:
    """6N rule of thumb for reference (Kaplan et al. 2020): FLOPs per token of training."""
    return 6.0 * params if params > 0 else math.nan
