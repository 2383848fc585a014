"""Serving under load: KV-cache capacity as the engine sizes it, request workloads, and a
continuous-batching scheduler simulated step by step (vLLM v1's). Torch-free.

The step time of each engine step comes from the caller (`StepTime`); the performance model
provides it for real GPUs, `AffineStepTime` is an analytic stand-in.
"""

from whichgpu.serving.batch import AffineStepTime, DecodeRunStepTime, StepBatch, StepTime
from whichgpu.serving.kv import (
    BlockGroups,
    KvCapacity,
    KvLayout,
    default_non_torch_bytes,
    kv_cache_capacity,
    kv_layout,
    kv_tokens_sglang,
    vllm_batch_defaults,
)
from whichgpu.serving.results import LatencyStats, RequestTimes, ServingResult
from whichgpu.serving.scheduler import SchedulerConfig, simulate
from whichgpu.serving.workload import (
    ClosedLoop,
    Poisson,
    RequestLengths,
    Workload,
    fixed_lengths,
    read_lengths,
    sample_lengths,
)

__all__ = [
    "AffineStepTime",
    "BlockGroups",
    "ClosedLoop",
    "DecodeRunStepTime",
    "KvCapacity",
    "KvLayout",
    "LatencyStats",
    "Poisson",
    "RequestLengths",
    "RequestTimes",
    "SchedulerConfig",
    "ServingResult",
    "StepBatch",
    "StepTime",
    "Workload",
    "default_non_torch_bytes",
    "fixed_lengths",
    "kv_cache_capacity",
    "kv_layout",
    "kv_tokens_sglang",
    "read_lengths",
    "sample_lengths",
    "simulate",
    "vllm_batch_defaults",
]
