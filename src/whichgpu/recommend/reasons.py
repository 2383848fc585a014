"""Why a configuration runs as it does, in words a user understands, each from a number."""

from __future__ import annotations

from whichgpu.hardware.spec import GpuSpec
from whichgpu.parallel.plan import LABELS
from whichgpu.perf.device import POWER_EXPONENT
from whichgpu.perf.estimate import StepEstimate
from whichgpu.recommend.evaluate import AnyRun, Run
from whichgpu.recommend.planned import PlannedRun
from whichgpu.units import GB

POWER_SOURCE = (f"compute clock ~ (limit / power the tensor work needs at the rated clock)^{POWER_EXPONENT:.3f}, the "
                "exponent from Tim Dettmers' measurement of an RTX 2080 Ti: about 7% slower at 200 W than at its "
                "250 W limit; the need per die family is fitted (perf/device.py)")


def _pct(x: float, total: float) -> str:
    return f"{100 * x / total:.0f}%" if total > 0 else "0%"


def planned_text(run: PlannedRun, min_count: int) -> str:
    """A layout of the parallel planner: the layout, its MFU and where the rest of the step goes."""
    r = run.result
    p = r.plan
    split = r.split
    comm = sum(split.get(k, 0.0) for k in ("tp", "cp", "ep", "pp_p2p", "dp"))
    text = f"{100 * r.mfu:.0f}% MFU"
    if r.bubble_fraction >= 0.05:
        text += f", {100 * r.bubble_fraction:.0f}% pipeline bubble"
    if comm > 0.15 * r.step_s:
        text += f", {_pct(comm, r.step_s)} exposed communication"
    how = (f"{'needs ' if p.gpus == min_count else ''}{p.gpus} GPUs as {run.label} (parallel planner: micro-batch "
           f"{p.micro_batch} x {p.grad_accum}, {LABELS.get(p.sharding, p.sharding)}, recompute {p.recompute or 'none'}"
           + (f", {p.schedule}" if p.pp > 1 else "") + ")")
    return f"{how}; {text}"


def bound_text(run: Run, gpu: GpuSpec) -> str:
    """The regime of the step (compute, memory, overhead, communication) and its number."""
    e: StepEstimate = run.pred.est
    step = e.step_s
    if e.bound == "host":
        return (f"host-bound: PyTorch's eager dispatch ({e.cpu_s * 1e3:.0f} ms a step) is slower than the GPU's "
                f"work ({e.gpu_busy_s * 1e3:.0f} ms); a faster card cannot help, --compile (CUDA graphs) can")
    bw = f"{gpu.memory_bandwidth_gbps / 1000:.1f} TB/s" if gpu.memory_bandwidth_gbps >= 1000 \
        else f"{gpu.memory_bandwidth_gbps:.0f} GB/s"
    if e.bound == "memory":
        if run.workload.serving:
            moved = run.pred.trace.total_bytes()
            return f"memory-bound: each decode step reads {moved / GB:.1f} GB (weights, KV cache) at {bw}"
        return f"memory-bound: {_pct(e.memory_s, step)} of the step is memory traffic at {bw}"
    if e.bound == "overhead":
        return (f"overhead-bound: {_pct(e.overhead_s, step)} of the step is kernel launches and CPU dispatch "
                "(small kernels; a larger batch or --compile helps)")
    if e.bound == "communication":
        label = LABELS.get(run.layout.sharding, "DDP")
        return f"communication-bound: {_pct(e.comm_s, step)} of the step waits on {label} traffic between the GPUs"
    peak = gpu.peak(e.mfu_peak_dtype)
    text = f"compute-bound: {100 * e.mfu:.0f}% MFU"
    if peak:
        text += f" of {e.mfu_peak_dtype.upper()} {peak:g} TFLOP/s"
    if e.comm_s > 0.15 * step:
        text += f", {_pct(e.comm_s, step)} exposed communication"
    return text


def layout_text(run: Run, min_count: int) -> str:
    """How it runs on the GPUs: the count when more than one, the sharding, the micro-batch."""
    lay = run.layout
    parts = []
    train = run.workload.spec.task == "train"
    if lay.gpus > 1:
        label = LABELS.get(lay.sharding, lay.sharding) if train else "replicas"
        parts.append(f"needs {lay.gpus} GPUs: {label}" if lay.gpus == min_count else f"{lay.gpus} GPUs, {label}")
    batch = run.workload.spec.batch_size or 1
    if lay.micro_batch < batch:
        if train:
            parts.append(f"micro-batch {lay.micro_batch} x {lay.grad_accum} accumulation steps "
                         f"(batch {batch} does not fit)")
        else:
            parts.append(f"batch {lay.micro_batch} (batch {batch} does not fit)")
    return "; ".join(parts)


def precision_text(run: AnyRun) -> str:
    """Only when the card does something other than the BF16 path of modern cards, or when the
    peak of the path it takes is an estimate (no source gives it: hardware/spec.py)."""
    from whichgpu.workload.precision import POLICIES

    pol = POLICIES.get(run.precision)
    caveat = run.gpu.peak_caveat(pol.matmul_dtype if pol else "fp32")
    if caveat:
        return caveat
    if run.precision_reason == "as requested" or run.precision.endswith("bf16"):
        return ""
    return f"{run.precision.upper().replace('AMP-', 'AMP ')}: {run.precision_reason}"


def power_text(gpu: GpuSpec, limit_w: float | None) -> str:
    if not limit_w or gpu.tdp_w is None or limit_w >= gpu.tdp_w:
        return ""
    from whichgpu.perf.device import Device
    from whichgpu.perf.params import load_params

    scale = Device(gpu, load_params(), power_limit_w=limit_w).power_scale
    return f"power-capped at {limit_w:g} W of {gpu.tdp_w:g}: compute x{scale:.2f}"


def needs_server(gpu: GpuSpec) -> bool:
    """SXM/OAM/superchip modules cannot be bought as a card: they need a matching server board."""
    ff = gpu.form_factor.lower()
    return not (ff.startswith("pcie") or ff.startswith("tpu"))


def form_factor_text(gpu: GpuSpec) -> str:
    """A card that is not a PCIe card needs its own server to be bought into."""
    if not needs_server(gpu):
        return ""
    return f"{gpu.form_factor.split(' (')[0]} module: needs a matching server (not priced)"
