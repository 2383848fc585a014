"""`whichgpu serve`: an LLM served under load by a continuous-batching engine (vLLM, SGLang,
TensorRT-LLM), simulated request by request: KV-cache capacity, throughput, TTFT / TPOT / E2E
latency, cost per million output tokens, and the highest request rate that meets latency SLOs."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

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
from whichgpu.limits import Bound

if TYPE_CHECKING:
    from whichgpu.report.serve import ServeReport
    from whichgpu.serving.workload import RequestLengths

RATE = Bound(0, 1e6, lo_open=True)  # requests per second, all replicas
SPEC_DRAFT = Bound(1, 16)
ACCEPTANCE = Bound(0, 1, lo_open=True)
CONCURRENCY = Bound(1, 1 << 20)
REQUESTS = Bound(1, 1_000_000)
REPLICAS = Bound(1, 65536)
UTILIZATION = Bound(0, 1, lo_open=True)
HIT_RATE = Bound(0, 0.99)
SLO_MS = Bound(0, 1e7, lo_open=True)
SEED = Bound(0, 2**32 - 1)
RECV_INTERVAL = Bound(1, 100_000)  # decode steps between SGLang's polls for new requests
LEN_STDDEV = Bound(0, limits.SEQ_LEN.hi)  # tokens
SWEEP_POINTS = 8
"""Rates of the HTML report's latency-throughput curve: 1/8, 2/8, ..., 8/8 of the saturation rate."""


def serve_cmd(
    model: str = typer.Argument(..., help="A decoder LLM of the zoo (e.g. llama-3.1-8b) or a path to its config.json."),
    gpu: str = typer.Option(None, "--gpu", help="GPU name (id, product name or alias; default: the --system's GPU)."),
    system: str = SystemOpt,
    tp: int = int_option(1, "--tp", bound=limits.TP, help="Tensor-parallel degree of one replica."),
    ep: int = int_option(1, "--ep", bound=limits.TP, help="Expert-parallel degree, MoE models (1, or equal to --tp: "
                         "experts spread over the tensor-parallel group)."),
    pp: int = int_option(1, "--pp", bound=limits.TP, help="Pipeline-parallel stages of one replica (each of --tp "
                         "GPUs; vLLM runs one batch per stage)."),
    attention_dp: int = int_option(1, "--attention-dp", bound=limits.TP, help="DP attention: the --tp GPUs form this "
                                   "many attention groups, each with its own requests and KV cache, the MLP or experts "
                                   "over all of them (SGLang --enable-dp-attention --dp, vLLM --data-parallel-size, "
                                   "TensorRT-LLM enable_attention_dp). Must divide --tp."),
    spec_draft_len: int = int_option(None, "--spec-draft-len", bound=SPEC_DRAFT, help="Speculative decoding: draft "
                                     "tokens proposed per step (with --spec-acceptance)."),
    spec_acceptance: float = float_option(None, "--spec-acceptance", bound=ACCEPTANCE, help="Speculative decoding: "
                                          "the chance each draft token is accepted (0-1]."),
    spec_draft_model: str = typer.Option(None, "--spec-draft-model", help="Speculative decoding: a zoo LLM as the "
                                         "draft model (default: a one-layer draft head, EAGLE / MTP style)."),
    replicas: int = int_option(1, "--replicas", bound=REPLICAS, help="Identical engine replicas behind a load "
                               "balancer; the load is split evenly over them."),
    engine: str = typer.Option("vllm", "--engine", help="vllm, sglang or tensorrt-llm."),
    mixed_chunk: bool = typer.Option(None, "--mixed-chunk/--no-mixed-chunk", help="SGLang: its prefill steps carry "
                                     "the running requests' decode (its --enable-mixed-chunk); default off, as "
                                     "SGLang's: a step prefills or decodes. vLLM and TensorRT-LLM always mix."),
    recv_interval: int = int_option(1, "--scheduler-recv-interval", bound=RECV_INTERVAL, help="SGLang: its "
                                    "scheduler takes in new requests only every this many decode steps (its "
                                    "--scheduler-recv-interval; a prefill step is always followed by a poll). "
                                    "Default 1, SGLang's: every step."),
    adp_balance: str = typer.Option(None, "--adp-balance", help="TensorRT-LLM with --attention-dp: its attention-DP "
                                    "balancing on (attention_dp_config enable_balance) as TIMEOUT[,WAIT], its "
                                    "timeout_iters and batching_wait_iters (WAIT default 10, its default; "
                                    "'default' for 50,10). Default off, as TensorRT-LLM's."),
    concurrency: int = int_option(None, "--concurrency", bound=CONCURRENCY, help="Closed loop: requests in flight "
                                  "(all replicas), a new one sent as one finishes."),
    rate: float = float_option(None, "--rate", bound=RATE, help="Open loop: Poisson arrivals, requests per second "
                               "(all replicas)."),
    input_len: int = int_option(None, "--input-len", bound=limits.SEQ_LEN, help="Prompt tokens per request."),
    output_len: int = int_option(None, "--output-len", bound=limits.SEQ_LEN, help="Answer tokens per request."),
    output_len_stddev: float = float_option(0.0, "--output-len-stddev", bound=LEN_STDDEV, help="Answers drawn "
                                            "normal around --output-len with this standard deviation, tokens "
                                            "(aiperf's --osl-stddev; seeded by --seed). 0: all equal; a closed "
                                            "loop of equal requests keeps each burst in lockstep."),
    lengths: Path = typer.Option(None, "--lengths", help="JSONL or CSV of (input, output) token counts; requests draw "
                                 "pairs from it at random (instead of --input-len/--output-len)."),
    requests: int = int_option(None, "--requests", bound=REQUESTS, help="Requests per replica to simulate (default "
                               "1000; closed loop: at least 10 x its concurrency)."),
    precision: str = typer.Option("bf16", "--precision", help="Weights: bf16, fp16, fp8, int8 (W8A8), int4 "
                                  "(weight-only, AWQ/GPTQ) or fp4 (Blackwell)."),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="KV cache: auto (16-bit), bf16, fp16 or fp8."),
    gpu_memory_utilization: float = float_option(None, "--gpu-memory-utilization", bound=UTILIZATION,
                                                 help="Share of GPU memory the engine may use: vLLM's "
                                                 "--gpu-memory-utilization (default 0.9), SGLang's "
                                                 "--mem-fraction-static (default: its rule for the GPU), "
                                                 "TensorRT-LLM's free_gpu_memory_fraction (default 0.9)."),
    max_num_seqs: int = int_option(None, "--max-num-seqs", bound=CONCURRENCY, help="Most requests running at once "
                                   "(default: vLLM's for the GPU, 256 or 1024, which TensorRT-LLM is assumed to share; SGLang's own "
                                   "max_running_requests, 2048-4096 by its KV pool)."),
    max_batched_tokens: int = int_option(None, "--max-batched-tokens", "--max-num-batched-tokens",
                                         bound=limits.SEQ_LEN, help="Token budget of one engine step (default: "
                                         "vLLM's for the GPU, 2048 or 8192; SGLang's chunked_prefill_size, 2048-16384 by the GPU's "
                                         "memory; TensorRT-LLM's 8192, also its longest prompt: it does not chunk "
                                         "prefills)."),
    prefix_cache_hit_rate: float = float_option(0.0, "--prefix-cache-hit-rate", bound=HIT_RATE,
                                                help="Share of each prompt found in the prefix cache."),
    slo_ttft_ms: float = float_option(None, "--slo-ttft-ms", bound=SLO_MS, help="Time-to-first-token target, ms: "
                                      "search the highest rate meeting it."),
    slo_tpot_ms: float = float_option(None, "--slo-tpot-ms", bound=SLO_MS, help="Time-per-output-token target, ms: "
                                      "search the highest rate meeting it."),
    slo_percentile: int = int_option(90, "--slo-percentile", bound=Bound(50, 99),
                                     help="Percentile the SLOs apply to: 50, 90 or 99."),
    seed: int = int_option(0, "--seed", bound=SEED, help="Seed of the Poisson arrivals and of --lengths sampling."),
    html: Path = typer.Option(None, "--html", help="Write a self-contained HTML report (latency against throughput "
                              "as the rate grows)."),
    json_out: bool = JsonOpt,
    catalog: str = CatalogOpt,
) -> None:
    """Throughput (requests/s, tokens/s), TTFT, TPOT and end-to-end latency (mean, P50, P90, P99),
    KV-cache capacity and GPU memory, cost per million output tokens at the catalog's rental price,
    and with --slo-ttft-ms / --slo-tpot-ms the highest Poisson rate that meets them."""
    from whichgpu.report.serve import render_html, render_no_html, serve_document
    from whichgpu.serving.model import layout_text

    try:
        rep = serve_run(
            model, gpu=gpu, system=system, tp=tp, ep=ep, pp=pp, attention_dp=attention_dp,
            spec_draft_len=spec_draft_len, spec_acceptance=spec_acceptance, spec_draft_model=spec_draft_model,
            replicas=replicas, engine=engine, mixed_chunk=mixed_chunk, recv_interval=recv_interval,
            adp_balance=adp_balance, concurrency=concurrency, rate=rate, input_len=input_len, output_len=output_len,
            lengths=lengths, requests=requests, output_len_stddev=output_len_stddev, precision=precision,
            kv_dtype=kv_dtype, gpu_memory_utilization=gpu_memory_utilization, max_num_seqs=max_num_seqs,
            max_batched_tokens=max_batched_tokens, prefix_cache_hit_rate=prefix_cache_hit_rate,
            slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, slo_percentile=slo_percentile, seed=seed,
            sweep=html is not None, catalog=catalog)
    except NoAnswerError as e:  # the report says "no" too, with the reason
        if html is not None:
            on = gpu or system or "the default GPU"
            write_report(html, render_no_html(f"{model} on {on}: {engine}, {precision} weights, "
                                             f"{layout_text(tp, ep, pp, attention_dp)}", str(e)))
        raise
    if json_out:
        emit_json("whichgpu.serve/1", serve_document(rep))
    else:
        from whichgpu.report.serve import print_serve

        print_serve(rep)
    if html is not None:
        write_report(html, render_html(rep))
    no = serve_no_answer(rep)
    if no is not None:
        raise NoAnswerError(no)


ADP_BALANCE_DEFAULTS = (50, 10)
"""TensorRT-LLM's ``AttentionDpConfig`` defaults (``timeout_iters``, ``batching_wait_iters``), which apply
when ``enable_balance`` is turned on without them."""
ADP_TIMEOUT = Bound(1, 100_000)
ADP_WAIT = Bound(0, 100_000)


def parse_adp_balance(text: str | None) -> tuple[int, int] | None:
    """``--adp-balance`` TIMEOUT[,WAIT] (or 'default'): (timeout_iters, batching_wait_iters); None: off."""
    if text is None:
        return None
    t = text.strip().lower()
    if t == "default":
        return ADP_BALANCE_DEFAULTS
    parts = t.split(",")
    try:
        if len(parts) > 2:
            raise ValueError
        vals = [int(x) for x in parts]
    except ValueError:
        raise InputError(f"--adp-balance takes TIMEOUT[,WAIT] steps (e.g. 60,0) or 'default' "
                         f"({ADP_BALANCE_DEFAULTS[0]},{ADP_BALANCE_DEFAULTS[1]}), got {text!r}",
                         field="adp_balance") from None
    timeout, wait = vals[0], (vals[1] if len(vals) > 1 else ADP_BALANCE_DEFAULTS[1])
    for name, v, b in (("TIMEOUT", timeout, ADP_TIMEOUT), ("WAIT", wait, ADP_WAIT)):
        if not b.lo <= v <= b.hi:
            raise InputError(f"--adp-balance {name} must be {b.lo}-{b.hi:,} steps, got {v}", field="adp_balance")
    return timeout, wait


def serve_run(
    model: str, *, gpu: str | None = None, system: str | None = None, tp: int = 1, ep: int = 1, pp: int = 1,
    attention_dp: int = 1,
    spec_draft_len: int | None = None, spec_acceptance: float | None = None, spec_draft_model: str | None = None,
    replicas: int = 1,
    engine: str = "vllm", mixed_chunk: bool | None = None, recv_interval: int = 1,
    adp_balance: str | tuple[int, int] | None = None, concurrency: int | None = None, rate: float | None = None,
    input_len: int | None = None,
    output_len: int | None = None, lengths: Path | None = None, requests: int | None = None,
    output_len_stddev: float = 0.0, precision: str = "bf16", kv_dtype: str = "auto", gpu_memory_utilization: float | None = None,
    max_num_seqs: int | None = None, max_batched_tokens: int | None = None, prefix_cache_hit_rate: float = 0.0,
    slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None, slo_percentile: int = 90, seed: int = 0,
    sweep: bool = False, catalog: str | None = None,
) -> ServeReport:
    """The simulated serving run `whichgpu serve` shows (and the web app serves); flags as the
    command's, by their parameter names; `sweep` adds the latency-throughput curve (the HTML
    report's, SWEEP_POINTS rates up to saturation)."""
    from whichgpu.recommend.prices import catalog_prices
    from whichgpu.report.serve import ServeReport
    from whichgpu.serving.kv import batch_defaults, default_running_requests
    from whichgpu.serving.model import Setup, build, check_request_tokens, serving_engine
    from whichgpu.serving.slo import (
        PERCENTILES,
        Slo,
        held_concurrency,
        idle_run,
        poisson_runner,
        probe_requests,
        rate_sweep,
        saturation_rate,
    )
    from whichgpu.serving.slo import search_max_rate as search
    from whichgpu.serving.workload import ClosedLoop, Poisson, Workload

    # ---- the question, checked ----
    engine = serving_engine(engine)  # its profile's aliases too (trtllm, trt-llm)
    if isinstance(adp_balance, str):
        adp_balance = parse_adp_balance(adp_balance)
    if recv_interval != 1 and engine != "sglang":
        raise InputError(f"--scheduler-recv-interval is SGLang's; give --engine sglang, or leave the flag out "
                         f"(got --engine {engine})", field="scheduler_recv_interval")
    if (concurrency is None) == (rate is None):
        raise InputError("give exactly one of --concurrency (closed loop) or --rate (Poisson arrivals)",
                         field="concurrency")
    if slo_percentile not in PERCENTILES:
        raise InputError(f"must be 50, 90 or 99, got {slo_percentile}", field="slo_percentile")
    if concurrency is not None and concurrency % replicas:
        raise InputError(f"--concurrency {concurrency} does not split evenly over {replicas} replicas", field="concurrency")
    pool, fixed = _lengths(input_len, output_len, lengths)
    if output_len_stddev and not fixed:
        raise InputError("--output-len-stddev spreads --output-len; with --lengths the file gives the lengths",
                         field="output_len_stddev")
    named = get_system(catalog, system)
    g = get_catalog(catalog).get(gpu_names(gpu, named))
    sys_ = system_for(g, named, catalog)
    if (spec_draft_len is None) != (spec_acceptance is None):
        raise InputError("speculative decoding needs both --spec-draft-len and --spec-acceptance", field="spec_draft_len")
    if spec_draft_model is not None and spec_draft_len is None:
        raise InputError("--spec-draft-model needs --spec-draft-len and --spec-acceptance", field="spec_draft_model")
    total_bytes = int(g.usable_memory_bytes)
    d_tokens, d_seqs = batch_defaults(engine, total_bytes, g.name)
    mbt = max_batched_tokens or d_tokens
    mns = max_num_seqs or d_seqs

    # ---- the engine ----
    spec = None
    if spec_draft_len is not None and spec_acceptance is not None:
        from whichgpu.serving.spec import SpecDecode

        spec = SpecDecode(spec_draft_len, spec_acceptance, spec_draft_model)
    sm = build(Setup(model, g, sys_, tp=tp, ep=ep, precision=precision, kv_dtype=kv_dtype, engine=engine, pp=pp,
                     spec=spec, attention_dp=attention_dp, mixed_chunk=mixed_chunk, adp_balance=adp_balance))
    if concurrency is not None and attention_dp > 1 and (concurrency // replicas) % attention_dp:
        raise InputError(f"--concurrency {concurrency} does not split evenly over {replicas} replica(s) x "
                         f"{attention_dp} attention groups", field="concurrency")
    gpus_per_replica = max(tp, ep) * pp
    max_seq_len = int((pool.input_len + pool.output_len).max())
    check_request_tokens(sm.model_id, sm.args, max_seq_len, "lengths" if lengths else "input_len")
    try:
        cap = sm.capacity(gpu_memory_utilization=gpu_memory_utilization, max_seq_len=max_seq_len,
                          max_num_batched_tokens=mbt, max_num_seqs=mns)
    except NoAnswerError as e:  # say what would hold the weights
        raise NoAnswerError(f"{e}{sm.weights_hint(gpu_memory_utilization)}") from e
    if max_num_seqs is None:  # SGLang's own default follows from its KV pool
        mns = default_running_requests(engine, mns, cap.num_tokens, sm.args.max_positions)
    cfg = sm.scheduler_config(cap, max_num_seqs=mns, max_num_batched_tokens=mbt,
                              prefix_cache_hit_rate=prefix_cache_hit_rate, recv_interval=recv_interval)
    if recv_interval > 1:
        sm.assumptions["scheduler"] += (f"; --scheduler-recv-interval {recv_interval}: new requests are taken in only "
                                        f"every {recv_interval} decode steps (and after each prefill step), so a "
                                        "request waits up to that many decode steps before its prefill")
    longest = int(pool.input_len.max())
    if cfg.refuses(longest):
        raise NoAnswerError(f"{engine} does not chunk prefills (its default): a {longest:,}-token prompt exceeds its "
                            f"step budget (max_num_tokens) of {mbt:,}, and the engine refuses it; "
                            f"--max-batched-tokens {longest} or more serves it")

    # ---- the run: one replica (under DP attention one attention group), its share of the load ----
    units = replicas * attention_dp
    per_conc = concurrency // units if concurrency is not None else None
    per_rate = rate / units if rate is not None else None
    n = requests or (max(1000, 10 * per_conc) if per_conc is not None else 1000)
    reqs = _draw(pool, fixed, n, seed, output_len_stddev)
    arrival = ClosedLoop(per_conc) if per_conc is not None else Poisson(float(per_rate or 0.0), seed)
    result = sm.simulate(Workload(reqs, arrival), cfg)

    # ---- SLO search and the rate sweep ----
    slo = None
    slo_search = None
    curve = None
    ceiling = None
    n_probe = None
    if slo_ttft_ms is not None or slo_tpot_ms is not None or sweep:
        sat_conc = held_concurrency(cap, mns)
        n_probe = probe_requests(sat_conc)
        probe_reqs = _draw(pool, fixed, n_probe, seed, output_len_stddev)
        ceiling = saturation_rate(probe_reqs, sm.step_time, cfg, sat_conc, simulate_fn=sm.simulator).requests_per_s
        runner = poisson_runner(probe_reqs, sm.step_time, cfg, seed, simulate_fn=sm.simulator)
        if slo_ttft_ms is not None or slo_tpot_ms is not None:
            slo = Slo(None if slo_ttft_ms is None else slo_ttft_ms / 1e3,
                      None if slo_tpot_ms is None else slo_tpot_ms / 1e3, slo_percentile)
            slo_search = search(runner, slo, ceiling, idle=idle_run(probe_reqs, sm.step_time, cfg, simulate_fn=sm.simulator))
        if sweep:
            curve = rate_sweep(runner, [ceiling * k / SWEEP_POINTS for k in range(1, SWEEP_POINTS + 1)])

    rep = ServeReport(
        serving=sm, capacity=cap, config=cfg, replicas=replicas, gpus_per_replica=gpus_per_replica,
        attention_dp=attention_dp,
        concurrency=concurrency, rate_per_s=rate, num_requests=n, lengths_file=str(lengths) if lengths else None,
        fixed_lengths=fixed, mean_input_len=float(reqs.input_len.mean()), mean_output_len=float(reqs.output_len.mean()),
        seed=seed, result=result, prices=catalog_prices(g, dt.date.today()), slo=slo_search, ceiling_per_s=ceiling,
        probe_requests=n_probe, sweep=curve,
        slo_percentile=slo_percentile, output_len_stddev=float(output_len_stddev))  # 0 with --lengths (refused above)
    return rep


def serve_no_answer(rep: ServeReport) -> str | None:
    """Why the answer is "no" (exit 1): no rate meets the SLOs; else None."""
    if rep.slo is not None and rep.slo.max_rate_per_s is None:
        from whichgpu.report.serve import no_rate_reason

        return no_rate_reason(rep)
    return None


def _lengths(input_len: int | None, output_len: int | None, path: Path | None) -> tuple[RequestLengths, bool]:
    """(the requests' length pool, whether they are fixed): --input-len/--output-len or --lengths."""
    from whichgpu.serving.workload import fixed_lengths, read_lengths

    if path is not None:
        if input_len is not None or output_len is not None:
            raise InputError("give --lengths FILE or --input-len/--output-len, not both", field="lengths")
        return read_lengths(path), False
    if input_len is None or output_len is None:
        raise InputError("give --input-len and --output-len (tokens per request), or --lengths FILE",
                         field="input_len")
    return fixed_lengths(input_len, output_len, 1), True


def _draw(pool: RequestLengths, fixed: bool, n: int, seed: int, output_stddev: float = 0.0) -> RequestLengths:
    """``n`` requests from the pool: the one fixed pair (answers spread by ``output_stddev`` tokens,
    seeded), or a seeded sample of the file's."""
    from whichgpu.serving.workload import sample_lengths, spread_lengths

    if fixed:
        return spread_lengths(int(pool.input_len[0]), int(pool.output_len[0]), output_stddev, n, seed)
    return sample_lengths(pool, n, seed)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)
