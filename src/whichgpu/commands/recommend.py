"""`whichgpu recommend`: which GPU, how many, bought or rented, for a workload (or a use case)
and a budget. With no arguments it runs the default use case (docs/presets.md)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from whichgpu import limits
from whichgpu.commands import serve as serve_cmd
from whichgpu.commands.common import (
    CatalogOpt,
    CompileOpt,
    EngineOpt,
    JsonOpt,
    MoeCapacityOpt,
    MoeSkewOpt,
    NoCacheOpt,
    SystemOpt,
    WideOpt,
    emit_json,
    engine_attention,
    engine_gpus,
    float_option,
    get_catalog,
    get_system,
    int_option,
    moe_flags_note,
    resolve_engine,
    workload_spec,
    write_report,
)
from whichgpu.errors import InputError, NoAnswerError
from whichgpu.hardware.engine import get_engine

UseCaseOpt = typer.Option(None, "--use-case", help="learning, kaggle, cv-research, nlp-research, llm-finetune, "
                          "llm-pretrain, llm-serving or image-generation (docs/presets.md); the default without MODEL: llm-finetune.")


def recommend_cmd(
    model: str = typer.Argument(None, help="Zoo name, Hugging Face config.json or file.py:factory (default: a use-case preset)."),
    use_case: str = UseCaseOpt,
    task: str = typer.Option(None, "--task", help="train (default) or infer (causal LMs: serving, prefill + decode)."),
    batch_size: int = int_option(None, "--batch-size", "-b", bound=limits.BATCH, help="Samples per GPU per optimizer step (default: the model's)."),
    seq_len: int = int_option(None, "--seq-len", bound=limits.SEQ_LEN, help="Tokens per sample (default: the model's)."),
    image_size: int = int_option(None, "--image-size", bound=limits.IMAGE_SIZE, help="Image side in pixels (default: the model's)."),
    precision: str = typer.Option("auto", "--precision", help="auto (per GPU: BF16 on Ampere+, FP16 AMP on Volta/Turing, else FP32), or fp32, tf32, amp-fp16, amp-bf16, fp16, bf16, fp8, int8, int4 on every GPU."),
    optimizer: str = typer.Option(None, "--optimizer", help="sgd, adamw, adam, lamb, rmsprop, adafactor, adamw-8bit (default: the model's)."),
    finetune: str = typer.Option(None, "--finetune", help="full (default), lora or qlora."),
    lora_rank: int = int_option(16, "--lora-rank", bound=limits.LORA_RANK, help="LoRA rank."),
    checkpointing: str = typer.Option(None, "--checkpointing", help="Activation checkpointing: none (default), selective or full."),
    moe_capacity: float = MoeCapacityOpt,
    moe_skew: float = MoeSkewOpt,
    budget: float = float_option(None, "--budget", bound=limits.BUDGET_USD, help="USD: purchase of all cards (--buy), or rent per job (with a job) or per month."),
    buy: bool = typer.Option(True, "--buy/--rent", help="Buy the cards (amortised + electricity) or rent them (cloud $/GPU-hour)."),
    hours_per_month: float = float_option(200.0, "--hours-per-month", bound=limits.HOURS_PER_MONTH, help="Hours of use a month (utilisation = H / 730)."),
    years: float = float_option(3.0, "--years", bound=limits.YEARS, help="Years a purchase is amortised over."),
    electricity: float = float_option(0.20, "--electricity-usd-per-kwh", bound=limits.USD_PER_KWH, help="Electricity price, USD per kWh."),
    max_gpus: int = int_option(None, "--max-gpus", bound=limits.MAX_GPUS, help="Largest GPU count to consider (counts 1, 2, 4, 8, ...; default 8, a preset's own)."),
    max_power_w: float = float_option(None, "--max-power-w", bound=limits.POWER_BUDGET_W, help="Power supply budget for the GPUs, W (GPUs x TDP or the limit)."),
    min_memory_gb: float = float_option(None, "--min-memory-gb", bound=limits.MEMORY_GB, help="Leave out GPUs with less memory (a preset sets its rule of thumb; 0 disables it)."),
    objective: str = typer.Option(None, "--objective", help="value (work per $; default), time, energy or cost-per-job."),
    job_tokens: float = float_option(None, "--job-tokens", bound=limits.JOB_TOKENS, help="The job: tokens to process (training) or to generate (serving)."),
    job_epochs: float = float_option(None, "--job-epochs", bound=limits.JOB_EPOCHS, help="The job: epochs over --dataset-size samples."),
    dataset_size: float = float_option(None, "--dataset-size", bound=limits.DATASET_SIZE, help="Samples per epoch (with --job-epochs)."),
    power_limit_w: float = float_option(None, "--power-limit-w", bound=limits.POWER_W, help="Model a power cap per GPU, W (throughput from Dettmers' RTX 2080 Ti measurement)."),
    step_host_ms: float = float_option(None, "--step-host-ms", bound=limits.STEP_HOST_MS, help="Host time per step outside kernel issue, ms: your loop's data loading, logging, loss read (default: the engine's fitted figure)."),
    price: list[str] = typer.Option(None, "--price", help="NAME=USD (purchase per card) or NAME=USD/h (rent per GPU-hour); repeatable."),
    prices_file: str = typer.Option(None, "--prices", metavar="FILE", help="Prices file, TOML or CSV (format: docs/presets.md)."),
    gpu: str = typer.Option(None, "--gpu", help="Only these GPUs (comma-separated names); default: the whole catalog."),
    engine: str = EngineOpt,
    compile_: bool = CompileOpt,
    top: int = int_option(None, "--top", bound=limits.ROWS, help="Rows of the ranked table to show (default 15; "
                          "serving: the 5 cheapest searched exactly)."),
    rate: float = float_option(None, "--rate", bound=serve_cmd.RATE, help="Serving: requests per second to serve "
                               "(Poisson); ranks GPU x count x TP by cost per million output tokens within the SLOs."),
    slo_ttft_ms: float = float_option(None, "--slo-ttft-ms", bound=serve_cmd.SLO_MS, help="Serving: time-to-first-token "
                                      "target, ms (with --rate)."),
    slo_tpot_ms: float = float_option(None, "--slo-tpot-ms", bound=serve_cmd.SLO_MS, help="Serving: time-per-output-token "
                                      "target, ms (with --rate)."),
    slo_percentile: int = int_option(90, "--slo-percentile", bound=limits.Bound(50, 99), help="Serving: percentile "
                                     "the SLOs apply to: 50, 90 or 99."),
    input_len: int = int_option(None, "--input-len", bound=limits.SEQ_LEN, help="Serving: prompt tokens per request "
                                "(default 1024)."),
    output_len: int = int_option(None, "--output-len", bound=limits.SEQ_LEN, help="Serving: answer tokens per request "
                                 "(default 256)."),
    html: str = typer.Option(None, "--html", metavar="FILE", help="Also write a self-contained HTML report with charts."),
    no_cache: bool = NoCacheOpt,
    system: str = SystemOpt,
    json_out: bool = JsonOpt,
    wide: bool = WideOpt,
    catalog: str = CatalogOpt,
) -> None:
    """Rank every GPU x count for the workload by value, time, energy or cost per job, with the reason
    for each row, the picks (best overall, best value, within budget, no budget) and the cards that
    cannot run it."""
    from whichgpu.recommend import SCHEMA

    if rate is not None or slo_ttft_ms is not None or slo_tpot_ms is not None:
        from whichgpu.report.recommend_serving import SCHEMA as SERVING_SCHEMA
        from whichgpu.report.recommend_serving import no_answer, print_serving_recommendation

        if html is not None:
            raise InputError("--html is not available with --rate (serving recommendations): use --json, or "
                             "`whichgpu serve ... --html` for one configuration")
        given = [k for k, v in {"--task": task, "--batch-size": batch_size, "--seq-len": seq_len,
                                "--image-size": image_size, "--optimizer": optimizer, "--finetune": finetune,
                                "--checkpointing": checkpointing, "--budget": budget, "--objective": objective,
                                "--job-tokens": job_tokens, "--job-epochs": job_epochs, "--power-limit-w": power_limit_w,
                                "--max-power-w": max_power_w, "--system": system,
                                "--step-host-ms": step_host_ms}.items() if v is not None]
        if given or compile_:
            raise InputError(f"{', '.join(given) or '--compile'} do not apply to a serving recommendation (--rate): it "
                             "takes --input-len, --output-len, the SLOs, --precision, --engine, --gpu, --max-gpus and "
                             "the cost flags")
        srec = recommend_serving_run(
            model, use_case=use_case, rate=rate, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms,
            slo_percentile=slo_percentile, input_len=input_len, output_len=output_len, precision=precision,
            engine=engine, max_gpus=max_gpus, min_memory_gb=min_memory_gb, buy=buy, hours_per_month=hours_per_month,
            years=years, electricity=electricity, price=price, prices_file=prices_file, gpu=gpu, top=top,
            catalog=catalog)
        if json_out:
            from whichgpu.recommend.serving import serving_body

            emit_json(SERVING_SCHEMA, serving_body(srec))
        else:
            print_serving_recommendation(srec)
        no = no_answer(srec)
        if no is not None:
            raise NoAnswerError(no)
        return
    top = 15 if top is None else top
    if html is not None and not html.strip():
        raise InputError("--html needs a file name to write the report to, e.g. --html report.html")
    progress = None
    if not json_out:
        from whichgpu.report.console import err_console

        progress = err_console.status
    rec, traced = recommend_run(
        model, use_case=use_case, task=task, batch_size=batch_size, seq_len=seq_len, image_size=image_size,
        precision=precision, optimizer=optimizer, finetune=finetune, lora_rank=lora_rank, checkpointing=checkpointing,
        moe_capacity=moe_capacity, moe_skew=moe_skew, budget=budget, buy=buy, hours_per_month=hours_per_month,
        years=years, electricity=electricity, max_gpus=max_gpus, max_power_w=max_power_w,
        min_memory_gb=min_memory_gb, objective=objective, job_tokens=job_tokens, job_epochs=job_epochs,
        dataset_size=dataset_size, power_limit_w=power_limit_w, price=price, prices_file=prices_file, gpu=gpu,
        engine=engine, compile_=compile_, no_cache=no_cache, system=system, catalog=catalog, progress=progress,
        step_host_ms=step_host_ms)
    if html:
        from whichgpu.report.html import render

        write_report(Path(html), render(rec))
    if json_out:
        from whichgpu.report.recommend import recommend_document

        emit_json(SCHEMA, recommend_document(rec, traced))
    else:
        from whichgpu.report.recommend import print_recommendation

        print_recommendation(rec, top, wide=wide, traced=traced)
        if html:
            from whichgpu.report.console import say

            say(f"wrote {html}")
    no = recommend_no_answer(rec)
    if no is not None:
        raise NoAnswerError(no)


def recommend_run(
    model: str | None = None, *, use_case: str | None = None, task: str | None = None, batch_size: int | None = None,
    seq_len: int | None = None, image_size: int | None = None, precision: str = "auto", optimizer: str | None = None,
    finetune: str | None = None, lora_rank: int = 16, checkpointing: str | None = None,
    moe_capacity: float | None = None, moe_skew: float | None = None, budget: float | None = None, buy: bool = True,
    hours_per_month: float = 200.0, years: float = 3.0, electricity: float = 0.20, max_gpus: int | None = None,
    max_power_w: float | None = None, min_memory_gb: float | None = None, objective: str | None = None,
    job_tokens: float | None = None, job_epochs: float | None = None, dataset_size: float | None = None,
    power_limit_w: float | None = None, price: list[str] | None = None, prices_file: str | None = None,
    gpu: str | None = None, engine: str | None = None, compile_: bool = False, no_cache: bool = False,
    system: str | None = None, catalog: str | None = None,
    progress: Callable[[str], AbstractContextManager[Any]] | None = None, step_host_ms: float | None = None,
) -> tuple[Any, Any]:
    """The ranking `whichgpu recommend` shows (and the web app serves): (the Recommendation, the first
    workload's trace or None). Flags as the command's, by their parameter names; `progress` wraps
    the ranking (the CLI's spinner)."""
    from whichgpu.recommend import Job, Request, recommend
    from whichgpu.recommend.cost import CostModel
    from whichgpu.recommend.presets import DEFAULT_PRESET, get_preset
    from whichgpu.recommend.prices import load_prices_file, merge, parse_price_args
    from whichgpu.recommend.request import DEFAULT_MAX_GPUS
    from whichgpu.recommend.workloads import make_workload
    from whichgpu.workload.api import get_trace

    cat = get_catalog(catalog)
    workload_flags = {"--task": task, "--batch-size": batch_size, "--seq-len": seq_len, "--image-size": image_size,
                      "--optimizer": optimizer, "--finetune": finetune, "--checkpointing": checkpointing,
                      "--moe-capacity": moe_capacity, "--moe-skew": moe_skew}
    preset = None
    if model is None:
        preset = get_preset(use_case if use_case is not None else DEFAULT_PRESET)
    eng = resolve_engine(engine, compile_, preset.engine if preset else "pytorch")
    attention = engine_attention(eng, None)
    if preset is not None:
        given = [k for k, v in workload_flags.items() if v is not None]
        if given:
            raise InputError(f"{', '.join(given)} describe a MODEL's workload; the use case {preset.name!r} fixes its "
                             "own (docs/presets.md): give a MODEL to change them")
        options = (("attention", attention),) if attention is not None else ()
        workloads = tuple(
            make_workload(replace(p.spec, precision=precision, options=options),
                          unit=p.unit, unit_scale=p.unit_scale, weight=p.weight)
            for p in preset.workloads)
        title = f"use case {preset.name}" + (" (default)" if use_case is None else "")
    else:
        assert model is not None  # (no preset: a model)
        if use_case is not None:
            raise InputError("give a MODEL or --use-case, not both")
        spec = replace(workload_spec(model, task or "train", batch_size, seq_len, image_size, precision, optimizer,
                                     "foreach", "full", None, "none", attention, moe_capacity, moe_skew),
                       finetune=finetune or "full", checkpointing=checkpointing or "none", lora_rank=lora_rank)
        workloads = (make_workload(spec),)
        title = model
    sys_ = get_system(catalog, system)
    gpu_ids = tuple(g.id for g in cat.get_many(gpu)) if gpu else None
    if get_engine(eng).vendors:  # an engine for some vendors' GPUs only: weigh those
        gpu_ids = tuple(g.id for g in engine_gpus(eng, cat.get_many(gpu or "all"), every=not gpu))
    if sys_ is not None and sys_.gpu is not None:  # a system built from one GPU: rank its layouts
        if gpu_ids is not None and sys_.gpu not in gpu_ids:
            raise InputError(f"--system {sys_.id} holds {sys_.gpu}, which --gpu leaves out")
        gpu_ids = (sys_.gpu,)
    user = merge(load_prices_file(prices_file, cat) if prices_file else {}, parse_price_args(price or [], cat))
    req = Request(
        workloads=workloads, title=title, preset=preset.name if preset else None,
        cost=CostModel("buy" if buy else "rent", hours_per_month, years, electricity),
        objective=objective or (preset.objective if preset else "value"), budget_usd=budget,
        max_gpus=max_gpus if max_gpus is not None else (preset.max_gpus if preset else DEFAULT_MAX_GPUS),
        max_power_w=max_power_w,
        min_memory_gb=min_memory_gb if min_memory_gb is not None else (preset.min_memory_gb if preset else None),
        memory_rule=(preset.rule if preset and min_memory_gb is None else ""), power_limit_w=power_limit_w,
        step_host_ms=step_host_ms,
        job=Job(job_tokens if job_tokens is not None else (preset.job_tokens if preset and job_epochs is None else None),
                job_epochs, dataset_size),
        gpu_ids=gpu_ids, engine=eng, prices=user, system=sys_)

    first: list[Any] = []  # the first trace: tells whether the model has routed experts

    def trace_for(spec: Any) -> Any:
        t = get_trace(spec, use_cache=not no_cache)
        if not first:
            first.append(t)
        return t

    if progress is None:
        rec = recommend(req, cat, trace_for)
    else:
        with progress("evaluating every GPU x count (each workload variant is traced once, then cached)"):
            rec = recommend(req, cat, trace_for)
    if model is not None:
        moe_flags_note(moe_capacity, moe_skew, model, first)
    return rec, (first[0] if first else None)


def recommend_serving_run(
    model: str | None = None, *, use_case: str | None = None, rate: float | None = None,
    slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None, slo_percentile: int = 90,
    input_len: int | None = None, output_len: int | None = None, precision: str = "auto", engine: str | None = None,
    max_gpus: int | None = None, min_memory_gb: float | None = None, buy: bool = True, hours_per_month: float = 200.0,
    years: float = 3.0, electricity: float = 0.20, price: list[str] | None = None, prices_file: str | None = None,
    gpu: str | None = None, top: int | None = None, catalog: str | None = None,
) -> Any:
    """The serving ranking (`recommend --rate R --slo-...`, `recommend.serving`): which GPU, how many
    and what TP serve the rate within the SLOs for the least per million output tokens."""
    from whichgpu.parallel.models import planner_model
    from whichgpu.recommend.cost import CostModel
    from whichgpu.recommend.presets import get_preset
    from whichgpu.recommend.prices import load_prices_file, merge, parse_price_args
    from whichgpu.recommend.serving import ServingAsk, recommend_serving
    from whichgpu.serving.model import serving_engine
    from whichgpu.serving.slo import PERCENTILES
    from whichgpu.serving.step import PRECISIONS

    if rate is None:
        raise InputError("--slo-ttft-ms / --slo-tpot-ms rank serving configurations at a request rate: give --rate "
                         "(requests per second)", field="rate")
    if slo_ttft_ms is None and slo_tpot_ms is None:
        raise InputError("--rate ranks serving configurations within latency targets: give --slo-ttft-ms and/or "
                         "--slo-tpot-ms", field="slo_ttft_ms")
    if slo_percentile not in PERCENTILES:
        raise InputError(f"--slo-percentile must be 50, 90 or 99, got {slo_percentile}", field="slo_percentile")
    if use_case is not None and use_case != "llm-serving":
        raise InputError(f"--rate is a serving question: use --use-case llm-serving (or a MODEL), not {use_case!r}",
                         field="use_case")
    if model is not None and use_case is not None:
        raise InputError("give a MODEL or --use-case, not both")
    preset = get_preset("llm-serving") if model is None else None
    name = model if model is not None else preset.workloads[0].spec.model  # type: ignore[union-attr]
    planner_model(name)  # a decoder LLM the serving model knows, or its one-line error
    prec = "bf16" if precision == "auto" else precision
    if prec not in PRECISIONS:
        raise InputError(f"--precision for serving must be auto (bf16) or one of {', '.join(PRECISIONS)}, got "
                         f"{precision!r}", field="precision")
    eng = serving_engine(engine or "vllm")
    cat = get_catalog(catalog)
    gpus = cat.get_many(gpu) if gpu else list(cat)
    floor = min_memory_gb if min_memory_gb is not None else (preset.min_memory_gb if preset else None)
    if floor:
        gpus = [g for g in gpus if g.memory_gb >= floor]
    user = merge(load_prices_file(prices_file, cat) if prices_file else {}, parse_price_args(price or [], cat))
    ask = ServingAsk(name, rate, input_len or 1024, output_len or 256, slo_ttft_ms, slo_tpot_ms, slo_percentile,
                     prec, "auto", eng, max_gpus if max_gpus is not None else 8, top if top is not None else 5,
                     CostModel("buy" if buy else "rent", hours_per_month, years, electricity), user)
    return recommend_serving(ask, gpus)


def recommend_no_answer(rec: Any) -> str | None:
    """Why the answer is "no" (exit 1): no GPU can run the job within the constraints; else None."""
    if rec.rows:
        return None
    return (f"none of the {len(rec.rejected)} GPUs compared can run this job within the constraints "
            "(why: see 'cannot run this job' above, or 'cannot_run' in the JSON)")


def register(app: typer.Typer) -> None:
    app.command("recommend")(recommend_cmd)
