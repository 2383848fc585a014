"""The memory model's view of the plan: the one Plan (whichgpu/parallel/plan.py) and its defaults."""

from __future__ import annotations

from whichgpu.memory.allowances import CUDA_CONTEXT_BYTES, FRAGMENTATION_FRACTION
from whichgpu.parallel.plan import Plan

FINETUNES: tuple[str, ...] = ("full", "lora", "qlora")


def fragmentation(plan: Plan) -> float:
    """Allocator fragmentation as a fraction of the memory that churns in a step."""
    return FRAGMENTATION_FRACTION if plan.fragmentation is None else plan.fragmentation


def cuda_context_bytes(plan: Plan) -> float:
    """Per-process CUDA context outside PyTorch's allocator."""
    return CUDA_CONTEXT_BYTES if plan.cuda_context_bytes is None else plan.cuda_context_bytes
