"""Trace a model on the meta device: every aten op with FLOPs, bytes, module, phase, dtype.

The engine stacks three things around one training (or inference) step:
* `PolicyMode` (TorchFunctionMode): the precision policy and fused-attention routing;
* `Tracker`: which module (forward and backward) each op belongs to;
* `Recorder` (TorchDispatchMode, `recorder.py`): one record per aten call, plus storage
  alloc/free events, turned into the trace's ops by `finalize.py`.

Nothing is computed: tensors live on ``meta``. The optimizer step is synthesised (`optim.py`).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_map

from whichgpu.errors import BatchTooSmallError, CaptureError
from whichgpu.workload.autocast import PolicyMode
from whichgpu.workload.finalize import finalize, mem_events
from whichgpu.workload.nodynamo import preresolve_dynamo_shims
from whichgpu.workload.optim import OptimizerSpec, ParamGroup, optimizer_ops
from whichgpu.workload.precision import Precision
from whichgpu.workload.recorder import CaptureState, Recorder
from whichgpu.workload.shape import ModelShape
from whichgpu.workload.trace import Trace
from whichgpu.workload.tracker import Tracker
from whichgpu.workload.zoo.base import Built


def _mult(name: str, repeats: dict[str, int]) -> int:
    return 1 + next((extra for pre, extra in repeats.items() if name.startswith(pre + ".")), 0)


_HEADS = ("lm_head", "output", "embed_out")


def quantized_storages(model: nn.Module, precision: Precision) -> set[int]:
    """Storages of the parameters a weight-only / FP8 inference format stores quantised: the
    weights of every nn.Linear and the stacked routed experts', except the output head unless
    the format quantises it too (GPTQ, AWQ and TensorRT-LLM FP8 keep the head in 16 bits;
    gpt-fast and GGUF quantise it), and the embedding table when the format quantises it (GGUF)."""
    if not precision.weight_bits:
        return set()
    out: set[int] = set()
    for name, mod in model.named_modules():
        for pname in getattr(mod, "QUANTIZED", ()):  # stacked expert weights (zoo/llm/modern.py Experts)
            out.add(getattr(mod, pname).untyped_storage()._cdata)
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
            shape: ModelShape | None = None, finetune: str = "full", lora_rank: int = 16,
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
    if adapted:  # the adapted linears of the whole model: a traced block stands for its repeats too
        from whichgpu.workload.finetune import LoRALinear

        adapted = sum(_mult(n, repeats) for n, m in model.named_modules() if isinstance(m, LoRALinear))
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
    # The KV cache is not an input here: the memory model sizes it for the full model (every
    # layer, sliding windows, latent caches) from the trace's shape.
    kv_ids = ({t.untyped_storage()._cdata for t in tree_flatten(inputs.get(built.kv_key))[0] if isinstance(t, torch.Tensor)}
              if built.kv_key and isinstance(inputs, dict) else set())
    input_bytes = sum(t.untyped_storage().nbytes() for sid, t in {t.untyped_storage()._cdata: t for t in input_tensors}.items()
                      if sid not in kv_ids)
    for t in input_tensors:
        if t.device.type != "meta":
            raise CaptureError(f"example input of shape {tuple(t.shape)} is on {t.device}, not 'meta'; "
                               "build inputs with device='meta' (nothing may allocate real memory)")
    for p in model.parameters():
        if p.device.type != "meta":
            raise CaptureError("the model has parameters on " + str(p.device) + ", not 'meta'; build it under "
                               "`with torch.device('meta'):` so no weights are allocated")

    tracker = Tracker(model)
    recorder = Recorder(state, tracker)
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
    except ValueError as e:
        if "more than 1 value per channel when training" in str(e):  # torch's batch-norm check
            raise BatchTooSmallError(f"model {name!r} cannot train at batch {batch_size}: batch norm needs more "
                                     "than one value per channel (use a batch of 2 or more)", batch_size + 1) from None
        raise CaptureError(f"model {name!r} failed to trace at batch {batch_size}: "
                           f"{type(e).__name__}: {_first_line(e)}") from None
    except Exception as e:  # the model's own code raised (TypeError, RuntimeError, ...)
        raise CaptureError(f"model {name!r} failed to trace at batch {batch_size}: "
                           f"{type(e).__name__}: {_first_line(e)}") from None

    ops, index_map = finalize(state, repeats)
    if task == "train":
        groups = _param_groups(prow)
        ops += optimizer_ops(optimizer, groups, loss_scaling=precision.loss_scaling)
    events = mem_events(state, repeats, grad_sids, index_map, len(ops))
    opt_name = optimizer.name + ("-8bit" if optimizer.state_bytes == 1.0 else "") + (
        f"/{optimizer.impl}" if task == "train" else "")
    trace = Trace(
        model=name, task=task, phase=phase, batch_size=batch_size, seq_len=seq_len, image_size=image_size,
        context=context, precision=precision.name, optimizer=opt_name if task == "train" else "none",
        sparsity="2:4" if sparsity else "none", samples=built.samples or batch_size,
        tokens=built.tokens, params=params, trainable_params=trainable,
        param_bytes=pbytes, buffer_bytes=bbytes, input_bytes=int(input_bytes), ops=ops,
        mem_events=events, repeats=repeats, shape=shape or ModelShape(), notes=list(built.notes),
        finetune=finetune if not adapted else f"{finetune} (rank {lora_rank}, {adapted} layers)",
        checkpointing=checkpointing,
    )
    trace.capture_seconds = time.perf_counter() - t0
    return trace


def _first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return msg[0][:300] if msg else type(e).__name__


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
