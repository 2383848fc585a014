"""``path/to/file.py:factory`` models. This runs the user's code (like importing it would).

The factory is called under ``torch.device("meta")`` so modules it creates hold no memory. It
may accept any of the keyword arguments ``batch_size``, ``seq_len``, ``image_size``, ``task``
and returns one of:

* ``(model, inputs)`` or ``(model, inputs, loss_fn)`` where inputs is a tensor, a tuple of
  tensors (positional) or a dict (keyword), and ``loss_fn(output, inputs) -> scalar``;
* ``(model, shapes)`` where shapes is a list of shape tuples: float32 inputs of those shapes;
* a dict with keys ``model``, ``inputs`` (or ``input_shapes``), optionally ``loss_fn``.

Without a loss_fn, training uses ``output.loss`` if present, else the mean of the output.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from typing import Any

import torch
from torch import nn

from whichgpu.errors import CaptureError, InputError
from whichgpu.workload.zoo.base import BuildRequest, Built


def _load(path: str, fn: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"whichgpu_user_{abs(hash(path))}", path)
    if spec is None or spec.loader is None:
        raise CaptureError(f"cannot import {path!r} as a Python file")
    mod = importlib.util.module_from_spec(spec)
    try:
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    except Exception as e:
        raise CaptureError(f"importing {path} raised {type(e).__name__}: {_line(e)}") from None
    f = getattr(mod, fn, None)
    if f is None or not callable(f):
        names = sorted(n for n, v in vars(mod).items() if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == mod.__name__)
        raise CaptureError(f"{path} has no function {fn!r}; callables there: {', '.join(names) or 'none'}")
    return f


def _line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0][:300] if s else ""


def _to_meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x if x.device.type == "meta" else torch.empty_like(x, device="meta")
    if isinstance(x, dict):
        return {k: _to_meta(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_to_meta(v) for v in x)
    return x


def build_factory(ref: str, req: BuildRequest) -> Built:
    path, _, fn = ref.rpartition(":")
    f = _load(path, fn)
    wanted = {"batch_size": req.batch_size, "seq_len": req.seq_len, "image_size": req.image_size, "task": req.task}
    try:
        params = inspect.signature(f).parameters
        kwargs = {k: v for k, v in wanted.items() if k in params and v is not None}
    except (TypeError, ValueError):
        kwargs = {}
    try:
        with torch.device("meta"):
            res = f(**kwargs)
    except CaptureError:
        raise
    except Exception as e:
        raise CaptureError(f"factory {fn}() in {path} raised {type(e).__name__}: {_line(e)}") from None
    model, inputs, loss_fn = _unpack(res, f"{path}:{fn}")
    if any(p.device.type != "meta" for p in model.parameters()):
        model = model.to("meta")
    inputs = _to_meta(inputs)
    if req.task == "train" and not any(p.requires_grad for p in model.parameters()):
        raise InputError(f"{path}:{fn}: the model has no trainable parameters to train; its inference can be "
                         "estimated (task infer)", field="task")
    b = req.batch_size or 1
    return Built(model, inputs, loss_fn, {}, samples=b,
                 full_params=sum(p.numel() for p in model.parameters()),
                 notes=[f"user factory {fn}() from {path}"])


def _unpack(res: Any, where: str) -> tuple[nn.Module, Any, Any]:
    loss_fn = None
    if isinstance(res, dict):
        model = res.get("model")
        inputs = res.get("inputs", res.get("input_shapes"))
        loss_fn = res.get("loss_fn")
    elif isinstance(res, (tuple, list)) and len(res) in (2, 3):
        model, inputs = res[0], res[1]
        loss_fn = res[2] if len(res) == 3 else None
    else:
        raise CaptureError(f"{where} must return (model, inputs[, loss_fn]) or a dict with 'model' and 'inputs'; "
                           f"got {type(res).__name__}")
    if not isinstance(model, nn.Module):
        raise CaptureError(f"{where}: the first returned value must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(inputs, (list, tuple)) and inputs and all(
            isinstance(s, (tuple, list, torch.Size)) and all(isinstance(d, int) for d in s) for s in inputs):
        inputs = tuple(torch.empty(*s, device="meta") for s in inputs)
    elif isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if inputs is None:
        raise CaptureError(f"{where}: no example inputs returned (give tensors or input shapes)")
    if loss_fn is not None and not callable(loss_fn):
        raise CaptureError(f"{where}: loss_fn must be callable (output, inputs) -> scalar tensor")
    return model, inputs, loss_fn
