"""Serving under load: KV-cache capacity as the engine sizes it, request workloads, and a
continuous-batching scheduler simulated step by step (vLLM v1's). Torch-free.

The step time of each engine step comes from the caller (`StepTime`); the performance model
provides it for real GPUs, `AffineStepTime` is an analytic stand-in. Speculative decoding
(`SpecDecode`) and pipeline-parallel serving (`simulate_pipeline`, `model.Setup.pp`) build on the
same scheduler.
"""

from whichgpu.serving.batch import (
    AffineStepTime,
    DecodeRunStepTime,
    SpecRunStepTime,
    StepBatch,
    StepTime,
)
from whichgpu.serving.kv import (
    BlockGroups,
    KvCapacity,
    KvLayout,
    batch_defaults,
    default_non_torch_bytes,
    kv_cache_capacity,
    kv_layout,
    kv_tokens_sglang,
    vllm_batch_defaults,
)
from whichgpu.serving.pipeline import PipelineStepTime, simulate_pipeline, stage_layers
from whichgpu.serving.results import LatencyStats, RequestTimes, ServingResult
from whichgpu.serving.scheduler import SchedulerConfig, simulate
from whichgpu.serving.spec import SpecDecode, expected_tokens
from whichgpu.serving.workload import (
    Arrivals,
    ClosedLoop,
    Poisson,
    RequestLengths,
    Workload,
    fixed_lengths,
    read_lengths,
    sample_lengths,
    spread_lengths,
)

__all__ = [
    "AffineStepTime",
    "Arrivals",
    "BlockGroups",
    "ClosedLoop",
    "DecodeRunStepTime",
    "KvCapacity",
    "KvLayout",
    "LatencyStats",
    "PipelineStepTime",
    "Poisson",
    "RequestLengths",
    "RequestTimes",
    "SchedulerConfig",
    "ServingResult",
    "SpecDecode",
    "SpecRunStepTime",
    "StepBatch",
    "StepTime",
    "Workload",
    "batch_defaults",
    "default_non_torch_bytes",
    "expected_tokens",
    "fixed_lengths",
    "kv_cache_capacity",
    "kv_layout",
    "kv_tokens_sglang",
    "read_lengths",
    "sample_lengths",
    "simulate",
    "simulate_pipeline",
    "spread_lengths",
    "stage_layers",
    "vllm_batch_defaults",
]
