"""Pipeline-parallel serving: the model's layers split over ``pp`` stages, ``pp`` batches in flight.
Torch-free.

Split (`stage_layers`): each stage holds ``layers // pp`` consecutive decoder layers, the first
``layers % pp`` stages one more (vLLM's ``get_pp_indices`` gives the extra layers to the stages
before the last instead; the difference is one layer's weights and KV on one GPU). The embedding
lives on the first stage, the final norm and LM head on the last (`model.stage_weight_bytes`).

Timing: vLLM keeps ``pp`` batches in flight, one per stage ("virtual engines", each with its own
scheduler). Modelled as ``pp`` independent engines (`simulate_pipeline`): the requests are dealt
round-robin (closed loop: the concurrency split as evenly as possible over ``min(pp, C)`` engines;
open loop: the arrival sequence dealt in turn), each engine gets ``max_num_seqs // pp`` (at least
1) sequences and ``1 / pp`` of the KV blocks, and runs the scheduler (`scheduler.simulate`) with
the step time of a full pass of its batch through every stage (`PipelineStepTime`): the sum of
the stages' times, each from the step model over its own layers, plus ``pp - 1`` point-to-point
sends of the step's activations. The engines run concurrently (each stage busy with another
engine's batch), so their per-request times are merged into one result.

Approximations: a full pass is the sum of its stages, as if the stages were balanced (a slower
stage would hold the other engines' batches back; the last stage's LM head makes it a little
slower); a closed loop per engine (a real client refills whichever engine frees a slot); the
engines' peak block uses are summed (an upper bound of the pool's peak).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from whichgpu.errors import InputError
from whichgpu.hardware.system import System
from whichgpu.parallel.comm import Link, node_link
from whichgpu.perf.params import PerfParams
from whichgpu.serving.batch import StepBatch, StepTime
from whichgpu.serving.results import RequestTimes, ServingResult, summarise
from whichgpu.serving.scheduler import SchedulerConfig, simulate
from whichgpu.serving.step import ACT_BYTES, StepModel
from whichgpu.serving.workload import Arrivals, ClosedLoop, RequestLengths, Workload

P2P_TENSORS = 2
"""Tensors a stage sends the next per token: the hidden states and the residual (vLLM's
``IntermediateTensors`` of Llama-style models), each ``hidden`` 16-bit values."""


def stage_layers(layers: int, pp: int) -> tuple[tuple[int, int], ...]:
    """(first, end) decoder layers of each of ``pp`` stages; the first ``layers % pp`` take one more."""
    if isinstance(pp, bool) or not isinstance(pp, int) or pp < 1:
        raise InputError(f"pipeline parallelism must be a whole number >= 1, got {pp!r}", field="pp")
    if pp > layers:
        raise InputError(f"pipeline parallelism {pp} exceeds the model's {layers} layers", field="pp")
    q, r = divmod(layers, pp)
    bounds: list[tuple[int, int]] = []
    lo = 0
    for s in range(pp):
        hi = lo + q + (1 if s < r else 0)
        bounds.append((lo, hi))
        lo = hi
    return tuple(bounds)


def boundary_links(system: System, tp: int, pp: int, params: PerfParams) -> tuple[Link, ...]:
    """The link each of the ``pp - 1`` stage boundaries sends over, stages placed on consecutive
    groups of ``tp`` GPUs: the scale-up link (or PCIe) inside a node, the network per GPU across
    nodes (as the training planner's pipeline sends, `parallel.planner`)."""
    gpn = system.gpus_per_node
    links: list[Link] = []
    for s in range(pp - 1):
        edge = (s + 1) * tp  # first GPU of stage s + 1
        if tp * pp > gpn and edge % gpn == 0:
            so = system.scaleout
            if so is None:
                raise InputError(f"tp {tp} x pp {pp} = {tp * pp} GPUs exceed the {gpn} of one {system.name} node, "
                                 "and it has no scale-out network", field="pp")
            links.append(Link(so.gbps_per_gpu * params.nccl_efficiency * 1e9, so.latency_us * 1e-6,
                              f"network {so.kind}"))
        else:
            links.append(node_link(system, 2, params))
    return tuple(links)


@dataclass
class PipelineStepTime:
    """A full pass of one batch through every stage (`batch.DecodeRunStepTime`)."""

    stages: tuple[StepModel, ...]
    links: tuple[Link, ...]
    """One per stage boundary."""
    hidden: int

    def p2p_s(self, tokens: int) -> float:
        """Seconds of the sends between stages of a step of ``tokens`` tokens (latency + bytes /
        bandwidth per boundary, as the training planner's pipeline sends)."""
        nbytes = P2P_TENSORS * max(1, tokens) * self.hidden * ACT_BYTES
        return sum(link.step_latency_s + nbytes / link.bytes_per_s for link in self.links)

    def __call__(self, batch: StepBatch) -> float:
        return sum(st(batch) for st in self.stages) + self.p2p_s(batch.num_tokens)

    def decode_run(self, decode_context: np.ndarray, steps: int) -> np.ndarray:
        total = np.zeros(steps, np.float64)
        for st in self.stages:
            total += st.decode_run(decode_context, steps)
        return total + self.p2p_s(int(decode_context.size))


def simulate_pipeline(workload: Workload, step_time: StepTime, config: SchedulerConfig, pp: int, *,
                      decode_runs: bool = True) -> ServingResult:
    """``workload`` over ``pp`` virtual engines (see the module docstring); ``pp == 1`` is
    `scheduler.simulate` itself. ``config`` is the whole pool's (blocks and sequences of the
    engine); ``step_time`` times a full pass through the stages (`PipelineStepTime`)."""
    if pp == 1:
        return simulate(workload, step_time, config, decode_runs=decode_runs)
    if isinstance(pp, bool) or not isinstance(pp, int) or pp < 1:
        raise InputError(f"pipeline parallelism must be a whole number >= 1, got {pp!r}", field="pp")
    lengths, n = workload.lengths, workload.num_requests
    arrival = workload.arrival
    if isinstance(arrival, ClosedLoop):
        engines = min(pp, arrival.concurrency, n)
        q, r = divmod(arrival.concurrency, engines)
        times = None
    else:
        engines = min(pp, n)
        q = r = 0
        times = arrival.arrivals(n)
    cfg = replace(config, num_blocks=max(1, config.num_blocks // pp), max_num_seqs=max(1, config.max_num_seqs // pp))
    arr, first, fin = np.zeros(n), np.zeros(n), np.zeros(n)
    pre = np.zeros(n, np.int64)
    peak = steps = 0
    seq_steps = 0.0
    for v in range(engines):
        idx = np.arange(v, n, engines)
        sub = RequestLengths(lengths.input_len[idx], lengths.output_len[idx])
        how = ClosedLoop(q + (1 if v < r else 0)) if times is None else Arrivals(times[idx])
        res = simulate(Workload(sub, how), step_time, cfg, decode_runs=decode_runs)
        got = res.requests
        arr[idx], first[idx], fin[idx], pre[idx] = got.arrival_s, got.first_token_s, got.finish_s, got.preemptions
        peak += res.peak_blocks_used
        steps += res.steps
        seq_steps += res.mean_batch_seqs * res.steps
    merged = RequestTimes(arr, first, fin, lengths.input_len, lengths.output_len, pre)
    return summarise(merged, num_blocks=cfg.num_blocks * pp, peak_blocks_used=peak, steps=steps,
                     seq_steps=round(seq_steps))
