"""``path/to/file.py:factory`` models. This runs the user's code (like importing it would).

The factory is called under ``torch.device("meta")`` so modules it creates hold no memory. It
may accept any of the keyword arguments ``batch_size``, ``seq_len``, ``image_size``, ``task``
and returns one of:

* ``(model, inputs)`` or ``(model, inputs, loss_fn)`` where inputs is a tensor, a tuple of
  tensors (positional) or a dict (keyword), and ``loss_fn(output, inputs) -> scalar``;
* ``(model, shapes)`` where shapes is a list of shape tuples: float32 inputs of those shapes;
* a dict with keys ``model``, ``inputs`` (or ``input_shapes``), optionally ``loss_fn``.

Without a loss_fn, training uses ``output.loss`` if present, else the mean of the output.

The batch: a factory with a ``batch_size`` parameter is called with the requested batch (its
default, else 1, when none is requested) and its inputs must have it as their leading dimension;
a factory without one builds a fixed batch, the leading dimension of its first input, and a
different requested batch is refused (`FixedBatchError`). A ``seq_len`` or ``image_size`` the
factory does not take is refused too: it could not be applied.

The user's code (the import, the call, and the traced forward and backward: `user_code`) runs
with its directory on ``sys.path``, its stdout sent to stderr (the CLI's stdout may be JSON),
under a time limit (``$WHICHGPU_CAPTURE_TIMEOUT`` seconds), and ``sys.exit``, ``os._exit`` and
``KeyboardInterrupt`` inside it become a one-line `CaptureError`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from whichgpu.errors import CaptureError, InputError, WhichGPUError
from whichgpu.workload.spec import FixedBatchError
from whichgpu.workload.zoo.base import BuildRequest, Built

TIMEOUT_ENV = "WHICHGPU_CAPTURE_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0
SIZES = ("seq_len", "image_size")
_WORDS = {"seq_len": "a sequence length", "image_size": "an image size"}


# ---- running the user's code -------------------------------------------------------------------

class _Exited(BaseException):
    """Raised in place of os._exit(code) inside the user's code."""

    def __init__(self, code: Any) -> None:
        super().__init__(code)
        self.code = code


class _TimedOut(BaseException):
    """Raised by the SIGALRM handler when the user's code runs past the time limit."""


def capture_timeout() -> float:
    """Seconds the user's code may run ($WHICHGPU_CAPTURE_TIMEOUT; 0: no limit)."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v < 0:
        raise InputError(f"${TIMEOUT_ENV} must be a number of seconds >= 0 (0: no limit), got {raw!r}")
    return v


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Python prints and writes to file descriptor 1 (C code, subprocesses) go to stderr."""
    saved: int | None = None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stdout.flush()
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                sys.stderr.flush()
            os.dup2(saved, 1)
            os.close(saved)


@contextlib.contextmanager
def _on_path(directory: str) -> Iterator[None]:
    """`directory` first on sys.path (the factory's own imports of modules beside it). When this
    put it there, the modules imported from it are forgotten after, so that an edited one is
    imported afresh by the next capture in this process."""
    if directory in sys.path:  # (an enclosing capture put it there, or the user did)
        yield
        return
    before = set(sys.modules)
    sys.path.insert(0, directory)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(directory)
        for name in set(sys.modules) - before:
            f = getattr(sys.modules.get(name), "__file__", None)
            if (isinstance(f, str) and not name.startswith("whichgpu")
                    and os.path.abspath(f).startswith(directory + os.sep)):
                sys.modules.pop(name, None)


@contextlib.contextmanager
def _no_os_exit() -> Iterator[None]:
    real = os._exit

    def fake(code: int) -> NoReturn:
        raise _Exited(code)

    os._exit = fake  # type: ignore[assignment]
    try:
        yield
    finally:
        os._exit = real


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise _TimedOut after `seconds` (SIGALRM; only on the main thread of a POSIX process)."""
    usable = (seconds > 0 and hasattr(signal, "SIGALRM") and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise _TimedOut()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    outer = signal.setitimer(signal.ITIMER_REAL, seconds)  # an enclosing limit is put back after
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer[0] > 0:
            signal.setitimer(signal.ITIMER_REAL, max(outer[0] - (time.monotonic() - start), 1e-3), outer[1])


@contextlib.contextmanager
def user_code(path: str, what: str, hint: str = "a factory must return (model, inputs)") -> Iterator[None]:
    """Run the user's code from `path` (`what` names it in messages: "factory make() in m.py")
    with its directory on sys.path, stdout sent to stderr, a time limit, and its exits and
    interrupts turned into CaptureError (`hint`: what it should do instead of exiting)."""
    limit = capture_timeout()
    try:
        with _stdout_to_stderr(), _on_path(str(Path(path).resolve().parent)), _no_os_exit(), _time_limit(limit):
            yield
    except _TimedOut:
        raise CaptureError(f"{what} did not finish within {limit:g} s; set ${TIMEOUT_ENV} to allow more "
                           "(seconds, 0: no limit)") from None
    except _Exited as e:
        raise CaptureError(f"{what} called os._exit({e.code!r}); {hint}") from None
    except SystemExit as e:
        raise CaptureError(f"{what} called sys.exit({e.code!r}); {hint}") from None
    except KeyboardInterrupt:
        raise CaptureError(f"{what} was interrupted (KeyboardInterrupt)") from None


def _where(path: str) -> str:
    return Path(path).name


# ---- loading and calling the factory -----------------------------------------------------------

def _load(path: str, fn: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"whichgpu_user_{abs(hash(path))}", path)
    if spec is None or spec.loader is None:
        raise CaptureError(f"cannot import {path!r} as a Python file")
    mod = importlib.util.module_from_spec(spec)
    try:
        with user_code(path, f"importing {_where(path)}", "put script code under if __name__ == '__main__':"):
            sys.modules[spec.name] = mod
            spec.loader.exec_module(mod)
    except WhichGPUError:
        sys.modules.pop(spec.name, None)
        raise
    except Exception as e:
        sys.modules.pop(spec.name, None)
        raise CaptureError(f"importing {_where(path)} raised {type(e).__name__}: {_line(e)}") from None
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


def _params(f: Any) -> dict[str, inspect.Parameter]:
    """The named parameters of `f` (not *args/**kwargs): the sizes it can be called with."""
    try:
        ps = inspect.signature(f).parameters
    except (TypeError, ValueError):
        return {}
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {k: p for k, p in ps.items() if p.kind in named}


def build_factory(ref: str, req: BuildRequest, batch: int | None = None) -> Built:
    """Build the factory's model and inputs; `batch` is the requested batch (None: the factory's
    own; `req.batch_size` is then ignored)."""
    path, _, fn = ref.rpartition(":")
    what = f"factory {fn}() in {_where(path)}"
    f = _load(path, fn)
    params = _params(f)
    for name in SIZES:
        if getattr(req, name) is not None and name not in params:
            raise InputError(f"{what} takes no {name} argument, so {_WORDS[name]} cannot be applied; leave it "
                             f"unset or give {fn}() a {name} parameter", field=name)
    kwargs: dict[str, Any] = {k: getattr(req, k) for k in (*SIZES, "task") if k in params and getattr(req, k) is not None}
    takes_batch = "batch_size" in params
    if takes_batch:
        own = params["batch_size"].default
        if batch is not None:
            kwargs["batch_size"] = batch
        elif own is inspect.Parameter.empty or isinstance(own, bool) or not isinstance(own, int) or own <= 0:
            kwargs["batch_size"] = 1
    try:
        with user_code(path, what), torch.device("meta"):
            res = f(**kwargs)
    except WhichGPUError:
        raise
    except Exception as e:
        raise CaptureError(f"{what} raised {type(e).__name__}: {_line(e)}") from None
    model, inputs, loss_fn = _unpack(res, f"{_where(path)}:{fn}")
    if any(p.device.type != "meta" for p in model.parameters()):
        model = model.to("meta")
    inputs = _to_meta(inputs)
    n = _batch_of(inputs, what)
    if takes_batch:
        want = kwargs.get("batch_size", params["batch_size"].default)
        if not _has_batch(inputs, want):
            raise CaptureError(f"{what} was called with batch_size={want} but no input has {want} as its leading "
                               f"dimension (inputs {_shapes(inputs)}); build the inputs with batch_size")
        n = want
    elif batch is not None and batch != n:
        raise FixedBatchError(f"{what} builds batch {n} (the leading dimension of its inputs) and takes no "
                              f"batch_size argument, so batch {batch} cannot be applied; leave the batch size "
                              f"unset or give {fn}() a batch_size parameter and build the inputs with it", n)
    if req.task == "train" and not any(p.requires_grad for p in model.parameters()):
        raise InputError(f"{_where(path)}:{fn}: the model has no trainable parameters to train; its inference can be "
                         "estimated (task infer)", field="task")
    notes = [f"user factory {fn}() from {path}"]
    if not takes_batch:
        notes.append(f"batch {n} fixed by the factory (the leading dimension of its inputs; {fn}() takes no "
                     "batch_size argument)")
    return Built(model, inputs, loss_fn, {}, samples=n,
                 full_params=sum(p.numel() for p in model.parameters()), notes=notes)


def _tensors(inputs: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor)]


def _shapes(inputs: Any) -> str:
    return ", ".join(str(tuple(t.shape)) for t in _tensors(inputs)[:4]) or "none"


def _batch_of(inputs: Any, what: str) -> int:
    """The batch of the inputs: the leading dimension of the first input with one (1: none has)."""
    ts = _tensors(inputs)
    for t in ts:
        if 0 in t.shape:
            raise CaptureError(f"{what} returned an input of shape {tuple(t.shape)}, with a zero dimension; "
                               "the batch and every size must be >= 1")
    return next((int(t.shape[0]) for t in ts if t.dim() >= 1), 1)


def _has_batch(inputs: Any, batch: int) -> bool:
    """Some input has `batch` as its leading dimension (or second: sequence-first inputs)."""
    ts = [t for t in _tensors(inputs) if t.dim() >= 1]
    return not ts or any(t.shape[0] == batch or (t.dim() >= 2 and t.shape[1] == batch) for t in ts)


def _shape_tensor(s: Any, where: str) -> torch.Tensor:
    dims = tuple(s)
    if any(d < 1 for d in dims):
        raise CaptureError(f"{where}: input shape {dims} has a dimension < 1; every size (the batch first) must "
                           "be >= 1")
    try:
        return torch.empty(*dims, device="meta")
    except (RuntimeError, ValueError, OverflowError) as e:
        raise CaptureError(f"{where}: input shape {dims} is too large ({_line(e)})") from None


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
            isinstance(s, (tuple, list, torch.Size)) and all(isinstance(d, int) and not isinstance(d, bool) for d in s)
            for s in inputs):
        inputs = tuple(_shape_tensor(s, where) for s in inputs)
    elif isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if inputs is None:
        raise CaptureError(f"{where}: no example inputs returned (give tensors or input shapes)")
    if loss_fn is not None and not callable(loss_fn):
        raise CaptureError(f"{where}: loss_fn must be callable (output, inputs) -> scalar tensor")
    return model, inputs, loss_fn
