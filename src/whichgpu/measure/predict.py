"""Predict the quantity a measurement reports, from the performance and memory models.

    step     samples/s (or tokens/s) of one training or inference step, all GPUs (GPUs that each
             train alone, the job's `replicas`, add up)
    prefill  prompt tokens / prefill time
    ttft     prefill time, ms (first-token latency of a batch)
    decode   tokens/s while generating G tokens after a prompt of P: the decode step at the mean
             context P + G/2 (a step's time grows linearly with its context, so the mean step
             is the step at the mean context)
    serve    static batch B: B x G tokens / (prefill(B, P) + (G - 1) decode steps at P + G/2);
             the first token comes out of the prefill; divided by the GPUs when reported per GPU
    memory   GPU memory as nvidia-smi shows it (MiB): the memory model's total
    fits     1 if the step fits in the GPU's memory, else 0
    weights  weight bytes as stored (GiB)

llama.cpp's layer split runs the layers of one token on one GPU after another: a decode step
takes as long as on one GPU; a prompt is cut into micro-batches of ``n_ubatch`` tokens that flow
through the GPUs as a pipeline, (m + N - 1) stage times for m micro-batches over N GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from whichgpu.errors import InputError
from whichgpu.hardware.engine import Engine
from whichgpu.measure.jobs import Job
from whichgpu.perf.estimate import StepEstimate, estimate
from whichgpu.predict import serving_specs
from whichgpu.units import GiB, MiB
from whichgpu.workload.spec import WorkloadSpec
from whichgpu.workload.trace import Trace

TraceOf = Callable[[WorkloadSpec], Trace]
LLAMA_CPP_UBATCH = 512  # llama.cpp's default n_ubatch (tokens per micro-batch of a prompt)


@dataclass(frozen=True)
class Prediction:
    value: float
    step_s: float
    bound: str
    details: dict[str, float]


def _pipeline(total_s: float, stages: int, micro: int) -> float:
    """GPipe timing of an evenly split model: (m + N - 1) stage times of total / (N m)."""
    if stages <= 1:
        return total_s
    return total_s * (micro + stages - 1) / (stages * micro)


def predict(job: Job, trace_of: TraceOf, params: object = None,
            engines: Mapping[str, Engine] | None = None) -> Prediction:
    """The row's quantity; `params` and `engines` (id -> profile) override the packaged ones
    (the fit script tries candidate values this way)."""
    k = job.kind
    eng = engines.get(job.engine) if engines else None
    if k == "step":
        tr = trace_of(job.spec)
        est = estimate(tr, job.gpu, job.plan, params, top=0, engine=eng, system=job.system)  # type: ignore[arg-type]
        if job.unit == "tokens/s":
            if not tr.tokens:
                raise InputError(f"{tr.model} does not count tokens; the row asks for tokens/s")
            return Prediction(est.tokens_per_s * job.replicas, est.step_s, est.bound, {})
        return Prediction(est.samples_per_s * job.replicas, est.step_s, est.bound, {})
    if k in ("prefill", "ttft"):
        est, tr = _prefill(job, trace_of, params, eng)
        t = _pipeline(est.step_s, job.layer_split, max(1, math.ceil(job.prompt / LLAMA_CPP_UBATCH)))
        if k == "ttft":
            return Prediction(t * 1e3, t, est.bound, {})
        return Prediction(tr.tokens / t, t, est.bound, {})
    if k == "decode":
        est, tr = _decode(job, trace_of, params, eng)
        return Prediction(tr.tokens / est.step_s, est.step_s, est.bound, {})
    if k == "serve":
        pre, _ = _prefill(job, trace_of, params, eng)
        dec, _ = _decode(job, trace_of, params, eng)
        total = pre.step_s + (job.gen - 1) * dec.step_s
        b = job.spec.batch_size or 1
        return Prediction(b * job.gen / total / job.per_gpu, total, dec.bound,
                          {"prefill_s": pre.step_s, "decode_step_s": dec.step_s})
    if k in ("memory", "fits"):
        from whichgpu.memory import memory_estimate

        spec = job.spec
        if spec.task == "infer" and job.prompt + job.gen > 0:
            spec = replace(spec, phase="decode", context=job.prompt + job.gen)
        tr = trace_of(spec)
        mplan = replace(job.plan, cuda_context_bytes=job.cuda_context_bytes)
        mem = memory_estimate(tr, job.gpu, mplan, job.system)
        if k == "fits":
            return Prediction(1.0 if mem.fits else 0.0, 0.0, "", {"total_bytes": mem.total_bytes,
                                                                  "capacity_bytes": mem.capacity_bytes})
        return Prediction(mem.total_bytes / MiB, 0.0, "", {"total_bytes": mem.total_bytes})
    if k == "weights":
        from whichgpu.memory import memory_estimate

        tr = trace_of(job.spec)
        mem = memory_estimate(tr, job.gpu, job.plan, job.system)
        return Prediction(mem.weights.bytes / GiB, 0.0, "", {})
    raise InputError(f"unknown prediction kind {k!r}")


def _prefill(job: Job, trace_of: TraceOf, params: object, eng: Engine | None) -> tuple[StepEstimate, Trace]:
    tr = trace_of(serving_specs(job.spec, job.prompt)[0])
    return estimate(tr, job.gpu, job.plan, params, top=0, engine=eng, system=job.system), tr  # type: ignore[arg-type]


def _decode(job: Job, trace_of: TraceOf, params: object, eng: Engine | None) -> tuple[StepEstimate, Trace]:
    ctx = max(1, job.prompt + job.gen // 2)  # the mean context over the generated tokens
    tr = trace_of(replace(serving_specs(job.spec, job.prompt)[1], context=ctx))
    return estimate(tr, job.gpu, job.plan, params, top=0, engine=eng, system=job.system), tr  # type: ignore[arg-type]
