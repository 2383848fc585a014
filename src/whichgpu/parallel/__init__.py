"""How a workload is laid out over GPUs: the plan (data, tensor, pipeline, context and expert
degrees, sharding, schedule) and the collectives it costs over a system's links. Torch-free.

Today: the `Plan`, data-parallel collectives (DDP all-reduce; ZeRO/FSDP reduce-scatter and
all-gather, hybrid sharding) and tensor-parallel collectives of a traced rank. Pipeline
schedules and the layout search arrive with the planner.
"""

from whichgpu.parallel.plan import Plan

__all__ = ["Plan"]
