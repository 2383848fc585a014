"""Activation checkpointing applied to a built model before capture.

* ``full``: every block (element of a repeated layer stack) runs under
  ``torch.utils.checkpoint`` (non-reentrant): only its inputs are saved, its forward is
  recomputed in backward.
* ``selective``: blocks are checkpointed with an op-level policy: outputs of GEMMs and fused
  attention are saved, everything else (elementwise, norms, softmax) is recomputed — the
  "selective op" activation checkpointing of torchtitan. (Korthikanti et al.'s selective
  recomputation of the attention core corresponds to this with eager attention; with fused
  attention the score matrix is never stored anyway.)

Recomputed ops appear in the trace's backward phase with the tag "recompute".
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from whichgpu.errors import InputError

MODES = ("none", "selective", "full")
_SAVE = {
    torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
    torch.ops.aten.baddbmm.default, torch.ops.aten.convolution.default,
}


def _policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    if op in _SAVE or str(op).startswith("whichgpu.attention"):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


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


def apply_checkpointing(model: nn.Module, mode: str, repeats: dict[str, int], in_backward: Any,
                        on_recompute: Any, recompute_ctx: Any = contextlib.nullcontext) -> int:
    """Wrap block forwards in torch.utils.checkpoint. A block forward running while
    `in_backward()` is a recomputation; `on_recompute(flag)` is told when one starts and ends
    (the capture engine tags those ops), and `recompute_ctx()` is entered around it (the capture
    engine re-activates its precision policy, which the recomputation would otherwise run
    without). Returns the number of blocks wrapped."""
    if mode not in MODES:
        raise InputError(f"--checkpointing must be one of {', '.join(MODES)}; got {mode!r}")
    if mode == "none":
        return 0
    chosen = blocks(model, repeats)
    if not chosen:
        raise InputError("no repeated blocks found to checkpoint in this model")
    ctx_fn = functools.partial(create_selective_checkpoint_contexts, _policy) if mode == "selective" else None
    for _name, mod in chosen:
        orig = mod.forward

        def run(*args: Any, _orig: Any = orig, **kwargs: Any) -> Any:
            recomputing = bool(in_backward())
            if not recomputing:
                return _orig(*args, **kwargs)
            on_recompute(True)
            try:
                with recompute_ctx():
                    return _orig(*args, **kwargs)
            finally:
                on_recompute(False)

        def fwd(*args: Any, _run: Any = run, **kwargs: Any) -> Any:
            if not torch.is_grad_enabled():
                return _run(*args, **kwargs)
            if ctx_fn is not None:
                return checkpoint(_run, *args, use_reentrant=False, context_fn=ctx_fn, **kwargs)
            return checkpoint(_run, *args, use_reentrant=False, **kwargs)

        mod.forward = fwd
    return len(chosen)
