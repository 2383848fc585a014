"""The entry point of workload capture: a WorkloadSpec in, a Trace out (cached on disk).

A cache hit imports no torch, so commands over cached traces start fast.

The batch of a ``file.py:factory`` model, unset, is the factory's own (the leading dimension of
its inputs, or its ``batch_size`` default): `resolve` learns it from the factory's trace (cached,
so a later run imports no torch), which is then also cached under the resolved batch.
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import replace
from typing import Any

from whichgpu.errors import CaptureError, InputError, WhichGPUError
from whichgpu.workload import cache
from whichgpu.workload.shape import ModelShape
from whichgpu.workload.spec import ModelSource, WorkloadSpec, cache_key, classify, read_config
from whichgpu.workload.trace import Trace


def _generating_default(spec: WorkloadSpec, causal_lm: bool, window: int | None) -> int | None:
    """The default prompt (or decode context) of a causal LM that generates (inference, phase full or
    decode): half the model's default window, leaving the other half for the generated tokens
    (a prompt that fills the window leaves no position to generate into). Else the window."""
    if window and causal_lm and spec.task == "infer" and spec.phase in ("full", "decode"):
        return max(1, window // 2)
    return window


def resolve(spec: WorkloadSpec) -> tuple[WorkloadSpec, ModelSource]:
    """Fill the model's defaults (batch, sizes, optimizer) and validate. Torch-free, except for a
    factory whose batch is unset and whose trace is not cached: it is captured to learn its batch."""
    spec.validate()
    src = classify(spec.model)
    if src.kind == "zoo":
        from whichgpu.workload.zoo import get_entry

        e = get_entry(src.ref)
        upd: dict[str, Any] = {}
        if spec.batch_size is None:
            upd["batch_size"] = e.default_batch(spec.precision)
        if e.input_kind == "tokens" and spec.seq_len is None:
            upd["seq_len"] = _generating_default(spec, e.causal_lm, e.default_seq_len)
        if e.input_kind == "image" and spec.image_size is None:
            upd["image_size"] = e.default_image_size
        if spec.optimizer is None:
            upd["optimizer"] = e.default_optimizer
        if spec.phase != "full" and not e.causal_lm:
            raise InputError(f"phase {spec.phase} applies to causal LMs; {e.title} is not one", field="phase")
        if e.input_kind == "image" and spec.seq_len is not None:
            raise InputError(f"{e.title} takes images, not tokens: give an image size, not a sequence length",
                             field="seq_len")
        if e.input_kind == "tokens" and spec.image_size is not None:
            raise InputError(f"{e.title} takes tokens, not images: give a sequence length, not an image size",
                             field="image_size")
        spec = replace(spec, **upd)
    else:
        upd = {}
        if spec.batch_size is None and src.kind == "config":
            upd["batch_size"] = 1  # (a factory's batch, unset, is its own: workload/factory.py)
        if spec.optimizer is None:
            upd["optimizer"] = "adamw"
        if src.kind == "config" and spec.seq_len is None:
            cfg = read_config(src.ref)
            if cfg.get("model_type") not in ("vit", "deit", "beit", "convnext", "resnet", "swin", "dinov2"):
                n = cfg.get("max_position_embeddings") or cfg.get("n_positions")
                window = min(n, 2048) if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 2048
                from whichgpu.workload.zoo.llm.args import SUPPORTED  # (the zoo: only when needed)

                upd["seq_len"] = _generating_default(spec, cfg.get("model_type") in SUPPORTED, window)
        spec = replace(spec, **upd)
    if spec.phase == "decode" and spec.context is None:
        spec = replace(spec, context=spec.seq_len)
    if spec.phase == "decode":
        spec = replace(spec, seq_len=None)
    if src.kind == "factory" and spec.batch_size is None:
        spec = replace(spec, batch_size=_factory_batch(spec, src))
    return spec, src


def _factory_batch(spec: WorkloadSpec, src: ModelSource) -> int:
    """The batch a factory builds when none is asked for: captured (or found in the cache) with
    the batch unset, and cached under the batch it has, where `get_trace` finds it next."""
    key = cache_key(src, spec)
    trace = cache.load(key)
    if trace is None:
        trace = _capture(spec, src)
        trace.key = key
        cache.store(key, trace)
    at = replace(spec, batch_size=trace.batch_size)
    at_key = cache_key(src, at)
    if not cache.has(at_key):
        cache.store(at_key, replace(trace, key=at_key))
    return trace.batch_size


def get_trace(spec: WorkloadSpec, use_cache: bool = True) -> Trace:
    spec, src = resolve(spec)
    key = cache_key(src, spec)
    if use_cache:
        hit = cache.load(key)
        if hit is not None:
            return hit
    trace = _capture(spec, src)
    trace.key = key
    if use_cache:
        cache.store(key, trace)
    return trace


def _channels_last(built: Any) -> None:
    """NHWC activations (torch.channels_last), as `--memory-format nhwc` in NVIDIA's ConvNets."""
    import torch

    built.model = built.model.to(memory_format=torch.channels_last)

    def conv(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dim() == 4 and x.is_floating_point():
            return x.contiguous(memory_format=torch.channels_last)
        if isinstance(x, dict):
            return {k: conv(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(conv(v) for v in x)
        return x

    built.inputs = conv(built.inputs)


def _capture(spec: WorkloadSpec, src: ModelSource) -> Trace:
    """Capture with Python's cyclic garbage collector paused (restored after): importing torch
    and tracing allocate hundreds of thousands of objects, and the collections they trigger cost
    a cold start about 0.6 s. Nothing in a capture depends on them: tensors are freed by
    reference counting, and traces are identical with the collector on or off (tested)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _capture_now(spec, src)
    finally:
        if was_enabled:
            gc.enable()


def _capture_now(spec: WorkloadSpec, src: ModelSource) -> Trace:
    try:
        import torch  # noqa: F401
    except ImportError:
        from whichgpu.errors import MissingExtraError

        raise MissingExtraError("tracing a model", "torch", "torch") from None
    from whichgpu.workload.nodynamo import preresolve_dynamo_shims
    from whichgpu.workload.zoo.base import BuildRequest

    req = BuildRequest(task=spec.task, batch_size=spec.batch_size or 1, seq_len=spec.seq_len,
                       image_size=spec.image_size, phase=spec.phase, context=spec.context,
                       options=spec.options)
    preresolve_dynamo_shims()
    _quiet_libraries()
    guard: Any = contextlib.nullcontext()
    if src.kind == "factory":  # the model's forward and loss are the user's code too
        from whichgpu.workload.factory import user_code

        guard = user_code(src.ref.rpartition(":")[0], f"the model of {src.title}, while tracing,",
                          "a model's forward must return its output")
    with guard:
        return _build_and_capture(spec, src, req)


def _build_and_capture(spec: WorkloadSpec, src: ModelSource, req: Any) -> Trace:
    from whichgpu.workload.capture import capture
    from whichgpu.workload.noinit import skip_init
    from whichgpu.workload.optim import resolve_optimizer
    from whichgpu.workload.precision import get_precision

    with skip_init():
        built, name, shape = _build(src, req, spec.batch_size)
    batch = spec.batch_size or 1
    if src.kind == "factory":
        batch = built.samples  # the inputs' leading dimension (factory.py)
    fmt = dict(spec.options).get("memory_format", "channels_first")
    if fmt not in ("channels_first", "channels_last"):
        raise CaptureError(f"memory format must be channels_first or channels_last, got {fmt!r}")
    if fmt == "channels_last":
        _channels_last(built)
    if spec.task == "infer" and not isinstance(built.inputs, (dict, tuple, list)):
        raise CaptureError("model inputs must be a dict or a tuple")
    opt = resolve_optimizer(spec.optimizer or "adamw", spec.optimizer_impl)
    return capture(built, name=name, task=spec.task, precision=get_precision(spec.precision, spec.task),
                   optimizer=opt, sparsity=spec.sparsity == "2:4", phase=spec.phase,
                   batch_size=batch, seq_len=spec.seq_len, image_size=spec.image_size,
                   context=spec.context, shape=shape, finetune=spec.finetune, lora_rank=spec.lora_rank,
                   checkpointing=spec.checkpointing, memory_format=fmt)


def _quiet_libraries() -> None:
    """transformers/diffusers log advice meant for real weights (dtype casts, init); the CLI owns
    the output, so their warnings are silenced during capture."""
    import logging
    import os

    # Read by the libraries when they configure their loggers (on import).
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
    for name in ("transformers", "diffusers", "huggingface_hub"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _build(src: ModelSource, req: Any, batch: int | None) -> tuple[Any, str, ModelShape]:
    """Build the model (on meta, initialisers skipped): (built, name, model shape). `batch` is the
    requested batch (None: a factory's own)."""
    if src.kind == "factory":
        from whichgpu.workload.factory import build_factory

        return build_factory(src.ref, req, batch), src.title, ModelShape()
    try:
        return _build_model(src, req)
    except (WhichGPUError, MemoryError):
        raise
    except Exception as e:  # a builder refusing sizes past what torch can hold (overflow), ...
        msg = (str(e).strip().splitlines() or [""])[0][:300]
        raise CaptureError(f"cannot build {src.title} at batch {req.batch_size}: {type(e).__name__}: {msg}") from None


def _build_model(src: ModelSource, req: Any) -> tuple[Any, str, ModelShape]:
    shape = ModelShape()
    if src.kind == "zoo":
        from whichgpu.workload.zoo import get_entry

        e = get_entry(src.ref)
        built = e.load_builder()(req)
        name = e.id
        if built.shape is not None:
            shape = built.shape
        elif e.config and e.family == "decoder":
            from whichgpu.workload.hf import model_shape
            from whichgpu.workload.zoo.llm.build import load_packaged_config

            shape = model_shape(load_packaged_config(e.config), e.config)
        if not shape.family:
            shape = replace(shape, family=e.family)
    elif src.kind == "config":
        from whichgpu.workload.hf import build_hf, model_shape

        cfg = read_config(src.ref)
        built = build_hf(cfg, req, src.ref)
        name = src.title
        shape = built.shape if built.shape is not None else model_shape(cfg, src.ref)
    return built, name, shape
