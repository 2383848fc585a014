"""`whichgpu plan`: lay a decoder LLM's training out over many GPUs (tensor, pipeline, context,
expert and data parallelism), simulate the pipeline schedule, rank the layouts, export the best."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from whichgpu import limits
from whichgpu.commands.common import (
    CatalogOpt,
    JsonOpt,
    SystemOpt,
    emit_json,
    float_option,
    get_catalog,
    get_system,
    gpu_names,
    int_option,
    system_for,
    write_report,
)
from whichgpu.errors import InputError, NoAnswerError


def plan_cmd(
    model: str = typer.Argument(..., help="A decoder LLM of the zoo (e.g. llama-3-70b) or a path to its config.json."),
    gpu: str = typer.Option(None, "--gpu", help="GPU name (id, product name or alias; default: the --system's GPU)."),
    gpus: int = int_option(8, "--gpus", bound=limits.GPUS, help="GPUs of the job (tp x pp x cp x dp)."),
    system: str = SystemOpt,
    global_batch: int = int_option(None, "--global-batch", bound=limits.BATCH,
                                   help="Sequences per optimizer step (default: 4 per GPU)."),
    seq_len: int = int_option(None, "--seq-len", bound=limits.SEQ_LEN, help="Tokens per sequence (default: the model's)."),
    precision: str = typer.Option(None, "--precision", help="bf16 (Megatron --bf16: 16-bit weights, FP32 main "
                                  "gradients and optimizer), fp16, fp8 (Transformer Engine FP8 GEMMs), amp-bf16 "
                                  "(torch autocast, FP32 weights), fp32 or tf32. Default: bf16, or fp16 on a GPU "
                                  "without BF16 (V100, T4)."),
    tp: int = int_option(None, "--tp", bound=limits.GPUS, help="Tensor-parallel degree (searched if not given)."),
    pp: int = int_option(None, "--pp", bound=limits.GPUS, help="Pipeline-parallel degree (searched if not given)."),
    vp: int = int_option(None, "--vp", bound=limits.GPUS, help="Virtual pipeline stages per rank (interleaved)."),
    cp: int = int_option(None, "--cp", bound=limits.GPUS, help="Context-parallel degree (searched if not given)."),
    ep: int = int_option(None, "--ep", bound=limits.GPUS, help="Expert-parallel degree, MoE models (searched if not given)."),
    etp: int = int_option(None, "--etp", bound=limits.GPUS, help="Expert tensor-parallel degree, MoE models "
                          "(Megatron --expert-tensor-parallel-size). Not given: experts whole (1), expert "
                          "parallelism folded over the tensor-parallel ranks, as Megatron-Bridge's MoE recipes run; "
                          "equal to --tp: Megatron's default split."),
    micro_batch: int = int_option(None, "--micro-batch", "--batch-size", "-b", bound=limits.BATCH,
                                  help="Sequences per GPU per micro-batch (searched if not given)."),
    sharding: str = typer.Option(None, "--sharding", help="ddp, zero1 (Megatron's distributed optimizer), zero2, zero3, "
                                 "fsdp-full, fsdp-hybrid or fsdp-grad-op (searched if not given)."),
    recompute: str = typer.Option(None, "--recompute", "--checkpointing",
                                  help="Activation recomputation: none, selective or full (searched if not given)."),
    schedule: str = typer.Option(None, "--schedule", help="Pipeline schedule: 1f1b, gpipe, interleaved-1f1b, zb-h1, "
                                 "zb-h2 or zb-v (searched if not given)."),
    sequence_parallel: bool = typer.Option(None, "--sequence-parallel/--no-sequence-parallel",
                                           help="Megatron sequence parallelism with tp > 1 (default: on)."),
    tp_comm_overlap: bool = typer.Option(None, "--tp-comm-overlap/--no-tp-comm-overlap",
                                         help="Overlap tensor-parallel collectives with GEMMs (default: with sequence "
                                         "parallelism where the group shares NVLink; Transformer Engine's overlap "
                                         "needs peer memory access)."),
    attention: str = typer.Option(None, "--attention", help="flash (FlashAttention-2 or later, cuDNN/TE fused "
                                  "attention), flash1 (FlashAttention-1 generation, 2022 Triton kernels: half the "
                                  "rate) or unfused (score GEMMs and a fused softmax, Megatron-LM before "
                                  "FlashAttention). Default: flash, or unfused on a GPU older than Ampere "
                                  "(V100, T4), which flash kernels do not run on."),
    grad_dtype: str = typer.Option("fp32", "--grad-dtype", help="Main gradients and their data-parallel reduction: "
                                   "fp32 (Megatron's default with bf16; --accumulate-allreduce-grads-in-fp32 with "
                                   "fp16), bf16 (--grad-reduce-in-bf16: half the gradient memory and traffic) or "
                                   "fp16 (with --precision fp16: Megatron's fp16 default, DeepSpeed's fp16 engine)."),
    fp8_params: bool = typer.Option(False, "--fp8-params", help="With --precision fp8: keep the weights in FP8 "
                                    "(Megatron --fp8-param-gather; FP32 main weights stay in the optimizer)."),
    engine: str = typer.Option("megatron", "--engine", help="Engine profile: host launch costs and the loss's "
                               "kernels (megatron: Megatron-LM, its unfused vocab-parallel loss; nemo: NeMo / "
                               "Megatron-Bridge, the fused loss; default megatron)."),
    step_host_ms: float = float_option(None, "--step-host-ms", bound=limits.STEP_HOST_MS,
                                       help="Host time per step outside kernel issue, ms (default: the engine's figure)."),
    top: int = int_option(5, "--top", bound=limits.Bound(1, 100), help="Layouts to show."),
    objective: str = typer.Option("time", "--objective", help="time (fastest step) or cost (cheapest step; with a "
                                  "fixed GPU count the same order, with the price per step shown)."),
    html: Path = typer.Option(None, "--html", help="Write a self-contained HTML report (Gantt chart, time split)."),
    export: str = typer.Option(None, "--export", help="Write the best layout as megatron, deepspeed, torchtitan or "
                               "torchrun configuration (with --out)."),
    out: Path = typer.Option(None, "--out", help="File for --export."),
    json_out: bool = JsonOpt,
    catalog: str = CatalogOpt,
) -> None:
    """The top layouts that fit, each with step time, tokens/s, model TFLOP/s per GPU, MFU, the time
    split (compute, exposed communication by kind, bubble, optimizer) and the worst rank's peak
    memory; the closest layouts that do not fit, with the reason."""
    run = plan_run(
        model, gpu=gpu, gpus=gpus, system=system, global_batch=global_batch, seq_len=seq_len, precision=precision,
        tp=tp, pp=pp, vp=vp, cp=cp, ep=ep, etp=etp, micro_batch=micro_batch, sharding=sharding, recompute=recompute,
        schedule=schedule, sequence_parallel=sequence_parallel, tp_comm_overlap=tp_comm_overlap,
        attention=attention, grad_dtype=grad_dtype, fp8_params=fp8_params, engine=engine, top=top,
        objective=objective, export=export, out=out, catalog=catalog, step_host_ms=step_host_ms)
    job, res, ctx, price, g, sys_ = run.job, run.res, run.ctx, run.price, run.gpu, run.system
    if json_out:
        emit_json("whichgpu.plan/1", plan_body(run))
    else:
        from whichgpu.report.plan import print_plan

        print_plan(job, res)
        if price is not None and res.best:
            from whichgpu.report.console import say

            say(f"cost of #1: ${gpus * res.best[0].step_s / 3600.0 * price:,.2f} per step at ${price:g} per GPU-hour "
                f"(catalog rental price of {g.name})")
    if html is not None:
        _write_html(job, res, ctx, html)
    if export is not None and out is not None and res.best:
        from whichgpu.parallel.export import ExportJob
        from whichgpu.parallel.export import export as do_export

        best = res.best[0].plan
        per_node = launch_gpus_per_node(gpus, sys_.gpus_per_node, best.tp)
        text = do_export(export, ExportJob(job.model_id, job.args, best.with_(precision=precision), job.global_batch,
                                           job.seq_len, per_node, max(1, gpus // per_node), grad_dtype=grad_dtype,
                                           fp8_params=fp8_params))
        try:
            out.write_text(text)
        except OSError as e:
            raise InputError(f"cannot write {out}: {e.strerror}", field="out") from e
    no = plan_no_answer(run)
    if no is not None:
        raise NoAnswerError(no)


def launch_gpus_per_node(gpus: int, node_gpus: int, tp: int) -> int:
    """Processes per node for the launch: every node runs as many (torchrun's --nproc-per-node),
    so the most that divides the GPU count, fits a node and keeps each tensor-parallel group inside
    one node (consecutive ranks); 12 GPUs of 8-GPU nodes at tp 4 launch as 3 nodes x 4."""
    fits = [n for n in range(min(gpus, node_gpus), 0, -1) if gpus % n == 0]
    return next((n for n in fits if n % tp == 0), fits[0])


@dataclass(frozen=True)
class PlanRun:
    """A planner search as `whichgpu plan` runs it: the job, the ranked layouts, the planner's
    context (for the Gantt chart), the GPU's catalog rental price, the GPU and the system."""

    job: Any
    res: Any
    ctx: Any
    objective: str
    price: float | None
    gpu: Any
    system: Any


def plan_run(
    model: str, *, gpu: str | None = None, gpus: int = 8, system: str | None = None, global_batch: int | None = None,
    seq_len: int | None = None, precision: str | None = None, tp: int | None = None, pp: int | None = None,
    vp: int | None = None, cp: int | None = None, ep: int | None = None, etp: int | None = None,
    micro_batch: int | None = None,
    sharding: str | None = None, recompute: str | None = None, schedule: str | None = None,
    sequence_parallel: bool | None = None, tp_comm_overlap: bool | None = None, attention: str | None = None,
    grad_dtype: str = "fp32", fp8_params: bool = False, engine: str = "megatron", top: int = 5,
    objective: str = "time", export: str | None = None, out: Path | None = None, catalog: str | None = None,
    step_host_ms: float | None = None,
) -> PlanRun:
    """The layout search `whichgpu plan` shows (and the web app serves); flags as the command's, by
    their parameter names (`export` and `out` are only checked here); `precision` None: bf16, or
    fp16 on a GPU without BF16 (`default_train_precision`); `attention` None: flash, or unfused on a
    GPU older than Ampere (parallel/planner.py `default_attention`)."""
    from whichgpu.parallel.models import planner_model, refuse_serving_only
    from whichgpu.parallel.plan import RECOMPUTES, SCHEDULES, SHARDINGS, Plan
    from whichgpu.parallel.planner import ATTENTIONS, GRAD_DTYPES, Context, Job, default_attention
    from whichgpu.parallel.search import Fixed, search

    if objective not in ("time", "cost"):
        raise InputError(f"objective must be 'time' or 'cost', got {objective!r}", field="objective")
    if grad_dtype not in GRAD_DTYPES:
        raise InputError(f"grad-dtype must be one of {', '.join(GRAD_DTYPES)}, got {grad_dtype!r}", field="grad_dtype")
    named = get_system(catalog, system)
    g = get_catalog(catalog).get(gpu_names(gpu, named))
    precision = precision or default_train_precision(g)
    attention = attention or default_attention(g)
    if grad_dtype == "fp16" and precision != "fp16":
        raise InputError(f"--grad-dtype fp16 keeps FP16 gradients: it needs --precision fp16, not {precision}",
                         field="grad_dtype")
    if fp8_params and precision != "fp8":
        raise InputError(f"--fp8-params keeps FP8 weights: it needs --precision fp8, not {precision}",
                         field="fp8_params")
    if attention not in ATTENTIONS:
        raise InputError(f"attention must be one of {', '.join(ATTENTIONS)}, got {attention!r}", field="attention")
    for name, value, valid in (("sharding", sharding, SHARDINGS), ("recompute", recompute, RECOMPUTES),
                               ("schedule", schedule, SCHEDULES)):
        if value is not None and value not in valid:
            from whichgpu.errors import UnknownNameError

            raise UnknownNameError(name, value, valid, field=name)
    if (export is None) != (out is None):
        raise InputError("--export and --out go together: --export FORMAT --out FILE", field="export")
    if export is not None:
        from whichgpu.parallel.export import FORMATS

        if export not in FORMATS:
            from whichgpu.errors import UnknownNameError

            raise UnknownNameError("export format", export, FORMATS, field="export")
    model_id, args, default_seq = planner_model(model)
    refuse_serving_only(model_id, args, "the parallel planner")
    sys_ = system_for(g, named, catalog)
    seq = seq_len or default_seq or 4096
    gb = global_batch or 4 * gpus
    if sys_.scaleout is None and gpus > sys_.gpus_per_node:
        raise InputError(f"{gpus} GPUs do not fit in one {sys_.name} ({sys_.gpus_per_node} GPUs) and it has no "
                         "scale-out network: pick a --system with one (see `whichgpu systems`)", field="system")
    job = Job(model_id, args, g, sys_, gpus, gb, seq, precision, attention, grad_dtype, fp8_params)
    from whichgpu.workload.precision import get_precision

    get_precision(precision, "train")  # a bad or inference-only precision is a one-line error
    fixed = Fixed(tp=tp, pp=pp, vp=vp, cp=cp, ep=ep, etp=etp, micro_batch=micro_batch, sharding=sharding,
                  recompute=recompute,
                  schedule=schedule, sequence_parallel=sequence_parallel, tp_comm_overlap=tp_comm_overlap)
    check_fixed(job, fixed)
    base = Plan(engine=engine, precision=None, step_host_ms=step_host_ms)
    base.validate()
    ctx = Context.make(job)
    res = search(job, fixed, base, top=top, objective=objective, ctx=ctx)
    return PlanRun(job, res, ctx, objective, _rent(g), g, sys_)


def default_train_precision(g: Any) -> str:
    """The planner's precision when none is given: bf16 (Megatron --bf16, the recipes' choice), or
    fp16 on a GPU without BF16 (before compute capability 8.0), whose tensor cores take FP16 only."""
    return "fp16" if g.supports("bf16") is False else "bf16"


def plan_body(run: PlanRun) -> dict[str, Any]:
    """The JSON body of whichgpu.plan/1: the planner's document with the price per step."""
    from whichgpu.report.plan import plan_document

    doc = plan_document(run.job, run.res, run.objective)
    for item in doc["plans"] + doc["not_fitting"]:
        if run.price is not None and item["step_s"]:
            item["usd_per_step"] = run.job.gpus * item["step_s"] / 3600.0 * run.price
    doc["usd_per_gpu_hour"] = run.price
    return doc


def plan_no_answer(run: PlanRun) -> str | None:
    """Why the answer is "no" (exit 1): no layout fits, with the closest one's reason; else None."""
    res = run.res
    if res.best:
        return None
    return f"no layout of {run.job.model_id} fits on {run.job.gpus} x {run.gpu.name}: {res.why_none()}"


def _rent(g: Any) -> float | None:
    from whichgpu.recommend.prices import catalog_prices

    q = catalog_prices(g, dt.date.today()).rent
    return q.usd


def check_fixed(job: Any, fixed: Any) -> None:
    """Degrees the user gave must be possible on their own: one-line errors (exit 2)."""
    from whichgpu.parallel.planner import stages_fit

    a = job.args
    if job.seq_len > a.max_positions:  # as estimate, fit and recommend refuse it (and plan's --export did)
        raise InputError(f"sequence length {job.seq_len} exceeds the model's max_position_embeddings {a.max_positions} "
                         "(for a context extension, give a config.json with the longer window)", field="seq_len")
    prod = 1
    for name in ("tp", "pp", "cp"):
        v = getattr(fixed, name)
        if v:
            prod *= v
    if job.gpus % prod:
        raise InputError(f"the fixed degrees (tp x pp x cp = {prod}) do not divide --gpus {job.gpus}", field="gpus")
    if fixed.tp and a.heads % fixed.tp:
        raise InputError(f"tensor parallelism {fixed.tp} does not divide the {a.heads} attention heads of "
                         f"{job.model_id}", field="tp")
    if fixed.pp and not stages_fit(a.layers, fixed.pp * (fixed.vp or 1)):
        raise InputError(f"pp {fixed.pp} x vp {fixed.vp or 1} stages exceed the {a.layers} layers of {job.model_id}",
                         field="pp")
    if fixed.vp and fixed.vp > 1 and fixed.pp == 1:
        raise InputError(f"vp {fixed.vp} virtual stages need pipeline parallelism (pp >= 2)", field="vp")
    if fixed.schedule not in (None, "1f1b") and (fixed.pp == 1 or job.gpus == 1):
        why = "--pp 1" if fixed.pp == 1 else "one GPU"
        raise InputError(f"the {fixed.schedule} schedule pipelines stages over GPUs and {why} has one stage: give "
                         "--pp 2 or more, or --schedule 1f1b (no pipeline)", field="schedule")
    if fixed.schedule == "zb-v" and fixed.vp not in (None, 2):
        raise InputError(f"zb-v runs two virtual stages per GPU (the V shape): --vp must be 2, got {fixed.vp}",
                         field="vp")
    if fixed.vp and fixed.vp > 1 and fixed.schedule in ("1f1b", "gpipe", "zb-h1"):
        raise InputError(f"--vp {fixed.vp} virtual stages run under --schedule interleaved-1f1b (or zb-v at vp 2), not "
                         f"{fixed.schedule}", field="vp")
    if fixed.schedule == "interleaved-1f1b" and fixed.vp == 1:
        raise InputError("interleaved-1f1b needs at least two virtual stages per GPU: give --vp 2 or more, or "
                         "--schedule 1f1b", field="vp")
    if fixed.ep and fixed.ep > 1 and not a.experts:
        raise InputError(f"expert parallelism needs a mixture-of-experts model; {job.model_id} is dense", field="ep")
    if fixed.ep and a.experts and a.experts % fixed.ep:
        raise InputError(f"expert parallelism {fixed.ep} does not divide the {a.experts} experts", field="ep")
    if fixed.etp and not a.experts:
        raise InputError(f"expert tensor parallelism needs a mixture-of-experts model; {job.model_id} is dense",
                         field="etp")
    if fixed.etp and a.experts and a.expert_intermediate % fixed.etp:
        raise InputError(f"expert tensor parallelism {fixed.etp} does not divide the expert width "
                         f"{a.expert_intermediate} of {job.model_id}", field="etp")
    if fixed.etp and fixed.tp and fixed.tp % fixed.etp:
        raise InputError(f"expert tensor parallelism {fixed.etp} must divide --tp {fixed.tp}", field="etp")
    if fixed.etp and fixed.tp and fixed.etp < fixed.tp and fixed.sequence_parallel is False:
        raise InputError(f"--etp {fixed.etp} below --tp {fixed.tp} needs sequence parallelism (the experts take "
                         "each rank's share of the sequence): drop --no-sequence-parallel", field="etp")
    if fixed.ep and a.experts:
        expert_tp = fixed.etp or 1  # not given: the search keeps experts whole (etp 1)
        ranks = job.gpus // (fixed.pp or 1)  # tp x cp x dp at most
        if ranks % (fixed.ep * expert_tp):
            raise InputError(f"expert parallelism {fixed.ep} x expert tensor parallelism {expert_tp} = "
                             f"{fixed.ep * expert_tp} must divide tp x cp x dp ({ranks} GPUs"
                             f"{' per pipeline stage' if fixed.pp else ''})", field="ep")
    if fixed.cp and fixed.cp > 1 and job.seq_len % (2 * fixed.cp):
        raise InputError(f"context parallelism {fixed.cp} needs --seq-len divisible by {2 * fixed.cp}", field="cp")
    if fixed.micro_batch and job.global_batch >= 1 and job.global_batch % fixed.micro_batch:
        # global batch = micro-batch x accumulation x data parallel, whatever degrees are searched
        raise InputError(f"global batch {job.global_batch} is not divisible by micro-batch {fixed.micro_batch} (the "
                         "global batch is micro-batch x accumulation steps x data-parallel degree)",
                         field="global_batch")
    if fixed.tp and fixed.pp and fixed.cp is not None and fixed.micro_batch:
        dp = job.gpus // (fixed.tp * fixed.pp * (fixed.cp or 1))
        if job.global_batch % (fixed.micro_batch * dp):
            raise InputError(f"global batch {job.global_batch} is not divisible by micro-batch {fixed.micro_batch} x "
                             f"data-parallel {dp}", field="global_batch")
    if fixed.sequence_parallel and fixed.tp == 1:
        raise InputError("sequence parallelism needs tp >= 2", field="sequence_parallel")
    if job.global_batch < 1:
        raise InputError("global batch must be >= 1", field="global_batch")


def plan_gantt(res: Any, ctx: Any) -> str:
    """The Gantt chart (SVG) of the best layout's pipeline schedule; "" without pipeline stages."""
    from whichgpu.parallel.planner import evaluate

    gantt = ""
    if res.best and res.best[0].plan.pp > 1:
        from whichgpu.report.gantt import gantt_svg

        r = evaluate(ctx, res.best[0].plan, timeline=True)
        tl = getattr(r, "timeline", None)
        if tl is not None:
            gantt = gantt_svg(tl, title=f"{res.best[0].plan.schedule}: {res.best[0].plan.pp} stages, "
                                        f"{res.best[0].plan.grad_accum} micro-batches")
    return gantt


def _write_html(job: Any, res: Any, ctx: Any, path: Path) -> None:
    from whichgpu.report.plan import render_html

    write_report(path, render_html(job, res, plan_gantt(res, ctx)))


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)
