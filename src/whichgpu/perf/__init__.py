"""Performance model: per-op roofline with shape-dependent efficiency, overheads, communication.

Torch-free. Inputs: a `Trace` (workload), a `GpuSpec` (hardware), a `Plan` (how it runs).
"""

from whichgpu.perf.estimate import StepEstimate, estimate
from whichgpu.perf.plan import Plan

__all__ = ["Plan", "StepEstimate", "estimate"]
