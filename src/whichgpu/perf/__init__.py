"""Performance model: per-op roofline with shape-dependent efficiency, overheads, communication.

Torch-free. Inputs: a `Trace` (workload), a `GpuSpec` (hardware), a `Plan` (how it runs).
"""

from whichgpu.parallel.plan import Plan
from whichgpu.perf.estimate import StepEstimate, estimate

__all__ = ["Plan", "StepEstimate", "estimate"]
