"""Step time of a traced workload on one GPU type, with where the time goes.

    per op:   t = max(FLOPs / (peak(dtype) * eff_shape), bytes / (BW * eff_size)) + kernels * latency
    GPU:      T_gpu = sum of op times + exposed communication
    CPU:      T_cpu = the engine's host time to issue every op (one graph launch with CUDA graphs)
    step:     T = max(T_gpu, T_cpu) + the engine's fixed per-step host cost

The engine (hardware/engines/*.toml) decides the op list (fusion), the host costs, the
convolution layout, FP16 accumulation and the speed of dequantising GEMMs.

The four-way split (compute / memory / overhead / communication) sums to the step time:
compute- and memory-bound kernel time, overhead = kernel latencies + CPU time the GPU waits for
+ fixed per-step cost, communication = gradient all-reduce not hidden behind backward.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from whichgpu.hardware.engine import Engine, get_engine
from whichgpu.hardware.spec import GpuSpec
from whichgpu.hardware.system import System, default_system
from whichgpu.memo import IdentityMemo
from whichgpu.parallel.comm import allreduce, collective_latency_s, collective_time, node_link
from whichgpu.parallel.plan import Plan
from whichgpu.parallel.sharding import describe as describe_sharding
from whichgpu.parallel.sharding import sharded_comm
from whichgpu.perf.bands import Band, load_bands, step_kind, workload_family
from whichgpu.perf.device import Device
from whichgpu.perf.fusion import fuse
from whichgpu.perf.kernels import (
    matmul_time,
    memory_time,
    unaligned_dims,
    vector_elements,
    vector_time,
)
from whichgpu.perf.mfu import step_flops
from whichgpu.perf.params import PerfParams, load_params, load_params_with_meta
from whichgpu.workload.precision import POLICIES
from whichgpu.workload.trace import Op, Trace

GEMM_CATEGORIES = ("matmul", "conv", "attention", "rnn")
GRAPH_REPLAY_S = 20e-6  # one cudaGraphLaunch per step
SYNC_S = 20e-6  # a device-to-host synchronisation round trip
# First-generation fused attention kernels (FlashAttention-1 in CUDA, its 2022 Triton port, the
# xformers kernels of 2022) run at half the rate of FlashAttention-2 and later: FlashAttention-2
# is "around 2x faster than FlashAttention" and FlashAttention reached "only 25-40% of the
# theoretical maximum FLOPs/s" on A100 (Dao 2023, arXiv:2307.08691, abstract). Taken from the
# paper, not fitted; ops tagged "flash1" get it.
FLASH1_SPEED = 0.5


@dataclass
class OpEstimate:
    name: str
    category: str
    phase: str
    module: str
    count: int
    seconds: float  # total over `count` occurrences
    compute_s: float
    memory_s: float
    latency_s: float
    bound: str  # "compute" | "memory" | "latency"
    flops: float  # total
    bytes: float  # total
    dtype: str  # the hardware path used
    efficiency: float  # GEMM efficiency vs the path's dense peak (0 for non-GEMM)
    shapes: str = ""


@dataclass(frozen=True)
class UnalignedGemm:
    """A tensor-core GEMM whose operand rows are not whole 16-byte vectors, capped in rate
    (`perf.kernels.matmul_time`'s `narrow`), and what it would take padded."""

    name: str
    module: str
    dims: tuple[int, ...]  # the row lengths that are not multiples of `multiple`
    multiple: int  # elements per 16-byte vector on the GEMM's path (8 for FP16/BF16)
    seconds: float  # per step, as capped
    padded_s: float  # per step, were those dimensions padded to `multiple`


@dataclass
class StepEstimate:
    gpu_id: str
    gpu_name: str
    gpus: int
    step_s: float
    compute_s: float
    memory_s: float
    overhead_s: float
    comm_s: float
    gpu_busy_s: float
    cpu_s: float
    comm_total_s: float
    samples_per_s: float  # all GPUs
    tokens_per_s: float  # all GPUs (0 when the workload has no tokens)
    mfu: float  # model FLOPs (PaLM's definition, perf/mfu.py) / step / dense peak
    hfu: float  # executed FLOPs (recomputation included) / step / dense peak
    mfu_peak_dtype: str
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    bound: str  # step_bound(): "host" | "compute" | "memory" | "overhead" | "communication"
    by_category: dict[str, dict[str, float]]
    top_ops: list[OpEstimate]
    assumptions: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    band: Band | None = None  # error band of this class of workload (perf/bands.py)
    outside: tuple[str, ...] = ()  # why the configuration lies outside the validated ground
    unaligned_gemms: list[UnalignedGemm] = field(default_factory=list)  # slowest first

    @property
    def validated(self) -> bool:
        return not self.outside

    def likely_step_s(self) -> tuple[float, float] | None:
        return self.band.time_range(self.step_s) if self.band else None

    def likely(self, throughput: float) -> tuple[float, float] | None:
        """Likely range of a throughput derived from this step (samples/s, tokens/s)."""
        return self.band.throughput_range(throughput) if self.band else None

    def confidence(self) -> dict[str, Any]:
        """The error band and the validated-ground flag, for JSON (tokens/s null without tokens)."""
        d: dict[str, Any] = {"validated": self.validated, "outside_validated": list(self.outside)}
        if self.band is not None:
            lo, hi = self.band.time_range(self.step_s)
            d["error_band"] = {**self.band.to_dict(), "step_s": [lo, hi],
                               "samples_per_s": list(self.band.throughput_range(self.samples_per_s)),
                               "tokens_per_s": list(self.band.throughput_range(self.tokens_per_s))
                               if self.tokens_per_s else None,
                               "description": self.band.describe()}
        return d

    @property
    def split(self) -> dict[str, float]:
        return {"compute": self.compute_s, "memory": self.memory_s, "overhead": self.overhead_s,
                "communication": self.comm_s}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("band", None)
        d.pop("outside", None)
        d["split"] = self.split
        d["tokens_per_s"] = self.tokens_per_s or None  # a workload without tokens: null, not 0.0
        d.update(self.confidence())
        return d


def _key(o: Op) -> tuple[Any, ...]:
    return (o.category, o.dtype, o.flops, o.bytes_read, o.bytes_written, o.mm, o.kernels, o.sparse,
            o.phase, o.name)


_Prepared = tuple[list[Op], list[tuple[Op, int]], bool, dict[tuple[Any, ...], list[Op]]]
_COMPACT: IdentityMemo[_Prepared] = IdentityMemo(256)


def _prepared(trace: Trace, fusion: str) -> _Prepared:
    """(ops as launched, identical ops merged with a multiplicity, has host syncs, components of
    fused ops); memoised per trace and fusion scope."""
    return _COMPACT.get((trace,), (fusion,), lambda: _prepare(trace, fusion))


def _prepare(trace: Trace, fusion: str) -> _Prepared:
    parts: dict[tuple[Any, ...], list[Op]] = {}
    if fusion != "none":
        ops, by_pos = fuse(trace.ops, epilogue=fusion == "epilogue")
        parts = {_key(ops[i]): comps for i, comps in by_pos.items() if ops[i].category not in GEMM_CATEGORIES}
    else:
        ops = trace.ops
    agg: dict[tuple[Any, ...], list[Any]] = {}
    for o in ops:
        k = _key(o)
        e = agg.get(k)
        if e is None:
            agg[k] = [o, o.count]
        else:
            e[1] += o.count
    syncs = any("host-sync" in o.tags for o in ops)
    return ops, [(o, n) for o, n in agg.values()], syncs, parts


def _synced_time(ops: list[Op], costs: dict[tuple[Any, ...], float], cpu_op_s: float, cpu_view_s: float,
                 accum: int) -> float:
    """Step time when the program waits for the GPU (host syncs): each segment between syncs
    takes the longer of its CPU issue time and its GPU time, and they add up."""
    total = gpu = cpu = 0.0
    for o in ops:
        n = o.count / accum if o.phase == "optimizer" else o.count
        gpu += costs[_key(o)] * n
        cpu += (cpu_op_s if o.kernels > 0 else cpu_view_s) * n
        if "host-sync" in o.tags:
            total += max(gpu, cpu) + SYNC_S
            gpu = cpu = 0.0
    return total + max(gpu, cpu)


def gemm_path(o: Op, eng: Engine) -> str:
    """The tensor path a GEMM runs on: its dtype, or FP16 with FP16 accumulation where the engine
    accumulates in half precision."""
    if eng.fp16_accumulate and o.dtype == "fp16" and o.category in ("matmul", "conv"):
        return "fp16acc16"
    return o.dtype


def unaligned_of(o: Op, eng: Engine) -> tuple[int, ...]:
    """A tensor-core matmul's operand row lengths that are not whole 16-byte vectors (its rate is
    then capped: `perf.kernels.matmul_time`'s `narrow`); () for any other op."""
    if o.category != "matmul" or o.mm is None or o.flops <= 0:
        return ()
    return unaligned_dims(o.mm, gemm_path(o, eng), o.phase == "backward")


def op_cost(o: Op, dev: Device, overlap: str, latency_s: float,
            parts: list[Op] | None = None, engine: Engine | None = None, system: System | None = None,
            aligned: bool = False) -> tuple[float, float, float, float, str, str, float]:
    """(seconds, compute_s, memory_s, latency_s, bound, dtype used, efficiency) for one occurrence.

    A fused kernel (`parts` = the ops it replaces) pays its components' average cost per byte on
    its own, smaller, traffic: fusion removes traffic, it does not change how fast bytes move.
    `aligned`: time an unaligned GEMM as if its dimensions were padded to whole 16-byte rows.
    """
    p = dev.params
    eng = engine or get_engine()
    if o.category == "view":
        return 0.0, 0.0, 0.0, 0.0, "latency", o.dtype, 0.0
    if o.category == "comm":
        # A tensor-parallel collective: on the critical path (the next op needs its result).
        kind = "all_gather" if "all_gather" in o.tags else "all_reduce"
        group = next((int(t[6:]) for t in o.tags if t.startswith("group=")), 1)
        t = collective_time(kind, o.bytes_read, group, system or default_system(dev.spec), p,
                            nvls=eng.nvls_for(group, o.bytes_read))
        return t, 0.0, 0.0, 0.0, "communication", o.dtype, 0.0
    if parts:
        comp_bytes = sum(c.bytes_read + c.bytes_written for c in parts)
        comp_time = sum(memory_time(c.bytes_read + c.bytes_written, dev) for c in parts)
        tm = comp_time * (o.bytes_read + o.bytes_written) / comp_bytes if comp_bytes else 0.0
        tc = vector_time(o.flops, dev)
        lat = o.kernels * latency_s
        body = tc + tm if overlap == "sum" else max(tc, tm)
        return body + lat, tc, tm, lat, ("compute" if tc >= tm else "memory"), o.dtype, 0.0
    eff = 0.0
    used = o.dtype
    kv_reads = 1.0  # decode attention without grouped K/V loads reads the cache once per query head
    if o.category in GEMM_CATEGORIES and o.flops > 0:
        mm = o.mm
        if o.category == "conv" and mm is not None and (mm[2] < 8 or mm[3] < 16):
            # grouped/depthwise convolutions with a few channels per group: direct kernels on
            # the CUDA cores, not tensor-core GEMMs, reaching a fraction of the memory roofline
            # (less in backward: the weight gradient reduces over batch and space per weight)
            factor = p.direct_conv_bwd_factor if o.phase == "backward" else p.direct_conv_factor
            tc = vector_time(o.flops, dev)
            tm = memory_time(o.bytes_read + o.bytes_written, dev) / factor
            lat = o.kernels * latency_s
            body = tc + tm if overlap == "sum" else max(tc, tm)
            return body + lat, tc, tm, lat, ("compute" if tc >= tm else "memory"), o.dtype, 0.0
        factor = {"conv": p.conv_factor, "attention": p.attention_factor}.get(o.category, 1.0)
        if "flash1" in o.tags:
            factor *= FLASH1_SPEED
        group = next((int(t[4:]) for t in o.tags if t.startswith("gqa=")), 1)
        if o.category == "attention" and group > 1 and not eng.grouped_kv and mm is not None and mm[1] <= 16 * group:
            # Decode attention that runs per query head (no grouped K/V loads): each of the
            # group's heads reads the cache again, in tiles of its own single query row.
            mm = (mm[0] * group, max(1, mm[1] // group), mm[2], mm[3])
            kv_reads = float(group)
        path = gemm_path(o, eng)
        narrow = not aligned and bool(unaligned_of(o, eng))
        tc, eff, used = matmul_time(o.flops, mm, path, dev, factor, o.sparse, o.category == "rnn", narrow)
        if used == "fp32" and "k3s1" in o.tags:
            tc /= p.winograd_speedup  # cuDNN's FP32 3x3 convolutions: Winograd, fewer multiplies
    else:
        tc = vector_time(o.flops, dev)
    tm = memory_time(o.bytes_read * kv_reads + o.bytes_written, dev)
    if "wq" in o.tags:
        tm /= eng.quantized_bandwidth  # dequantising weight-only GEMM
    lat = o.kernels * latency_s
    passes = p.nchw_bwd_passes if o.phase == "backward" else p.nchw_transpose_passes
    if o.category == "conv" and "nchw" in o.tags and used != "fp32" and eng.conv_layout == "as-traced" and passes > 0:
        # Tensor-core convolutions run in NHWC: with NCHW activations cuDNN transposes the
        # input and output (and their gradients) around the kernel, in extra kernels that do
        # not overlap with the convolution. Forward kernels read NCHW natively more often than
        # the weight- and data-gradient kernels do: each direction has its own share.
        tr = memory_time(passes * (o.bytes_read + o.bytes_written), dev)
        lat += 2 * latency_s
        return max(tc, tm) + tr + lat, tc, tm + tr, lat, ("compute" if tc >= tm + tr else "memory"), used, eff
    if overlap == "sum":
        body = tc + tm
    else:
        body = max(tc, tm)
    bound = "compute" if tc >= tm else "memory"
    if lat > body:
        bound = "latency"
    return body + lat, tc, tm, lat, bound, used, eff


@dataclass
class _OpSums:
    """The per-op part of an estimate: it depends on the trace, the card, the engine and the plan's
    overlap, power limit and accumulation, not on the GPU count or sharding, so one is shared by
    every count a search tries."""

    compute_s: float
    memory_s: float
    latency_s: float
    backward_gpu_s: float
    cpu_s: float
    by_category: dict[str, dict[str, float]]
    per_op: list[OpEstimate]  # slowest first
    notes: frozenset[str]
    costs: dict[tuple[Any, ...], float]
    collective_s: float = 0.0  # tensor-parallel collectives in the trace (on the critical path)
    unaligned: tuple[UnalignedGemm, ...] = ()  # the GEMMs the 16-byte row rule slows, slowest first


_SUMS: IdentityMemo[_OpSums] = IdentityMemo(256)


def _op_sums(trace: Trace, dev: Device, plan: Plan, engine: Engine, system: System) -> _OpSums:
    return _SUMS.get((trace, dev.spec, dev.params, engine, system),
                     (plan.overlap, plan.use_measured, plan.power_limit_w, plan.grad_accum),
                     lambda: _sum_ops(trace, dev, plan, engine, system))


def host_time(ops: list[tuple[Op, int]], engine: Engine, accum: int = 1) -> float:
    """Host (CPU) time to issue one step's ops, one by one (no CUDA graph)."""
    total = 0.0
    for o, n0 in ops:
        n = n0 / accum if o.phase == "optimizer" else n0
        total += n * (engine.host_op_us if o.kernels > 0 else engine.host_view_us) * 1e-6
    return total


def _sum_ops(trace: Trace, dev: Device, plan: Plan, engine: Engine, system: System) -> _OpSums:
    params = dev.params
    _ops, compact, _syncs, parts = _prepared(trace, engine.fusion)
    latency_s = (params.graph_kernel_us if engine.graphs else params.kernel_latency_us) * 1e-6

    compute_s = memory_s = latency_total = backward_gpu = collective_s = 0.0
    by_cat: dict[str, dict[str, float]] = {}
    per_op: list[OpEstimate] = []
    notes: set[str] = set()
    accum = plan.grad_accum
    costs: dict[tuple[Any, ...], float] = {}
    unaligned: list[UnalignedGemm] = []
    for o, n0 in compact:
        n: float = n0 / accum if o.phase == "optimizer" else n0
        t, tc, tm, lat, bound, used, eff = op_cost(o, dev, plan.overlap, latency_s, parts.get(_key(o)), engine, system)
        costs[_key(o)] = t
        dims = unaligned_of(o, engine)
        if dims:
            padded = op_cost(o, dev, plan.overlap, latency_s, parts.get(_key(o)), engine, system, aligned=True)[0]
            if padded < t:  # the cap bound it (a slow path may not reach the cap at all)
                unaligned.append(UnalignedGemm(o.name, o.module, dims, vector_elements(gemm_path(o, engine)) or 1,
                                               t * n, padded * n))
        if o.category in GEMM_CATEGORIES:
            note = dev.rate(o.dtype).note
            if note:
                notes.add(note)
        body = (t - lat) * n
        if bound == "communication":
            collective_s += body
        elif bound == "compute" or (bound == "latency" and tc >= tm):
            compute_s += body
        else:
            memory_s += body
        latency_total += lat * n
        if o.phase == "backward":
            backward_gpu += t * n
        c = by_cat.setdefault(o.category, {"seconds": 0.0, "flops": 0.0, "bytes": 0.0, "kernels": 0.0})
        c["seconds"] += t * n
        c["flops"] += o.flops * n
        c["bytes"] += (o.bytes_read + o.bytes_written) * n
        c["kernels"] += o.kernels * n
        if o.category != "view":
            per_op.append(OpEstimate(o.name, o.category, o.phase, o.module, int(n0), t * n, tc * n, tm * n, lat * n,
                                     bound, o.flops * n, (o.bytes_read + o.bytes_written) * n, used, eff, o.shapes))
    if engine.graphs:
        cpu_s = min(GRAPH_REPLAY_S, host_time(_prepared(trace, "none")[1], get_engine(), accum))
    else:
        cpu_s = host_time(compact, engine, accum)
    per_op.sort(key=lambda e: -e.seconds)
    unaligned.sort(key=lambda u: -u.seconds)
    return _OpSums(compute_s, memory_s, latency_total, backward_gpu, cpu_s, by_cat, per_op, frozenset(notes),
                   costs, collective_s, tuple(unaligned))


def mfu_peak_flops(spec: GpuSpec, dtype: str, fallback: float) -> float:
    """The peak MFU is measured against: the catalog's dense peak of the dtype's path, FLOP/s."""
    peak = spec.peak(dtype)
    return peak * 1e12 if peak else fallback


def step_bound(split: dict[str, float], cpu_s: float, gpu_s: float) -> str:
    """What limits a step, one definition for every report: "host" when the CPU's dispatch takes
    longer than the GPU's work and communication (the GPU waits; a faster card cannot help), else
    the largest share of the step: compute, memory, overhead or communication."""
    if cpu_s > gpu_s:
        return "host"
    return max(split, key=lambda k: split[k])


def estimate(trace: Trace, spec: GpuSpec, plan: Plan | None = None, params: PerfParams | None = None,
             top: int = 10, engine: Engine | None = None, system: System | None = None) -> StepEstimate:
    """Predict one step of `trace` on `spec` under `plan`, in `system` (default: the GPU's usual
    system, hardware/systems/); `engine` overrides the plan's engine profile, e.g. with fitted values."""
    plan = plan or Plan()
    plan.validate(trace.task)
    plan.check_trace(trace.batch_size, trace.checkpointing, trace.precision)
    tp = max(trace.shape.tp, 1)
    plan.require_modelled(tp_traced=tp > 1)
    if tp != plan.tp:
        plan = replace(plan, tp=tp)  # the trace holds one rank of a tp-way split
    system = system or default_system(spec)
    params = params or load_params()
    eng = engine or get_engine(plan.engine)
    dev = Device(spec, params, plan.use_measured, plan.power_limit_w)
    sums = _op_sums(trace, dev, plan, eng, system)
    ops, _compact, syncs, _parts = _prepared(trace, eng.fusion)
    compute_s, memory_s, latency_total = sums.compute_s, sums.memory_s, sums.latency_s
    backward_gpu, cpu_s, costs = sums.backward_gpu_s, sums.cpu_s, sums.costs
    by_cat = {k: dict(v) for k, v in sums.by_category.items()}
    notes = set(sums.notes)
    accum = plan.grad_accum

    # ---- data-parallel gradient all-reduce -----------------------------------------------------
    comm_total = comm_exposed = 0.0
    comm_link = ""
    if trace.task == "train" and plan.dp > 1:
        pol = POLICIES.get(trace.precision)
        grad_bytes = pol.param_bytes if pol is not None else 4.0
        if plan.sharding != "ddp":  # ZeRO / FSDP collectives (parallel/sharding.py)
            ce = sharded_comm(trace, grad_bytes, system, plan, params, backward_gpu, compute_s + memory_s + latency_total)
            notes.add(describe_sharding(plan))
        else:
            ce = allreduce(trace.trainable_params * grad_bytes, system, plan, params, backward_gpu)
        # With accumulation the all-reduce runs once per optimizer step (DDP no_sync on the others).
        comm_total, comm_exposed = ce.total_s / accum, ce.exposed_s / accum
        comm_link = f"{ce.link}, {ce.bus_gbps:.0f} GB/s bus"
    if sums.collective_s:
        # Tensor-parallel collectives of the trace: the next layer waits for them.
        comm_total += sums.collective_s
        comm_exposed += sums.collective_s

    gpu_busy = compute_s + memory_s + latency_total
    gpu_total = gpu_busy + comm_exposed
    fixed = eng.step_host_s(trace.task, plan.step_host_ms)
    overlapped = max(gpu_total, cpu_s)
    if syncs and not eng.graphs:
        overlapped = max(overlapped, _synced_time(ops, costs, eng.host_op_us * 1e-6,
                                                  eng.host_view_us * 1e-6, accum) + comm_exposed)
        notes.add("host synchronisations in the step (e.g. NMS): CPU and GPU work do not fully overlap")
    step = overlapped + fixed
    overhead = latency_total + (overlapped - gpu_total) + fixed
    if plan.dp > 1:
        # Synchronous steps wait for the slowest replica (expected max of N jittered step times).
        wait = step * params.dp_jitter * math.sqrt(2.0 * math.log(plan.dp))
        step += wait
        overhead += wait

    split = {"compute": compute_s, "memory": memory_s, "overhead": overhead, "communication": comm_exposed}
    bound = step_bound(split, cpu_s, gpu_total)
    samples = trace.samples * plan.dp / step
    tokens = trace.tokens * plan.dp / step if trace.tokens else 0.0
    pol = POLICIES.get(trace.precision)
    peak_rate = dev.rate(pol.matmul_dtype if pol else "fp32")
    # MFU and HFU against the datasheet's dense peak of the path (PaLM's definition), not the
    # sustained-clock rate the kernels are timed at
    peak_flops = mfu_peak_flops(spec, peak_rate.dtype, peak_rate.flops / dev.clock_scale)
    flops = step_flops(trace)
    mfu = flops.model / step / peak_flops
    hfu = flops.hardware / step / peak_flops
    _, fit_meta = load_params_with_meta()
    assumptions = {
        "precision": trace.precision,
        "mfu_peak": f"{peak_rate.dtype} dense {peak_flops / 1e12:g} TFLOP/s (datasheet)"
                    + (f" (estimated: {cav})" if (cav := spec.peak_caveat(peak_rate.dtype)) else ""),
        "mfu": f"model FLOPs: {flops.definition}; HFU: all executed forward and backward FLOPs",
        "system": f"{system.id}: {system.name}",
        "matmul_ceiling": f"{peak_rate.ceiling:.3f} ({peak_rate.ceiling_source})",
        "engine": eng.summary(),
        "compile": ("eager (no fusion beyond the traced kernels)" if not eng.fuses
                    else f"{eng.name}: {eng.fusion} fusion" + (", CUDA graphs" if eng.graphs else "")),
        "overlap": f"per-kernel compute/memory overlap: {plan.overlap}",
        "data_parallel": (f"{plan.sharding_label} over {plan.dp} GPUs "
                          f"({-(-plan.gpus // system.gpus_per_node)} node(s) of {system.gpus_per_node}), "
                          f"collectives over {comm_link}, "
                          f"{'overlapped with backward' if plan.comm_overlap else 'not overlapped'}")
        if plan.dp > 1 else "single GPU",
        "efficiency_source": f"params.toml ({fit_meta.get('source', '')})",
        "memory_bandwidth": f"{spec.memory_bandwidth_gbps:g} GB/s x {dev.mem_ceiling:.2f} ceiling "
                            f"({'HBM' if dev.hbm else 'GDDR'})",
        "clock": (f"sustained compute clock x{dev.clock_scale:.2f} of the rated boost"
                  + (f" (tensor work needs ~{dev.power_need_w:.0f} W at the rated clock on {dev.node}; "
                     f"budget {plan.power_limit_w or spec.tdp_w:g} W)" if dev.power_need_w else "")
                  if abs(dev.clock_scale - 1.0) > 1e-9 else "rated boost clock"),
        "power_limit": (f"{plan.power_limit_w:g} W (clock x{dev.clock_scale:.3f}, measured ceilings x{dev.power_scale:.3f})"
                        if plan.power_limit_w else "stock"),
        "gradient_accumulation": f"{accum} micro-batches per optimizer step" if accum > 1 else "none",
        "step_host": eng.step_host_text(trace.task, plan.step_host_ms),
    }
    if sums.unaligned:
        assumptions["unaligned_gemms"] = unaligned_text(sums.unaligned)
    if tp > 1:
        link = node_link(system, tp, params, plan.p2p)
        assumptions["tensor_parallel"] = (f"{tp} GPUs (one rank traced; Megatron split), all-reduce per attention and "
                                          f"MLP output over {link.text} ({link.bytes_per_s / 1e9:.0f} GB/s bus, "
                                          f"{collective_latency_s(tp, params) * 1e6:.3g} us latency per collective)")
    bands = load_bands()
    family = workload_family(trace.shape)
    band = bands.lookup(eng.id, step_kind(trace.task, trace.phase), family, spec.architecture) if bands.bands else None
    outside = bands.outside(eng.id, trace.precision, trace.task, family, spec.architecture) if bands.bands else ()
    return StepEstimate(
        band=band, outside=outside,
        gpu_id=spec.id, gpu_name=spec.name, gpus=plan.gpus, step_s=step, compute_s=compute_s, memory_s=memory_s,
        overhead_s=overhead, comm_s=comm_exposed, gpu_busy_s=gpu_busy, cpu_s=cpu_s, comm_total_s=comm_total,
        samples_per_s=samples, tokens_per_s=tokens, mfu=mfu, hfu=hfu, mfu_peak_dtype=peak_rate.dtype,
        model_tflops_per_gpu=flops.model / step / 1e12, hardware_tflops_per_gpu=flops.hardware / step / 1e12, bound=bound, by_category=by_cat, top_ops=[replace(e) for e in sums.per_op[:top]],
        assumptions=assumptions, notes=sorted(notes), unaligned_gemms=list(sums.unaligned),
    )


def unaligned_text(items: tuple[UnalignedGemm, ...]) -> str:
    """The assumption line for GEMMs slowed by operand rows that are not whole 16-byte vectors,
    grouped by module (a layer's forward and backward GEMMs share their dimensions)."""
    groups: dict[str, tuple[set[int], int, float]] = {}
    for u in items:
        where = u.module or u.name
        dims, count, secs = groups.get(where, (set(), 0, 0.0))
        groups[where] = (dims | set(u.dims), count + 1, secs + u.seconds)
    order = sorted(groups.items(), key=lambda kv: -kv[1][2])
    named = "; ".join(f"{where} ({', '.join(str(d) for d in sorted(dims))}; {count} kernel{'s' if count > 1 else ''})"
                      for where, (dims, count, _) in order[:3])
    if len(order) > 3:
        named += f"; {len(order) - 3} more module(s)"
    total = sum(u.seconds for u in items)
    padded = sum(u.padded_s for u in items)
    multiples = " or ".join(str(m) for m in sorted({u.multiple for u in items}))
    return (f"GEMMs with a dimension that is not a multiple of {multiples} elements (one 16-byte vector) run at "
            f"the narrow-load rate: {named}: {total * 1e3:.3g} ms per step, about {padded * 1e3:.3g} ms padded "
            f"(e.g. a vocabulary rounded up to a multiple of 64)")
