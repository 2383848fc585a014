"""Activation checkpointing applied to a built model before capture.

* ``full``: every block (element of a repeated layer stack) is checkpointed: only its inputs are
  kept, its forward is recomputed in backward.
* ``selective``: blocks are checkpointed with an op-level policy: outputs of GEMMs and fused
  attention are saved, everything else (elementwise, norms, softmax) is recomputed — the
  "selective op" activation checkpointing of torchtitan. (Korthikanti et al.'s selective
  recomputation of the attention core corresponds to this with eager attention; with fused
  attention the score matrix is never stored anyway.)

Recomputed ops appear in the trace's backward phase with the tag "recompute".

The mechanism is that of ``torch.utils.checkpoint(use_reentrant=False)`` with its default early
stop, and of its selective-checkpoint contexts, re-implemented here on the public
saved-tensor hooks: PyTorch's own reads ``torch._dynamo.config`` on every call, and importing
dynamo costs a cold capture 1-1.5 s. The semantics a trace depends on are the same and a test
holds them equal op for op: what a block keeps from forward to backward (its inputs; for
selective also the saved op outputs), that each saved tensor is regenerated at the first unpack
in backward by re-running the block until the last saved tensor is produced (the ops after it
are not re-run), and that a regenerated tensor is released once its backward node has used it.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import defaultdict
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from whichgpu.errors import CaptureError, InputError

MODES = ("none", "selective", "full")
_SAVE = {
    torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
    torch.ops.aten.baddbmm.default, torch.ops.aten.convolution.default,
}
# Ops the selective policy neither caches nor counts (the mechanism adds detaches of its own).
_IGNORED = {torch.ops.aten.detach.default, torch.ops.prim.device.default}
_RECOMPUTE = object()


def _must_save(op: Any) -> bool:
    return op in _SAVE or str(op).startswith("whichgpu.attention")


def blocks(model: nn.Module, repeats: dict[str, int]) -> list[tuple[str, nn.Module]]:
    """The modules to checkpoint: elements of the repeated layer stacks (or, for models without
    declared repeats, of the shallowest containers holding >= 2 modules of one type)."""
    if repeats:
        stacks = {k.rsplit(".", 1)[0] for k in repeats}
    else:
        stacks = set()
        for name, mod in model.named_modules():
            kids = list(mod.children())
            if isinstance(mod, (nn.ModuleList, nn.Sequential)) and len(kids) >= 2 and len({type(k) for k in kids}) == 1:
                stacks.add(name)
        # keep the shallowest: drop stacks nested inside another chosen stack's elements
        stacks = {s for s in stacks if not any(s != t and s.startswith(t + ".") for t in stacks)}
    out: list[tuple[str, nn.Module]] = []
    for s in sorted(stacks):
        parent = model.get_submodule(s) if s else model
        out.extend((f"{s}.{n}" if s else n, m) for n, m in parent.named_children())
    return out


class _Stop(Exception):
    """Raised inside a recomputation once the last saved tensor has been regenerated."""


class _Holder:
    """What autograd stores for one tensor saved inside a checkpointed block. `value` is set
    when the recomputation regenerates it and cleared when backward unpacks it."""

    __slots__ = ("__weakref__", "value")

    def __init__(self) -> None:
        self.value: torch.Tensor | None = None


def _detach(x: Any) -> Any:
    return x.detach() if isinstance(x, torch.Tensor) else x


class _OutputStore(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Selective checkpointing's two modes share a store of op outputs, keyed by op and call
    number within the block."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # no disable-dynamo shim around __torch_dispatch__ (see nodynamo.py)

    def __init__(self, store: dict[Any, dict[int, Any]]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.store = store
        self.counter: dict[Any, int] = defaultdict(int)

    def _call_number(self, func: Any) -> int:
        idx = self.counter[func]
        self.counter[func] += 1
        return idx


class _SaveOutputs(_OutputStore):  # type: ignore[no-untyped-call]
    """Selective checkpointing, forward: keep the outputs of the ops the policy saves."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func not in _IGNORED:
            self.store[func][self._call_number(func)] = tree_map(_detach, out) if _must_save(func) else _RECOMPUTE
        return out


class _ReuseOutputs(_OutputStore):  # type: ignore[no-untyped-call]
    """Selective checkpointing, recomputation: saved ops return their kept outputs instead of
    running again; the rest run."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if func in _IGNORED:
            return func(*args, **(kwargs or {}))
        idx = self._call_number(func)
        entry = self.store.get(func, {}).pop(idx, None)
        if entry is None:
            raise CaptureError(f"checkpointed block recomputed {func} (call {idx}) that its forward did not run")
        if entry is _RECOMPUTE:
            return func(*args, **(kwargs or {}))
        return entry


class _Frame:
    """One checkpointed call of a block: its inputs, and a weak reference to the holder of each
    tensor autograd saved while it ran."""

    def __init__(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], selective: bool,
                 on_recompute: Any, recompute_ctx: Any) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.holders: list[weakref.ref[_Holder]] = []
        self.recomputed = False
        self.store: dict[Any, dict[int, Any]] | None = defaultdict(dict) if selective else None
        self.on_recompute = on_recompute
        self.recompute_ctx = recompute_ctx

    def pack(self, x: torch.Tensor) -> _Holder:
        h = _Holder()
        self.holders.append(weakref.ref(h))
        return h

    def unpack(self, h: _Holder) -> torch.Tensor:
        if not self.recomputed:
            self.recompute()
        x = h.value
        if x is None:
            raise CaptureError("a checkpointed block's saved tensor was used twice in backward")
        h.value = None
        return x

    def recompute(self) -> None:
        n = 0

        def pack(x: torch.Tensor) -> torch.Tensor:
            nonlocal n
            x = x.detach() if x.requires_grad else x
            if n >= len(self.holders):
                raise CaptureError("a checkpointed block saved more tensors when recomputed than in its forward")
            h = self.holders[n]()
            n += 1
            if h is not None:
                h.value = x
            if n == len(self.holders):
                raise _Stop
            return x

        reuse = _ReuseOutputs(self.store) if self.store is not None else contextlib.nullcontext()
        self.on_recompute(True)
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x), torch.enable_grad(), \
                    self.recompute_ctx(), reuse:
                self.fn(*self.args, **self.kwargs)
        except _Stop:
            pass
        finally:
            self.on_recompute(False)
        self.recomputed = True
        if n != len(self.holders):
            raise CaptureError(f"a checkpointed block saved {len(self.holders)} tensors in its forward "
                               f"but {n} when recomputed")


def checkpoint(fn: Any, *args: Any, selective: bool = False, on_recompute: Any = lambda flag: None,
               recompute_ctx: Any = contextlib.nullcontext, **kwargs: Any) -> Any:
    """Run `fn(*args, **kwargs)` checkpointed (see the module docstring)."""
    frame = _Frame(fn, args, kwargs, selective, on_recompute, recompute_ctx)
    save = _SaveOutputs(frame.store) if frame.store is not None else contextlib.nullcontext()
    with torch.autograd.graph.saved_tensors_hooks(frame.pack, frame.unpack), save:
        return fn(*args, **kwargs)


def apply_checkpointing(model: nn.Module, mode: str, repeats: dict[str, int], on_recompute: Any,
                        recompute_ctx: Any = contextlib.nullcontext) -> int:
    """Checkpoint the forward of each block. `on_recompute(flag)` is told when a recomputation
    starts and ends (the capture engine tags those ops), and `recompute_ctx()` is entered around
    it (the capture engine re-activates its precision policy, which the recomputation would
    otherwise run without). Returns the number of blocks wrapped."""
    if mode not in MODES:
        raise InputError(f"checkpointing must be one of {', '.join(MODES)}; got {mode!r}", field="checkpointing")
    if mode == "none":
        return 0
    chosen = blocks(model, repeats)
    if not chosen:
        raise InputError("no repeated blocks found to checkpoint in this model", field="checkpointing")
    selective = mode == "selective"
    for _name, mod in chosen:
        def fwd(*args: Any, _orig: Any = mod.forward, **kwargs: Any) -> Any:
            if not torch.is_grad_enabled():
                return _orig(*args, **kwargs)
            return checkpoint(_orig, *args, selective=selective, on_recompute=on_recompute,
                              recompute_ctx=recompute_ctx, **kwargs)

        mod.forward = fwd
    return len(chosen)
