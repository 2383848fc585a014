"""`whichgpu estimate`: step time, throughput, MFU and where the time goes, per GPU."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import typer

from whichgpu import limits
from whichgpu.commands.common import (
    AttentionOpt,
    BatchOpt,
    CatalogOpt,
    CompileOpt,
    ContextOpt,
    EngineOpt,
    ImageOpt,
    JsonOpt,
    MoeCapacityOpt,
    MoeSkewOpt,
    NoCacheOpt,
    OptimImplOpt,
    OptimOpt,
    PhaseOpt,
    SeqOpt,
    SparsityOpt,
    SystemOpt,
    TaskOpt,
    WideOpt,
    emit_json,
    engine_attention,
    engine_gpus,
    float_option,
    get_catalog,
    get_system,
    gpu_names,
    int_option,
    moe_flags_note,
    resolve_engine,
    system_for,
    workload_spec,
)
from whichgpu.errors import InputError


def estimate_cmd(
    model: str = typer.Argument(..., help="Zoo name, path to a Hugging Face config.json, or path/to/file.py:factory."),
    gpu: str = typer.Option(None, "--gpu", help="GPU name(s), comma-separated, or 'all' for the whole catalog (default: the --system's GPU)."),
    gpus: int = int_option(1, "--gpus", bound=limits.GPUS, help="Data-parallel degree: model replicas (or shards, with --sharding)."),
    sharding: str = typer.Option("ddp", "--sharding", help="Data parallelism: ddp, zero1, zero2, zero3, fsdp-full, fsdp-hybrid, fsdp-grad-op (memory and communication)."),
    tp: int = int_option(1, "--tp", bound=limits.TP, help="Tensor-parallel degree (built-in decoders: one rank of a Megatron split is traced)."),
    system: str = SystemOpt,
    task: str = TaskOpt,
    batch_size: int = BatchOpt,
    seq_len: int = SeqOpt,
    image_size: int = ImageOpt,
    precision: str = typer.Option("auto", "--precision", help="auto (per GPU: BF16 on Ampere+, FP16 AMP on Volta/Turing, else FP32), or fp32, tf32, amp-fp16, amp-bf16, fp16, bf16, fp8, int8, int4."),
    optimizer: str = OptimOpt,
    optimizer_impl: str = OptimImplOpt,
    phase: str = PhaseOpt,
    context: int = ContextOpt,
    sparsity: str = SparsityOpt,
    attention: str = AttentionOpt,
    moe_capacity: float = MoeCapacityOpt,
    moe_skew: float = MoeSkewOpt,
    channels_last: bool = typer.Option(False, "--channels-last", help="NHWC activations for convolutional models (PyTorch default is NCHW)."),
    checkpointing: str = typer.Option("none", "--checkpointing", help="Activation checkpointing: none, selective or full."),
    finetune: str = typer.Option("full", "--finetune", help="full, lora or qlora."),
    lora_rank: int = int_option(16, "--lora-rank", bound=limits.LORA_RANK, help="LoRA rank."),
    engine: str = EngineOpt,
    compile_: bool = CompileOpt,
    overlap: str = typer.Option("max", "--overlap", help="Per-kernel compute/memory overlap: max (overlapped) or sum (serial)."),
    no_ddp_overlap: bool = typer.Option(False, "--no-ddp-overlap", help="Do not overlap gradient all-reduce with backward."),
    grad_accum: int = int_option(1, "--grad-accum", bound=limits.GRAD_ACCUM, help="Micro-batches per optimizer step."),
    power_limit_w: float = float_option(None, "--power-limit-w", bound=limits.POWER_W, help="Model a power cap (W)."),
    step_host_ms: float = float_option(None, "--step-host-ms", bound=limits.STEP_HOST_MS,
                                       help="Host time per step outside kernel issue, ms: your loop's data loading, "
                                       "logging, loss read (default: the engine's fitted figure)."),
    explain: bool = typer.Option(False, "--explain", help="Also show the reasoning: roofline of the top ops and the bandwidth-ratio estimate of Dettmers' guide."),
    top: int = int_option(8, "--top", bound=limits.TOP, help="Top ops by time to list per GPU."),
    no_cache: bool = NoCacheOpt,
    json_out: bool = JsonOpt,
    wide: bool = WideOpt,
    catalog: str = CatalogOpt,
) -> None:
    """Predict step time and throughput on one or more GPUs, with the time split and top ops."""
    results = estimate_run(
        model, gpu=gpu, gpus=gpus, sharding=sharding, tp=tp, system=system, task=task, batch_size=batch_size,
        seq_len=seq_len, image_size=image_size, precision=precision, optimizer=optimizer,
        optimizer_impl=optimizer_impl, phase=phase, context=context, sparsity=sparsity, attention=attention,
        moe_capacity=moe_capacity, moe_skew=moe_skew, channels_last=channels_last, checkpointing=checkpointing,
        finetune=finetune, lora_rank=lora_rank, engine=engine, compile_=compile_, overlap=overlap,
        no_ddp_overlap=no_ddp_overlap, grad_accum=grad_accum, power_limit_w=power_limit_w, top=top,
        no_cache=no_cache, catalog=catalog, step_host_ms=step_host_ms)
    from whichgpu.report.estimate import estimate_document, print_estimates

    if json_out:
        emit_json("whichgpu.estimate/1", estimate_document(results, explain))
        return
    print_estimates(results, explain, top, wide=wide)


def estimate_run(
    model: str, *, gpu: str | None = None, gpus: int = 1, sharding: str = "ddp", tp: int = 1, system: str | None = None,
    task: str = "train", batch_size: int | None = None, seq_len: int | None = None, image_size: int | None = None,
    precision: str = "auto", optimizer: str | None = None, optimizer_impl: str = "foreach", phase: str = "full",
    context: int | None = None, sparsity: str = "none", attention: str | None = None,
    moe_capacity: float | None = None, moe_skew: float | None = None, channels_last: bool = False,
    checkpointing: str = "none", finetune: str = "full", lora_rank: int = 16, engine: str | None = None,
    compile_: bool = False, overlap: str = "max", no_ddp_overlap: bool = False, grad_accum: int = 1,
    power_limit_w: float | None = None, top: int = 8, no_cache: bool = False, catalog: str | None = None,
    step_host_ms: float | None = None,
) -> list[Any]:
    """The per-GPU predictions `whichgpu estimate` shows (and the web app's comparison serves), one per
    GPU named by `gpu`; flags as the command's, by their parameter names."""
    from whichgpu.parallel.plan import make_plan
    from whichgpu.perf.auto import probe_precision, resolve_precision
    from whichgpu.predict import predict
    from whichgpu.workload.api import get_trace, resolve
    from whichgpu.workload.spec import is_serving

    cat = get_catalog(catalog)
    sys_ = get_system(catalog, system)
    specs = cat.get_many(gpu_names(gpu, sys_))
    if not specs:
        raise InputError("--gpu names no GPU; give a name, several separated by commas, or 'all'")
    eng = resolve_engine(engine, compile_)
    specs = engine_gpus(eng, specs, every=(gpu or "").strip().lower() == "all")
    plan = make_plan(task, dp=gpus, tp=tp, engine=eng, overlap=overlap, comm_overlap=not no_ddp_overlap,
                     grad_accum=grad_accum, power_limit_w=power_limit_w, step_host_ms=step_host_ms, sharding=sharding,
                     recompute=checkpointing if task == "train" else None)
    options: list[tuple[str, object]] = []
    if channels_last:
        options.append(("memory_format", "channels_last"))
    if tp > 1:
        options.append(("tp", tp))
    base = workload_spec(model, task, batch_size, seq_len, image_size,
                         probe_precision(task) if precision == "auto" else precision,
                         optimizer, optimizer_impl, phase, context, sparsity, engine_attention(eng, attention),
                         moe_capacity, moe_skew)
    base = replace(base, options=tuple(base.options) + tuple(options), checkpointing=checkpointing,
                   finetune=finetune, lora_rank=lora_rank)
    resolved, src = resolve(base)
    serving = is_serving(resolved, src)
    traces: dict[Any, Any] = {}

    def trace_for(spec: Any) -> Any:
        if spec not in traces:
            traces[spec] = get_trace(spec, use_cache=not no_cache)
        return traces[spec]

    results = []
    for g in specs:
        prec, why = resolve_precision(g, task, precision)
        results.append(predict(resolved, g, replace(plan, precision=prec or precision), system_for(g, sys_, catalog),
                               trace_for, serving=serving, precision_reason=why, top=top))
    moe_flags_note(moe_capacity, moe_skew, model, traces.values())
    return results


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate_cmd)
