"""Peak memory per GPU of one step: a breakdown where every line says how it was obtained.

    training:  weights + master weights + optimizer states + gathered shards + inputs
               + max(forward/backward: activations(t) + gradients(t),       [lifetime simulation]
                     optimizer step: all gradients + optimizer temporaries)
               + communication buffers + workspace + CUDA context + fragmentation
    inference: weights + KV cache + inputs + activation peak + workspace + context + fragmentation

The lines are evaluated at the peak moment, so they add up to the total.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from whichgpu.hardware.engine import DEFAULT_ENGINE
from whichgpu.hardware.spec import GpuSpec
from whichgpu.hardware.system import System, default_system
from whichgpu.memory.allowances import workspace
from whichgpu.memory.inference import inference
from whichgpu.memory.lines import ZERO, MemoryLine, gb, precision_of
from whichgpu.memory.plan import cuda_context_bytes, fragmentation
from whichgpu.memory.training import training
from whichgpu.parallel.plan import Plan
from whichgpu.perf.bands import Band, load_bands, workload_family
from whichgpu.units import GB
from whichgpu.workload.trace import Trace

LINE_TITLES: dict[str, str] = {
    "weights": "weights", "gradients": "gradients", "master_weights": "master weights",
    "optimizer_states": "optimizer states", "optimizer_temporaries": "optimizer step temporaries",
    "activations": "activations", "gathered_params": "gathered parameters", "kv_cache": "KV cache",
    "inputs": "inputs", "comm_buffers": "communication buffers", "workspace": "workspace",
    "cuda_context": "CUDA context", "fragmentation": "allocator fragmentation",
}


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-GPU peak memory of one step and where it goes."""

    trace: Trace = field(repr=False, compare=False)  # the step estimated: model, task, sizes, precision
    gpu_id: str
    gpu_name: str
    plan: Plan
    weights: MemoryLine
    gradients: MemoryLine
    master_weights: MemoryLine
    optimizer_states: MemoryLine
    optimizer_temporaries: MemoryLine
    activations: MemoryLine
    gathered_params: MemoryLine
    kv_cache: MemoryLine
    inputs: MemoryLine
    comm_buffers: MemoryLine
    workspace: MemoryLine
    cuda_context: MemoryLine
    fragmentation: MemoryLine
    total_bytes: float
    capacity_bytes: float
    peak_phase: str  # "forward" | "backward" | "optimizer step" (training) or the inference phase
    peak_module: str
    activation_peak_bytes: float  # largest activation footprint at any moment (incl. block copies)
    params: int
    trainable_params: int
    assumptions: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    band: Band | None = None  # error band of the memory model on measured rows (perf/bands.py)
    outside: tuple[str, ...] = ()  # why the configuration lies outside the validated ground

    @property
    def allocated_peak_bytes(self) -> float:
        """What torch.cuda.max_memory_allocated() reports: tensors only (the caching allocator's
        reserve and the CUDA context are not counted)."""
        return self.total_bytes - self.fragmentation.bytes - self.cuda_context.bytes

    @property
    def reserved_bytes(self) -> float:
        """What torch.cuda.max_memory_reserved() reports: allocated plus the allocator's cache."""
        return self.total_bytes - self.cuda_context.bytes

    @property
    def nvidia_smi_bytes(self) -> float:
        """What nvidia-smi (NVML "used") shows for the process: reserved plus the CUDA context."""
        return self.total_bytes

    def likely_bytes(self) -> tuple[float, float] | None:
        return self.band.time_range(self.nvidia_smi_bytes) if self.band else None

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.total_bytes

    @property
    def host_bytes(self) -> float:
        return sum(line.host_bytes for _k, line in self.lines())

    def lines(self) -> tuple[tuple[str, MemoryLine], ...]:
        return tuple((k, getattr(self, k)) for k in LINE_TITLES)

    def to_dict(self) -> dict[str, Any]:
        t = self.trace
        return {
            "workload": {"model": t.model, "task": t.task, "phase": t.phase, "batch_size": t.batch_size,
                         "seq_len": t.seq_len, "image_size": t.image_size, "context": t.context,
                         "precision": t.precision, "optimizer": t.optimizer, "params": self.params,
                         "trainable_params": self.trainable_params},
            "gpu": {"id": self.gpu_id, "name": self.gpu_name, "capacity_bytes": self.capacity_bytes},
            "plan": self.plan.to_dict(),
            "breakdown": [{"line": k, "title": LINE_TITLES[k], "bytes": v.bytes, "gb": v.bytes / GB,
                           "host_bytes": v.host_bytes, "assumption": v.assumption} for k, v in self.lines()],
            "total_bytes": self.total_bytes, "total_gb": self.total_bytes / GB,
            "capacity_bytes": self.capacity_bytes, "capacity_gb": self.capacity_bytes / GB,
            "fits": self.fits, "headroom_bytes": self.headroom_bytes, "headroom_gb": self.headroom_bytes / GB,
            "host_bytes": self.host_bytes, "peak_phase": self.peak_phase, "peak_module": self.peak_module,
            "activation_peak_bytes": self.activation_peak_bytes,
            "assumptions": dict(self.assumptions), "notes": list(self.notes),
            "as_reported": {"torch_max_memory_allocated_bytes": self.allocated_peak_bytes,
                            "torch_max_memory_reserved_bytes": self.reserved_bytes,
                            "nvidia_smi_used_bytes": self.nvidia_smi_bytes},
            "validated": not self.outside, "outside_validated": list(self.outside),
            **({"error_band": {**self.band.to_dict(), "nvidia_smi_used_bytes": list(self.band.time_range(
                self.nvidia_smi_bytes)), "description": self.band.describe()}} if self.band else {}),
        }


def memory_confidence(trace: Trace, gpu: GpuSpec) -> tuple[Band | None, tuple[str, ...]]:
    """The memory model's error band for this class of workload and GPU, and why the
    configuration lies outside the validated ground (perf/bands.py)."""
    bands = load_bands()
    if not bands.bands:
        return None, ()
    family = workload_family(trace.shape)
    return (bands.lookup(DEFAULT_ENGINE, "memory", family, gpu.architecture),
            bands.outside(DEFAULT_ENGINE, trace.precision, trace.task, family, gpu.architecture))


def capacity_bytes(gpu: GpuSpec) -> float:
    """What a process can allocate on `gpu` (`GpuSpec.usable_memory_bytes`)."""
    return gpu.usable_memory_bytes


def memory_estimate(trace: Trace, gpu: GpuSpec, plan: Plan | None = None,
                    system: System | None = None) -> MemoryEstimate:
    """Peak memory per GPU of one step of `trace` on `gpu` under `plan`, in `system` (default: the
    GPU's usual system; it sets the node of fsdp-hybrid sharding)."""
    plan = plan or Plan()
    plan.validate(trace.task)
    plan.check_trace(trace.batch_size, trace.checkpointing, trace.precision)
    plan.require_modelled(tp_traced=trace.shape.tp > 1)
    system = system or default_system(gpu)
    shard_gpus = plan.shard_gpus(system.gpus_per_node)
    frag, ctx = fragmentation(plan), cuda_context_bytes(plan)
    prec = precision_of(trace)
    ws_bytes, ws_text = workspace(gpu, trace)
    common = {
        "workspace": MemoryLine(ws_bytes, ws_text),
        "cuda_context": MemoryLine(ctx, f"{gb(ctx)} per process "
                                   "(CUDA 12 lazy module loading; outside PyTorch's allocator)"),
    }
    if trace.task == "train":
        parts, peak_phase, module, act_peak, notes = training(trace, plan, prec, shard_gpus)
    else:
        parts, peak_phase, module, act_peak, notes = inference(trace, plan, prec)
    parts.update(common)
    churn = sum(parts[k].bytes for k in ("activations", "gradients", "optimizer_temporaries", "gathered_params")
                if k in parts)
    parts["fragmentation"] = MemoryLine(frag * churn, f"{100 * frag:g}% of the memory "
                                        "that churns in a step (activations, gradients, temporaries, gathered shards)")
    lines = {k: parts.get(k, ZERO) for k in LINE_TITLES}
    total = sum(v.bytes for v in lines.values())
    cap = capacity_bytes(gpu)
    assumptions = {
        "capacity": f"{gpu.usable_memory_text} = {gb(cap)}",
        "precision": f"{prec.name}: {prec.description}",
        "fragmentation": f"{frag:g} of churning memory",
        "cuda_context": gb(ctx),
    }
    if trace.task == "train":
        assumptions.update({
            "sharding": f"{plan.sharding_label} over {plan.dp} GPU(s)"
                        + (f", sharded over {shard_gpus} per node ({system.name})" if shard_gpus != plan.dp else "") + (", optimizer offloaded to CPU" if plan.offload_optimizer else ""),
            "gradients": ("zero_grad(set_to_none=True): allocated during backward" if plan.set_to_none and plan.grad_accum == 1
                          else "kept live through the step (set_to_none=False or gradient accumulation)"),
            "master_weights": ("the FP32 parameters are the master weights" if prec.param_dtype == "float32" else
                               "FP32 master weights, FP32 gradient copy and FP32 states for the 16-bit parameters"
                               if plan.master_weights else "none (torch.optim on the 16-bit parameters)"),
        })
    band, outside = memory_confidence(trace, gpu)
    return MemoryEstimate(
        band=band, outside=outside,
        trace=trace, gpu_id=gpu.id, gpu_name=gpu.name, plan=plan, total_bytes=total, capacity_bytes=cap, peak_phase=peak_phase,
        peak_module=module, activation_peak_bytes=act_peak, params=trace.params,
        trainable_params=trace.trainable_params, assumptions=assumptions, notes=tuple(notes), **lines)
