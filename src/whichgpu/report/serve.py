"""Reports of `whichgpu serve`: console tables, the JSON document (whichgpu.serve/1) and a
self-contained HTML page whose inline SVG shows latency (TTFT and TPOT at the SLO percentile)
against throughput as the request rate grows."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Any

from whichgpu.recommend.prices import GpuPrices
from whichgpu.report.console import compact_table, console, say
from whichgpu.serving.accuracy import Accuracy, lookup
from whichgpu.serving.kv import KvCapacity
from whichgpu.serving.model import RETRACTING_ENGINES, ServingModel, layout_text
from whichgpu.serving.results import LatencyStats, ServingResult
from whichgpu.serving.scheduler import SchedulerConfig
from whichgpu.serving.slo import SloSearch

GB = 1e9


@dataclass(frozen=True)
class ServeReport:
    """Everything `whichgpu serve` found, for one replica (totals are derived: x replicas)."""

    serving: ServingModel
    capacity: KvCapacity
    config: SchedulerConfig
    replicas: int
    gpus_per_replica: int
    concurrency: int | None
    """Closed loop: requests in flight over all replicas (None: Poisson)."""
    rate_per_s: float | None
    """Poisson: requests per second over all replicas (None: closed loop)."""
    num_requests: int
    """Requests simulated (one replica)."""
    lengths_file: str | None
    fixed_lengths: bool
    mean_input_len: float
    mean_output_len: float
    seed: int
    result: ServingResult
    prices: GpuPrices
    slo: SloSearch | None
    ceiling_per_s: float | None
    """One replica's saturation rate (closed loop at the largest concurrency the KV cache holds)."""
    probe_requests: int | None
    sweep: list[tuple[float, ServingResult]] | None
    """(rate of one replica, its run), rates growing to the ceiling (the HTML chart)."""
    slo_percentile: int = 90
    output_len_stddev: float = 0.0
    """Standard deviation of the answer lengths around --output-len, tokens (0: fixed)."""
    attention_dp: int = 1
    """DP attention groups per replica: the simulated unit is one group (its share of the load)."""

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    @property
    def units(self) -> int:
        """Simulated units the totals multiply: replicas x attention groups."""
        return self.replicas * self.attention_dp

    @property
    def gpus_per_unit(self) -> float:
        return self.gpus_per_replica / self.attention_dp

    @property
    def usd_per_gpu_hour(self) -> float | None:
        return self.prices.rent.usd

    def cost_per_million(self, r: ServingResult) -> float | None:
        """USD per million output tokens at run ``r``'s throughput (one replica's)."""
        return self.cost_per_million_at(r.output_tokens_per_s)

    def cost_per_million_at(self, output_tokens_per_s: float) -> float | None:
        """USD per million output tokens when one replica makes ``output_tokens_per_s``: its GPUs'
        rent per second over its tokens per second (the same for any number of replicas)."""
        usd = self.usd_per_gpu_hour
        if usd is None or not output_tokens_per_s > 0:
            return None
        return self.gpus_per_unit * usd / 3600.0 / output_tokens_per_s * 1e6


def _f(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _ms(s: LatencyStats) -> dict[str, float | None]:
    return {k: _f(v) for k, v in s.to_ms().items()}


def _run_doc(rep: ServeReport, r: ServingResult) -> dict[str, Any]:
    """Totals of a run over all replicas, its latencies and cost."""
    k, g = rep.units, rep.gpus
    return {
        "requests_per_s": r.requests_per_s * k, "output_tokens_per_s": r.output_tokens_per_s * k,
        "total_tokens_per_s": r.total_tokens_per_s * k, "output_tokens_per_s_per_gpu": r.output_tokens_per_s * k / g,
        "total_tokens_per_s_per_gpu": r.total_tokens_per_s * k / g,
        "ttft_ms": _ms(r.ttft), "tpot_ms": _ms(r.tpot), "e2e_ms": _ms(r.e2e),
        "preemptions": r.preemptions, "cost_per_million_output_tokens": rep.cost_per_million(r),
    }


def _setup_doc(rep: ServeReport) -> dict[str, Any]:
    s = rep.serving.setup
    c = rep.config
    sp = s.spec
    return {"tp": s.tp, "ep": s.ep, "pp": s.pp, "attention_dp": s.attention_dp,
            "adp_balance": None if s.adp_balance is None else {"timeout_iters": s.adp_balance[0],
                                                               "batching_wait_iters": s.adp_balance[1]},
            "speculative": None if sp is None else {"draft_len": sp.draft_len, "acceptance": sp.acceptance,
                                                    "draft_model": sp.draft_model},
            "replicas": rep.replicas, "gpus_per_replica": rep.gpus_per_replica,
            "gpus": rep.gpus, "engine": s.engine, "precision": s.precision, "kv_dtype": s.kv_dtype,
            "gpu_memory_utilization": rep.capacity.gpu_memory_utilization,
            "engine_memory_fraction": rep.capacity.engine_fraction, "max_num_seqs": c.max_num_seqs,
            "max_num_batched_tokens": c.max_num_batched_tokens, "block_size": c.block_size,
            "prefix_cache_hit_rate": c.prefix_cache_hit_rate, "cpu_overhead_ms_per_step": c.cpu_overhead_s * 1e3,
            "request_overhead_ms": c.request_latency_s * 1e3}


def _memory_doc(rep: ServeReport) -> dict[str, Any]:
    cap = rep.capacity
    return {"gpu_memory_gb": cap.total_memory_bytes / GB, "requested_gb": cap.requested_bytes / GB,
            "weights_gb_per_gpu": cap.weight_bytes / GB, "activation_peak_gb": cap.activation_peak_bytes / GB,
            "non_torch_gb": cap.non_torch_bytes / GB, "kv_cache_gb": cap.kv_cache_bytes / GB,
            "kv_blocks": cap.num_blocks, "kv_cache_tokens": cap.num_tokens, "max_seq_len": cap.max_seq_len,
            "max_concurrency": cap.max_concurrency, "peak_blocks_used": rep.result.peak_blocks_used,
            "linear_state_mb_per_request": cap.state_bytes_per_request / 1e6, "state_pool_gb": cap.state_pool_bytes / GB,
            "state_slots": cap.state_slots, "notes": list(cap.notes)}


def _slo_doc(rep: ServeReport) -> dict[str, Any] | None:
    s = rep.slo
    if s is None:
        return None
    k = rep.units
    return {
        "ttft_ms": None if s.slo.ttft_s is None else s.slo.ttft_s * 1e3,
        "tpot_ms": None if s.slo.tpot_s is None else s.slo.tpot_s * 1e3,
        "percentile": s.slo.percentile,
        "max_rate_per_s": None if s.max_rate_per_s is None else s.max_rate_per_s * k,
        "max_rate_per_s_per_replica": None if s.max_rate_per_s is None else s.max_rate_per_s * rep.attention_dp,
        "capped": s.capped, "ceiling_per_s": s.ceiling_per_s * k,
        "probes": len(s.probes), "requests_per_probe": rep.probe_requests, "seed": rep.seed,
        "at_rate": None if s.at_rate is None or s.max_rate_per_s is None else _at_rate_doc(rep, s.max_rate_per_s, s.at_rate),
        "reason": None if s.max_rate_per_s is not None else no_rate_reason(rep),
    }


def sustained_output_tokens_per_s(rate_per_s: float, r: ServingResult) -> float:
    """Output tokens per second of one replica sustaining ``rate_per_s``: in steady state every
    request that arrives is served, so rate x mean answer length (a probe's own window, from the
    first arrival to the last finish, includes its ramp-up and drain)."""
    return rate_per_s * float(r.requests.output_tokens.mean())


def _at_rate_doc(rep: ServeReport, rate: float, r: ServingResult) -> dict[str, Any]:
    """The SLO search's answer: sustained throughput (all replicas) and latency at the percentile's
    probe (the steady-state window)."""
    k, g = rep.units, rep.gpus
    out = sustained_output_tokens_per_s(rate, r)
    total = rate * float((r.requests.input_tokens + r.requests.output_tokens).mean())
    return {"requests_per_s": rate * k, "output_tokens_per_s": out * k, "total_tokens_per_s": total * k,
            "output_tokens_per_s_per_gpu": out * k / g, "ttft_ms": _ms(r.ttft), "tpot_ms": _ms(r.tpot),
            "e2e_ms": _ms(r.e2e), "preemptions": r.preemptions,
            "cost_per_million_output_tokens": rep.cost_per_million_at(out)}


def _workload_doc(rep: ServeReport) -> dict[str, Any]:
    return {"mode": "closed-loop" if rep.concurrency is not None else "poisson",
            "concurrency": rep.concurrency, "rate_per_s": rep.rate_per_s,
            "concurrency_per_replica": None if rep.concurrency is None else rep.concurrency // rep.replicas,
            "rate_per_s_per_replica": None if rep.rate_per_s is None else rep.rate_per_s / rep.replicas,
            "concurrency_per_scheduler": None if rep.concurrency is None else rep.concurrency // rep.units,
            "overloaded": None if rep.rate_per_s is None else overload(rep) is not None,
            "requests_per_replica": rep.num_requests, "lengths_file": rep.lengths_file,
            "mean_input_len": rep.mean_input_len, "mean_output_len": rep.mean_output_len,
            "output_len_stddev": rep.output_len_stddev, "seed": rep.seed}


def serve_document(rep: ServeReport) -> dict[str, Any]:
    """The JSON body of whichgpu.serve/1."""
    sm, r = rep.serving, rep.result
    rent = rep.prices.rent
    run = _run_doc(rep, r)
    return {
        "model": sm.model_id, "gpu": sm.setup.gpu.id, "gpu_name": sm.setup.gpu.name, "system": sm.setup.system.id,
        "setup": _setup_doc(rep), "workload": _workload_doc(rep), "memory": _memory_doc(rep),
        "kv_cache_tokens": rep.capacity.num_tokens, "max_concurrency": rep.capacity.max_concurrency,
        **run,
        "duration_s": r.duration_s, "steps": r.steps, "mean_batch_seqs": r.mean_batch_seqs,
        "price": None if rent.usd is None else {"usd_per_gpu_hour": rent.usd, **{k: v for k, v in rent.to_dict().items()
                                                                               if k != "usd"}},
        "slo": _slo_doc(rep),
        "assumptions": dict(sm.assumptions),
        "accuracy": None if (acc := accuracy(rep)) is None else acc.to_dict(sm.setup.gpu.name),
        "notes": notes(rep),
    }


def accuracy(rep: ServeReport) -> Accuracy | None:
    """The published runs of this GPU and engine (or the coarser group) and how far off we were."""
    s = rep.serving.setup
    return lookup(s.gpu.id, s.engine)


def accuracy_text(rep: ServeReport) -> str | None:
    a = accuracy(rep)
    return None if a is None else a.text(rep.serving.setup.gpu.name)


def _evictions(rep: ServeReport) -> str:
    """What the engine calls a request losing its KV cache to make room (the JSON's ``preemptions``)."""
    return "retractions" if rep.serving.setup.engine in RETRACTING_ENGINES else "preemptions"


OVERLOAD_SHARE = 0.97
OVERLOAD_MIN_REQUESTS = 10
"""A Poisson run is overloaded where, over the middle half of its arrivals, first tokens come at
less than `OVERLOAD_SHARE` of the arrival rate and the queue grows by at least
`OVERLOAD_MIN_REQUESTS`: a queue that keeps up ends the window about where it began."""


def overload(rep: ServeReport) -> tuple[float, float] | None:
    """(requests/s offered, requests/s the run served: first tokens), all replicas, over the middle
    half of the arrivals, where a Poisson run's queue grows (`OVERLOAD_SHARE`); None otherwise."""
    if rep.rate_per_s is None:
        return None
    req = rep.result.requests
    offered, served = req.middle_rates()
    window = req.arrival_s.size / 2 / offered if offered > 0 else 0.0
    if offered <= 0 or served >= OVERLOAD_SHARE * offered or (offered - served) * window < OVERLOAD_MIN_REQUESTS:
        return None
    return offered * rep.units, served * rep.units


def notes(rep: ServeReport) -> list[str]:
    out = []
    if (over := overload(rep)) is not None:
        offered, served = over
        out.append(f"overloaded: requests arrive at {offered:.3g}/s and get their first token at about {served:.3g}/s "
                   "(the middle half of the run): the queue grows through the run, so TTFT and end-to-end latency "
                   "grow with its length (--requests) and describe no steady state; a lower --rate, more "
                   "--replicas or GPUs, or --slo-ttft-ms for the highest rate that meets a target")
    if rep.replicas > 1:
        out.append(f"{rep.replicas} identical replicas: one is simulated with its share of the load "
                   "(concurrency or rate / replicas); throughput is its figure x replicas, latency its own")
    if rep.attention_dp > 1:
        out.append(f"DP attention: one of the {rep.attention_dp} attention groups is simulated with its share of the "
                   f"load (/ {rep.attention_dp}), the groups assumed balanced and in lockstep; throughput is its "
                   f"figure x {rep.attention_dp} per replica; KV capacity and max concurrency are one group's")
    if rep.usd_per_gpu_hour is None:
        out.append(f"no rental price for {rep.serving.setup.gpu.name} in the catalog: no cost per token")
    elif rep.prices.rent.stale:
        out.append(f"the rental price of {rep.serving.setup.gpu.name} is older than a year")
    if rep.concurrency is not None and rep.fixed_lengths and not rep.output_len_stddev:
        out.append("equal answers in a closed loop keep each burst in lockstep (every prompt prefilled with its "
                   "wave); real clients drift out of phase: --output-len-stddev (say 10 % of --output-len) gives "
                   "that steady state")
    per_unit = None if rep.concurrency is None else rep.concurrency / (rep.replicas * rep.attention_dp)
    if rep.config.max_num_seqs > rep.capacity.max_concurrency and (per_unit is None
                                                                    or per_unit > rep.capacity.max_concurrency):
        out.append(f"max_num_seqs {rep.config.max_num_seqs} exceeds the {rep.capacity.max_concurrency:.0f} requests "
                   "of the longest length the KV cache holds: at full load requests wait or are preempted")
    return out + list(rep.capacity.notes)


def no_rate_reason(rep: ServeReport) -> str:
    """Why no rate meets the SLOs: the latency at the lowest rate tried."""
    s = rep.slo
    assert s is not None
    low = s.lowest
    want = _slo_text(s)
    if low is None:
        return f"no request rate meets {want}"
    p = s.slo.percentile
    if s.idle_misses:
        return (f"no request rate meets {want}: even a request served alone (an idle engine) has TTFT P{p} "
                f"{s.slo.stat(low.ttft) * 1e3:.4g} ms and TPOT P{p} {s.slo.stat(low.tpot) * 1e3:.4g} ms")
    rate = s.probes[-1].rate_per_s * rep.units
    return (f"no request rate meets {want}: even at {rate:.3g} requests/s (1/1024 of the {s.ceiling_per_s * rep.units:.3g}"
            f" the engine sustains) TTFT P{p} is {s.slo.stat(low.ttft) * 1e3:.4g} ms and TPOT P{p} "
            f"{s.slo.stat(low.tpot) * 1e3:.4g} ms")


def _slo_text(s: SloSearch) -> str:
    p = s.slo.percentile
    parts = []
    if s.slo.ttft_s is not None:
        parts.append(f"TTFT P{p} <= {s.slo.ttft_s * 1e3:g} ms")
    if s.slo.tpot_s is not None:
        parts.append(f"TPOT P{p} <= {s.slo.tpot_s * 1e3:g} ms")
    return " and ".join(parts)


def _num(x: float, digits: int = 4) -> str:
    if not math.isfinite(x):
        return "-"
    return f"{x:,.0f}" if abs(x) >= 10 ** (digits - 1) else f"{x:.{digits}g}"


def headline(rep: ServeReport) -> str:
    sm = rep.serving
    s = sm.setup
    par = layout_text(s.tp, s.ep, s.pp, s.attention_dp)
    if s.spec is not None:
        par += (f", speculative decoding ({s.spec.draft_len} drafts at {s.spec.acceptance:g} acceptance, "
                f"{s.spec.draft_model or 'draft head'})")
    reps = f", {rep.replicas} replicas" if rep.replicas > 1 else ""
    return (f"{sm.model_id} on {rep.gpus} x {s.gpu.name} ({s.system.name}): {s.engine}, {s.precision} weights, "
            f"{'FP8' if s.kv_dtype == 'fp8' else '16-bit'} KV cache, {par}{reps}")


def workload_text(rep: ServeReport) -> str:
    if rep.concurrency is not None:
        load = f"closed loop, {rep.concurrency} requests in flight"
    else:
        load = f"Poisson arrivals at {rep.rate_per_s:g} requests/s"
    per = " per replica" if rep.replicas > 1 else ""
    if rep.fixed_lengths and rep.output_len_stddev:
        lens = (f"{rep.mean_input_len:.0f} prompt + {rep.mean_output_len:.0f} answer tokens (mean; answers "
                f"spread by a standard deviation of {rep.output_len_stddev:g} tokens)")
    elif rep.fixed_lengths:
        lens = f"{rep.mean_input_len:.0f} prompt + {rep.mean_output_len:.0f} answer tokens"
    else:
        lens = (f"lengths drawn from {rep.lengths_file} (mean {rep.mean_input_len:.0f} prompt + "
                f"{rep.mean_output_len:.0f} answer tokens)")
    return f"{load}; {rep.num_requests} requests{per} of {lens}"


def print_serve(rep: ServeReport) -> None:
    r, cap = rep.result, rep.capacity
    say(headline(rep))
    say("workload: " + workload_text(rep))
    m = compact_table("memory per GPU")
    m.add_column("", no_wrap=True)
    m.add_column("value", justify="right")
    share = f"{cap.requested_bytes / GB:.1f} GB of {cap.total_memory_bytes / GB:.1f}"
    if cap.engine_fraction is not None:
        share += f" (the engine's fraction {cap.engine_fraction:g}, its accounting)"
    for name, val in (("GPU memory x utilization", share),
                      ("weights", f"{cap.weight_bytes / GB:.2f} GB"),
                      ("activation peak (profiling run)", f"{cap.activation_peak_bytes / GB:.2f} GB"),
                      ("non-torch (NCCL, workspaces)", f"{cap.non_torch_bytes / GB:.2f} GB"),
                      ("KV cache", f"{cap.kv_cache_bytes / GB:.2f} GB"),
                      ("KV blocks", f"{cap.num_blocks:,} of {cap.block_size} tokens"),
                      ("KV tokens", f"{cap.num_tokens:,}"),
                      (f"max concurrency at {cap.max_seq_len:,} tokens", f"{cap.max_concurrency:.1f}"),
                      ("peak blocks used", f"{r.peak_blocks_used:,} ({r.peak_blocks_used / max(1, cap.num_blocks):.0%})")):
        m.add_row(name, val)
    if cap.state_bytes_per_request:
        m.add_row("linear-attention state per request", f"{cap.state_bytes_per_request / 1e6:.1f} MB"
                  + (f" ({cap.groups.state_groups} blocks)" if cap.groups.state_groups else ""))
    if cap.state_slots is not None:
        m.add_row("linear-attention state pool", f"{cap.state_pool_bytes / GB:.2f} GB: {cap.state_slots:,} requests")
    console.print(m)
    t = compact_table("throughput")
    for col in ("", "requests/s", "output tokens/s", "total tokens/s"):
        t.add_column(col, justify="left" if not col else "right")
    k, g = rep.units, rep.gpus
    t.add_row(f"all {g} GPUs" if g > 1 else "total", _num(r.requests_per_s * k), _num(r.output_tokens_per_s * k),
              _num(r.total_tokens_per_s * k))
    if g > 1:
        t.add_row("per GPU", _num(r.requests_per_s * k / g), _num(r.output_tokens_per_s * k / g),
                  _num(r.total_tokens_per_s * k / g))
    console.print(t)
    lat = compact_table("latency (ms)")
    for col in ("", "mean", "P50", "P90", "P99"):
        lat.add_column(col, justify="left" if not col else "right")
    for name, s in (("TTFT", r.ttft), ("TPOT", r.tpot), ("E2E", r.e2e)):
        lat.add_row(name, *(_num(v) for v in (s.mean * 1e3, s.p50 * 1e3, s.p90 * 1e3, s.p99 * 1e3)))
    console.print(lat)
    say(f"{_evictions(rep)}: {r.preemptions}; mean batch {r.mean_batch_seqs:.1f} sequences over {r.steps:,} steps; "
        f"simulated {r.duration_s:.1f} s")
    say(cost_text(rep, r), wrap=True)
    if rep.slo is not None:
        say(slo_line(rep), wrap=True)
    say("assumptions: " + "; ".join(f"{k}: {v}" for k, v in rep.serving.assumptions.items()), wrap=True)
    if (acc := accuracy_text(rep)) is not None:
        say("accuracy: " + acc, wrap=True)
    for n in notes(rep):
        say("note: " + n, wrap=True)


def cost_text(rep: ServeReport, r: ServingResult) -> str:
    rent = rep.prices.rent
    c = rep.cost_per_million(r)
    if c is None or rent.usd is None:
        return f"cost: unknown (no rental price for {rep.serving.setup.gpu.name} in the catalog)"
    stale = ", older than a year" if rent.stale else ""
    return (f"cost: ${c:,.3g} per million output tokens at ${rent.usd:g} per GPU-hour (catalog rental price, "
            f"{rent.date}{stale}; source: {rent.source})")


def slo_line(rep: ServeReport) -> str:
    s = rep.slo
    assert s is not None
    how = (f"{len(s.probes)} probe{'s' if len(s.probes) > 1 else ''} of {rep.probe_requests} requests, latency over "
           f"the middle half by arrival, Poisson seed {rep.seed}")
    if s.max_rate_per_s is None or s.at_rate is None:
        return f"SLO: {no_rate_reason(rep)} ({how})"
    k = rep.units
    a = s.at_rate
    p = s.slo.percentile
    out = sustained_output_tokens_per_s(s.max_rate_per_s, a)
    cost = rep.cost_per_million_at(out)
    capped = " (the engine's saturation rate: throughput, not latency, is the limit)" if s.capped else ""
    return (f"SLO: highest Poisson rate with {_slo_text(s)}: {s.max_rate_per_s * k:.3g} requests/s{capped}; there "
            f"{out * k:,.0f} output tokens/s, TTFT P{p} {s.slo.stat(a.ttft) * 1e3:.4g} ms, TPOT P{p} "
            f"{s.slo.stat(a.tpot) * 1e3:.4g} ms" + (f", ${cost:,.3g} per million output tokens" if cost else "")
            + f" ({how})")


# ---- HTML ------------------------------------------------------------------------------------------

def _e(x: object) -> str:
    return escape(str(x), quote=True)


def latency_chart(rep: ServeReport, which: str, width: int = 440, height: int = 300) -> str:
    """One panel: latency ``which`` ("ttft" or "tpot") at the SLO percentile against output tokens/s
    per GPU, one point per rate of the sweep; the SLO bound as a dashed line."""
    if not rep.sweep:
        return ""
    p = rep.slo_percentile
    k, g = rep.units, rep.gpus
    pts = []
    for rate, r in rep.sweep:
        v = getattr(getattr(r, which), f"p{p}") * 1e3
        if math.isfinite(v):
            pts.append((sustained_output_tokens_per_s(rate, r) * k / g, v, rate * k))
    if not pts:
        return ""
    bound = None
    if rep.slo is not None:
        b = rep.slo.slo.ttft_s if which == "ttft" else rep.slo.slo.tpot_s
        bound = None if b is None else b * 1e3
    left, right, top, bottom = 60, 15, 25, 45
    xmax = max(x for x, _, _ in pts) * 1.05 or 1.0
    ymax = max([y for _, y, _ in pts] + ([bound] if bound else [])) * 1.1 or 1.0
    pw, ph = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + x / xmax * pw

    def sy(y: float) -> float:
        return top + ph - y / ymax * ph

    name = "TTFT" if which == "ttft" else "TPOT"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="{name} P{p} against output tokens per second per GPU">',
           f'<text x="{left}" y="15" font-size="13" font-weight="bold">{name} P{p} (ms)</text>',
           f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#333"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#333"/>']
    for i in range(5):
        yv = ymax * i / 4
        xv = xmax * i / 4
        out.append(f'<text x="{left - 5}" y="{sy(yv) + 4:.1f}" font-size="10" text-anchor="end">{yv:.3g}</text>')
        out.append(f'<text x="{sx(xv):.1f}" y="{top + ph + 14}" font-size="10" text-anchor="middle">{xv:,.0f}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 8}" font-size="11" text-anchor="middle">'
               'output tokens/s per GPU</text>')
    if bound is not None:
        out.append(f'<line x1="{left}" y1="{sy(bound):.1f}" x2="{left + pw}" y2="{sy(bound):.1f}" stroke="#eb3b5a" '
                   f'stroke-dasharray="5,4"><title>SLO {bound:g} ms</title></line>'
                   f'<text x="{left + pw - 2}" y="{sy(bound) - 4:.1f}" font-size="10" fill="#eb3b5a" '
                   f'text-anchor="end">SLO {bound:g} ms</text>')
    path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y, _) in enumerate(pts))
    out.append(f'<path d="{path}" fill="none" stroke="#3867d6" stroke-width="2"/>')
    for x, y, rate in pts:
        out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" fill="#3867d6"><title>{rate:.3g} requests/s: '
                   f'{x:,.0f} output tokens/s per GPU, {name} P{p} {y:.4g} ms</title></circle>')
    out.append("</svg>")
    return "".join(out)


CSS = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;"
       "margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f0f0f0}"
       ".charts{display:flex;flex-wrap:wrap;gap:1em}.note{color:#555}")


def render_no_html(question: str, reason: str) -> str:
    """The HTML report of a question answered "no" before anything ran (the weights do not fit, a
    prompt the engine refuses): the question and why."""
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>whichgpu serve: "
            f"{_e(question)}</title><style>{CSS}</style></head><body><h1>whichgpu serve</h1><p>{_e(question)}</p>"
            f"<h2>No</h2><p>{_e(reason)}</p></body></html>\n")


def render_html(rep: ServeReport) -> str:
    r = rep.result
    rows = "".join(f"<tr><th>{n}</th>" + "".join(f"<td>{_num(v * 1e3)}</td>" for v in (s.mean, s.p50, s.p90, s.p99))
                   + "</tr>" for n, s in (("TTFT", r.ttft), ("TPOT", r.tpot), ("E2E", r.e2e)))
    doc = serve_document(rep)
    mem = doc["memory"]
    mem_rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(_num(v) if isinstance(v, float) else v)}</td></tr>"
                       for k, v in mem.items() if k != "notes")
    sweep_rows = "".join(
        f"<tr><td>{rate * rep.units:.3g}</td>"
        f"<td>{_num(sustained_output_tokens_per_s(rate, x) * rep.units / rep.gpus)}</td>"
        f"<td>{_num(getattr(x.ttft, f'p{rep.slo_percentile}') * 1e3)}</td>"
        f"<td>{_num(getattr(x.tpot, f'p{rep.slo_percentile}') * 1e3)}</td><td>{x.preemptions}</td></tr>"
        for rate, x in (rep.sweep or []))
    p = rep.slo_percentile
    assumptions = "".join(f"<li><b>{_e(k)}</b>: {_e(v)}</li>" for k, v in rep.serving.assumptions.items())
    note_items = "".join(f"<li>{_e(n)}</li>" for n in notes(rep))
    if (acc := accuracy_text(rep)) is not None:
        note_items = f"<li><b>accuracy</b>: {_e(acc)}</li>" + note_items
    ceiling = "" if rep.ceiling_per_s is None else (
        f"<p class=note>Poisson arrivals at 1/{len(rep.sweep or [])} to {len(rep.sweep or [])}/{len(rep.sweep or [])}"
        f" of the saturation rate ({rep.ceiling_per_s * rep.units:.3g} requests/s: a closed loop at the largest "
        f"concurrency the KV cache holds); {rep.probe_requests} requests per point, seed {rep.seed}; latency over the "
        "middle half of the requests by arrival (steady state); throughput: rate x mean answer length.</p>")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>whichgpu serve: "
            f"{_e(rep.serving.model_id)} on {_e(rep.serving.setup.gpu.name)}</title><style>{CSS}</style></head><body>"
            f"<h1>whichgpu serve</h1><p>{_e(headline(rep))}</p><p>Workload: {_e(workload_text(rep))}</p>"
            f"<h2>Latency against throughput as the rate grows</h2><div class=charts>{latency_chart(rep, 'ttft')}"
            f"{latency_chart(rep, 'tpot')}</div>{ceiling}"
            f"<table><tr><th>requests/s</th><th>output tokens/s per GPU</th>"
            f"<th>TTFT P{p} ms</th><th>TPOT P{p} ms</th><th>{_evictions(rep)}</th></tr>{sweep_rows}</table>"
            "<h2>The run</h2><table><tr><th></th><th>mean</th><th>P50</th><th>P90</th><th>P99</th></tr>"
            f"{rows}</table><p>{_e(_num(doc['requests_per_s']))} requests/s, {_e(_num(doc['output_tokens_per_s']))} "
            f"output tokens/s, {_e(_num(doc['total_tokens_per_s']))} total tokens/s; {r.preemptions} {_evictions(rep)}.</p>"
            f"<p>{_e(cost_text(rep, r))}</p>" + (f"<p><b>{_e(slo_line(rep))}</b></p>" if rep.slo else "")
            + f"<h2>Memory per GPU</h2><table>{mem_rows}</table>"
            f"<h2>Assumptions</h2><ul>{assumptions}</ul>"
            + (f"<h2>Notes</h2><ul>{note_items}</ul>" if note_items else "") + "</body></html>\n")
