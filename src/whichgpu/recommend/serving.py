"""Which GPU, how many and what tensor parallelism serve a request rate within latency targets for
the least money: `recommend --use-case llm-serving --rate R --slo-ttft-ms X --slo-tpot-ms Y`.
Torch-free.

For each accelerator with a price (rent: the catalog's cloud price per GPU-hour; buy: the purchase
amortised over the hours of use, plus electricity, `cost.buy_usd_per_hour`), each
tensor-parallel degree that divides the model's heads and fits one node of its default system, and,
for an MoE model at TP > 1, each of the layouts its engines serve it with (`layouts`: experts split
by tensor parallelism, expert parallelism over the TP GPUs, and expert parallelism with DP attention,
`serve --ep TP --attention-dp TP`, whose rates are one attention group's x TP):

1. The serving engine is built as `whichgpu serve` builds it (`serving.model.build`, vLLM's default
   batch knobs for the GPU, 90 % of memory); a replica whose weights do not fit, or whose KV cache
   cannot hold one request, is left out with the reason.
2. The highest Poisson rate one replica sustains within the targets is searched
   (`serving.slo.search_max_rate`: probes of the same requests, latency over the middle half).
3. Replicas = ceil(rate / that rate); GPUs = replicas x TP. More GPUs than ``max_gpus``: out
   (before any search when the throughput bound already needs more).
4. Cost per million output tokens at the asked rate: the replicas' cost per hour over the output
   tokens an hour of the rate produces (rate x output length x 3600).

Ranked by cost per million output tokens, then fewer GPUs, then the higher rate per replica
(headroom). Bounding: configurations are taken best first by a lower bound of their cost, from a
rate no SLO rate exceeds: first `rate_upper_bound` (a prefill and decode throughput bound), then
also the closed-loop saturation rate (one short simulation); the SLO search runs when a
configuration's tightest bound still comes first. Once the ``top`` cheapest are found, a
configuration whose bound exceeds the last of them is not searched (listed as such): the ranking's
top is exact, the pruned ones could not enter it.
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from whichgpu.errors import InputError, WhichGPUError
from whichgpu.hardware.spec import GpuSpec
from whichgpu.hardware.system import System, default_system
from whichgpu.measure.serving_validate import validated_gpus
from whichgpu.recommend.cost import CostModel, buy_usd_per_hour, rent_usd_per_hour
from whichgpu.recommend.prices import UserPrice, resolve_prices
from whichgpu.serving.kv import TRTLLM_MAX_NUM_TOKENS
from whichgpu.serving.slo import held_concurrency, probe_requests

TP_DEGREES = (1, 2, 4, 8)
PROBE_REQUESTS = 400
"""Requests per SLO probe here (the serve command uses 1,000): the ranking compares many
configurations; its top entries are worth re-checking with `whichgpu serve`."""
REL_TOL = 0.05


def layouts(experts: int, tp: int) -> list[tuple[int, int]]:
    """(expert parallelism, attention groups) tried at `tp`: (1, 1) always; for an MoE model whose
    experts `tp` divides, also EP = TP and EP = TP with DP attention over all TP GPUs (SGLang
    ``--ep TP --enable-dp-attention --dp TP``, vLLM data parallel with EP, TensorRT-LLM
    ``enable_attention_dp``): the layouts the engines' own recipes serve DeepSeek-class models with."""
    out = [(1, 1)]
    if experts and tp > 1 and experts % tp == 0:
        out += [(tp, 1), (tp, tp)]
    return out


@dataclass(frozen=True)
class ServingAsk:
    """The serving question."""

    model: str
    rate_per_s: float
    input_len: int
    output_len: int
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    percentile: int = 90
    precision: str = "bf16"
    kv_dtype: str = "auto"
    engine: str = "vllm"
    max_gpus: int = 8
    top: int = 10
    cost: CostModel = field(default_factory=CostModel)
    prices: dict[str, UserPrice] = field(default_factory=dict)
    """The user's prices by GPU id (`prices.parse_price_args`), over the catalog's."""

    def validate(self) -> None:
        if not (math.isfinite(self.rate_per_s) and self.rate_per_s > 0):
            raise InputError(f"--rate must be a finite number > 0 requests/s, got {self.rate_per_s:g}", field="rate")
        if self.slo_ttft_ms is None and self.slo_tpot_ms is None:
            raise InputError("serving recommendations need a latency target: --slo-ttft-ms and/or --slo-tpot-ms",
                             field="slo_ttft_ms")
        for name, v in (("--input-len", self.input_len), ("--output-len", self.output_len)):
            if v < 1:
                raise InputError(f"{name} must be >= 1 token, got {v}", field=name.lstrip("-").replace("-", "_"))
        if self.max_gpus < 1:
            raise InputError(f"--max-gpus must be >= 1, got {self.max_gpus}", field="max_gpus")
        self.cost.validate()


@dataclass
class ServingOption:
    """One GPU x tensor-parallel configuration, with its answer or why it has none."""

    gpu: GpuSpec
    system: System
    tp: int
    ep: int = 1
    attention_dp: int = 1
    """Attention groups per replica (DP attention); the search simulates one group."""
    usd_per_gpu_hour: float | None = None
    price_source: str = ""
    max_rate_per_replica: float | None = None
    ceiling_per_replica: float | None = None
    capped: bool = False
    replicas: int | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    kv_tokens: int | None = None
    reason: str = ""
    kind: str = ""
    """Why it is out: price, fit, slo, max-gpus, pruned ("" when it meets the targets)."""
    assumptions: dict[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> int | None:
        return None if self.replicas is None else self.replicas * self.tp

    @property
    def layout(self) -> str:
        """The replica's layout: "TP8", "TP8 EP8", "TP8 EP8 DP-attention 8"."""
        from whichgpu.serving.model import layout_text

        return layout_text(self.tp, self.ep, attention_dp=self.attention_dp)

    @property
    def meets(self) -> bool:
        return not self.reason and self.replicas is not None

    def usd_per_hour(self) -> float | None:
        if self.usd_per_gpu_hour is None or self.gpus is None:
            return None
        return self.usd_per_gpu_hour * self.gpus

    def usd_per_million_tokens(self, ask: ServingAsk) -> float | None:
        h = self.usd_per_hour()
        if h is None:
            return None
        return h / (ask.rate_per_s * ask.output_len * 3600.0 / 1e6)

    def to_dict(self, ask: ServingAsk) -> dict[str, Any]:
        return {"gpu": self.gpu.id, "gpu_name": self.gpu.name, "system": self.system.id, "tp": self.tp,
                "ep": self.ep, "attention_dp": self.attention_dp, "layout": self.layout,
                "replicas": self.replicas, "gpus": self.gpus, "meets_slo": self.meets,
                "max_rate_per_s_per_replica": self.max_rate_per_replica,
                "saturation_rate_per_s_per_replica": self.ceiling_per_replica, "capped": self.capped,
                f"ttft_ms_p{ask.percentile}": self.ttft_ms, f"tpot_ms_p{ask.percentile}": self.tpot_ms,
                "kv_cache_tokens": self.kv_tokens, "usd_per_gpu_hour": self.usd_per_gpu_hour,
                "usd_per_hour": self.usd_per_hour(), "usd_per_million_output_tokens": self.usd_per_million_tokens(ask),
                "price_source": self.price_source, "reason": self.reason or None, "reason_kind": self.kind or None,
                "validated_gpu": self.gpu.id in validated_gpus()}


@dataclass
class ServingRecommendation:
    ask: ServingAsk
    ranked: list[ServingOption]
    """Configurations meeting the targets at the rate, cheapest per million output tokens first."""
    more: list[ServingOption]
    """Configurations that meet the targets at a higher cost than the top."""
    others: list[ServingOption]
    """The rest, each with its reason and kind."""
    assumptions: dict[str, str]


def _gpu_hour(g: GpuSpec, cost: CostModel, today: dt.date, user: dict[str, UserPrice]) -> tuple[float | None, str]:
    p = resolve_prices(g, user, today)
    if cost.mode == "rent":
        q = p.rent
        return (None, "no cloud price in the catalog") if q.usd is None else \
            (rent_usd_per_hour(q.usd, 1), f"rent ${q.usd:g}/GPU-hour ({q.source})")
    q = p.buy
    if q.usd is None:
        return None, "no purchase price in the catalog"
    return buy_usd_per_hour(q.usd, 1, g.tdp_w, cost), f"buy ${q.usd:,.0f} ({q.kind}, {q.source}) amortised"


def _setup_option(ask: ServingAsk, g: GpuSpec, sys_: System, tp: int, today: dt.date, ep: int = 1,
                  adp: int = 1) -> tuple[ServingOption, Any]:
    """The option with its engine built and capacity sized (or its reason), and the run context
    (under DP attention: one attention group's)."""
    from whichgpu.serving.kv import batch_defaults, default_running_requests
    from whichgpu.serving.model import Setup, build

    opt = ServingOption(g, sys_, tp, ep, adp)
    opt.usd_per_gpu_hour, opt.price_source = _gpu_hour(g, ask.cost, today, ask.prices)
    if opt.usd_per_gpu_hour is None:
        opt.reason, opt.kind = opt.price_source, "price"
        return opt, None
    try:
        sm = build(Setup(ask.model, g, sys_, tp=tp, ep=ep, precision=ask.precision, kv_dtype=ask.kv_dtype,
                         engine=ask.engine, attention_dp=adp))
        tokens, seqs = batch_defaults(ask.engine, int(g.usable_memory_bytes), g.name)
        cap = sm.capacity(max_seq_len=ask.input_len + ask.output_len, max_num_batched_tokens=tokens,
                          max_num_seqs=seqs)
        seqs = default_running_requests(ask.engine, seqs, cap.num_tokens, sm.args.max_positions)
        cfg = sm.scheduler_config(cap, max_num_seqs=seqs, max_num_batched_tokens=tokens)
    except WhichGPUError as e:
        opt.reason, opt.kind = str(e).splitlines()[0], "fit"
        return opt, None
    if cap.max_concurrency < 1:
        opt.reason = (f"the KV cache holds {cap.num_tokens:,} tokens, less than one request of "
                      f"{ask.input_len + ask.output_len:,}")
        opt.kind = "fit"
        return opt, None
    if cfg.refuses(ask.input_len):
        opt.reason = (f"{ask.engine} does not chunk prefills: it refuses a {ask.input_len:,}-token prompt, over its "
                      f"max_num_tokens of {tokens:,}")
        opt.kind = "engine"
        return opt, None
    opt.kv_tokens = cap.num_tokens
    opt.assumptions = dict(sm.assumptions)
    return opt, (sm, cap, cfg, seqs)


def _search(ask: ServingAsk, opt: ServingOption, ctx: Any) -> None:
    """Fill `opt` with the SLO search's answer at the asked rate (or its reason)."""
    from whichgpu.serving.scheduler import simulate
    from whichgpu.serving.slo import Slo, idle_run, poisson_runner, search_max_rate, steady_state
    from whichgpu.serving.workload import Poisson, Workload, fixed_lengths

    sm, cap, cfg, seqs = ctx
    k = opt.attention_dp  # the simulation runs one attention group: its rates x k per replica
    slo = Slo(None if ask.slo_ttft_ms is None else ask.slo_ttft_ms / 1e3,
              None if ask.slo_tpot_ms is None else ask.slo_tpot_ms / 1e3, ask.percentile)
    assert opt.ceiling_per_replica is not None
    reqs = fixed_lengths(ask.input_len, ask.output_len, opt_requests(cap, seqs))
    runner = poisson_runner(reqs, sm.step_time, cfg)
    res = search_max_rate(runner, slo, opt.ceiling_per_replica / k, idle=idle_run(reqs, sm.step_time, cfg), rel_tol=REL_TOL)
    if res.max_rate_per_s is None:
        low = res.lowest
        why = "even one request served alone misses the targets" if res.idle_misses else "no rate down to 1/1024 of saturation meets the targets"
        if low is not None:
            why += f" (TTFT P{ask.percentile} {slo.stat(low.ttft) * 1e3:.0f} ms, TPOT {slo.stat(low.tpot) * 1e3:.1f} ms)"
        opt.reason, opt.kind = why, "slo"
        return
    opt.max_rate_per_replica, opt.capped = res.max_rate_per_s * k, res.capped
    replicas = max(1, math.ceil(ask.rate_per_s / opt.max_rate_per_replica - 1e-9))
    opt.replicas = replicas
    if replicas * opt.tp > ask.max_gpus:
        opt.reason = (f"needs {replicas} replicas x {opt.layout} = {replicas * opt.tp} GPUs (at most "
                      f"{opt.max_rate_per_replica:.2f} requests/s each), over --max-gpus {ask.max_gpus}")
        opt.kind = "max-gpus"
        return
    # the latency each replica sees at its share of the rate (at most the searched rate's)
    r = steady_state(simulate(Workload(reqs, Poisson(ask.rate_per_s / (replicas * k), 0)), sm.step_time, cfg))
    opt.ttft_ms, opt.tpot_ms = slo.stat(r.ttft) * 1e3, slo.stat(r.tpot) * 1e3
    if not math.isfinite(opt.tpot_ms):
        opt.tpot_ms = None


def opt_requests(cap: Any, seqs: int) -> int:
    """Requests per probe: at least PROBE_REQUESTS and 4 x the concurrency the replica holds."""
    return probe_requests(held_concurrency(cap, seqs), PROBE_REQUESTS)


def _saturation(ask: ServingAsk, opt: ServingOption, ctx: Any) -> None:
    """The replica's closed-loop throughput at the most requests it holds: the search's ceiling."""
    from whichgpu.serving.slo import saturation_rate
    from whichgpu.serving.workload import fixed_lengths

    sm, cap, cfg, seqs = ctx
    conc = held_concurrency(cap, seqs)
    reqs = fixed_lengths(ask.input_len, ask.output_len, opt_requests(cap, seqs))
    opt.ceiling_per_replica = saturation_rate(reqs, sm.step_time, cfg, conc).requests_per_s * opt.attention_dp


def rate_upper_bound(ask: ServingAsk, ctx: Any) -> float:
    """Requests/s one replica (under DP attention: one attention group) cannot exceed. Every
    request needs its prompt prefilled and `output_len` decode steps; a step holding P prefill
    tokens and D decoding requests takes at least the longer of a prefill-only step of P tokens and
    a decode-only step of D requests, so the rate is at most 1 / max(input_len x p, output_len x d),
    with p the least prefill time per token (a full token budget) and d the least decode time per
    request: a decode step of C requests at the prompt's context over C, C the most requests the
    replica holds and, with a TPOT target, the most whose decode step alone stays within it; 0 where
    even one request's decode step exceeds the target (no rate meets it)."""
    import numpy as np

    from whichgpu.serving.batch import StepBatch

    sm, cap, cfg, seqs = ctx

    def dec(c: int) -> float:
        return decode_step_s(ask, ctx, c)

    conc = held_concurrency(cap, seqs)
    if ask.slo_tpot_ms is not None and dec(1) > ask.slo_tpot_ms / 1e3:
        return 0.0  # one request alone decodes slower than the target: no rate meets it
    if ask.slo_tpot_ms is not None and dec(conc) > ask.slo_tpot_ms / 1e3:
        lo, hi = 1, conc  # largest c with dec(c) within the target (dec grows with c)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if dec(mid) <= ask.slo_tpot_ms / 1e3 else (lo, mid - 1)
        conc = lo
    budget = cfg.max_num_batched_tokens
    prefill = float(sm.step_time(StepBatch(np.array([budget]), np.array([0]), np.zeros(0, np.int64))))
    per_request = max(ask.input_len * prefill / budget, ask.output_len * dec(conc) / conc)
    return float(1.0 / per_request)


def decode_step_s(ask: ServingAsk, ctx: Any, requests: int) -> float:
    """One decode step of `requests` requests at the prompt's context, with the engine's host time:
    the least time per output token each of them sees."""
    import numpy as np

    from whichgpu.serving.batch import StepBatch

    sm = ctx[0]
    return float(sm.step_time(StepBatch.decode_only(np.full(requests, ask.input_len, np.int64))) + sm.cpu_overhead_s)


def _lower_bound(ask: ServingAsk, opt: ServingOption, rate_ub: float) -> float:
    """Least cost per million output tokens the option can reach: replicas at `rate_ub` each."""
    assert opt.usd_per_gpu_hour is not None
    replicas = max(1, math.ceil(ask.rate_per_s / rate_ub - 1e-9))
    return opt.usd_per_gpu_hour * replicas * opt.tp / (ask.rate_per_s * ask.output_len * 3600.0 / 1e6)


def recommend_serving(ask: ServingAsk, gpus: Iterable[GpuSpec], systems: Any = None,
                      today: dt.date | None = None) -> ServingRecommendation:
    """The ranking of the module docstring over `gpus` (each in its default system)."""
    from whichgpu.parallel.models import planner_model
    from whichgpu.serving.model import check_request_tokens, engine_unsupported

    ask.validate()
    today = today or dt.date.today()
    model_id, args, _ = planner_model(ask.model)
    check_request_tokens(model_id, args, ask.input_len + ask.output_len)
    experts = args.experts
    built: list[tuple[ServingOption, Any, float]] = []
    others: list[ServingOption] = []
    for g in gpus:
        sys_ = default_system(g, systems)
        if (why := engine_unsupported(ask.engine, g)) is not None:
            others.append(ServingOption(g, sys_, 1, reason=why, kind="engine"))
            continue
        usd, src = _gpu_hour(g, ask.cost, today, ask.prices)
        if usd is None:  # one line per GPU, not per degree
            others.append(ServingOption(g, sys_, 1, reason=src, kind="price"))
            continue
        heavy: set[int] = set()  # TP degrees whose weights do not fit: no other layout of theirs does either
        for tp, ep, adp in ((t, e, d) for t in TP_DEGREES for e, d in layouts(experts, t)):
            if tp > sys_.gpus_per_node or tp > ask.max_gpus or tp in heavy:
                continue
            opt, ctx = _setup_option(ask, g, sys_, tp, today, ep, adp)
            if ctx is None:
                if "tensor parallelism" not in opt.reason:  # a degree the heads rule out is no option
                    others.append(opt)
                if opt.reason.startswith("the weights"):  # serving.kv's message: the weights alone overflow
                    heavy.add(tp)
                continue
            ub = rate_upper_bound(ask, ctx) * adp
            if ub <= 0:  # the TPOT target is below one request's own decode step
                opt.reason = (f"even one request alone decodes at {decode_step_s(ask, ctx, 1) * 1e3:.1f} ms a token, "
                              f"over the TPOT target of {ask.slo_tpot_ms:g} ms, at any rate")
                opt.kind = "slo"
                others.append(opt)
                continue
            least = max(1, math.ceil(ask.rate_per_s / ub - 1e-9)) * tp
            if least > ask.max_gpus:  # no search can bring it under the cap
                opt.reason = (f"needs at least {least} GPUs (at most {ub:.3g} requests/s per replica within the "
                              f"targets), over --max-gpus {ask.max_gpus}")
                opt.kind = "max-gpus"
                others.append(opt)
                continue
            built.append((opt, ctx, _lower_bound(ask, opt, ub)))
    # best first by the cost bound: a throughput bound first, then the tighter closed-loop saturation
    # rate (cheap), then the SLO search (dear); stop once no bound can beat the top's last
    heap = [(bound, i, 0) for i, (_o, _c, bound) in enumerate(built)]
    heapq.heapify(heap)
    ranked: list[ServingOption] = []
    while heap:
        bound, i, stage = heapq.heappop(heap)
        opt, ctx, _ = built[i]
        if len(ranked) >= ask.top:
            worst = ranked[ask.top - 1].usd_per_million_tokens(ask)
            if worst is not None and bound > worst:
                opt.reason = (f"not searched: even at its throughput bound it costs more per million tokens "
                              f"(${bound:.3g}) than the top {ask.top}")
                opt.kind = "pruned"
                others.append(opt)
                continue
        if stage == 0:
            _saturation(ask, opt, ctx)
            assert opt.ceiling_per_replica is not None
            ub = min(opt.ceiling_per_replica, rate_upper_bound(ask, ctx) * opt.attention_dp)
            heapq.heappush(heap, (max(bound, _lower_bound(ask, opt, ub)), i, 1))
            continue
        _search(ask, opt, ctx)
        if opt.meets:
            ranked.append(opt)
            ranked.sort(key=lambda o: (o.usd_per_million_tokens(ask) or math.inf, o.gpus or 0,
                                       -(o.max_rate_per_replica or 0.0)))  # equal cost: the most headroom first
        else:
            others.append(opt)
    more, ranked = ranked[ask.top:], ranked[:ask.top]
    assumptions = {
        "engine": f"{ask.engine}: " + ("its scheduling (GUARANTEED_NO_EVICT, whole prompts, no chunked prefill) "
                                        f"with max_num_tokens {TRTLLM_MAX_NUM_TOKENS} and vLLM's max_num_seqs for "
                                        "the GPU, 0.9 of the memory free after loading for the KV cache"
                                        if ask.engine == "tensorrt-llm" else
                                        "its scheduling (prefill-first steps, admission within new_token_ratio, "
                                        "retraction) with its chunked_prefill_size and max_running_requests (2048-4096 by its KV pool), "
                                        "its default mem_fraction_static for the GPU and layout"
                                        if ask.engine == "sglang" else
                                        "vLLM v1 scheduling with the GPU's default max_num_seqs and "
                                        "max_num_batched_tokens, 90 % of GPU memory")
                  + " (GPU memory as cudaMemGetInfo reports it: the catalog's GiB less the driver's 1.5 % and "
                    "inline ECC's sixteenth)",
        "workload": f"Poisson arrivals at {ask.rate_per_s:g} requests/s split evenly over the replicas; "
                    f"{ask.input_len} prompt + {ask.output_len} answer tokens",
        "slo": f"P{ask.percentile} over the middle half of {PROBE_REQUESTS}+ requests per probe, bracket narrowed to "
               f"{REL_TOL:.0%}",
        "cost": ask.cost.describe(),
        "layout": (f"one replica per node of the GPU's default system, TP in {', '.join(map(str, TP_DEGREES))}"
                   + ("; the MoE experts split by TP, or over EP = TP, or EP = TP with DP attention (one attention "
                      "group per GPU, each with its own requests and KV cache, simulated as one group with its share "
                      "of the rate, the groups balanced)" if experts else "")),
    }
    return ServingRecommendation(ask, ranked, more, others, assumptions)


def serving_body(rec: ServingRecommendation) -> dict[str, Any]:
    """The JSON document (`whichgpu.recommend-serving/1`)."""
    a = rec.ask
    return {"ask": {"model": a.model, "rate_per_s": a.rate_per_s, "input_len": a.input_len, "output_len": a.output_len,
                    "slo_ttft_ms": a.slo_ttft_ms, "slo_tpot_ms": a.slo_tpot_ms, "percentile": a.percentile,
                    "precision": a.precision, "kv_dtype": a.kv_dtype, "engine": a.engine, "max_gpus": a.max_gpus,
                    "cost_mode": a.cost.mode},
            "ranking": [o.to_dict(a) for o in rec.ranked],
            "more_meeting": [o.to_dict(a) for o in rec.more],
            "not_meeting": [o.to_dict(a) for o in rec.others],
            "assumptions": rec.assumptions}
