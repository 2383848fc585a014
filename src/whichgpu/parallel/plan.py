"""The plan: how a workload runs (the third input, beside the workload and the system). Torch-free.

One frozen object carries every switch of "how": the parallel degrees, the micro-batch and
gradient accumulation, the data-parallel sharding, recomputation, the pipeline schedule, the
engine, overlap, offload and the power cap. Performance (perf/), memory (memory/), recommend,
validate and the planner all take it; reports echo it. A search is an enumeration of plans.

Names of the sharding modes live here and nowhere else (parallel/sharding.py and memory/states.py
read them).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, get_args

from whichgpu import limits
from whichgpu.errors import InputError, NotModelledError, UnknownNameError

Sharding = Literal["ddp", "zero1", "zero2", "zero3", "fsdp-full", "fsdp-hybrid", "fsdp-grad-op"]
Recompute = Literal["none", "selective", "full"]
Schedule = Literal["1f1b", "gpipe", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-v"]
Overlap = Literal["max", "sum"]
Offload = Literal["none", "optimizer"]

SHARDINGS: tuple[str, ...] = get_args(Sharding)
RECOMPUTES: tuple[str, ...] = get_args(Recompute)
SCHEDULES: tuple[str, ...] = get_args(Schedule)
OFFLOADS: tuple[str, ...] = get_args(Offload)
# Parameters are sharded too (ZeRO-3 = FSDP FULL_SHARD; HYBRID_SHARD shards inside a node).
FULL_SHARD: tuple[str, ...] = ("zero3", "fsdp-full", "fsdp-hybrid")
# Gradients are sharded (ZeRO-2 and up; FSDP SHARD_GRAD_OP = ZeRO-2).
GRAD_SHARD: tuple[str, ...] = ("zero2", "zero3", "fsdp-full", "fsdp-hybrid", "fsdp-grad-op")
LABELS: dict[str, str] = {
    "ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3", "fsdp-full": "FSDP FULL_SHARD",
    "fsdp-hybrid": "FSDP HYBRID_SHARD", "fsdp-grad-op": "FSDP SHARD_GRAD_OP",
}
DEGREES: dict[str, str] = {"dp": "data", "tp": "tensor", "pp": "pipeline", "cp": "context", "ep": "expert"}
_MODELLED_TRAIN_DEGREES = ("dp",)  # the planner issue models the others


@dataclass(frozen=True, kw_only=True)
class Plan:
    """How one workload runs. Every field is echoed in reports (``to_dict``)."""

    dp: int = 1
    """Data-parallel degree: model replicas (or shards, with ZeRO/FSDP) that split the batch."""
    tp: int = 1
    """Tensor-parallel degree (Megatron split of attention heads and FFN); 1 = off."""
    pp: int = 1
    """Pipeline-parallel degree: stages the layers are split into; 1 = off."""
    vp: int = 1
    """Virtual pipeline stages per pipeline rank (interleaved schedule); 1 = not interleaved."""
    cp: int = 1
    """Context-parallel degree (the sequence split over GPUs, ring attention); 1 = off."""
    ep: int = 1
    """Expert-parallel degree (MoE experts spread over the data-parallel ranks); 1 = off."""
    etp: int | None = None
    """Expert tensor parallelism: the tensor-parallel split of each expert's weights (Megatron
    --expert-tensor-parallel-size); None = tp. Below tp, the expert-parallel group folds over the
    tensor-parallel ranks too (Megatron's MoE parallel folding): ep x etp divides tp x cp x dp."""
    precision: str | None = None
    """Numeric policy (fp32, tf32, amp-bf16, amp-fp16, bf16, fp16, fp8, int8, int4, ...,
    workload/precision.py); None = as the workload was traced."""
    micro_batch: int | None = None
    """Samples per GPU per micro-batch; None = the workload's batch size as traced."""
    grad_accum: int = 1
    """Micro-batches per optimizer step: the optimizer step and the gradient collectives run once
    per ``grad_accum`` micro-batches; times are reported per micro-batch."""
    sharding: Sharding = "ddp"
    """Data-parallel sharding of the model states: ddp (replicas), zero1 (optimizer states),
    zero2 (+ gradients), zero3 (+ parameters), fsdp-full (= ZeRO-3), fsdp-grad-op (= ZeRO-2),
    fsdp-hybrid (ZeRO-3 inside a node of the system, replicas across nodes)."""
    recompute: Recompute | None = None
    """Activation recomputation: none, selective (attention core) or full (each block's forward
    again in backward); None = as the workload was traced."""
    schedule: Schedule = "1f1b"
    """Pipeline schedule (with pp > 1): gpipe, 1f1b, interleaved-1f1b (needs vp > 1), or the zero-bubble
    schedules that split backward into input- and weight-gradient passes: zb-h1 (1F1B's memory),
    zb-h2 (twice the warm-up), zb-v (two model chunks per rank in a V: vp = 2)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism (with tp > 1): norms, dropout and residuals sharded over the
    sequence; the all-reduces become reduce-scatter + all-gather (same bytes), activations / tp."""
    tp_comm_overlap: bool = False
    """Overlap the tensor-parallel collectives with the GEMMs (Megatron --tp-comm-overlap)."""
    engine: str = "pytorch"
    """Execution engine profile (hardware/engines/*.toml): eager PyTorch, torch.compile, CUDA
    graphs, TensorRT-LLM, llama.cpp, vLLM, ...: launch costs, fusion, kernels."""
    overlap: Overlap = "max"
    """Per-kernel compute/memory overlap: max (a kernel takes the longer of the two) or sum."""
    comm_overlap: bool = True
    """Overlap the data-parallel collectives with backward (DDP buckets, FSDP prefetch)."""
    bucket_mb: float = 25.0
    """Gradient bucket size of the data-parallel collectives (DDP's default 25 MB)."""
    offload: Offload = "none"
    """ZeRO-Offload / FSDP CPU offload: optimizer states, master weights and FP32 gradients in
    CPU RAM (needs a ZeRO or FSDP sharding)."""
    power_limit_w: float | None = None
    """A power cap per GPU (nvidia-smi -pl), W; None = the card's TDP."""
    step_host_ms: float | None = None
    """Host time per step outside kernel issue (a training loop's data loading, logging, reading
    the loss; an inference loop's input preparation), ms; None = the engine's fitted figure."""
    use_measured: bool = True
    """Use measured matmul ceilings from the catalog where present."""
    p2p: bool = True
    """NCCL peer-to-peer between GPUs; False = NCCL_P2P_DISABLE=1 (transfers staged in host memory)."""
    optimizer_state_bits: int | None = None
    """Bits of each optimizer state value (8, 16 or 32); None = from the optimizer and precision."""
    master_weights: bool = True
    """16-bit parameters keep FP32 master weights, an FP32 gradient copy and FP32 states (apex O2,
    DeepSpeed, Megatron). False: plain torch.optim on the 16-bit parameters."""
    set_to_none: bool = True
    """``zero_grad(set_to_none=True)`` (PyTorch's default): gradients freed after each step."""
    ddp_bucket_view: bool = False
    """DDP ``gradient_as_bucket_view=True``: gradients are views of the all-reduce buckets."""
    fragmentation: float | None = None
    """Allocator fragmentation as a fraction of the memory that churns; None = the fitted default."""
    cuda_context_bytes: float | None = None
    """Per-process CUDA context outside PyTorch's allocator; None = the default allowance."""

    # ---- derived ---------------------------------------------------------------------------
    @property
    def expert_tp(self) -> int:
        """The tensor-parallel split of each expert (etp, or tp when not set)."""
        return self.etp if self.etp is not None else self.tp

    @property
    def gpus(self) -> int:
        """GPUs the plan occupies: dp x tp x pp x cp (experts are spread over the dp ranks)."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def compile(self) -> bool:
        """The engine fuses kernels (torch.compile, XLA, TensorRT-LLM, ...)."""
        from whichgpu.hardware.engine import get_engine

        return get_engine(self.engine).fuses

    @property
    def offload_optimizer(self) -> bool:
        return self.offload == "optimizer"

    @property
    def sharding_label(self) -> str:
        return LABELS[self.sharding]

    def parallel_label(self) -> str:
        """E.g. 'single GPU', 'DDP x 8', 'ZeRO-3 x 16, TP 2'."""
        parts = [f"{self.sharding_label} x {self.dp}"] if self.dp > 1 else []
        parts += [f"{k.upper()} {getattr(self, k)}" for k in ("tp", "pp", "cp", "ep") if getattr(self, k) > 1]
        if self.etp is not None and self.etp != self.tp:
            parts.append(f"ETP {self.etp}")
        if self.pp > 1 and self.vp > 1:
            parts.append(f"VP {self.vp}")
        return ", ".join(parts) or "single GPU"

    def shard_gpus(self, gpus_per_node: int) -> int:
        """GPUs the model states are sharded over: the data-parallel group; under fsdp-hybrid the
        data-parallel ranks of one node (HYBRID_SHARD shards inside a node, replicates across)."""
        if self.sharding == "fsdp-hybrid":
            return max(1, min(self.dp, gpus_per_node // self.tp))
        return self.dp

    def with_(self, **changes: Any) -> Plan:
        """A copy with fields changed (validated)."""
        p = replace(self, **changes)
        p.validate()
        return p

    # ---- checks ----------------------------------------------------------------------------
    def validate(self, task: str = "train") -> None:
        """One-line errors in the plan's own terms (the CLI maps field names to its flags)."""
        for name in ("dp", "tp", "pp", "vp", "cp", "ep", "grad_accum"):
            v = getattr(self, name)
            hi = int((limits.GRAD_ACCUM if name == "grad_accum" else limits.GPUS).hi)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
                what = {"vp": "virtual pipeline stages", "grad_accum": "gradient accumulation steps"}.get(
                    name, f"{DEGREES.get(name, name)}-parallel degree")
                raise InputError(f"{what} must be a whole number >= 1 and <= {hi}, got {v!r}", field=name)
        if self.etp is not None and (isinstance(self.etp, bool) or not isinstance(self.etp, int)
                                     or not 1 <= self.etp <= int(limits.GPUS.hi)):
            raise InputError(f"expert tensor-parallel degree must be a whole number >= 1 and <= "
                             f"{int(limits.GPUS.hi)}, got {self.etp!r}", field="etp")
        if self.micro_batch is not None and (isinstance(self.micro_batch, bool) or self.micro_batch < 1):
            raise InputError(f"micro_batch must be >= 1, got {self.micro_batch!r}", field="micro_batch")
        for name, valid in (("sharding", SHARDINGS), ("schedule", SCHEDULES), ("offload", OFFLOADS)):
            if getattr(self, name) not in valid:
                raise UnknownNameError(name, str(getattr(self, name)), valid, field=name)
        if self.recompute is not None and self.recompute not in RECOMPUTES:
            raise UnknownNameError("recompute", str(self.recompute), RECOMPUTES, field="recompute")
        if self.overlap not in get_args(Overlap):
            raise InputError(f"overlap must be 'max' or 'sum', got {self.overlap!r}", field="overlap")
        if not (self.bucket_mb > 0 and math.isfinite(self.bucket_mb)):
            raise InputError(f"bucket_mb must be > 0, got {self.bucket_mb}", field="bucket_mb")
        if self.power_limit_w is not None and not limits.POWER_W.ok(self.power_limit_w):
            raise InputError(f"power_limit_w must be {limits.POWER_W.describe()} W, got {self.power_limit_w}",
                             field="power_limit_w")
        if self.step_host_ms is not None and not limits.STEP_HOST_MS.ok(self.step_host_ms):
            raise InputError(f"step_host_ms must be {limits.STEP_HOST_MS.describe()} ms, got {self.step_host_ms}",
                             field="step_host_ms")
        if self.optimizer_state_bits not in (None, 8, 16, 32):
            raise InputError(f"optimizer_state_bits must be 8, 16 or 32, got {self.optimizer_state_bits}",
                             field="optimizer_state_bits")
        if self.fragmentation is not None and not 0.0 <= self.fragmentation < 1.0:
            raise InputError(f"fragmentation must be in [0, 1), got {self.fragmentation}", field="fragmentation")
        if self.cuda_context_bytes is not None and self.cuda_context_bytes < 0:
            raise InputError(f"cuda_context_bytes must be >= 0, got {self.cuda_context_bytes}",
                             field="cuda_context_bytes")
        if self.offload != "none" and self.sharding == "ddp":
            raise InputError("optimizer offload is ZeRO-Offload / FSDP CPU offload: it needs a sharding of zero1, "
                             "zero2, zero3 or an fsdp mode (zero2 on a single GPU works)", field="offload")
        if self.schedule == "zb-v" and self.vp != 2:
            raise InputError(f"the zb-v schedule runs two model chunks per rank (vp 2), got vp {self.vp}", field="vp")
        if self.sequence_parallel and self.tp < 2:
            raise InputError("sequence parallelism shards along the tensor-parallel group: it needs tp >= 2",
                             field="sequence_parallel")
        if self.schedule == "interleaved-1f1b" and self.vp < 2:
            raise InputError("the interleaved-1f1b schedule needs vp >= 2 virtual stages per rank", field="vp")
        if self.vp > 1 and self.pp < 2:
            raise InputError(f"vp {self.vp} virtual stages need pipeline parallelism (pp >= 2)", field="vp")
        if self.vp > 1 and self.schedule not in ("interleaved-1f1b", "zb-v"):
            raise InputError(f"vp {self.vp} virtual stages need the interleaved-1f1b or zb-v schedule, "
                             f"not {self.schedule}", field="schedule")
        from whichgpu.hardware.engine import get_engine

        get_engine(self.engine)  # an unknown engine is a one-line error with suggestions
        if task != "train":
            if self.sharding != "ddp" or self.offload != "none":
                raise InputError("sharding and optimizer offload apply to training; inference holds the whole "
                                 "model on each GPU", field="sharding")
            if self.recompute not in (None, "none"):
                raise InputError("activation recomputation applies to training", field="recompute")

    def require_modelled(self, *, tp_traced: bool = False) -> None:
        """Raise NotModelledError for degrees the performance and memory models do not cover yet
        (tensor parallelism is modelled where the trace holds one rank of a Megatron split)."""
        for name in ("tp", "pp", "cp", "ep"):
            if getattr(self, name) > 1 and not (name == "tp" and tp_traced):
                raise NotModelledError(f"{DEGREES[name]} parallelism ({name} {getattr(self, name)}) is not "
                                       "modelled yet" + (" for this model (built-in decoders split by tensor "
                                                         "parallelism)" if name == "tp" else ""), field=name)

    def check_trace(self, batch_size: int, checkpointing: str, precision: str = "") -> None:
        """The trace must be of this plan's precision, micro-batch and recomputation."""
        if self.precision is not None and precision and self.precision != precision:
            raise InputError(f"the plan's precision {self.precision!r} differs from the traced {precision!r}",
                             field="precision")
        if self.micro_batch is not None and self.micro_batch != batch_size:
            raise InputError(f"the plan's micro-batch {self.micro_batch} differs from the traced batch {batch_size}",
                             field="micro_batch")
        if self.recompute is not None and self.recompute != checkpointing:
            raise InputError(f"the plan recomputes {self.recompute!r} but the workload was traced with "
                             f"checkpointing {checkpointing!r}", field="recompute")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gpus"] = self.gpus
        d["sharding_label"] = self.sharding_label
        return d


def make_plan(task: str = "train", **fields: Any) -> Plan:
    """A validated Plan from loosely typed values (command-line strings): a bad mode name is a
    one-line error naming the valid ones, not a type error."""
    plan = Plan(**fields)
    plan.validate(task)
    return plan
