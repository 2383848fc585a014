"""Communication of sharded data parallelism (ZeRO / FSDP), beside DDP's all-reduce (comm.py).

Bytes through each GPU's link per optimizer step, ring collectives over n GPUs (a reduce-scatter
or an all-gather moves (n-1)/n of its buffer; an all-reduce is one of each):

| sharding                     | collectives                                          | bytes per GPU        |
|------------------------------|------------------------------------------------------|----------------------|
| ddp                          | all-reduce of the gradients                          | 2 (n-1)/n G          |
| zero1, zero2, fsdp-grad-op   | reduce-scatter of the gradients, all-gather of the   | 2 (n-1)/n G (= DDP)  |
|                              | updated parameters                                   |                      |
| zero3, fsdp-full             | all-gather of the parameters in forward and again in | (n-1)/n (2 P + G)    |
|                              | backward, reduce-scatter of the gradients            | = 1.5 x DDP if P = G |

Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"
(SC'20), section 7: optimizer-state and gradient partitioning keep DDP's volume (2 Psi); parameter
partitioning adds one all-gather per pass, 3 Psi = 1.5x. G = trainable parameters x gradient
bytes; P = all parameters in the dtype they are gathered in (16-bit under mixed precision, the
NF4 storage under QLoRA). Under LoRA the frozen base makes P far larger than G.

Timing (an approximation, each part named): ZeRO-1/2 accumulate gradients locally and communicate
once per optimizer step, like DDP's no_sync; the reduce-scatter overlaps backward, as DDP's
buckets do, and the all-gather overlaps the next forward (FSDP SHARD_GRAD_OP gathers in forward
with prefetch; DeepSpeed gathers after the step, unoverlapped, which this does not model).
ZeRO-3 / FSDP full sharding gathers the parameters for every micro-batch and reduce-scatters its
gradients (the unsharded gradients are not kept), overlapped with the whole forward and backward
(prefetch of the next unit). The overlappable fraction is the fitted ``ddp_overlap``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from whichgpu.hardware.system import System
from whichgpu.parallel.comm import (
    CommEstimate,
    Link,
    dp_link,
    measured_buckets_s,
    node_link,
    ring_link,
)
from whichgpu.parallel.plan import FULL_SHARD, LABELS, Plan
from whichgpu.workload.precision import POLICIES
from whichgpu.workload.trace import Trace

if TYPE_CHECKING:  # perf/ imports this package; the parameters are only read here
    from whichgpu.perf.params import PerfParams


def traffic_bytes(sharding: str, gpus: int, param_bytes: float, grad_bytes: float) -> float:
    """Bytes through each GPU's link for one micro-batch step and its share of the optimizer
    step, per the table above (ZeRO-1/2 and DDP: per optimizer step)."""
    if gpus <= 1:
        return 0.0
    f = (gpus - 1) / gpus
    if sharding in FULL_SHARD:
        return f * (2.0 * param_bytes + grad_bytes)
    return 2.0 * f * grad_bytes


def gathered_param_bytes(trace: Trace) -> float:
    """P: all parameters in the dtype ZeRO-3 / FSDP gathers them in."""
    if (trace.finetune or "full").startswith("qlora"):
        return float(trace.param_bytes + trace.buffer_bytes)  # NF4 base + adapters as stored
    pol = POLICIES.get(trace.precision)
    return trace.params * (pol.gathered_param_bytes if pol is not None else 4.0)


def ring_collective(nbytes: float, gpus: int, link: Link, bucket_bytes: float, system: System | None = None,
                    p2p: bool = True, span: int | None = None) -> float:
    """One ring reduce-scatter or all-gather: (n-1)/n of the buffer over the bus, n-1 latency
    steps per bucket. Inside one node of a `system` whose file carries measured all-reduce times
    for the group (`measured_allreduce_s`; the ranks placed over `span` GPUs), half the measured
    all-reduce of the same buffer per bucket: NCCL's ring all-reduce is a reduce-scatter and an
    all-gather of it, each half the traffic and the steps."""
    if nbytes <= 0 or gpus <= 1:
        return 0.0
    measured = None if system is None else measured_buckets_s(system, gpus, nbytes, bucket_bytes, p2p, span)
    if measured is not None:
        return measured / 2.0
    buckets = max(1, math.ceil(nbytes / bucket_bytes))
    return (gpus - 1) / gpus * nbytes / link.bytes_per_s + link.step_latency_s * (gpus - 1) * buckets


def sharded_comm(trace: Trace, grad_elem_bytes: float, system: System, plan: Plan, params: PerfParams,
                 backward_s: float, step_gpu_s: float) -> CommEstimate:
    """Communication of one optimizer step (``plan.grad_accum`` micro-batches) under
    ``plan.sharding``; ``backward_s`` and ``step_gpu_s`` are one micro-batch's backward and whole
    GPU time, the windows the collectives overlap with.

    fsdp-hybrid (HYBRID_SHARD): the ZeRO-3 collectives run inside a node's shard group; the
    gradient shards are then all-reduced across the replicas (one per node) over the network."""
    n = plan.dp
    grads = trace.trainable_params * grad_elem_bytes
    if n <= 1 or grads <= 0:
        return CommEstimate(0.0, 0.0, 0.0, "", 0.0)
    hybrid = plan.sharding == "fsdp-hybrid"
    group = plan.shard_gpus(system.gpus_per_node) if hybrid else n
    link = node_link(system, group, params, plan.p2p) if hybrid else dp_link(system, plan, params)
    bucket = plan.bucket_mb * 1e6

    def coll(nbytes: float) -> float:
        return ring_collective(nbytes, group, link, bucket, system, plan.p2p, group if hybrid else plan.gpus)

    def exposed(total: float, window: float, nbytes: float) -> float:
        last = coll(min(nbytes, bucket))  # the last bucket / unit cannot hide behind anything
        return min(total, max(last, total - params.ddp_overlap * window))

    accum = plan.grad_accum
    if plan.sharding in FULL_SHARD:
        p = gathered_param_bytes(trace)
        per_micro = 2.0 * coll(p) + coll(grads)
        hidden = exposed(per_micro, step_gpu_s, p)
        moved = traffic_bytes(plan.sharding, group, p, grads) * accum
        total, text = per_micro * accum, link.text
        replicas = n // group
        if hybrid and replicas > 1:  # all-reduce of each GPU's gradient shard across the nodes
            net = ring_link(system, replicas, params, plan.p2p, span=plan.gpus)
            shard = grads / group
            across = 2.0 * ring_collective(shard, replicas, net, bucket)
            total += across
            hidden = hidden * accum + exposed(across, backward_s, shard)
            moved += 2.0 * (replicas - 1) / replicas * shard
            return CommEstimate(total, min(hidden, total), link.bytes_per_s / 1e9, f"{text}; replicas over {net.text}",
                                moved)
        return CommEstimate(total, hidden * accum, link.bytes_per_s / 1e9, text, moved)
    rs = coll(grads)
    ag = coll(grads)  # updated parameters, in the gradients' dtype (ZeRO section 7.2.1)
    forward_s = max(step_gpu_s - backward_s, 0.0)
    hidden = exposed(rs, backward_s, grads) + exposed(ag, forward_s, grads)
    return CommEstimate(rs + ag, hidden, link.bytes_per_s / 1e9, link.text, traffic_bytes(plan.sharding, n, 0.0, grads))


def describe(plan: Plan) -> str:
    """One line for a report: what the sharded step communicates."""
    label = LABELS[plan.sharding]
    if plan.sharding == "fsdp-hybrid":
        return (f"{label} over {plan.dp} GPUs: parameters all-gathered and gradients reduce-scattered inside each "
                "node every micro-batch, gradient shards all-reduced across nodes")
    if plan.sharding in FULL_SHARD:
        return (f"{label} over {plan.dp} GPUs: parameters all-gathered in forward and backward, gradients "
                "reduce-scattered, every micro-batch (1.5x DDP's traffic; ZeRO paper section 7)")
    return (f"{label} over {plan.dp} GPUs: gradients reduce-scattered and updated parameters all-gathered "
            "once per optimizer step (DDP's traffic; ZeRO paper section 7)")
