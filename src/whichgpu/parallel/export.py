"""Export a training layout to the launchers and configs people run: Megatron-LM, DeepSpeed,
torchtitan and torchrun. Torch-free (standard library only).

One ``ExportJob`` (model facts + Plan + batch and cluster) becomes one text file per format. Each
output names whichgpu, the model, the layout and its assumptions in a comment header (DeepSpeed's
JSON has no comments: a top-level "whichgpu" block carries them; DeepSpeed's parser ignores unknown
top-level keys and rejects unknown nested ones). What a format cannot express is an ``InputError``
naming the problem and what is valid; a substitution that keeps the math (Megatron runs GPipe's
bubble with 1F1B) is said in a comment.

Argument and key names, and where they were read:
* Megatron-LM: megatron/training/arguments.py (NVIDIA/Megatron-LM, 2025, commit 000c4ac).
* DeepSpeed 0.19.8: deepspeed/runtime/config.py, runtime/zero/config.py (checked by its parser).
* torchtitan: the TOML job-config layout of torchtitan/config/job_config.py (commit 000204a, the
  ``--job.config_file`` releases); torchtitan 0.3.0 keeps [training] and [parallelism] as the same
  ``--section.key`` overrides of its Python config registry.
* torchrun: torch.distributed.run (torch 2.13).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from whichgpu.errors import InputError
from whichgpu.parallel.plan import Plan
from whichgpu.workload.zoo.llm.args import DecoderArgs

FORMATS = ("megatron", "deepspeed", "torchtitan", "torchrun")
TRAIN_PRECISIONS = ("fp32", "tf32", "amp-bf16", "amp-fp16", "bf16", "fp16", "fp8")
PORT = 29500
PLACEHOLDERS = "dataset paths and tokenizer are placeholders; learning rate and optimizer are defaults"


@dataclass(frozen=True)
class ExportJob:
    """One training run to export: the model, its plan, the batch and the cluster."""

    model_id: str
    """The zoo id or Hugging Face id, echoed in the header."""
    args: DecoderArgs
    """The model's facts (layers, widths, heads, experts, ...)."""
    plan: Plan
    """The parallel layout, micro-batch, sharding, recomputation, schedule, precision."""
    global_batch: int
    """Sequences per optimizer step: micro_batch x dp x grad_accum."""
    seq_len: int
    """Tokens per sequence."""
    gpus_per_node: int
    """GPUs (processes) per node."""
    nodes: int
    """Nodes in the job: nodes x gpus_per_node = tp x pp x cp x dp."""
    train_steps: int = 1000
    """Optimizer steps to run."""
    grad_dtype: str = "fp32"
    """Main gradients and their reduction: fp32, bf16 (Megatron --grad-reduce-in-bf16) or fp16."""
    fp8_params: bool = False
    """FP8 weights (Megatron --fp8-param-gather) with --precision fp8."""

    @property
    def micro_batch(self) -> int:
        return self.plan.micro_batch or 1

    @property
    def precision(self) -> str:
        return self.plan.precision or "bf16"


def export(fmt: str, job: ExportJob) -> str:
    """The text of `fmt` (one of FORMATS) for `job`; InputError when the job is inconsistent or
    the format cannot express it."""
    if fmt not in FORMATS:
        raise InputError(f"unknown export format {fmt!r}; valid: {', '.join(FORMATS)}", field="format")
    check(job)
    return {"megatron": _megatron, "deepspeed": _deepspeed, "torchtitan": _torchtitan,
            "torchrun": _torchrun}[fmt](job)


def check(job: ExportJob) -> None:
    """The consistency every format needs: batch, GPUs, precision, experts."""
    p, a = job.plan, job.args
    p.validate()
    for name in ("global_batch", "seq_len", "gpus_per_node", "nodes", "train_steps"):
        v = getattr(job, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"{name} must be a whole number >= 1, got {v!r}", field=name)
    if job.global_batch != job.micro_batch * p.dp * p.grad_accum:
        raise InputError(f"global_batch {job.global_batch} must equal micro_batch {job.micro_batch} x dp {p.dp} x "
                         f"grad_accum {p.grad_accum} = {job.micro_batch * p.dp * p.grad_accum}", field="global_batch")
    if job.nodes * job.gpus_per_node != p.gpus:
        raise InputError(f"nodes {job.nodes} x gpus_per_node {job.gpus_per_node} = {job.nodes * job.gpus_per_node} GPUs, "
                         f"but the plan needs tp x pp x cp x dp = {p.gpus}", field="nodes")
    if job.precision not in TRAIN_PRECISIONS:
        raise InputError(f"precision {job.precision!r} is not a training precision; valid: "
                         f"{', '.join(TRAIN_PRECISIONS)}", field="precision")
    if p.ep > 1 and not a.experts:
        raise InputError(f"expert parallelism (ep {p.ep}) needs a mixture-of-experts model; {job.model_id} is dense",
                         field="ep")
    if p.ep > 1 and (a.experts % p.ep or (p.tp * p.dp * p.cp) % (p.ep * p.expert_tp)):
        raise InputError(f"ep {p.ep} must divide the {a.experts} experts, and ep x etp {p.expert_tp} must divide "
                         f"tp x dp x cp = {p.tp * p.dp * p.cp} (experts are spread over the data-parallel ranks, and "
                         "over tensor-parallel ranks with etp below tp)", field="ep")
    if p.etp is not None and not a.experts:
        raise InputError(f"expert tensor parallelism (etp {p.etp}) needs a mixture-of-experts model; {job.model_id} "
                         "is dense", field="etp")
    if job.seq_len > a.max_positions:
        raise InputError(f"seq_len {job.seq_len} exceeds the model's max positions {a.max_positions}", field="seq_len")


def _layout(p: Plan) -> str:
    vp = f" vp {p.vp}" if p.vp > 1 else ""
    etp = f" etp {p.etp}" if p.etp is not None and p.etp != p.tp else ""
    return (f"tp {p.tp} pp {p.pp}{vp} cp {p.cp} ep {p.ep}{etp} dp {p.dp} ({p.sharding_label}), schedule {p.schedule}, "
            f"micro-batch {p.micro_batch or 1} x grad-accum {p.grad_accum}, recompute {p.recompute or 'none'}")


def _header(job: ExportJob, fmt: str, notes: list[str]) -> list[str]:
    lines = [f"Generated by whichgpu for {fmt}: {job.model_id}",
             f"layout: {_layout(job.plan)}",
             f"batch: {job.global_batch} sequences x {job.seq_len} tokens per step, {job.train_steps} steps; "
             f"{job.nodes} node(s) x {job.gpus_per_node} GPUs; precision {job.precision}",
             f"assumptions: {PLACEHOLDERS}"]
    if job.plan.precision is None:
        lines.append("precision: the plan names none; bf16 assumed")
    return lines + notes


def _comment(lines: list[str]) -> str:
    return "".join(f"# {line}\n" for line in lines)


def _pp_layers(job: ExportJob) -> int:
    """Layers per (virtual) pipeline stage; the stages must split the layers evenly."""
    p, layers = job.plan, job.args.layers
    stages = p.pp * p.vp
    if layers % stages:
        raise InputError(f"pp {p.pp} x vp {p.vp} = {stages} stages do not divide the {layers} layers evenly; "
                         "use stage counts that divide them", field="pp")
    return layers // stages


# ---- torchrun -------------------------------------------------------------------------------
def _torchrun_line(job: ExportJob, script: str) -> str:
    """torch.distributed.run's own flags (c10d rendezvous; one process per GPU)."""
    return (f"torchrun --nnodes {job.nodes} --nproc-per-node {job.gpus_per_node} --rdzv-backend c10d "
            f"--rdzv-endpoint $MASTER_ADDR:{PORT} --rdzv-id ${{RDZV_ID:-whichgpu}} {script}")


def _torchrun(job: ExportJob) -> str:
    p = job.plan
    env = ['export MASTER_ADDR="${MASTER_ADDR:-localhost}"  # the first node\'s address, the same on every node']
    if (p.tp > 1 or p.cp > 1) and p.sharding not in _MEGATRON_FSDP:
        env.append("export CUDA_DEVICE_MAX_CONNECTIONS=1  # orders TP/CP collectives before compute (Megatron)")
    notes = ["run the same command on every node; train.py is a placeholder for your training script,",
             "which reads the layout above (torchrun only launches the processes: WORLD_SIZE = "
             f"{p.gpus} = tp {p.tp} x pp {p.pp} x cp {p.cp} x dp {p.dp})"]
    return ("#!/usr/bin/env bash\n" + _comment(_header(job, "torchrun", notes)) + "set -euo pipefail\n"
            + "\n".join(env) + "\n" + _torchrun_line(job, "train.py") + "\n")


# ---- Megatron-LM ----------------------------------------------------------------------------
# Megatron-FSDP's data-parallel sharding strategies (--data-parallel-sharding-strategy).
_MEGATRON_FSDP = {"zero2": "optim_grads", "fsdp-grad-op": "optim_grads", "zero3": "optim_grads_params",
                  "fsdp-full": "optim_grads_params", "fsdp-hybrid": "optim_grads_params"}
_MEGATRON_PRECISION = {"bf16": ["--bf16"], "amp-bf16": ["--bf16"], "fp16": ["--fp16"], "amp-fp16": ["--fp16"],
                       "fp8": ["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "delayed"], "fp32": [], "tf32": []}


def _megatron_model(a: DecoderArgs) -> list[str]:
    """Model dimensions in Megatron's GPT arguments."""
    if a.parallel_norms or a.family in ("gptj", "falcon") or a.gemma or a.sinks or a.layer_windows or a.final_softcap:
        raise InputError("Megatron's GPT arguments here cover Llama-style and GPT-2 decoders; this model's parallel "
                         "blocks, Gemma norms, attention sinks, sliding windows or soft-capping are not exported",
                         field="model")
    out = ["--num-layers", str(a.layers), "--hidden-size", str(a.hidden), "--num-attention-heads", str(a.heads),
           "--ffn-hidden-size", str(a.intermediate), "--max-position-embeddings", str(a.max_positions),
           "--norm-epsilon", f"{a.norm_eps:g}"]
    if a.head_dim != a.hidden // a.heads and not a.mla:
        out += ["--kv-channels", str(a.head_dim)]
    if a.kv_heads < a.heads and not a.mla:
        out += ["--group-query-attention", "--num-query-groups", str(a.kv_heads)]
    if a.family == "gpt2":
        out += ["--position-embedding-type", "learned_absolute"]  # LayerNorm, GELU and biases: the defaults
    else:
        out += ["--normalization", "RMSNorm", "--swiglu", "--position-embedding-type", "rope", "--disable-bias-linear"]
        if a.rotary_dim:
            out += ["--rotary-percent", f"{a.rotary_dim / a.head_dim:g}"]
        if a.qkv_bias:
            out += ["--add-qkv-bias"]
    if a.qk_norm:
        out += ["--qk-layernorm"]
    if not a.tie_embeddings:
        out += ["--untie-embeddings-and-output-weights"]
    if a.mla:
        out += ["--multi-latent-attention", "--kv-lora-rank", str(a.kv_lora_rank), "--qk-head-dim", str(a.qk_nope_dim),
                "--qk-pos-emb-head-dim", str(a.qk_rope_dim), "--v-head-dim", str(a.v_head_dim)]
        if a.q_lora_rank:
            out += ["--q-lora-rank", str(a.q_lora_rank)]
    if a.experts:
        out += ["--num-experts", str(a.experts), "--moe-router-topk", str(a.experts_per_token),
                "--moe-ffn-hidden-size", str(a.expert_intermediate), "--moe-token-dispatcher-type", "alltoall",
                "--moe-grouped-gemm"]
        if a.shared_experts:
            out += ["--moe-shared-expert-intermediate-size", str(a.shared_experts * a.expert_intermediate)]
        if a.dense_layers:
            out += ["--moe-layer-freq", f"([0]*{a.dense_layers}+[1]*{a.layers - a.dense_layers})"]
        if a.moe_style == "sigmoid":
            out += ["--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias"]
    return out


def _megatron(job: ExportJob) -> str:
    p, a = job.plan, job.args
    notes: list[str] = []
    if a.family != "gpt2":
        notes.append("--rotary-base is not among the model facts: Megatron's default 10000 applies; add the "
                     "config's rope_theta (Llama-3: 500000)")
    uneven = False
    if p.pp > 1:
        stages = p.pp * p.vp
        # the planner's split (planner.split_layers): even, or even once the embedding and the loss
        # count as a layer each, which Megatron's two account-for flags say
        uneven = bool(a.layers % stages) and (a.layers + 2) % stages == 0
        if not uneven:
            _pp_layers(job)
    if p.cp > 1 and job.seq_len % (2 * p.cp):
        raise InputError(f"Megatron needs seq_len a multiple of 2 x cp = {2 * p.cp}, got {job.seq_len}", field="seq_len")
    if p.tp_comm_overlap and not p.sequence_parallel:
        raise InputError("Megatron's --tp-comm-overlap needs sequence parallelism: set sequence_parallel",
                         field="tp_comm_overlap")
    if p.ep > 1 and job.precision in ("fp16", "amp-fp16"):
        raise InputError("Megatron's expert parallelism does not run in fp16; use bf16 or fp8", field="precision")
    par = ["--tensor-model-parallel-size", str(p.tp), "--pipeline-model-parallel-size", str(p.pp),
           "--context-parallel-size", str(p.cp), "--expert-model-parallel-size", str(p.ep)]
    if job.args.experts:
        par += ["--expert-tensor-parallel-size", str(p.expert_tp)]  # Megatron's default is tp; said either way
    if p.vp > 1:
        par += ["--num-virtual-stages-per-pipeline-rank", str(p.vp)]
    if uneven:
        par += ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
    if p.sequence_parallel:
        par += ["--sequence-parallel"]
    if p.tp_comm_overlap:
        par += ["--tp-comm-overlap"]
    if p.schedule in ("zb-h1", "zb-h2", "zb-v"):
        notes.append(f"schedule {p.schedule}: Megatron core has no zero-bubble schedule (it lives in the "
                     "zero-bubble-pipeline-parallelism fork); this runs " + ("interleaved 1F1B, vp 2" if p.vp > 1 else "1F1B"))
    elif p.schedule == "gpipe" and p.pp > 1:
        notes.append("schedule gpipe: Megatron runs 1F1B (the same bubble, less activation memory)")
    if p.sharding == "zero1":
        par += ["--use-distributed-optimizer"]
        notes.append("zero1: Megatron's distributed optimizer (optimizer states sharded over dp)")
    elif p.sharding in _MEGATRON_FSDP:
        par += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", _MEGATRON_FSDP[p.sharding],
                "--ckpt-format", "fsdp_dtensor"]
        notes.append(f"{p.sharding}: Megatron-FSDP (--use-megatron-fsdp), not --use-torch-fsdp2 (which refuses "
                     "pipeline and expert parallelism)")
        if p.sharding == "fsdp-hybrid":
            replicas = p.dp // p.shard_gpus(job.gpus_per_node)
            par += ["--num-distributed-optimizer-instances", str(replicas)]
            notes.append(f"fsdp-hybrid: {replicas} replicas of a shard group of {p.shard_gpus(job.gpus_per_node)}")
    if p.offload_optimizer:
        par += ["--optimizer-cpu-offload", "--use-precision-aware-optimizer"]
    rec: list[str] = []
    if p.recompute == "full":
        rec = ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif p.recompute == "selective":
        rec = ["--recompute-granularity", "selective"]
    if job.precision == "tf32":
        notes.append("tf32: Megatron keeps FP32 parameters; TF32 matmuls are PyTorch's setting on Ampere and newer")
    batch = ["--micro-batch-size", str(job.micro_batch), "--global-batch-size", str(job.global_batch),
             "--seq-length", str(job.seq_len), "--train-iters", str(job.train_steps)]
    rest = ["--lr", "3e-4", "--min-lr", "3e-5", "--lr-decay-style", "cosine", "--clip-grad", "1.0",
            "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "$TOKENIZER", "--vocab-size", str(a.vocab),
            "--data-path", "$DATA_PATH", "--split", "99,1,0", "--save", "$CKPT_DIR", "--save-interval", "500",
            "--log-interval", "10"]
    prec = list(_MEGATRON_PRECISION[job.precision])
    if job.grad_dtype == "bf16":
        prec.append("--grad-reduce-in-bf16")
    elif job.grad_dtype == "fp32" and job.precision in ("fp16", "amp-fp16"):
        prec.append("--accumulate-allreduce-grads-in-fp32")  # under --fp16 Megatron keeps FP16 gradients otherwise
    if job.fp8_params and job.precision == "fp8":
        prec.append("--fp8-param-gather")
    groups = [par, _megatron_model(a), batch, prec, rec, rest]
    env = ['export MASTER_ADDR="${MASTER_ADDR:-localhost}"',
           'DATA_PATH="${DATA_PATH:-/path/to/dataset_text_document}"  # placeholder: a Megatron .bin/.idx prefix',
           'TOKENIZER="${TOKENIZER:-/path/to/hf-tokenizer}"  # placeholder',
           'CKPT_DIR="${CKPT_DIR:-./checkpoints}"']
    if (p.tp > 1 or p.cp > 1) and p.sharding not in _MEGATRON_FSDP:
        env.append("export CUDA_DEVICE_MAX_CONNECTIONS=1  # Megatron asserts it with TP or CP (before Blackwell)")
    body = " \\\n    ".join([_torchrun_line(job, "pretrain_gpt.py")] + [" ".join(g) for g in groups if g])
    return ("#!/usr/bin/env bash\n" + _comment(_header(job, "Megatron-LM", notes)) + "set -euo pipefail\n"
            + "\n".join(env) + "\n" + body + "\n")


# ---- DeepSpeed ------------------------------------------------------------------------------
_ZERO_STAGE = {"ddp": 0, "zero1": 1, "zero2": 2, "fsdp-grad-op": 2, "zero3": 3, "fsdp-full": 3}


def _deepspeed(job: ExportJob) -> str:
    p = job.plan
    if p.schedule in ("zb-h1", "zb-h2", "zb-v") or p.vp > 1:
        raise InputError(f"DeepSpeed's pipeline engine runs one 1F1B schedule per stage: it cannot express "
                         f"{p.schedule} (vp {p.vp}); use 1f1b or gpipe, or export megatron/torchtitan", field="schedule")
    if p.cp > 1:
        raise InputError("DeepSpeed's config has no ring-attention context parallelism (its Ulysses "
                         "sequence_parallel_size splits heads); use cp 1, or export megatron/torchtitan", field="cp")
    if job.precision == "fp8":
        raise InputError("DeepSpeed's config has no FP8 training switch (FP8 comes from Transformer Engine layers); "
                         "use bf16, or export megatron/torchtitan", field="precision")
    if p.sharding == "fsdp-hybrid":
        raise InputError("DeepSpeed 0.19 removed MiCS, its hybrid-shard ZeRO-3 (ZeRO++ hpZ still shards over all "
                         "ranks); use zero3 or fsdp-full, or export torchtitan", field="sharding")
    stage = _ZERO_STAGE[p.sharding]
    if p.pp > 1 and stage >= 2:
        raise InputError(f"DeepSpeed's pipeline engine allows ZeRO stage 0 or 1, not {stage} ({p.sharding}) with "
                         f"pp {p.pp}; use ddp or zero1", field="sharding")
    zero: dict[str, object] = {"stage": stage, "overlap_comm": p.comm_overlap, "contiguous_gradients": True,
                               "reduce_bucket_size": int(p.bucket_mb * 1e6)}
    if p.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    cfg: dict[str, object] = {
        "train_batch_size": job.global_batch, "train_micro_batch_size_per_gpu": job.micro_batch,
        "gradient_accumulation_steps": p.grad_accum, "gradient_clipping": 1.0, "steps_per_print": 10,
        "zero_optimization": zero}
    prec = job.precision
    if prec == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif prec == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
                       "hysteresis": 2, "min_loss_scale": 1}
        if job.grad_dtype == "fp32":  # DeepSpeed's fp16 engine reduces FP16 gradients unless told otherwise
            cfg["communication_data_type"] = "fp32"
    elif prec in ("amp-bf16", "amp-fp16"):
        cfg["torch_autocast"] = {"enabled": True, "dtype": "bfloat16" if prec == "amp-bf16" else "float16"}
    if p.recompute in ("selective", "full"):
        cfg["activation_checkpointing"] = {"partition_activations": p.tp > 1, "contiguous_memory_optimization": False,
                                           "cpu_checkpointing": False}
    notes = [f"tp {p.tp}, pp {p.pp} and ep {p.ep} are set in the training script, not here: Megatron-DeepSpeed's "
             "--tensor-model-parallel-size / --pipeline-model-parallel-size, DeepSpeed's PipelineModule(num_stages) "
             "and MoE(ep_size); train_batch_size counts the dp ranks only",
             "recompute granularity (selective or full) is the training script's choice; "
             "activation_checkpointing configures DeepSpeed's checkpointing when it is on"]
    if p.schedule == "gpipe" and p.pp > 1:
        notes.append("schedule gpipe: DeepSpeed's TrainSchedule is 1F1B (the same bubble, less activation memory)")
    if p.sequence_parallel or p.tp_comm_overlap:
        notes.append("sequence parallelism and TP overlap are Megatron-DeepSpeed arguments (--sequence-parallel)")
    cfg["whichgpu"] = {"model": job.model_id, "tp": p.tp, "pp": p.pp, "vp": p.vp, "cp": p.cp, "ep": p.ep, "dp": p.dp,
                       "sharding": p.sharding, "schedule": p.schedule, "recompute": p.recompute or "none",
                       "precision": prec, "seq_len": job.seq_len, "nodes": job.nodes,
                       "gpus_per_node": job.gpus_per_node, "train_steps": job.train_steps,
                       "notes": _header(job, "DeepSpeed", notes)}
    return json.dumps(cfg, indent=2) + "\n"


# ---- torchtitan -----------------------------------------------------------------------------
# torch.distributed.pipelining schedule names (get_schedule_class); zb-h2 has none.
_TITAN_SCHEDULE = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B",
                   "zb-h1": "InterleavedZeroBubble", "zb-v": "ZBVZeroBubble"}
_TITAN_FLAVOR = {(4096, 32): "8B", (8192, 80): "70B", (16384, 126): "405B"}


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return str(v)


def _torchtitan(job: ExportJob) -> str:
    p, a = job.plan, job.args
    if p.schedule not in _TITAN_SCHEDULE:
        raise InputError(f"torch.distributed.pipelining has no {p.schedule} schedule; valid: "
                         f"{', '.join(_TITAN_SCHEDULE)}", field="schedule")
    if job.precision in ("fp16", "amp-fp16"):
        raise InputError("torchtitan's mixed precision is bfloat16 or float32; use bf16, amp-bf16, fp8, tf32 or fp32",
                         field="precision")
    notes: list[str] = []
    shard, replicate, reshard = p.dp, 1, "default"
    if p.sharding == "ddp":
        shard, replicate = 1, p.dp
    elif p.sharding == "fsdp-hybrid":
        shard = p.shard_gpus(job.gpus_per_node)
        replicate = p.dp // shard
    elif p.sharding in ("zero1", "zero2", "fsdp-grad-op"):
        reshard = "never"
        notes.append(f"{p.sharding}: torchtitan has no ZeRO-1/ZeRO-2 distinction; FSDP2 over dp {p.dp} keeping "
                     "parameters gathered after forward (fsdp_reshard_after_forward = never) is the closest")
    if p.offload_optimizer:
        notes.append("offload: torchtitan's enable_cpu_offload moves parameters and gradients to CPU as well")
    if p.tp > 1 and not p.sequence_parallel:
        notes.append("torchtitan's tensor parallelism always shards norms over the sequence (sequence parallel)")
    if p.tp_comm_overlap:
        notes.append("tp_comm_overlap: enable_async_tensor_parallel (needs training.compile)")
    if p.schedule == "zb-h1":
        notes.append("zb-h1: torch's ScheduleInterleavedZeroBubble")
    pipelined = p.pp > 1
    training = {"dataset": "c4", "dataset_path": "/path/to/dataset",
                "local_batch_size": job.micro_batch * (p.grad_accum if pipelined else 1),
                "global_batch_size": job.global_batch, "seq_len": job.seq_len, "max_norm": 1.0,
                "steps": job.train_steps, "enable_cpu_offload": p.offload_optimizer,
                "mixed_precision_param": "float32" if job.precision in ("fp32", "tf32") else "bfloat16",
                "mixed_precision_reduce": "float32"}
    par: dict[str, object] = {"data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard,
                              "fsdp_reshard_after_forward": reshard, "tensor_parallel_degree": p.tp,
                              "enable_async_tensor_parallel": p.tp_comm_overlap, "pipeline_parallel_degree": p.pp,
                              "context_parallel_degree": p.cp, "expert_parallel_degree": p.ep}
    if a.experts:
        if p.expert_tp not in (1, p.tp):
            raise InputError(f"torchtitan runs expert tensor parallelism 1 or equal to tp, not etp {p.expert_tp} with "
                             f"tp {p.tp}; export megatron", field="etp")
        par["expert_tensor_parallel_degree"] = p.expert_tp  # torchtitan's default is 1, Megatron's tp
    if pipelined:
        par.update(pipeline_parallel_schedule=_TITAN_SCHEDULE[p.schedule],
                   pipeline_parallel_layers_per_stage=_pp_layers(job),
                   pipeline_parallel_microbatch_size=job.micro_batch)
    flavor = _TITAN_FLAVOR.get((a.hidden, a.layers), job.model_id)
    sections: dict[str, dict[str, object]] = {
        "job": {"dump_folder": "./outputs", "description": f"whichgpu export: {job.model_id}"},
        "model": {"name": "deepseek_v3" if a.mla or a.experts else "llama3", "flavor": flavor,
                  "tokenizer_path": "/path/to/tokenizer", "converters": ["float8"] if job.precision == "fp8" else []},
        "training": training, "parallelism": par,
        "activation_checkpoint": {"mode": p.recompute or "none", "selective_ac_option": "op"}}
    if job.precision == "fp8":
        sections["float8"] = {"recipe_name": "tensorwise", "enable_fsdp_float8_all_gather": shard > 1,
                              "precompute_float8_dynamic_scale_for_fsdp": shard > 1}
    if flavor == job.model_id:
        notes.append(f"model.flavor: no torchtitan flavor is known for {job.model_id}; register one with these dims")
    head = _header(job, "torchtitan", [*notes,
        "keys of torchtitan's TOML job config (--job.config_file, torchtitan/config/job_config.py); torchtitan 0.3 "
        "takes [training] and [parallelism] as --training.KEY / --parallelism.KEY overrides"])
    text = _comment(head)
    for name, keys in sections.items():
        text += f"\n[{name}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in keys.items())
    return text
