"""The parallel planner: one training step of a decoder LLM laid out over many GPUs. Torch-free.

A layout is a ``Plan`` (tp, pp, vp, cp, ep, dp, micro-batch, accumulation, sharding, recompute,
schedule). Evaluating one:

1. Per layer and micro-batch, the kernels of one rank (parallel/layer.py), timed by the kernel
   model: forward F, input gradient B, weight gradient W (recomputation adds the forward, or the
   attention core, to B).
2. Tensor-parallel collectives (two per layer per pass; reduce-scatter + all-gather under sequence
   parallelism, the same bytes) on the scale-up link; context-parallel K/V ring exchange overlapped
   with the attention kernels (what exceeds them is exposed); expert-parallel all-to-all dispatch
   and combine (two per MoE layer per pass), exposed, across nodes through each GPU's own network
   rail (parallel/comm.py all_to_all_time).
3. Layers split over pp x vp virtual stages (remainders to the middle stages: the first stage
   carries the embedding, the last the LM head and loss); the pipeline schedule simulated pass by
   pass (parallel/schedule.py) with point-to-point activation transfers between stages.
4. Data-parallel gradient collectives (parallel/comm.py, parallel/sharding.py): all-reduce (DDP),
   reduce-scatter + all-gather (ZeRO-1/2, Megatron's distributed optimizer), or ZeRO-3/FSDP
   gathers; overlapped with the last micro-batch's backward as Megatron's --overlap-grad-reduce
   and FSDP's prefetch do (the fitted ``ddp_overlap``).
5. The optimizer step: memory-bound AdamW over this rank's (sharded) states.
6. Memory of the worst rank: weights, gradients and optimizer states under the sharding, the
   activations of the micro-batches the schedule keeps in flight, the logits of the last stage.

Rank order on the system is Megatron's (tp fastest, then cp, then dp, then pp): a group that
fits in a node uses the scale-up link, a wider one the scale-out network.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from whichgpu.errors import InputError
from whichgpu.hardware.spec import GpuSpec
from whichgpu.hardware.system import System
from whichgpu.memory.states import shard_factors
from whichgpu.parallel.comm import (
    Link,
    all_to_all_time,
    allreduce_time,
    collective_time,
    measured_allreduce_s,
    neighbour_link,
    node_link,
    nvls_speedup,
    ring_link,
)
from whichgpu.parallel.layer import LayerCost, Shard, edge_costs, layer_cost, local_experts
from whichgpu.parallel.plan import FULL_SHARD, Plan
from whichgpu.parallel.sharding import ring_collective
from whichgpu.perf.device import Device
from whichgpu.perf.kernels import memory_time
from whichgpu.perf.mfu import attended_width, matmul_params_per_token
from whichgpu.perf.params import PerfParams, load_params
from whichgpu.workload.precision import get_precision
from whichgpu.workload.zoo.llm.args import DecoderArgs, layer_kinds

GIB = 1024.0**3
# Memory outside the model's tensors on each rank: the CUDA context and NCCL's buffers (about
# 0.5 GB each on Hopper with several communicators) and the allocator's fragmentation of the
# activations that churn. Modelling allowances, stated in every report.
CONTEXT_BYTES = 1.0 * GIB
FRAGMENTATION = 0.10
# Megatron's --overlap-grad-reduce / --overlap-param-gather and FSDP's prefetch run the data-parallel
# collectives on their own streams beside the backward (and forward) kernels: the collectives hide
# behind that window, and what exceeds it is exposed. (The single-GPU model's fitted ddp_overlap
# describes PyTorch DDP on the throughput corpus, whose rows show little overlap; not used here.)
OVERLAP = 1.0
ADAM_BYTES_PER_PARAM = 32.0  # read p16 2 + g32 4 + master 4 + m 4 + v 4, write master, m, v, p16


# The attention kernels a job runs: "flash" FlashAttention-2 or later (FA2/FA3, cuDNN and
# Transformer Engine fused attention, PyTorch SDPA flash), "flash1" the first generation
# (FlashAttention-1, its 2022 Triton port as llm-foundry's attn_impl: triton, 2022 xformers) at
# half the rate, "unfused" score GEMMs with a fused softmax (Megatron-LM before FlashAttention).
ATTENTIONS = ("flash", "flash1", "unfused")
GRAD_DTYPES = ("fp32", "bf16", "fp16")
# The architectures each flash kernel does not run on: FlashAttention-2 and Transformer Engine's fused
# attention backends need compute capability 8.0 (Ampere), FlashAttention-1 ran on Turing (7.5) too.
# Megatron on an older NVIDIA GPU runs its unfused attention (score GEMMs and a fused softmax).
NO_FLASH = {"flash": ("pascal", "volta", "turing"), "flash1": ("pascal", "volta")}


def attention_runs(attention: str, gpu: GpuSpec) -> bool:
    """Whether `attention`'s kernels run on `gpu` (NO_FLASH)."""
    return gpu.architecture not in NO_FLASH.get(attention, ())


def default_attention(gpu: GpuSpec) -> str:
    """The planner's attention when none is asked: flash, or unfused on a GPU older than Ampere."""
    return "flash" if attention_runs("flash", gpu) else "unfused"


@dataclass(frozen=True)
class Job:
    """The question: train `args` on `gpus` GPUs of `system`, `global_batch` sequences of
    `seq_len` tokens per optimizer step, at `precision`."""

    model_id: str
    args: DecoderArgs
    gpu: GpuSpec
    system: System
    gpus: int
    global_batch: int
    seq_len: int
    precision: str = "bf16"
    attention: str = "flash"  # the attention kernels, one of ATTENTIONS
    grad_dtype: str = "fp32"  # main gradients (and their reduction): fp32, bf16 (--grad-reduce-in-bf16) or fp16
    fp8_params: bool = False  # FP8 precision keeps the model's weights in FP8 (--fp8-param-gather)

    @property
    def tokens(self) -> int:
        return self.global_batch * self.seq_len


@dataclass
class Result:
    """One evaluated layout."""

    plan: Plan
    fits: bool
    reason: str
    step_s: float
    tokens_per_s: float
    model_tflops_per_gpu: float
    mfu: float
    hfu: float
    split: dict[str, float]  # seconds per step: compute, tp, cp, ep, pp_p2p, bubble, dp, optimizer, overhead
    memory: dict[str, float]  # bytes on the worst rank
    peak_memory_bytes: float
    bubble_fraction: float
    stage_s: tuple[tuple[float, float, float], ...]  # (F, B, W) per virtual stage, one micro-batch
    assumptions: dict[str, str] = field(default_factory=dict)
    worst_stage: int = 0
    comm_total: dict[str, float] = field(default_factory=dict)  # per kind, before overlap (exposed: split)
    timeline: Any = None  # the simulated schedule (evaluate(..., timeline=True))

    def to_dict(self) -> dict[str, Any]:
        p = self.plan
        return {
            "tp": p.tp, "pp": p.pp, "vp": p.vp, "cp": p.cp, "ep": p.ep, "etp": p.expert_tp, "dp": p.dp,
            "micro_batch": p.micro_batch, "grad_accum": p.grad_accum, "sharding": p.sharding,
            "recompute": p.recompute, "schedule": p.schedule, "sequence_parallel": p.sequence_parallel,
            "tp_comm_overlap": p.tp_comm_overlap, "step_s": self.step_s, "tokens_per_s": self.tokens_per_s,
            "model_tflops_per_gpu": self.model_tflops_per_gpu, "mfu": self.mfu, "hfu": self.hfu,
            "peak_memory_gb": self.peak_memory_bytes / 1e9, "fits": self.fits, "reason": self.reason,
            "bubble_fraction": self.bubble_fraction, "time_split_s": dict(self.split),
            "memory_gb": {k: v / 1e9 for k, v in self.memory.items()}, "worst_stage": self.worst_stage,
            "comm_total_s": dict(self.comm_total),
            "assumptions": dict(self.assumptions),
        }


# ---------------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------------

def check_layout(job: Job, plan: Plan) -> None:
    """One-line InputError for a layout that cannot run (the CLI maps fields to its flags)."""
    a = job.args
    prod = plan.tp * plan.pp * plan.cp * plan.dp
    if prod != job.gpus:
        raise InputError(f"tp {plan.tp} x pp {plan.pp} x cp {plan.cp} x dp {plan.dp} = {prod} GPUs, but the job "
                         f"has {job.gpus}: the degrees must multiply to the GPU count", field="gpus")
    if a.heads % plan.tp:
        raise InputError(f"tensor parallelism {plan.tp} does not divide the {a.heads} attention heads "
                         f"(valid: {_valid(a.heads)})", field="tp")
    if not a.mla and a.kv_heads % plan.tp and plan.tp % a.kv_heads:
        raise InputError(f"tensor parallelism {plan.tp} and the {a.kv_heads} key/value heads do not divide one "
                         "another", field="tp")
    if (not a.experts or a.dense_layers) and a.intermediate % plan.tp:
        raise InputError(f"tensor parallelism {plan.tp} does not divide the MLP width {a.intermediate}", field="tp")
    etp = plan.expert_tp
    if a.experts and a.expert_intermediate % etp:
        raise InputError(f"{'expert ' if plan.etp is not None else ''}tensor parallelism {etp} does not divide the "
                         f"expert width {a.expert_intermediate}", field="etp" if plan.etp is not None else "tp")
    if plan.etp is not None:
        if not a.experts:
            raise InputError(f"expert tensor parallelism (etp {plan.etp}) needs a mixture-of-experts model; "
                             f"{job.model_id} is dense", field="etp")
        if plan.tp % etp:
            raise InputError(f"expert tensor parallelism {etp} must divide tensor parallelism {plan.tp} "
                             f"(valid: {_valid(plan.tp)})", field="etp")
        if etp < plan.tp and not plan.sequence_parallel:
            raise InputError(f"expert tensor parallelism {etp} below tp {plan.tp} needs sequence parallelism "
                             "(the experts take each rank's share of the sequence)", field="etp")
    stages = plan.pp * plan.vp
    if not stages_fit(a.layers, stages):
        raise InputError(f"pp {plan.pp} x vp {plan.vp} = {plan.pp * plan.vp} stages for {a.layers} layers: "
                         "each virtual stage needs at least one layer", field="pp")
    if plan.cp > 1 and job.seq_len % (2 * plan.cp):
        raise InputError(f"context parallelism {plan.cp} needs the sequence length ({job.seq_len}) divisible by "
                         f"2 x cp = {2 * plan.cp} (load-balanced causal chunks)", field="cp")
    if plan.ep > 1:
        if not a.experts:
            raise InputError(f"expert parallelism {plan.ep} needs a mixture-of-experts model; {job.model_id} is dense",
                             field="ep")
        if a.experts % plan.ep:
            raise InputError(f"expert parallelism {plan.ep} does not divide the {a.experts} experts "
                             f"(valid: {_valid(a.experts)})", field="ep")
        if (plan.tp * plan.dp * plan.cp) % (plan.ep * etp):
            raise InputError(f"expert parallelism {plan.ep} x expert tensor parallelism {etp} must divide "
                             f"tp x cp x dp = {plan.tp * plan.dp * plan.cp} (experts are spread over the data-parallel "
                             "ranks, and over tensor-parallel ranks with etp below tp)", field="ep")
    mb = plan.micro_batch or 1
    if job.global_batch % (mb * plan.dp):
        raise InputError(f"global batch {job.global_batch} is not divisible by micro-batch {mb} x dp {plan.dp}",
                         field="global_batch")
    m = job.global_batch // (mb * plan.dp)
    if plan.grad_accum != m:
        raise InputError(f"gradient accumulation {plan.grad_accum} does not match global batch {job.global_batch} / "
                         f"(micro-batch {mb} x dp {plan.dp}) = {m}", field="grad_accum")
    if plan.schedule == "interleaved-1f1b" and m % plan.pp:
        raise InputError(f"the interleaved schedule needs the micro-batches per step ({m}) divisible by pp "
                         f"{plan.pp}", field="schedule")


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _valid(n: int) -> str:
    """The degrees that divide n, for an error message (up to 64)."""
    return ", ".join(str(d) for d in divisors(n) if d <= 64)


# ---------------------------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------------------------

def stages_fit(layers: int, stages: int) -> bool:
    """Whether ``stages`` (virtual) pipeline stages can each hold a layer's place: at most the
    layers, or the layers + 2 split evenly once the embedding and the loss count as a layer each
    (`split_layers`)."""
    return stages <= layers or (stages <= layers + 2 and (layers + 2) % stages == 0)


def split_layers(layers: int, stages: int) -> list[int]:
    """Layers per virtual stage: as even as possible, the remainder to the middle stages (the
    first and last carry the embedding and the LM head). When the layers alone do not split
    evenly, the embedding and the LM head count as one layer each, as Megatron's
    --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split do (Llama-3.1
    405B: 126 layers + 2 over 16 x 8 virtual stages)."""
    if layers % stages and (layers + 2) % stages == 0:
        per = (layers + 2) // stages
        return [per - 1] + [per] * (stages - 2) + [per - 1] if stages > 1 else [layers]
    base, extra = divmod(layers, stages)
    counts = [base] * stages
    order = sorted(range(stages), key=lambda i: (i in (0, stages - 1), abs(i - (stages - 1) / 2)))
    for i in order[:extra]:
        counts[i] += 1
    return counts


@dataclass
class Context:
    """What evaluations of one job share: the device, parameters, per-layer cost cache."""

    job: Job
    params: PerfParams
    device: Device
    policy_dtype: str
    act_bytes: float
    param_bytes: float
    grad_bytes: float
    master: bool
    model_flops_per_token: float

    @property
    def optimizer_bytes(self) -> float:
        """Optimizer-side bytes per parameter, unsharded: FP32 main parameters, m and v (16-bit
        parameters), or m and v only (FP32 parameters)."""
        return 12.0 if self.master and self.param_bytes < 4.0 else 8.0

    @classmethod
    def make(cls, job: Job, params: PerfParams | None = None) -> Context:
        params = params or load_params()
        pol = get_precision(job.precision, "train")
        dev = Device(job.gpu, params)
        a = job.args
        e = 4.0 if pol.matmul_dtype in ("fp32", "tf32") else 2.0
        # Megatron keeps 16-bit parameters (--bf16 / --fp16), FP32 main gradients and FP32 main
        # parameters in the optimizer; torch autocast (amp-*) keeps FP32 parameters.
        param_bytes = 4.0 if pol.name in ("fp32", "tf32") or pol.name.startswith("amp") else 2.0
        master = param_bytes < 4.0 or pol.fp8
        if pol.fp8 and job.fp8_params:  # Megatron/TE --fp8-param-gather: FP8 weights, FP32 main copy
            param_bytes = 1.0
        # PaLM's 6N + 12LHQT per token, as perf/mfu.py counts it for a traced step
        shape = a.shape()
        flops_per_token = 6.0 * (matmul_params_per_token(shape) or 0.0) + 12.0 * attended_width(shape, job.seq_len)
        # FP32 main gradients (Megatron's default, and torch's for FP32 parameters); 16-bit ones when
        # the job reduces gradients in BF16 (Megatron --grad-reduce-in-bf16, NeMo's performance
        # recipes' grad_reduce_in_fp32=False): half the gradient buffer and the data-parallel traffic
        # (--grad-dtype fp16: FP16 gradients reduced in FP16, what Megatron does under --fp16 without
        # --accumulate-allreduce-grads-in-fp32, and DeepSpeed's fp16 engine)
        grad_bytes = 2.0 if job.grad_dtype in ("bf16", "fp16") and param_bytes < 4.0 else 4.0
        return cls(job, params, dev, pol.matmul_dtype, e, param_bytes, grad_bytes, master, flops_per_token)


def _peak_dtype(ctx: Context) -> tuple[float, str]:
    """The datasheet dense peak MFU is measured against (not the sustained-clock rate)."""
    from whichgpu.perf.estimate import mfu_peak_flops

    r = ctx.device.rate(ctx.policy_dtype)
    return mfu_peak_flops(ctx.job.gpu, r.dtype, r.flops / ctx.device.clock_scale), r.dtype


@lru_cache(maxsize=65536)
def _stage_params(a: DecoderArgs, lo: int, hi: int, first: bool, last: bool, tp: int, ep: int,
                  etp: int) -> tuple[float, float]:
    """(parameters, of which expert parameters) one rank of the stage of layers lo..hi-1 holds
    (experts split over etp and ep)."""
    n = 0.0
    experts = 0.0
    for i, count in layer_kinds(a, lo, hi):
        lp = a.layer_params(i)
        if a.is_moe(i):
            ex = a.experts * a.expert_params()
            n += count * ((lp - ex) / tp + ex / etp / ep)
            experts += count * ex / etp / ep
        else:
            n += count * lp / tp
    if first:
        n += a.vocab * a.hidden / tp
    if last:
        n += a.vocab * a.hidden / tp + a.hidden
    return n, experts


@lru_cache(maxsize=1)
def moe_accuracy() -> dict[str, Any]:
    """parallel/moe_accuracy.toml: measured over predicted throughput on the published MoE runs."""
    from pathlib import Path

    from whichgpu.hardware.datafiles import read_toml

    return read_toml(Path(__file__).resolve().parent / "moe_accuracy.toml")


@lru_cache(maxsize=1)
def moe_caveat() -> str:
    """What every MoE layout's figures carry: the planner is optimistic for MoE (measured, not assumed)."""
    q = moe_accuracy()
    by = ", ".join(f"{g} {v:.2f}x" for g, v in q["by_gpu"].items())
    return (f"not calibrated for MoE: on {q['rows']} published Megatron-Bridge MoE runs ({q['models']}; whichgpu "
            f"validate-plan --only moe) measured throughput was {q['p10']:.2f}-{q['p90']:.2f}x the prediction "
            f"(p10-p90, median {q['p50']:.2f}x; median by GPU: {by}; each run: whichgpu validate-plan --only moe "
            "--rows): expect slower than shown")


def _pass_time(gpu_s: float, host_s: float, comm: dict[str, float]) -> tuple[float, dict[str, float]]:
    """(time of one pass, the part of each kind of collective it exposes): the longer of the GPU's
    kernels plus the collectives and the host's time to issue them; what the collectives add
    beyond the longer of the two alone is exposed, shared over the kinds by their times."""
    total = sum(comm.values())
    t = max(gpu_s + total, host_s)
    shown = t - max(gpu_s, host_s)
    return t, {k: (v * shown / total if total > 0 else 0.0) for k, v in comm.items()}


@dataclass(frozen=True, slots=True)
class Scored:
    """A layout scored short of its pipeline schedule (`score`): its memory and whether it fits are
    final, its step time bounded below by `lower_s` (the busiest pipeline rank's work with no bubble
    and no wait for a transfer, plus the rest of the step as `evaluate` adds it); `finish` simulates
    the schedule and gives `evaluate`'s result."""

    plan: Plan
    fits: bool
    peak_memory_bytes: float
    lower_s: float
    finish: Callable[[bool], Result]


def evaluate(ctx: Context, plan: Plan, *, timeline: bool = False) -> Result:
    """Step time, throughput and the worst rank's memory of one layout (check_layout first)."""
    return score(ctx, plan).finish(timeline)


def score(ctx: Context, plan: Plan) -> Scored:
    """`evaluate` in two parts: all but the schedule's simulation now, the rest in `Scored.finish`
    (the search simulates only the layouts whose lower bound may still reach its top)."""
    from whichgpu.parallel.schedule import pipeline_time, simulate

    job, a, dev, params = ctx.job, ctx.job.args, ctx.device, ctx.params
    system = job.system
    mb = plan.micro_batch or 1
    m = plan.grad_accum
    sh = Shard(mb, job.seq_len, plan.tp, plan.cp, plan.ep, plan.sequence_parallel, ctx.policy_dtype, ctx.act_bytes,
               job.attention, plan.etp)
    stages = plan.pp * plan.vp
    counts = split_layers(a.layers, stages)
    bounds = [sum(counts[:i]) for i in range(stages + 1)]
    from whichgpu.hardware.engine import get_engine

    eng = get_engine(plan.engine)
    host_s = 0.0 if eng.graphs else (eng.host_op_us + eng.host_view_us) * 1e-6
    embed, head = edge_costs(a, sh, dev, host_s, eng.cross_entropy)
    recompute = plan.recompute or "none"

    # ---- links
    gpn = system.gpus_per_node
    tp_link = node_link(system, plan.tp, params, plan.p2p) if plan.tp > 1 else None
    cp_span = plan.tp * plan.cp
    cp_link = neighbour_link(system, plan.cp, params, plan.p2p, span=cp_span) if plan.cp > 1 else None

    tp_measured = plan.tp > 1 and plan.p2p and any(m.gpus == plan.tp for m in system.measured_allreduce)

    def tp_coll(nbytes: float) -> float:
        if plan.tp <= 1:
            return 0.0
        if tp_measured:  # NCCL's all-reduce as measured on this system (sequence parallel: its two halves)
            return measured_allreduce_s(system, plan.tp, nbytes) or 0.0
        return collective_time("all_reduce", nbytes, plan.tp, system, params)

    def ring_pass(nbytes: float, link: Link | None, n: int) -> float:
        if link is None or n <= 1:
            return 0.0
        return (n - 1) * (nbytes / link.bytes_per_s + link.step_latency_s)

    def all_to_all(nbytes: float) -> float:
        return all_to_all_time(nbytes, plan.ep, system, params, plan.p2p, span=plan.expert_tp * plan.ep)

    split = dict.fromkeys(("compute", "tp", "cp", "ep", "pp_p2p", "bubble", "dp", "optimizer", "overhead"), 0.0)
    f_s: list[float] = []
    b_s: list[float] = []
    w_s: list[float] = []
    comm_per_stage: list[dict[str, float]] = []
    raw_per_stage: list[dict[str, float]] = []
    act_per_stage: list[tuple[float, float, float]] = []  # (saved per micro-batch, input per micro-batch, one layer)
    passes = 3 if recompute == "full" else 2

    def per_layer(i: int) -> tuple[float, ...]:
        """One layer of `i`'s kind: (forward, input-gradient and weight-gradient passes, saved
        activation and input bytes, the collectives' time by kind, what the passes expose of it)."""
        lc: LayerCost = layer_cost(a, i, sh, dev, host_s)
        tp_raw = lc.tp_collectives * tp_coll(lc.tp_bytes)
        # --tp-comm-overlap pipelines the collectives with the GEMMs they feed: hidden up to
        # half the layer's kernels (the GEMM share), the rest exposed
        tp_f = max(0.0, tp_raw - 0.5 * lc.forward_gpu_s) if plan.tp_comm_overlap else tp_raw
        cp_raw_f = ring_pass(lc.cp_bytes, cp_link, plan.cp)
        cp_raw_b = ring_pass(2 * lc.cp_bytes, cp_link, plan.cp)
        cp_f = max(0.0, cp_raw_f - lc.attention_fwd_s)
        cp_b = max(0.0, cp_raw_b - 2.5 * lc.attention_fwd_s)
        ep_f = 2 * all_to_all(lc.ep_bytes)
        # Collectives are asynchronous to the host: where eager Python issuing the kernels is
        # the bottleneck, the GPU runs them in the slack the host leaves, so a pass takes the
        # longer of its kernels plus its collectives and the host's time to issue them
        fwd, ex_f = _pass_time(lc.forward_gpu_s, lc.forward_host_s, {"tp": tp_f, "cp": cp_f, "ep": ep_f})
        bwd, ex_b = _pass_time(lc.input_grad_gpu_s, lc.input_grad_host_s, {"tp": tp_f, "cp": cp_b, "ep": ep_f})
        exposed = [ex_f[k] + ex_b[k] + (ex_f[k] if recompute == "full" else 0.0) for k in ("tp", "cp", "ep")]
        if recompute == "full":
            bwd += fwd
        elif recompute == "selective":
            bwd += lc.attention_fwd_s
        return (fwd, bwd, lc.weight_grad_s, lc.activation_bytes, lc.input_bytes, passes * tp_raw,
                cp_raw_f * (passes - 1) + cp_raw_b, passes * ep_f, *exposed)

    per_kind: dict[tuple[int, bool, bool], tuple[float, ...]] = {}
    for v in range(stages):
        f = b = w = 0.0
        comm = {"tp": 0.0, "cp": 0.0, "ep": 0.0}
        raw = {"tp": 0.0, "cp": 0.0, "ep": 0.0}
        saved = inp = one = 0.0
        for i, count in layer_kinds(a, bounds[v], bounds[v + 1]):
            kind = a.kind(i)
            per = per_kind.get(kind)
            if per is None:
                per = per_kind[kind] = per_layer(i)
            fwd, bwd, wgt, act, inp1, raw_tp, raw_cp, raw_ep, c_tp, c_cp, c_ep = per
            raw["tp"] += count * raw_tp
            raw["cp"] += count * raw_cp
            raw["ep"] += count * raw_ep
            comm["tp"] += count * c_tp
            comm["cp"] += count * c_cp
            comm["ep"] += count * c_ep
            f += count * (fwd)
            b += count * (bwd)
            w += count * (wgt)
            saved += count * (act)
            inp += count * (inp1)
            one = max(one, act)
        if v == 0 or (v == stages - 1 and plan.pp > 1):
            # the training loop's host work per micro-batch (Megatron: fetch and broadcast the batch,
            # build the attention mask, average the loss over data parallel), on the stages that load
            # data: a synchronising step the GPU waits for however busy it is
            f += eng.microbatch_host_ms * 1e-3
        if v == 0:
            f += embed.forward_s
            b += embed.input_grad_s
        if v == stages - 1:
            f += head.forward_s
            b += head.input_grad_s
            w += head.weight_grad_s
        f_s.append(f)
        b_s.append(b)
        w_s.append(w)
        comm_per_stage.append(comm)
        raw_per_stage.append(raw)
        act_per_stage.append((saved, inp, one))

    # ---- pipeline
    p2p = 0.0
    if plan.pp > 1:
        nbytes = mb * job.seq_len / plan.cp * a.hidden * ctx.act_bytes / (plan.tp if plan.tp > 1 else 1)
        stride = plan.tp * plan.cp * plan.dp
        if stride >= gpn and system.scaleout is not None:
            bw = system.scaleout.gbps_per_gpu * params.nccl_efficiency * 1e9
            lat = system.scaleout.latency_us * 1e-6
        else:
            link = node_link(system, 2, params, plan.p2p)
            bw, lat = link.bytes_per_s, link.step_latency_s
        p2p = lat + nbytes / bw
    # ---- per-rank busy time split
    rank_of = [_rank_of(v, plan) for v in range(stages)]
    per_rank_work = [0.0] * plan.pp
    per_rank_comm = [dict.fromkeys(("tp", "cp", "ep"), 0.0) for _ in range(plan.pp)]
    stages_of: list[list[int]] = [[] for _ in range(plan.pp)]
    for v in range(stages):
        r = rank_of[v]
        stages_of[r].append(v)
        per_rank_work[r] += m * (f_s[v] + b_s[v] + w_s[v])
        for k in ("tp", "cp", "ep"):
            per_rank_comm[r][k] += m * comm_per_stage[v][k]
    worst = max(range(plan.pp), key=lambda r: per_rank_work[r])
    for k in ("tp", "cp", "ep"):
        split[k] = per_rank_comm[worst][k]
    split["compute"] = per_rank_work[worst] - sum(per_rank_comm[worst].values())
    split["pp_p2p"] = 0.0

    # ---- memory and data-parallel collectives of the worst-memory rank
    mem_by_rank = []
    grads_by_rank = []
    peaks = stage_peaks(plan.schedule, plan.pp, m, plan.vp) if plan.pp > 1 else None
    for r in range(plan.pp):
        vs = stages_of[r]
        n = ex = 0.0
        saved = inp = one = 0.0
        for v in vs:
            pn, pe = _stage_params(a, bounds[v], bounds[v + 1], v == 0, v == stages - 1, plan.tp, plan.ep,
                                   plan.expert_tp)
            n += pn
            ex += pe
            s_, i_, o_ = act_per_stage[v]
            saved += s_
            inp += i_
            one = max(one, o_)
        grads_by_rank.append((n, ex))
        pa, pw = (peaks[0][r], peaks[1][r]) if peaks else (1, 0)
        mem_by_rank.append(_memory(ctx, plan, n, ex, saved / len(vs), inp / len(vs), one, r, pa, pw,
                                   r == rank_of[stages - 1], len(vs), sh))
    worst_mem = max(range(plan.pp), key=lambda r: sum(mem_by_rank[r].values()))
    memory = mem_by_rank[worst_mem]
    peak = sum(memory.values())

    n_rank, ex_rank = max(grads_by_rank, key=lambda t: t[0])
    dp_total, dp_exposed, dp_text = _dp_comm(ctx, plan, n_rank, ex_rank, b_s, w_s, f_s, m)
    comm_total = {k: m * sum(raw_per_stage[v][k] for v in stages_of[worst]) for k in ("tp", "cp", "ep")}
    comm_total["dp"] = dp_total
    split["dp"] = dp_exposed
    opt_params = n_rank / (plan.dp if plan.sharding != "ddp" else 1)
    split["optimizer"] = memory_time(opt_params * ADAM_BYTES_PER_PARAM, dev) if opt_params else 0.0
    fixed0 = eng.step_host_s("train", plan.step_host_ms)
    # Synchronous ranks wait for the slowest once a step (perf/params.toml planner_dp_jitter, the
    # expected maximum of N jittered step times), however many micro-batches it holds.
    spread = math.sqrt(2.0 * math.log(plan.dp * plan.pp)) if plan.dp * plan.pp > 1 else 0.0
    # the makespan holds every pass of the busiest rank: at least its work (the step grows with it)
    lower = per_rank_work[worst] + dp_exposed + split["optimizer"] + fixed0
    lower += lower * params.planner_dp_jitter * spread
    capacity = job.gpu.usable_memory_bytes
    fits = peak <= capacity

    def finish(timeline: bool = False) -> Result:
        zb = plan.schedule.startswith("zb")
        if plan.pp > 1:
            ff, bb, ww = ((f_s, b_s, w_s) if zb
                          else (f_s, [x + y for x, y in zip(b_s, w_s, strict=True)], [0.0] * stages))
            chunks = plan.vp
            makespan, bubble, _ = pipeline_time(plan.schedule, plan.pp, m, ff, bb, ww, p2p, chunks)
            tl = simulate(plan.schedule, plan.pp, m, ff, bb, ww, p2p, chunks) if timeline else None
        else:
            makespan = m * (f_s[0] + b_s[0] + w_s[0])
            bubble = 0.0
            tl = None
        out = dict(split)
        # what the makespan holds beyond the worst rank's work is the bubble (includes p2p waits)
        out["bubble"] = max(0.0, makespan - per_rank_work[worst])
        step = makespan + dp_exposed + out["optimizer"] + fixed0
        jitter = step * params.planner_dp_jitter * spread
        step += jitter
        out["overhead"] = fixed0 + jitter
        tokens = job.global_batch * job.seq_len
        tps = tokens / step
        peak_flops, peak_dtype = _peak_dtype(ctx)
        model_flops = ctx.model_flops_per_token * tokens / job.gpus
        hw = model_flops * (4.0 / 3.0 if recompute == "full" else 1.0)
        reason = "" if fits else (
            f"needs {peak / 1e9:.1f} GB on pipeline rank {worst_mem} (weights {memory['weights'] / 1e9:.1f}, "
            f"gradients {memory['gradients'] / 1e9:.1f}, optimizer {memory['optimizer'] / 1e9:.1f}, "
            f"activations {memory['activations'] / 1e9:.1f}) of {capacity / 1e9:.1f} GB usable "
            f"({job.gpu.usable_memory_text})")
        return Result(
            plan=plan, fits=fits, reason=reason, step_s=step, tokens_per_s=tps,
            model_tflops_per_gpu=model_flops / step / 1e12, mfu=model_flops / step / peak_flops,
            hfu=hw / step / peak_flops, split=out, memory=memory, peak_memory_bytes=peak,
            bubble_fraction=bubble, stage_s=tuple(zip(f_s, b_s, w_s, strict=True)), worst_stage=worst_mem,
            comm_total=comm_total, timeline=tl,
            assumptions={
                "precision": f"{job.precision} (matmuls on the {peak_dtype} path; MFU against {peak_flops / 1e12:g} TFLOP/s)",
                "mfu": "model FLOPs per token 6N + 12LHQT (PaLM appendix B), N = matmul parameters incl. the LM head",
                "layer_costs": "analytic Megatron/TE layer kernels timed by the kernel model (parallel/layer.py)",
                "host": (f"{eng.name}: " + ("CUDA graphs" if eng.graphs else f"{eng.host_op_us + eng.host_view_us:g} us per kernel")
                         + f", {eng.microbatch_host_ms:g} ms per micro-batch, {fixed0 * 1e3:g} ms per step"
                         + (" (--step-host-ms)" if plan.step_host_ms is not None else "")
                         + ("" if eng.graphs else "; a pass takes the longer of its kernels plus collectives and the host's "
                            "issue time (collectives run in a host-bound pass's slack)")),
                "loss": ("Megatron's unfused vocab-parallel cross-entropy over FP32 logits (eight passes; "
                         "--cross-entropy-loss-fusion off, Megatron-LM's default): --engine nemo for the fused loss"
                         if eng.cross_entropy == "vocab-parallel"
                         else "cross-entropy as one fused kernel each way over the logits (NeMo's cross_entropy_loss_fusion, "
                              "llm-foundry's fused_crossentropy)"),
                "gradients": ("FP32 main gradients, reduced in FP32" if ctx.grad_bytes == 4.0
                              else "FP16 gradients, reduced in FP16 (Megatron's --fp16 default, DeepSpeed's fp16 engine)"
                              if job.grad_dtype == "fp16" else "BF16 gradients, reduced in BF16 (--grad-reduce-in-bf16)")
                + (", FP8 weights (--fp8-param-gather)" if ctx.param_bytes == 1.0 else ""),
                "attention": {"flash": "fused flash kernels (FlashAttention-2 or later), causal",
                              "flash1": "first-generation fused flash kernels (FlashAttention-1, 2022 Triton), causal, "
                                        "at half FlashAttention-2's rate (Dao 2023)",
                              "unfused": "score GEMMs, fused softmax and dropout (Megatron-LM before FlashAttention)",
                              }[job.attention]
                + ("" if attention_runs("flash", job.gpu) else
                   f"; no flash kernels on {job.gpu.architecture.capitalize()} (they need Ampere or newer)"),
                "data_parallel": dp_text,
                "pipeline": (f"{plan.schedule}, {plan.pp} stages x {plan.vp} chunks, {m} micro-batches, simulated; "
                             f"p2p {p2p * 1e6:.0f} us per transfer") if plan.pp > 1 else "none",
                "context_parallel": (f"{plan.cp} ranks pass K/V around a ring (slowest hop: {cp_link.text}), overlapped "
                                     "with the attention kernels") if cp_link is not None else "none",
                "tensor_parallel": (f"{plan.tp} GPUs over {tp_link.text if tp_link else ''}, 2 collectives per layer per pass"
                                    + (", sequence parallel" if plan.sequence_parallel else "")
                                    + (f", NCCL all-reduce times measured on {system.id} (nccl-tests)" if tp_measured
                                       else "" if plan.sequence_parallel
                                       else ", NVLS all-reduce" if nvls_speedup(system, plan.tp) > 1 else ", ring all-reduce")
                                    + (", overlapped with GEMMs" if plan.tp_comm_overlap else ""))
                if plan.tp > 1 else "none",
                "memory": (f"{'HIP context + RCCL' if job.gpu.vendor == 'AMD' else 'CUDA context + NCCL'} "
                           f"{CONTEXT_BYTES / GIB:g} GiB, fragmentation {FRAGMENTATION:.0%} of "
                           "activations; activations of the schedule's peak in-flight micro-batches; fits in "
                           f"{job.gpu.usable_memory_text} = {capacity / 1e9:.1f} GB"),
                "layout_order": "Megatron rank order tp, cp, dp, pp",
                **({"moe": f"{a.experts} experts, top-{a.experts_per_token}, routing assumed balanced (dropless), "
                           f"grouped expert GEMMs timed per expert, one kernel per local expert ({local_experts(a, plan.ep)} "
                           "here: Transformer Engine's GroupedLinear), "
                           + (f"all-to-all dispatch and combine over {plan.ep} GPUs"
                              + (" (across nodes: each GPU's share for other nodes through its own network rail)"
                                 if plan.expert_tp * plan.ep > gpn else "") if plan.ep > 1
                              else "every expert on each GPU") + "; " + moe_caveat()}
                   if a.experts else {}),
            },
        )
    return Scored(plan, fits, peak, lower, finish)


def stage_peaks(schedule: str, p: int, m: int, v: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per pipeline rank: the most (micro-batch, chunk) activations held at once, and the most
    weight-gradient passes pending, counted along the schedule's order (`schedule.steady_peaks`)."""
    from whichgpu.parallel.schedule import steady_peaks

    return steady_peaks(schedule, p, m, v)


@lru_cache(maxsize=256)
def largest_layer(a: DecoderArgs) -> int:
    """Parameters of the largest layer (the unit ZeRO-3 / FSDP gathers at once)."""
    return max(a.layer_params(i) for i, _ in layer_kinds(a, 0, a.layers))


def _rank_of(v: int, plan: Plan) -> int:
    """Pipeline rank that holds virtual stage v."""
    p = plan.pp
    if plan.schedule == "zb-v":
        c, r = divmod(v, p)
        return r if c == 0 else p - 1 - r
    return v % p


def _memory(ctx: Context, plan: Plan, n: float, ex: float, saved: float, inp: float, one: float, rank: int,
            peak_act: int, peak_w: int, last: bool, chunks: int, sh: Shard) -> dict[str, float]:
    """Bytes on one pipeline rank."""
    job, a = ctx.job, ctx.job.args
    dp = plan.dp
    shard_over = plan.shard_gpus(job.system.gpus_per_node) if plan.sharding == "fsdp-hybrid" else dp
    dense = n - ex
    ex_dp = max(1, plan.tp * dp * plan.cp // (plan.ep * plan.expert_tp))  # data-parallel replicas of an expert
    # the fraction of weights, gradients and optimizer states each GPU keeps (memory/states.py)
    dense_f = shard_factors(plan.sharding, shard_over)
    expert_f = shard_factors(plan.sharding, ex_dp)
    weights, grads, optimizer = ((dense * fd + ex * fe) * per for fd, fe, per in
                                 zip(dense_f, expert_f, (ctx.param_bytes, ctx.grad_bytes, ctx.optimizer_bytes),
                                     strict=True))
    if plan.sharding in FULL_SHARD:
        # the gathered unit and the prefetched next one, 16-bit (or FP8)
        weights += 2 * largest_layer(a) / plan.tp * min(ctx.param_bytes, 2.0)
    recompute = plan.recompute or "none"
    # In-flight micro-batches in chunk units: this rank's peak in the simulated schedule (stage_peaks).
    # Under the zero-bubble schedules a micro-batch whose W is still pending keeps the weight-gradient
    # GEMMs' inputs and output gradients: half its saved activations, as an allowance.
    held = max(1, peak_act)
    if plan.pp == 1:
        held = 1
    if recompute == "full":
        acts = held * inp + one
    else:
        acts = held * saved + peak_w * saved * 0.5
    if last:
        v = -(-a.vocab // plan.tp)
        acts += sh.tokens * v * (ctx.act_bytes + 4.0)
    other = CONTEXT_BYTES + FRAGMENTATION * acts
    return {"weights": weights, "gradients": grads, "optimizer": optimizer, "activations": acts, "other": other}


def _dp_comm(ctx: Context, plan: Plan, n: float, ex: float, b_s: list[float], w_s: list[float], f_s: list[float],
             m: int) -> tuple[float, float, str]:
    """(total, exposed, description) of the data-parallel collectives per optimizer step."""
    job, params = ctx.job, ctx.params
    dp = plan.dp
    if dp <= 1:
        return 0.0, 0.0, "none"
    system = job.system
    link = ring_link(system, dp, params, plan.p2p, span=plan.tp * plan.cp * dp)
    grads = (n - ex) * ctx.grad_bytes
    a = job.args
    if plan.sharding in FULL_SHARD:
        # FSDP / ZeRO-3 communicate one wrapped unit (a transformer block) per collective
        bucket = max(plan.bucket_mb * 1e6, largest_layer(a) / plan.tp * 2.0)
    else:
        # Megatron's gradient buckets: max(40M, 1M x dp) parameters (--ddp-bucket-size default)
        bucket = max(plan.bucket_mb * 1e6, max(40e6, 1e6 * dp) * ctx.grad_bytes)

    span = plan.tp * plan.cp * dp

    def coll(nbytes: float, n_: int, lk: Link) -> float:
        return ring_collective(nbytes, n_, lk, bucket, system, plan.p2p, span)

    backward_last = max(b + w for b, w in zip(b_s, w_s, strict=True))
    if plan.sharding in FULL_SHARD:
        p16 = (n - ex) * min(ctx.param_bytes, 2.0)  # the gathered weights: 16-bit, or FP8
        per_micro = 2 * coll(p16, dp, link) + coll((n - ex) * 2.0, dp, link)  # gradients reduced in 16 bits
        window = max(f + b + w for f, b, w in zip(f_s, b_s, w_s, strict=True))
        exposed = max(coll(min(p16, bucket), dp, link), per_micro - OVERLAP * window) * m
        return per_micro * m, min(exposed, per_micro * m), f"{plan.sharding_label} over {dp} GPUs, {link.text}"
    if plan.sharding == "ddp":  # all-reduce: NCCL's fastest of ring, tree and NVLS
        total, algo = allreduce_time(grads, dp, link, bucket, system, span, plan.p2p)
        last = allreduce_time(min(grads, bucket), dp, link, bucket, system, span, plan.p2p)[0]
    else:  # reduce-scatter the gradients, all-gather the updated 16-bit parameters (rings)
        total, algo = coll(grads, dp, link) + coll((n - ex) * min(ctx.param_bytes, 2.0), dp, link), "ring"
        last = coll(min(grads, bucket), dp, link)
    window = backward_last if plan.comm_overlap else 0.0
    exposed = max(last, total - OVERLAP * window)
    return total, min(exposed, total), f"{plan.sharding_label} over {dp} GPUs ({algo}), {link.text}"


