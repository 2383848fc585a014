"""Where the three inputs meet: a workload, a GPU in a system, and a plan -> one typed prediction.

Commands (estimate, recommend) call this instead of stitching perf and memory together. Serving a
causal LM is prefill (time to the first token) then decode steps at the full context; both are
traced and estimated here, and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from whichgpu.hardware.spec import GpuSpec
from whichgpu.hardware.system import System
from whichgpu.memory.estimate import MemoryEstimate, memory_estimate
from whichgpu.parallel.plan import Plan
from whichgpu.perf.estimate import StepEstimate, estimate
from whichgpu.workload.spec import WorkloadSpec
from whichgpu.workload.trace import Trace

TraceFor = Callable[[WorkloadSpec], Trace]


@dataclass(frozen=True)
class Prediction:
    """One workload on one GPU kind under one plan: the step (serving: decode), its prefill when
    serving, and the memory per GPU."""

    gpu: GpuSpec
    system: System
    plan: Plan
    precision: str
    precision_reason: str
    trace: Trace  # the step; serving: one decode step at the full context
    est: StepEstimate
    prefill_trace: Trace | None = None
    prefill: StepEstimate | None = None
    memory: MemoryEstimate | None = None  # the larger of prefill and decode when serving

    @property
    def serving(self) -> bool:
        return self.prefill is not None


def serving_specs(spec: WorkloadSpec, prompt: int | None = None) -> tuple[WorkloadSpec, WorkloadSpec]:
    """(prefill, decode) of serving `spec`: the prompt of `prompt` tokens (default: the spec's
    sequence length), then one token per step with the whole prompt in the KV cache."""
    n = prompt if prompt is not None else spec.seq_len
    pre = replace(spec, phase="prefill", seq_len=n)
    dec = replace(spec, phase="decode", context=n, seq_len=None)
    return pre, dec


def traces_of(spec: WorkloadSpec, trace_for: TraceFor, serving: bool) -> tuple[Trace, ...]:
    """The traces of one step: (step,) or, when serving, (prefill, decode)."""
    if serving:
        pre, dec = serving_specs(spec)
        return trace_for(pre), trace_for(dec)
    return (trace_for(spec),)


def predict(spec: WorkloadSpec, gpu: GpuSpec, plan: Plan, system: System, trace_for: TraceFor, *,
            serving: bool = False, precision_reason: str = "as requested", memory: bool = True,
            top: int = 8) -> Prediction:
    """Trace `spec` (the plan's precision, micro-batch and recomputation applied), estimate its step on `gpu`
    in `system` under `plan`, and its memory per GPU."""
    if plan.precision is not None:
        spec = replace(spec, precision=plan.precision)
    if plan.micro_batch is not None:
        spec = replace(spec, batch_size=plan.micro_batch)
    if plan.recompute is not None:
        spec = replace(spec, checkpointing=plan.recompute)
    traces = traces_of(spec, trace_for, serving)
    ests = [estimate(t, gpu, plan, top=top, system=system) for t in traces]
    mem = None
    if memory:
        mem = max((memory_estimate(t, gpu, plan, system) for t in traces), key=lambda m: m.total_bytes)
    if serving:
        return Prediction(gpu, system, plan, spec.precision, precision_reason, traces[1], ests[1], traces[0], ests[0],
                          mem)
    return Prediction(gpu, system, plan, spec.precision, precision_reason, traces[0], ests[0], memory=mem)
