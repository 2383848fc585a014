"""Will it fit: peak memory per GPU from the trace's tensor lifetimes plus model states, the
largest batch that fits, and what to change when it does not. Torch-free."""

from whichgpu.memory.estimate import MemoryEstimate, capacity_bytes, memory_estimate
from whichgpu.memory.lifetime import Timeline, simulate
from whichgpu.memory.lines import MemoryLine
from whichgpu.memory.plan import FINETUNES
from whichgpu.parallel.plan import SHARDINGS, Plan

__all__ = ["FINETUNES", "SHARDINGS", "MemoryEstimate", "MemoryLine", "Plan", "Timeline", "capacity_bytes",
           "memory_estimate", "simulate"]
