"""`whichgpu fit`: will it fit, the largest batch that fits, and what to change when it does not."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

import typer

from whichgpu import limits
from whichgpu.commands.common import (
    AttentionOpt,
    BatchOpt,
    CatalogOpt,
    ContextOpt,
    ImageOpt,
    JsonOpt,
    MoeCapacityOpt,
    MoeSkewOpt,
    NoCacheOpt,
    OptimImplOpt,
    OptimOpt,
    PhaseOpt,
    SeqOpt,
    SystemOpt,
    TaskOpt,
    WideOpt,
    emit_json,
    get_catalog,
    get_system,
    gpu_names,
    int_option,
    moe_flags_note,
    system_for,
    workload_spec,
)
from whichgpu.errors import NoAnswerError


def fit_cmd(
    model: str = typer.Argument(..., help="Zoo name, path to a Hugging Face config.json, or path/to/file.py:factory."),
    gpu: str = typer.Option(None, "--gpu", help="GPU name (id, product name or alias; default: the --system's GPU)."),
    gpus: int = int_option(1, "--gpus", bound=limits.GPUS, help="GPUs the model states are sharded over (and data-parallel replicas)."),
    task: str = TaskOpt,
    batch_size: int = BatchOpt,
    seq_len: int = SeqOpt,
    image_size: int = ImageOpt,
    precision: str = typer.Option("auto", "--precision", help="auto (per GPU: BF16 on Ampere+, FP16 AMP on Volta/Turing, else FP32), or fp32, tf32, amp-fp16, amp-bf16, fp16, bf16, fp8, int8, int4."),
    optimizer: str = OptimOpt,
    optimizer_impl: str = OptimImplOpt,
    checkpointing: str = typer.Option("none", "--checkpointing", help="Activation checkpointing of the repeated blocks: none, selective or full."),
    sharding: str = typer.Option("ddp", "--sharding", help="ddp, zero1, zero2, zero3, fsdp-full (= ZeRO-3), fsdp-hybrid (ZeRO-3 inside a node) or fsdp-grad-op (= ZeRO-2)."),
    system: str = SystemOpt,
    offload_optimizer: bool = typer.Option(False, "--offload-optimizer", help="Optimizer states in CPU RAM (ZeRO-Offload / FSDP CPU offload)."),
    finetune: str = typer.Option("full", "--finetune", help="full, lora or qlora (LoRA on a 4-bit NF4 base)."),
    lora_rank: int = int_option(16, "--lora-rank", bound=limits.LORA_RANK, help="LoRA rank."),
    phase: str = PhaseOpt,
    context: int = ContextOpt,
    attention: str = AttentionOpt,
    moe_capacity: float = MoeCapacityOpt,
    moe_skew: float = MoeSkewOpt,
    grad_accum: int = int_option(1, "--grad-accum", bound=limits.GRAD_ACCUM, help="Micro-batches per optimizer step (gradients then stay live through the step)."),
    no_master_weights: bool = typer.Option(False, "--no-master-weights", help="16-bit parameters without FP32 master weights (plain torch.optim on bf16/fp16 parameters)."),
    no_search: bool = typer.Option(False, "--no-search", help="Skip the search for the largest batch that fits."),
    no_cache: bool = NoCacheOpt,
    json_out: bool = JsonOpt,
    wide: bool = WideOpt,
    catalog: str = CatalogOpt,
) -> None:
    """Peak memory per GPU with a line-by-line breakdown, fits or not, the largest batch that fits
    and, when it does not fit, the changes that would make it fit."""
    progress = None
    if not json_out:
        from whichgpu.report.console import err_console

        progress = err_console.status
    report = fit_run(
        model, gpu=gpu, gpus=gpus, task=task, batch_size=batch_size, seq_len=seq_len, image_size=image_size,
        precision=precision, optimizer=optimizer, optimizer_impl=optimizer_impl, checkpointing=checkpointing,
        sharding=sharding, system=system, offload_optimizer=offload_optimizer, finetune=finetune,
        lora_rank=lora_rank, phase=phase, context=context, attention=attention, moe_capacity=moe_capacity,
        moe_skew=moe_skew, grad_accum=grad_accum, no_master_weights=no_master_weights, no_search=no_search,
        no_cache=no_cache, catalog=catalog, progress=progress)
    from whichgpu.report.memory import fit_document, print_fit

    if json_out:
        emit_json("whichgpu.memory/1", fit_document(report, lora_rank if finetune != "full" else None))
    else:
        print_fit(report, wide=wide)
    no = fit_no_answer(report)
    if no is not None:
        raise NoAnswerError(no)


def fit_run(
    model: str, *, gpu: str | None = None, gpus: int = 1, task: str = "train", batch_size: int | None = None,
    seq_len: int | None = None, image_size: int | None = None, precision: str = "auto", optimizer: str | None = None,
    optimizer_impl: str = "foreach", checkpointing: str = "none", sharding: str = "ddp", system: str | None = None,
    offload_optimizer: bool = False, finetune: str = "full", lora_rank: int = 16, phase: str = "full",
    context: int | None = None, attention: str | None = None, moe_capacity: float | None = None,
    moe_skew: float | None = None, grad_accum: int = 1, no_master_weights: bool = False, no_search: bool = False,
    no_cache: bool = False, catalog: str | None = None,
    progress: Callable[[str], AbstractContextManager[Any]] | None = None,
) -> Any:
    """The memory report `whichgpu fit` shows (and the web app serves); flags as the command's, by
    their parameter names; `progress` wraps the estimate and the batch search (the CLI's spinner)."""
    from whichgpu.memory.fit import fit
    from whichgpu.parallel.plan import make_plan
    from whichgpu.perf.auto import resolve_precision
    from whichgpu.workload.api import get_trace, resolve

    named = get_system(catalog, system)
    g = get_catalog(catalog).get(gpu_names(gpu, named))
    plan = make_plan(task, dp=gpus, sharding=sharding, offload="optimizer" if offload_optimizer else "none",
                     grad_accum=grad_accum, master_weights=not no_master_weights)
    sys_ = system_for(g, named, catalog)
    prec = resolve_precision(g, task, precision)[0] or precision
    spec: Any = workload_spec(model, task, batch_size, seq_len, image_size, prec, optimizer, optimizer_impl, phase,
                              context, "none", attention, moe_capacity, moe_skew)
    spec = replace(spec, checkpointing=checkpointing, finetune=finetune, lora_rank=lora_rank)
    spec, _src = resolve(spec)  # validates sizes and names before any capture
    traces: dict[Any, Any] = {}

    def trace_for(**changes: Any) -> Any:
        s = replace(spec, **changes)
        if s not in traces:
            traces[s] = get_trace(s, use_cache=not no_cache)
        return traces[s]

    trace = trace_for()
    moe_flags_note(moe_capacity, moe_skew, model, [trace])
    def answer() -> Any:
        r = fit(trace, g, plan, trace_for, search_batch=not no_search, system=sys_)
        if r.estimate.fits:
            return r
        from whichgpu.parallel.fallback import for_fit

        extra = (("--system", system) if system else ()) + (("--catalog", catalog) if catalog else ())
        return replace(r, parallel=for_fit(trace, model, g, sys_, gpus, grad_accum, attention, extra))

    if progress is None:
        return answer()
    with progress("estimating (new batch sizes and variants are traced once, then cached)"):
        return answer()


def fit_no_answer(report: Any) -> str | None:
    """Why the answer is "no" (exit 1): it never fits, or not as given; else None."""
    from whichgpu.report.memory import never_fits_message, parallel_tail

    if report.never_fits:
        return never_fits_message(report) + parallel_tail(report)
    if not report.estimate.fits:  # the answer to "does it fit as given" is no (exit 1), with or without a search
        e = report.estimate
        return (f"{e.trace.model} does not fit on {e.gpu_name} at batch {e.trace.batch_size} "
                f"({e.total_bytes / 1e9:.1f} GB needed, {e.capacity_bytes / 1e9:.1f} GB usable)"
                + parallel_tail(report))
    return None


def register(app: typer.Typer) -> None:
    app.command("fit")(fit_cmd)
