"""Our activation checkpointing (workload/checkpointing.py) against PyTorch's own.

The capture re-implements non-reentrant ``torch.utils.checkpoint`` and its selective contexts on
the public saved-tensor hooks, because PyTorch's reads ``torch._dynamo.config`` on every call and
importing dynamo costs a cold start 1-1.5 s. These tests swap PyTorch's in and require the same
trace: the same ops in the same order (recomputed ops, early stop, ops skipped by selective
saving) and the same storages allocated and freed after each op.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections import Counter
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from whichgpu.workload import checkpointing  # noqa: E402
from whichgpu.workload.api import get_trace  # noqa: E402
from whichgpu.workload.spec import WorkloadSpec  # noqa: E402


def _torch_checkpoint(fn: Any, *args: Any, selective: bool = False, on_recompute: Any = None,
                      recompute_ctx: Any = contextlib.nullcontext, **kwargs: Any) -> Any:
    """The same contract as checkpointing.checkpoint, built on torch.utils.checkpoint."""
    from torch.utils.checkpoint import (
        CheckpointPolicy,
        checkpoint,
        create_selective_checkpoint_contexts,
    )

    calls = [0]

    def run(*a: Any, **k: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:  # the forward; later calls are the recomputation
            return fn(*a, **k)
        on_recompute(True)
        try:
            with recompute_ctx():
                return fn(*a, **k)
        finally:
            on_recompute(False)

    def policy(ctx: Any, op: Any, *a: Any, **k: Any) -> Any:
        return CheckpointPolicy.MUST_SAVE if checkpointing._must_save(op) else CheckpointPolicy.PREFER_RECOMPUTE

    if selective:
        ctx_fn = functools.partial(create_selective_checkpoint_contexts, policy)
        return checkpoint(run, *args, use_reentrant=False, context_fn=ctx_fn, **kwargs)
    return checkpoint(run, *args, use_reentrant=False, **kwargs)


def _fingerprint(spec: WorkloadSpec) -> tuple[list[Any], Counter[Any]]:
    d = json.loads(get_trace(spec, use_cache=False).to_json())
    st = d["strings"]
    ops = [[st[r[0]], st[r[2]], st[r[3]], [st[t] for t in r[15]], *r[5:10]] for r in d["ops"]]
    events = Counter((e[0], e[1], e[2], st[e[3]], st[e[4]]) for e in d["mem_events"])
    return ops, events


@pytest.mark.parametrize("kw", [
    dict(model="gpt2", batch_size=2, seq_len=64, checkpointing="full"),
    dict(model="gpt2", batch_size=2, seq_len=64, checkpointing="selective", precision="amp-fp16"),
    dict(model="llama-3-8b", batch_size=1, seq_len=64, checkpointing="full", finetune="lora"),
    dict(model="llama-3-8b", batch_size=1, seq_len=64, checkpointing="selective", finetune="qlora"),
    dict(model="resnet50", batch_size=2, image_size=64, checkpointing="selective", precision="fp32"),
], ids=["gpt2-full", "gpt2-selective-fp16", "llama-lora-full", "llama-qlora-selective", "resnet-selective"])
def test_same_trace_as_torch_utils_checkpoint(kw: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    spec = WorkloadSpec(**kw)
    ours = _fingerprint(spec)
    assert any("recompute" in o[3] for o in ours[0])
    # PyTorch's checkpoint imports dynamo on its first call: done before its capture, since an
    # import that big inside a capture (collector paused) can leave a reference cycle holding a
    # block input past its last use.
    import torch._dynamo  # noqa: F401

    monkeypatch.setattr(checkpointing, "checkpoint", _torch_checkpoint)
    theirs = _fingerprint(spec)
    assert len(ours[0]) == len(theirs[0])
    for i, (a, b) in enumerate(zip(ours[0], theirs[0])):
        assert a == b, f"op {i}: ours {a} vs torch.utils.checkpoint {b}"
    assert ours[1] == theirs[1]


def test_a_saved_tensor_used_twice_is_an_error() -> None:
    """Like PyTorch's, a regenerated tensor is released after its first use: a second backward
    through a checkpointed region is refused with a clear error, not silently recomputed."""
    from whichgpu.errors import CaptureError

    lin = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4, requires_grad=True)
    y = checkpointing.checkpoint(lambda t: torch.relu(lin(t)) * 2, x).sum()
    y.backward(retain_graph=True)
    with pytest.raises(CaptureError, match="used twice"):
        y.backward()


def test_recomputation_is_announced_and_gradients_match() -> None:
    """On real (CPU) tensors the checkpointed block gives the same gradients as the plain one,
    and on_recompute brackets the recomputation."""
    torch.manual_seed(0)
    lin1, lin2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

    def block(t: Any) -> Any:
        return lin2(torch.nn.functional.gelu(lin1(t))) + t

    x = torch.randn(3, 8, requires_grad=True)
    block(x).pow(2).sum().backward()
    ref = [p.grad.clone() for p in (x, lin1.weight, lin2.weight)]
    for p in (x, lin1.weight, lin2.weight):
        p.grad = None
    flags: list[bool] = []
    for selective in (False, True):
        checkpointing.checkpoint(block, x, selective=selective, on_recompute=flags.append).pow(2).sum().backward()
        got = [p.grad.clone() for p in (x, lin1.weight, lin2.weight)]
        for a, b in zip(ref, got):
            torch.testing.assert_close(a, b)
        for p in (x, lin1.weight, lin2.weight):
            p.grad = None
    assert flags == [True, False, True, False]
