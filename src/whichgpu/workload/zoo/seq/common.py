"""Helpers shared by the sequence-model builders: request checks and repeated-block bookkeeping."""

from __future__ import annotations

from whichgpu.errors import InputError, require_positive
from whichgpu.workload.zoo.base import BuildRequest

TASKS = ("train", "infer")


def check_request(req: BuildRequest, model: str) -> None:
    """Reject requests no builder can honour (bad task, non-positive batch or length)."""
    if req.task not in TASKS:
        raise InputError(f"{model}: task must be one of {', '.join(TASKS)}, got {req.task!r}")
    require_positive(f"{model}: batch size", req.batch_size)
    require_positive(f"{model}: sequence length", req.seq_len)


def built_layers(n_layer: int, truncate: bool) -> int:
    """How many copies of a repeated block to build: 2 when truncating (see `Built.repeats`)."""
    return min(n_layer, 2) if truncate else n_layer


def layer_repeats(prefix: str, n_layer: int, n_built: int) -> dict[str, int]:
    """`Built.repeats` for a stack `prefix.0 .. prefix.{n_built-1}` standing for `n_layer` blocks."""
    extra = n_layer - n_built
    return {f"{prefix}.{n_built - 1}": extra} if extra > 0 else {}
