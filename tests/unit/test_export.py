"""Exporting a layout to Megatron-LM, DeepSpeed, torchtitan and torchrun: every degree survives a
round trip, every name is the project's own (checked by its parser where it installs, else against
the documented names below), and what a format cannot express is a one-line InputError."""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from pathlib import Path

import pytest

from whichgpu.errors import InputError
from whichgpu.parallel.export import FORMATS, ExportJob, export
from whichgpu.parallel.plan import Plan
from whichgpu.workload.zoo.llm.args import DecoderArgs, args_from_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CONFIGS = Path(__file__).parents[2] / "src" / "whichgpu" / "workload" / "configs"

# Megatron-LM's argument names that the export uses, read from NVIDIA/Megatron-LM
# megatron/training/arguments.py (commit 000c4ac24f61159c138b0975def722c65245983c). No PyPI package
# provides megatron.training (megatron-core ships megatron.core only; 0.17+ needs Python 3.12).
MEGATRON_NAMES = {
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
    "--expert-model-parallel-size", "--num-virtual-stages-per-pipeline-rank", "--sequence-parallel",
    "--tp-comm-overlap", "--use-distributed-optimizer", "--use-megatron-fsdp", "--data-parallel-sharding-strategy",
    "--ckpt-format", "--num-distributed-optimizer-instances", "--optimizer-cpu-offload",
    "--use-precision-aware-optimizer", "--num-layers", "--hidden-size", "--num-attention-heads", "--ffn-hidden-size",
    "--max-position-embeddings", "--norm-epsilon", "--kv-channels", "--group-query-attention", "--num-query-groups",
    "--position-embedding-type", "--normalization", "--swiglu", "--disable-bias-linear", "--rotary-percent",
    "--add-qkv-bias", "--qk-layernorm", "--untie-embeddings-and-output-weights", "--multi-latent-attention",
    "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--q-lora-rank", "--num-experts",
    "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-token-dispatcher-type", "--moe-grouped-gemm",
    "--moe-shared-expert-intermediate-size", "--moe-layer-freq", "--moe-router-score-function",
    "--moe-router-enable-expert-bias", "--micro-batch-size", "--global-batch-size", "--seq-length", "--train-iters",
    "--bf16", "--fp16", "--fp8-format", "--fp8-recipe", "--recompute-granularity", "--recompute-method",
    "--recompute-num-layers", "--lr", "--min-lr", "--lr-decay-style", "--clip-grad", "--tokenizer-type",
    "--tokenizer-model", "--vocab-size", "--data-path", "--split", "--save", "--save-interval", "--log-interval",
    "--grad-reduce-in-bf16", "--fp8-param-gather", "--accumulate-allreduce-grads-in-fp32",
    "--expert-tensor-parallel-size",  # Megatron-core MoE parallel folding (arguments.py, 2024 onwards)
    "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",  # validate_args counts
}
# Flags that take no value (action='store_true' / 'store_false' in the same file).
MEGATRON_SWITCHES = {
    "--sequence-parallel", "--tp-comm-overlap", "--use-distributed-optimizer", "--use-megatron-fsdp",
    "--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--group-query-attention", "--swiglu",
    "--disable-bias-linear", "--add-qkv-bias", "--qk-layernorm", "--untie-embeddings-and-output-weights",
    "--multi-latent-attention", "--moe-grouped-gemm", "--moe-router-enable-expert-bias", "--bf16", "--fp16",
    "--grad-reduce-in-bf16", "--fp8-param-gather", "--accumulate-allreduce-grads-in-fp32",
    "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
}
# torchtitan's TOML job-config keys the export writes, read from pytorch/torchtitan
# torchtitan/config/job_config.py (commit 000204a4a8bf3d0f31adc44fc29855fbb6ea13d8: classes Job,
# Model, Training, Parallelism, ActivationCheckpoint, Float8).
TORCHTITAN_NAMES = {
    "job": {"dump_folder", "description"},
    "model": {"name", "flavor", "tokenizer_path", "converters"},
    "training": {"dataset", "dataset_path", "local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps",
                 "enable_cpu_offload", "mixed_precision_param", "mixed_precision_reduce"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "enable_async_tensor_parallel", "pipeline_parallel_degree",
                    "pipeline_parallel_layers_per_stage", "pipeline_parallel_schedule",
                    "pipeline_parallel_microbatch_size", "context_parallel_degree", "expert_parallel_degree",
                    "expert_tensor_parallel_degree"},  # Parallelism: "etp is either 1 or the same as tp"
    "activation_checkpoint": {"mode", "selective_ac_option"},
    "float8": {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp", "recipe_name"},
}
# DeepSpeed's config keys the export writes (deepspeed/runtime/constants.py, zero/config.py; 0.19.8).
DEEPSPEED_NAMES = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                   "gradient_clipping", "steps_per_print", "zero_optimization", "bf16", "fp16", "torch_autocast",
                   "activation_checkpointing", "whichgpu"}


def _args(name: str) -> DecoderArgs:
    return args_from_config(json.loads((CONFIGS / f"{name}.json").read_text()), name)


def _job(model: str, plan: Plan, gpus_per_node: int = 8, seq_len: int = 4096) -> ExportJob:
    mb = plan.micro_batch or 1
    gpus_per_node = min(gpus_per_node, plan.gpus)
    return ExportJob(model, _args(model), plan, mb * plan.dp * plan.grad_accum, seq_len, gpus_per_node,
                     plan.gpus // gpus_per_node)


# The four layouts of the brief, each exportable to every format unless said.
JOBS = {
    "llama-3-8b ddp": _job("llama-3-8b", Plan(dp=8, micro_batch=2, grad_accum=4, precision="bf16")),
    "llama-3-70b tp8 pp4 vp5 sp": _job("llama-3-70b", Plan(
        tp=8, pp=4, vp=5, dp=2, schedule="interleaved-1f1b", sequence_parallel=True, tp_comm_overlap=True,
        micro_batch=1, grad_accum=16, sharding="zero1", recompute="selective", precision="bf16"), seq_len=8192),
    "mixtral ep8": _job("mixtral-8x7b", Plan(tp=2, dp=8, ep=8, micro_batch=1, grad_accum=8, sharding="zero1",
                                             recompute="full", precision="bf16", sequence_parallel=True)),
    "llama-3-8b fsdp-full": _job("llama-3-8b", Plan(dp=16, micro_batch=1, grad_accum=2, sharding="fsdp-full",
                                                    recompute="full", precision="amp-bf16")),
}
DEEPSPEED_REFUSES = {"llama-3-70b tp8 pp4 vp5 sp"}  # interleaved virtual stages


def test_megatron_counts_the_embedding_and_loss_where_the_split_needs_them() -> None:
    # Llama-3.1-405B as NeMo runs it: 126 layers + the embedding + the loss over 16 x 8 virtual stages
    plan = Plan(tp=8, pp=16, vp=8, dp=1, schedule="interleaved-1f1b", sequence_parallel=True, micro_batch=1,
                grad_accum=16, sharding="ddp", recompute="none", precision="bf16")
    flags = _megatron_flags(_torchrun_split(_command(export("megatron", _job("llama-3.1-405b", plan))),
                                            "pretrain_gpt.py")[1])
    assert flags["--account-for-embedding-in-pipeline-split"] is True
    assert flags["--account-for-loss-in-pipeline-split"] is True
    even = _megatron_flags(_torchrun_split(_command(export("megatron", JOBS["llama-3-70b tp8 pp4 vp5 sp"])),
                                           "pretrain_gpt.py")[1])
    assert "--account-for-embedding-in-pipeline-split" not in even  # 80 layers over 4 x 5: even without them
    with pytest.raises(InputError, match="do not divide the 126 layers"):  # 126 + 2 over 12 stages: neither
        export("megatron", _job("llama-3.1-405b", dataclasses.replace(plan, pp=4, vp=3, dp=4)))


# ---- parsing the outputs back ----------------------------------------------------------------
def _command(text: str) -> list[str]:
    """The launch command of a generated bash script, as argv (continuations joined)."""
    lines = [ln for ln in text.replace("\\\n", " ").splitlines() if ln.startswith("torchrun ")]
    assert len(lines) == 1
    return shlex.split(lines[0])


def _megatron_flags(argv: list[str]) -> dict[str, str | bool]:
    flags: dict[str, str | bool] = {}
    i = 0
    while i < len(argv):
        name = argv[i]
        assert name.startswith("--"), name
        if name in MEGATRON_SWITCHES:
            flags[name] = True
            i += 1
        else:
            flags[name] = argv[i + 1]
            i += 2
    return flags


def _torchrun_split(argv: list[str], script: str) -> tuple[list[str], list[str]]:
    at = argv.index(script)
    return argv[1:at + 1], argv[at + 1:]


def _degrees_megatron(text: str) -> dict[str, object]:
    launch, script_args = _torchrun_split(_command(text), "pretrain_gpt.py")
    f = _megatron_flags(script_args)
    world = int(launch[launch.index("--nnodes") + 1]) * int(launch[launch.index("--nproc-per-node") + 1])
    tp, pp, cp = (int(str(f[k])) for k in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                                           "--context-parallel-size"))
    precision = "fp8" if "--fp8-format" in f else "bf16" if "--bf16" in f else "fp16" if "--fp16" in f else "fp32"
    return {"tp": tp, "pp": pp, "vp": int(str(f.get("--num-virtual-stages-per-pipeline-rank", 1))), "cp": cp,
            "ep": int(str(f["--expert-model-parallel-size"])), "dp": world // (tp * pp * cp),
            "micro_batch": int(str(f["--micro-batch-size"])), "global_batch": int(str(f["--global-batch-size"])),
            "precision": precision, "recompute": f.get("--recompute-granularity", "none"),
            "sequence_parallel": "--sequence-parallel" in f}


def _degrees_deepspeed(text: str) -> dict[str, object]:
    cfg = json.loads(text)
    w = cfg["whichgpu"]
    precision = ("bf16" if cfg.get("bf16", {}).get("enabled") else "fp16" if cfg.get("fp16", {}).get("enabled")
                 else {"bfloat16": "amp-bf16", "float16": "amp-fp16"}[cfg["torch_autocast"]["dtype"]]
                 if "torch_autocast" in cfg else "fp32")
    dp = cfg["train_batch_size"] // (cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"])
    return {"tp": w["tp"], "pp": w["pp"], "vp": w["vp"], "cp": w["cp"], "ep": w["ep"], "dp": dp,
            "micro_batch": cfg["train_micro_batch_size_per_gpu"], "global_batch": cfg["train_batch_size"],
            "precision": precision, "recompute": w["recompute"] if "activation_checkpointing" in cfg else "none"}


def _degrees_torchtitan(text: str) -> dict[str, object]:
    c = tomllib.loads(text)
    t, p = c["training"], c["parallelism"]
    dp = p["data_parallel_replicate_degree"] * p["data_parallel_shard_degree"]
    pp = p["pipeline_parallel_degree"]
    micro = p["pipeline_parallel_microbatch_size"] if pp > 1 else t["local_batch_size"]
    layers_per_stage = p.get("pipeline_parallel_layers_per_stage")
    return {"tp": p["tensor_parallel_degree"], "pp": pp, "cp": p["context_parallel_degree"],
            "ep": p["expert_parallel_degree"], "dp": dp, "micro_batch": micro, "global_batch": t["global_batch_size"],
            "layers_per_stage": layers_per_stage, "recompute": c["activation_checkpoint"]["mode"],
            "precision": "fp8" if "float8" in c["model"]["converters"] else t["mixed_precision_param"]}


def _expected(job: ExportJob) -> dict[str, object]:
    p = job.plan
    return {"tp": p.tp, "pp": p.pp, "vp": p.vp, "cp": p.cp, "ep": p.ep, "dp": p.dp, "micro_batch": p.micro_batch,
            "global_batch": job.global_batch, "recompute": p.recompute or "none"}


# ---- round trips ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", JOBS)
def test_megatron_round_trip_and_documented_names(name: str) -> None:
    job = JOBS[name]
    text = export("megatron", job)
    assert text.startswith("#!/usr/bin/env bash\n# Generated by whichgpu") and job.model_id in text
    assert "placeholders" in text
    _, script_args = _torchrun_split(_command(text), "pretrain_gpt.py")
    flags = _megatron_flags(script_args)
    assert set(flags) <= MEGATRON_NAMES, set(flags) - MEGATRON_NAMES
    got = _degrees_megatron(text)
    want = _expected(job) | {"precision": "bf16", "sequence_parallel": job.plan.sequence_parallel}
    assert got == want
    a = job.args
    assert flags["--num-layers"] == str(a.layers) and flags["--hidden-size"] == str(a.hidden)
    assert flags["--num-query-groups"] == str(a.kv_heads) and flags["--seq-length"] == str(job.seq_len)
    if a.experts:
        assert flags["--num-experts"] == str(a.experts) and flags["--moe-router-topk"] == str(a.experts_per_token)
    if job.plan.recompute == "full":
        assert flags["--recompute-method"] == "uniform" and flags["--recompute-num-layers"] == "1"
    if job.plan.sharding == "zero1":
        assert flags["--use-distributed-optimizer"] is True
    if job.plan.sharding == "fsdp-full":
        assert flags["--use-megatron-fsdp"] is True
        assert flags["--data-parallel-sharding-strategy"] == "optim_grads_params"
        assert "CUDA_DEVICE_MAX_CONNECTIONS=1" not in text  # Megatron-FSDP asserts it is not 1


@pytest.mark.parametrize("name", sorted(set(JOBS) - DEEPSPEED_REFUSES))
def test_deepspeed_round_trip(name: str) -> None:
    job = JOBS[name]
    cfg = json.loads(export("deepspeed", job))
    assert set(cfg) <= DEEPSPEED_NAMES
    assert cfg["whichgpu"]["notes"][0].startswith("Generated by whichgpu")
    want = _expected(job) | {"precision": job.plan.precision}
    assert _degrees_deepspeed(export("deepspeed", job)) == want
    assert cfg["zero_optimization"]["stage"] == {"ddp": 0, "zero1": 1, "fsdp-full": 3}[job.plan.sharding]


@pytest.mark.parametrize("name", JOBS)
def test_torchtitan_round_trip_and_documented_names(name: str) -> None:
    job = JOBS[name]
    text = export("torchtitan", job)
    assert text.startswith("# Generated by whichgpu") and job.model_id in text
    c = tomllib.loads(text)
    for section, keys in c.items():
        assert set(keys) <= TORCHTITAN_NAMES[section], (section, set(keys) - TORCHTITAN_NAMES[section])
    got = _degrees_torchtitan(text)
    p = job.plan
    want = {k: v for k, v in _expected(job).items() if k != "vp"}
    want |= {"precision": "bfloat16", "layers_per_stage": job.args.layers // (p.pp * p.vp) if p.pp > 1 else None}
    assert got == want
    shard = c["parallelism"]["data_parallel_shard_degree"]
    assert shard == {"ddp": 1, "zero1": p.dp, "fsdp-full": p.dp}[p.sharding]
    if p.sharding == "zero1":
        assert "no ZeRO-1/ZeRO-2 distinction" in text  # said, not silently mapped


@pytest.mark.parametrize("name", JOBS)
def test_torchrun_round_trip(name: str) -> None:
    job = JOBS[name]
    argv = _command(export("torchrun", job))
    assert argv[argv.index("--nnodes") + 1] == str(job.nodes)
    assert int(argv[argv.index("--nproc-per-node") + 1]) * job.nodes == job.plan.gpus
    assert argv[-1] == "train.py"


def test_hybrid_sharding_maps_to_replicas_of_a_node_shard() -> None:
    job = _job("llama-3-8b", Plan(dp=32, micro_batch=1, sharding="fsdp-hybrid", precision="bf16"))
    par = tomllib.loads(export("torchtitan", job))["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (4, 8)
    flags = _megatron_flags(_torchrun_split(_command(export("megatron", job)), "pretrain_gpt.py")[1])
    assert flags["--num-distributed-optimizer-instances"] == "4"


def test_fp8_and_zero_bubble_are_said() -> None:
    job = _job("llama-3-8b", Plan(pp=2, vp=2, dp=4, schedule="zb-v", micro_batch=1, grad_accum=4, precision="fp8"))
    mega = export("megatron", job)
    assert "--fp8-format hybrid" in mega and "no zero-bubble schedule" in mega
    titan = tomllib.loads(export("torchtitan", job))
    assert titan["model"]["converters"] == ["float8"] and "float8" in titan
    assert titan["parallelism"]["pipeline_parallel_schedule"] == "ZBVZeroBubble"


def test_bf16_gradients_and_fp8_weights_reach_megatron() -> None:
    from dataclasses import replace

    job = _job("llama-3-8b", Plan(tp=2, dp=4, micro_batch=1, grad_accum=4, precision="fp8", sharding="zero1"))
    plain = _megatron_flags(_torchrun_split(_command(export("megatron", job)), "pretrain_gpt.py")[1])
    assert "--grad-reduce-in-bf16" not in plain and "--fp8-param-gather" not in plain
    both = replace(job, grad_dtype="bf16", fp8_params=True)
    flags = _megatron_flags(_torchrun_split(_command(export("megatron", both)), "pretrain_gpt.py")[1])
    assert flags["--grad-reduce-in-bf16"] is True and flags["--fp8-param-gather"] is True
    assert set(flags) <= MEGATRON_NAMES


def test_fp16_gradient_choice_reaches_megatron_and_deepspeed() -> None:
    from dataclasses import replace

    job = _job("llama-3-8b", Plan(dp=8, micro_batch=1, grad_accum=4, precision="fp16"))
    argv = _torchrun_split(_command(export("megatron", job)), "pretrain_gpt.py")[1]
    # FP32 gradients (the default) under --fp16 need Megatron's flag; FP16 gradients are its default
    assert _megatron_flags(argv)["--accumulate-allreduce-grads-in-fp32"] is True
    assert json.loads(export("deepspeed", job))["communication_data_type"] == "fp32"
    half = replace(job, grad_dtype="fp16")
    argv16 = _torchrun_split(_command(export("megatron", half)), "pretrain_gpt.py")[1]
    assert "--accumulate-allreduce-grads-in-fp32" not in _megatron_flags(argv16)
    assert "communication_data_type" not in json.loads(export("deepspeed", half))
    bf = _job("llama-3-8b", Plan(dp=8, micro_batch=1, grad_accum=4, precision="bf16"))
    assert "--accumulate-allreduce-grads-in-fp32" not in export("megatron", bf)  # forced in fp32 with --bf16


# ---- errors ---------------------------------------------------------------------------------
def _bad(job: ExportJob, fmt: str, text: str) -> None:
    with pytest.raises(InputError) as e:
        export(fmt, job)
    assert text in str(e.value) and "\n" not in str(e.value)


def test_inconsistent_jobs_are_one_line_errors() -> None:
    good = JOBS["llama-3-8b ddp"]
    from dataclasses import replace
    _bad(replace(good, global_batch=63), "megatron", "global_batch 63 must equal micro_batch 2 x dp 8 x grad_accum 4")
    _bad(replace(good, nodes=2), "torchrun", "the plan needs tp x pp x cp x dp = 8")
    _bad(replace(good, seq_len=16384), "torchtitan", "exceeds the model's max positions 8192")
    _bad(good, "slurm", "unknown export format 'slurm'; valid: megatron, deepspeed, torchtitan, torchrun")
    _bad(_job("llama-3-8b", Plan(dp=2, ep=2, micro_batch=1)), "megatron", "needs a mixture-of-experts model")
    _bad(_job("llama-3-8b", Plan(dp=8, micro_batch=1, precision="int4")), "megatron", "not a training precision")


def test_formats_refuse_what_they_cannot_express() -> None:
    _bad(JOBS["llama-3-70b tp8 pp4 vp5 sp"], "deepspeed", "cannot express interleaved-1f1b (vp 5)")
    zbv = _job("llama-3-8b", Plan(pp=2, vp=2, dp=4, schedule="zb-v", micro_batch=1, precision="bf16"))
    _bad(zbv, "deepspeed", "cannot express zb-v")
    _bad(_job("llama-3-8b", Plan(dp=8, micro_batch=1, precision="fp8")), "deepspeed", "no FP8 training switch")
    _bad(_job("llama-3-8b", Plan(pp=2, dp=4, micro_batch=1, sharding="zero3")), "deepspeed", "ZeRO stage 0 or 1")
    _bad(_job("llama-3-8b", Plan(cp=2, dp=4, micro_batch=1)), "deepspeed", "no ring-attention context parallelism")
    _bad(_job("llama-3-8b", Plan(pp=2, dp=4, schedule="zb-h2", micro_batch=1)), "torchtitan", "no zb-h2 schedule")
    _bad(_job("llama-3-8b", Plan(dp=8, micro_batch=1, precision="fp16")), "torchtitan", "bfloat16 or float32")
    _bad(_job("llama-3-8b", Plan(pp=3, dp=2, micro_batch=1), gpus_per_node=6), "megatron", "do not divide the 32 layers")
    _bad(_job("llama-3-8b", Plan(tp=2, dp=4, tp_comm_overlap=True, micro_batch=1)), "megatron",
         "needs sequence parallelism")
    assert FORMATS == ("megatron", "deepspeed", "torchtitan", "torchrun")


# ---- the projects' own parsers (skipped where the package is absent) --------------------------
@pytest.mark.parametrize("name", JOBS)
def test_torchrun_parser_accepts_the_launch_lines(name: str) -> None:
    run = pytest.importorskip("torch.distributed.run")
    job = JOBS[name]
    for fmt, script in (("torchrun", "train.py"), ("megatron", "pretrain_gpt.py")):
        launch, rest = _torchrun_split(_command(export(fmt, job)), script)
        ns = run.get_args_parser().parse_args([*launch, *rest])
        assert ns.nnodes == str(job.nodes) and ns.nproc_per_node == str(job.gpus_per_node)
        assert ns.rdzv_backend == "c10d" and ns.rdzv_endpoint == "$MASTER_ADDR:29500"
        assert ns.training_script == script


@pytest.mark.parametrize("name", JOBS)
def test_torch_knows_the_pipeline_schedule(name: str) -> None:
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    par = tomllib.loads(export("torchtitan", JOBS[name]))["parallelism"]
    if "pipeline_parallel_schedule" in par:
        schedules.get_schedule_class(par["pipeline_parallel_schedule"])  # raises ValueError when unknown


@pytest.mark.parametrize("name", sorted(set(JOBS) - DEEPSPEED_REFUSES))
def test_deepspeed_config_parser_accepts(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    dsc = pytest.importorskip("deepspeed.runtime.config")
    job = JOBS[name]

    class Mpu:  # the data-parallel group DeepSpeed counts train_batch_size over
        def get_data_parallel_world_size(self) -> int:
            return job.plan.dp

    monkeypatch.setattr(dsc.dist, "get_rank", lambda *a, **k: 0)  # no process group in a unit test
    cfg = dsc.DeepSpeedConfig(json.loads(export("deepspeed", job)), mpu=Mpu())
    assert cfg.world_size == job.plan.dp and cfg.train_batch_size == job.global_batch
    assert cfg.gradient_accumulation_steps == job.plan.grad_accum
    assert cfg.zero_optimization_stage == json.loads(export("deepspeed", job))["zero_optimization"]["stage"]


@pytest.mark.parametrize("name", JOBS)
def test_torchtitan_config_classes_parse_the_sections(name: str) -> None:
    """torchtitan 0.3's own TrainingConfig / ParallelismConfig, parsed by tyro with its ConfigManager's
    rules (what `--training.KEY` / `--parallelism.KEY` go through; its model registry needs triton,
    so the full ConfigManager does not import on a CPU-only machine)."""
    config = pytest.importorskip("torchtitan.config")
    tyro = pytest.importorskip("tyro")
    from dataclasses import fields

    c = tomllib.loads(export("torchtitan", JOBS[name]))
    for section, cls in (("training", config.TrainingConfig), ("parallelism", config.ParallelismConfig)):
        known = {f.name for f in fields(cls)}
        argv: list[str] = []
        for k, v in c[section].items():
            if isinstance(v, bool):
                argv += [f"--{k}" if v else f"--no_{k}"] if k in known else []
            elif k in known:
                argv += [f"--{k}", str(v)]
            if k not in known:  # moved out of [training]/[parallelism] in torchtitan 0.3
                assert k in {"dataset", "dataset_path", "enable_async_tensor_parallel"}, k
        parsed = tyro.cli(cls, args=argv, registry=config.manager.custom_registry)
        for k, v in c[section].items():
            if k in known:
                assert getattr(parsed, k) == v, (section, k)


def test_whole_experts_export_their_expert_tensor_parallel_degree() -> None:
    """etp 1 (experts whole, expert parallelism folded over the tensor-parallel ranks) is said to each
    engine in its own words; torchtitan takes 1 or tp only."""
    plan = Plan(tp=2, dp=8, ep=16, etp=1, micro_batch=1, grad_accum=4, sharding="zero1", precision="bf16",
                sequence_parallel=True)
    job = _job("qwen3-30b-a3b", plan)
    argv = _command(export("megatron", job))
    assert argv[argv.index("--expert-tensor-parallel-size") + 1] == "1"
    assert argv[argv.index("--expert-model-parallel-size") + 1] == "16"
    titan = tomllib.loads(export("torchtitan", job))["parallelism"]
    assert titan["expert_tensor_parallel_degree"] == 1 and titan["expert_parallel_degree"] == 16
    split = _job("qwen3-30b-a3b", Plan(tp=2, dp=8, ep=8, micro_batch=1, grad_accum=4, sharding="zero1",
                                       precision="bf16", sequence_parallel=True))
    argv = _command(export("megatron", split))
    assert argv[argv.index("--expert-tensor-parallel-size") + 1] == "2"  # Megatron's default, said
    _bad(_job("qwen3-30b-a3b", Plan(tp=4, dp=4, ep=8, etp=2, micro_batch=1, grad_accum=4, sharding="zero1",
                                    precision="bf16", sequence_parallel=True)), "torchtitan", "1 or equal to tp")
    _bad(_job("llama-3-8b", Plan(tp=2, dp=4, etp=1, micro_batch=1, sequence_parallel=True)), "megatron",
         "needs a mixture-of-experts model")
