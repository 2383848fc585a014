"""`whichgpu estimate`: step time, throughput, MFU and where the time goes, per GPU."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import typer

from whichgpu.commands.common import (
    AttentionOpt,
    BatchOpt,
    CatalogOpt,
    CompileOpt,
    ContextOpt,
    EngineOpt,
    ImageOpt,
    JsonOpt,
    NoCacheOpt,
    OptimImplOpt,
    OptimOpt,
    PhaseOpt,
    SeqOpt,
    SparsityOpt,
    TaskOpt,
    emit_json,
    engine_attention,
    get_catalog,
    resolve_engine,
    workload_spec,
)
from whichgpu.errors import InputError


def build_plan(gpus: int, gpus_per_node: int, network: str, engine: str, overlap: str, ddp_overlap: bool,
               grad_accum: int, power_limit_w: float | None, sharding: str = "ddp") -> Any:
    from whichgpu.perf.plan import Plan

    plan = Plan(gpus=gpus, gpus_per_node=gpus_per_node, network=network, engine=engine, overlap=overlap,
                ddp_overlap=ddp_overlap, grad_accum=grad_accum, power_limit_w=power_limit_w, sharding=sharding)
    plan.validate()
    return plan


def estimate_cmd(
    model: str = typer.Argument(..., help="Zoo name, path to a Hugging Face config.json, or path/to/file.py:factory."),
    gpu: str = typer.Option(..., "--gpu", help="GPU name(s), comma-separated, or 'all' for the whole catalog."),
    gpus: int = typer.Option(1, "--gpus", help="Data-parallel GPUs (DDP)."),
    sharding: str = typer.Option("ddp", "--sharding", help="Data parallelism: ddp, zero1, zero2, zero3, fsdp-full, fsdp-grad-op (memory and communication)."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs per node sharing the scale-up link."),
    network: str = typer.Option("ib-hdr-200", "--network", help="Inter-node fabric per GPU: ib-ndr-400, ib-hdr-200, ib-edr-100, eth-100, eth-25, efa-400."),
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
    channels_last: bool = typer.Option(False, "--channels-last", help="NHWC activations for convolutional models (PyTorch default is NCHW)."),
    checkpointing: str = typer.Option("none", "--checkpointing", help="Activation checkpointing: none, selective or full."),
    finetune: str = typer.Option("full", "--finetune", help="full, lora or qlora."),
    lora_rank: int = typer.Option(16, "--lora-rank", help="LoRA rank."),
    engine: str = EngineOpt,
    compile_: bool = CompileOpt,
    overlap: str = typer.Option("max", "--overlap", help="Per-kernel compute/memory overlap: max (overlapped) or sum (serial)."),
    no_ddp_overlap: bool = typer.Option(False, "--no-ddp-overlap", help="Do not overlap gradient all-reduce with backward."),
    grad_accum: int = typer.Option(1, "--grad-accum", help="Micro-batches per optimizer step."),
    power_limit_w: float = typer.Option(None, "--power-limit-w", help="Model a power cap (W)."),
    explain: bool = typer.Option(False, "--explain", help="Also show the reasoning: roofline of the top ops and the bandwidth-ratio estimate of Dettmers' guide."),
    top: int = typer.Option(8, "--top", help="Top ops by time to list per GPU."),
    no_cache: bool = NoCacheOpt,
    json_out: bool = JsonOpt,
    catalog: str = CatalogOpt,
) -> None:
    """Predict step time and throughput on one or more GPUs, with the time split and top ops."""
    from whichgpu.perf.auto import auto_precision
    from whichgpu.perf.estimate import estimate
    from whichgpu.workload.api import get_trace, resolve

    cat = get_catalog(catalog)
    specs = cat.get_many(gpu)
    if not specs:
        raise InputError("--gpu names no GPU; give a name, several separated by commas, or 'all'")
    eng = resolve_engine(engine, compile_)
    plan = build_plan(gpus, gpus_per_node, network, eng, overlap, not no_ddp_overlap, grad_accum, power_limit_w,
                      sharding)
    options: list[tuple[str, object]] = []
    if channels_last:
        options.append(("memory_format", "channels_last"))
    base = workload_spec(model, task, batch_size, seq_len, image_size, "amp-bf16" if precision == "auto" else precision,
                         optimizer, optimizer_impl, phase, context, sparsity, engine_attention(eng, attention))
    base = replace(base, options=tuple(base.options) + tuple(options), checkpointing=checkpointing,
                   finetune=finetune, lora_rank=lora_rank)
    resolved, src = resolve(base)
    serving = task == "infer" and phase == "full" and _is_causal_lm(src)
    results: list[dict[str, Any]] = []
    traces: dict[Any, Any] = {}

    def trace_for(spec: Any) -> Any:
        if spec not in traces:
            traces[spec] = get_trace(spec, use_cache=not no_cache)
        return traces[spec]

    from whichgpu.memory import MemoryPlan, memory_estimate

    mplan = MemoryPlan(gpus=gpus, sharding=sharding, finetune=finetune, grad_accum=grad_accum)
    mplan.validate(task)
    for g in specs:
        prec, why = (auto_precision(g, task) if precision == "auto" else (precision, "as requested"))
        spec = replace(base, precision=prec)
        if serving:
            pre = trace_for(replace(spec, phase="prefill"))
            dec = trace_for(replace(spec, phase="decode", context=resolved.seq_len))
            ep, ed = estimate(pre, g, plan, top=top), estimate(dec, g, plan, top=top)
            mem = max((memory_estimate(t, g, mplan) for t in (pre, dec)), key=lambda m: m.total_bytes)
            results.append({"gpu": g, "precision": prec, "precision_reason": why, "est": ed, "trace": dec,
                            "prefill": ep, "prefill_trace": pre, "memory": mem})
        else:
            tr = trace_for(spec)
            results.append({"gpu": g, "precision": prec, "precision_reason": why, "est": estimate(tr, g, plan, top=top),
                            "trace": tr, "memory": memory_estimate(tr, g, mplan)})
    from whichgpu.report.estimate import estimate_document, print_estimates

    if json_out:
        emit_json("whichgpu.estimate/1", estimate_document(results, plan, explain))
        return
    print_estimates(results, plan, explain, top)


def _is_causal_lm(src: Any) -> bool:
    if src.kind == "zoo":
        from whichgpu.workload.zoo import get_entry

        return get_entry(src.ref).causal_lm
    if src.kind == "config":
        from whichgpu.workload.spec import read_config
        from whichgpu.workload.zoo.llm.args import SUPPORTED

        return read_config(src.ref).get("model_type") in SUPPORTED
    return False


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate_cmd)
