"""Score the serving simulation against published serving latencies (``serving_dev.csv``:
NVIDIA AIConfigurator's silicon sample of vLLM, SGLang and TensorRT-LLM). Torch-free.

Each row is a closed-loop run at fixed concurrency with fixed prompt (``isl``) and answer (``osl``)
lengths: the simulation runs the same workload through the engine model (`serving.model.build`,
`serving.scheduler.simulate`) and compares mean TTFT and mean TPOT (the source does not say mean
or median). Rows sharing ``measurement_group`` are one measurement re-labelled: scored once.

What each row is run with (stated in `ASSUMPTIONS`):
- The engine knobs of AIConfigurator's own benchmark configs (its generator's benchmark rules,
  ``generator/rule_plugin/benchmark/{vllm,trtllm,sglang}.rule``): max_num_seqs = the row's
  ``batch_size`` (its concurrency per replica) and a step budget of batch_size + isl + 1500 tokens
  (vLLM max_num_batched_tokens, TensorRT-LLM max_num_tokens; SGLang max_prefill_tokens isl + 1500,
  its steps prefilling or decoding, not both, as its default without --enable-mixed-chunk). The
  budget decides how a burst of prompts is chunked into steps. TensorRT-LLM runs without chunked
  prefill (its ``enable_chunked_prefill=False`` default, which AIConfigurator's templates keep):
  whole prompts only, a second one waiting for a step with room.
- 10 x concurrency requests, the first C sent together (the benchmark length of AIConfigurator's
  evaluation runners, ``aiconfigurator/eval/benchmarks``). Its aiperf script
  (``generator/config/backend_templates/benchmark/bench_run.sh.j2``) sends 50 x C after a 2 x C
  warmup instead, where the first burst weighs 2 % of the mean, not 10 %: scored that way the signed
  TTFT error drifts with concurrency (-19 % at 4-8, -32 % at 16-32, -48 % at 64-128) where at 10 x C
  it is flat (-13 %, -14 %, -15 %), so the rows behave like the shorter run.
- Answer lengths spread by 10 % (normal, seeded) around ``osl``, as aiperf's ``--osl-stddev``
  draws them (AIConfigurator's benchmark script passes one; its value is not published, 10 % is
  this module's assumption): in a closed loop it keeps the clients out of phase. Exactly equal answers would keep every wave of a burst in lockstep forever, each request
  prefilled with its whole wave; the measured TTFT at concurrency 4-8 (about 1.2-1.5 prefill steps
  on the rows whose prefill the model gets right, dense models on H100/H200) says the measured
  clients were not. TPOT is a mean over requests and barely moves.
- each engine's default memory fraction (vLLM 0.9 of the memory cudaMemGetInfo reports, the
  catalog's GiB less 1.5 %; TensorRT-LLM 0.9 of what loading leaves; SGLang its own
  mem_fraction_static rule, AIConfigurator's SGLang templates passing none), a 16-bit KV cache
  unless the row says FP8 or the engine takes an FP8 cache from the row's checkpoint
  (`row_kv_dtype`), weights in the row's precision (blank: BF16); each engine's profile (vllm,
  sglang, tensorrt-llm), its request overhead included.

The B200 SGLang DeepSeek-R1/V3 rows also run with the knobs of their own launch scripts
(`launch_knobs`). Their container images (``lmsysorg/sglang:v0.5.x-cu129/cu130``), the three length
pairs (1k/1k, 1k/8k, 8k/1k) and the concurrency ladder (4 to 512) are SemiAnalysis InferenceMAX's
sweep, whose B200 scripts (``benchmarks/dsr1_fp8_b200.sh``, ``dsr1_fp4_b200.sh``) start SGLang with
``--scheduler-recv-interval`` 30 at concurrency 16 and over, 10 below (the FP8 script at tp 4: 10),
and ``--kv-cache-dtype fp8_e4m3``. The rows show the interval: at 1k/1k the FP8 rows' TTFT rises
2.6x from concurrency 8 to 16, where the same model and engine version on H200 (whose script sets
neither knob) rises 17 %.

DP attention rows (the ``attention_dp`` column, or a blank column whose per-rank batch size times
tp is the concurrency, as in seven TensorRT-LLM NVFP4 DeepSeek rows) run as `serve --attention-dp`
(`layout`): one attention group simulated with its share of the clients (concurrency / groups,
10 x that many requests) and the row's batch size as its max_num_seqs.

Not scored, listed with the reason: disaggregated rows (separate prefill and decode workers whose
counts are mostly not published), models without a packaged config, and layouts `serve` refuses
(`serving.model.build`: tensor parallelism over more GPUs than one node, expert parallelism over
part of the tensor-parallel group).
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whichgpu.errors import WhichGPUError

if TYPE_CHECKING:
    from whichgpu.serving.workload import RequestLengths

ZOO = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b", "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b", "deepseek-ai/DeepSeek-R1": "deepseek-v3",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3", "nvidia/DeepSeek-R1-NVFP4": "deepseek-v3",
    "nvidia/DeepSeek-V3.1-NVFP4": "deepseek-v3", "moonshotai/Kimi-K2.5": "kimi-k2",
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2", "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b", "zhipuai/GLM-5": "glm-5",
}
APART = {"Qwen/Qwen3.5-397B-A17B": "hybrid linear attention (Gated DeltaNet), its kernels timed from their FLOPs and "
                                   "bytes, not calibrated",
         "zhipuai/GLM-5": "DeepSeek sparse attention (indexer + top-2048 MLA), its kernels timed from their FLOPs and "
                          "bytes, not calibrated"}
"""Models whose rows are scored and listed apart from the bounded figures (`summary`'s "apart"), with
why: a family added after the calibration, reported so its error is seen, not folded in."""
STALLED_RUNS = {("B200", "sglang", "2025-11-10"): (
    "a day's runs whose TTFT stalls for seconds whatever the load (B200 SGLang, 2025-11-10: 5.5-9.2 s at "
    "concurrency 4-8 with 8k prompts and at 32-128 with 1k ones, where the same engine on the same GPUs measured "
    "0.6 s at 8 x 8k on another day and 2.1-2.9 s at 32-128 x 8k a week before, with TPOTs of 8-39 ms): not the "
    "engine's steady work, scored apart")}
"""Measurement days scored and listed apart (`apart_reason`), keyed by (GPU, engine, the day of
``measured_at``), with why: every row of the day's sweep, not the rows picked by their error."""
GPUS = {"H100-SXM5-80GB": ("h100-sxm5-80gb", "dgx-h100"), "H200-SXM-141GB": ("h200-sxm-141gb", "dgx-h200"),
        "B200": ("b200", "hgx-b200")}


def validated_gpus() -> dict[str, str]:
    """The GPUs the serving dev rows measure, {catalog id: the rows' name}: serving's validated ground."""
    return {gid: name for name, (gid, _system) in GPUS.items()}


BENCH_REQUESTS_PER_CONCURRENCY = 10
"""Requests per unit of concurrency each row's benchmark is simulated with (see the module doc)."""
BENCH_TOKEN_HEADROOM = 1500
"""AIConfigurator's benchmark configs: max_num_batched_tokens (TensorRT-LLM max_num_tokens) =
max_batch_size + isl + this (module doc)."""
BENCH_ANSWER_SPREAD = 0.1
"""Relative standard deviation of the simulated answer lengths around the row's osl (module doc)."""


def bench_lengths(isl: int, osl: int, n: int, seed: int = 0) -> RequestLengths:
    """`n` requests of `isl` prompt tokens and answers of mean `osl` spread by BENCH_ANSWER_SPREAD
    (`serving.workload.spread_lengths`: normal, seeded, rounded, at least 1 token)."""
    from whichgpu.serving.workload import spread_lengths

    return spread_lengths(isl, osl, BENCH_ANSWER_SPREAD * osl, n, seed)


ENGINES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm"}
PRECISIONS = {"": "bf16", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp4": "fp4", "int4": "int4"}
ASSUMPTIONS = {
    "workload": "closed loop at the row's concurrency, fixed isl, answers spread 10 % around osl (aiperf's "
                "--osl-stddev; keeps the clients out of phase), 10 x concurrency requests, the first wave sent together",
    "engine": "AIConfigurator's benchmark knobs: max_num_seqs = the row's batch size, a step budget of batch size + "
              "isl + 1500 tokens, chunked prefill mixed with decode (sglang: a step prefills or decodes, its "
              "default without --enable-mixed-chunk; tensorrt-llm: whole prompts mixed with decode, its default "
              "without chunked prefill); the engine's memory fraction (vllm 0.9 of the memory cudaMemGetInfo reports, "
              "tensorrt-llm 0.9 of what loading leaves, sglang its own mem_fraction_static rule); the engine's profile (vllm, "
              "sglang = vLLM's kernels with its own request overhead, tensorrt-llm); vllm admits on the next chunk's KV "
              "blocks and preempts, sglang keeps room for the running answers and retracts, tensorrt-llm reserves each request's whole prompt and answer "
              "(GUARANTEED_NO_EVICT, its default) and never preempts",
    "precision": "weights in the row's precision (blank: BF16); KV cache FP8 where kv_precision says so or, on "
                 "tensorrt-llm and vllm with FP8/FP4 weights and on sglang with FP4 weights (the engines take an FP8 KV "
                 "cache from NVIDIA ModelOpt checkpoints, and every NVFP4 checkpoint is one; at 1k + 8k tokens the "
                 "TensorRT-LLM and vLLM FP8 rows' TTFTs need it: Llama-3.1-70B FP8 on one H200 measures 449 ms at 32 "
                 "requests, which reserve 295k tokens where a 16-bit cache holds 208k; SGLang's FP8 rows are the model "
                 "makers' own checkpoints, with no KV scheme), else 16-bit",
    "attention_dp": "tensorrt-llm DP-attention rows without attention-DP balancing (TensorRT-LLM's default, and "
                    "AIConfigurator's TensorRT-LLM templates set no attention_dp_config); --trtllm-adp-balance "
                    "TIMEOUT[,WAIT] runs them with it",
    "metric": "mean TTFT and mean TPOT (the source does not say mean or median); one score per measurement_group",
    "launch_scripts": "the B200 SGLang DeepSeek rows (InferenceMAX's sweep) with their launch scripts' "
                      "--scheduler-recv-interval (30 from 16 requests in flight, 10 below; the FP8 script's tp-4 branch "
                      "10) and --kv-cache-dtype fp8_e4m3; the 2025-11-10 B200 SGLang runs, whose TTFT stalls for "
                      "seconds whatever the load, scored apart",
}


def assumptions(trtllm_adp_balance: tuple[int, int] | None = None) -> dict[str, str]:
    """`ASSUMPTIONS` as `serving_rows` ran with ``trtllm_adp_balance``."""
    out = dict(ASSUMPTIONS)
    if trtllm_adp_balance is not None:
        out["attention_dp"] = (f"tensorrt-llm DP-attention rows with attention-DP balancing, timeout_iters "
                               f"{trtllm_adp_balance[0]}, batching_wait_iters {trtllm_adp_balance[1]} "
                               "(--trtllm-adp-balance)")
    return out


@dataclass
class ServeScore:
    name: str
    group: str  # "GPU engine"
    gpu: str
    engine: str
    measured_ttft_ms: float
    measured_tpot_ms: float
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    row_id: str = ""  # the CSV's row_id (the first row of its measurement_group)
    apart: str = ""  # scored apart, outside the bounded figures: why (`APART`); "" in them
    engine_version: str = ""  # the CSV's engine_version (blank where the source gives none)

    def to_dict(self) -> dict[str, Any]:
        e = self.errors()
        return {"name": self.name, "row_id": self.row_id, "engine_version": self.engine_version,
                "group": self.group, "gpu": self.gpu, "engine": self.engine,
                "measured_ttft_ms": self.measured_ttft_ms, "measured_tpot_ms": self.measured_tpot_ms,
                "predicted_ttft_ms": self.predicted_ttft_ms, "predicted_tpot_ms": self.predicted_tpot_ms,
                "ttft_error": e[0] if e else None, "tpot_error": e[1] if e else None, "apart": self.apart,
                **self.extra}

    def errors(self) -> tuple[float, float] | None:
        if self.predicted_ttft_ms is None or self.predicted_tpot_ms is None:
            return None
        return (self.predicted_ttft_ms / self.measured_ttft_ms - 1.0, self.predicted_tpot_ms / self.measured_tpot_ms - 1.0)


def _reason(r: dict[str, str]) -> str:
    if r["mode"] != "agg":
        return "disaggregated prefill/decode workers (worker counts mostly not published): not modelled"
    if r["hf_model_id"] not in ZOO:
        return f"model {r['hf_model_id']} has no packaged config"
    if r["gpu"] not in GPUS:
        return f"GPU {r['gpu']} not mapped"
    if r["engine"] not in ENGINES:
        return f"engine {r['engine']} not modelled"
    if int(r["pp"] or 1) > 1:
        return "pipeline-parallel serving is not modelled"
    if r["precision"] not in PRECISIONS:
        return f"precision {r['precision']} not modelled"
    if not (r["concurrency"] and r["isl"] and r["osl"]):
        return "concurrency or lengths not published"
    return ""


def layout(r: dict[str, str]) -> tuple[int, int, int]:
    """(GPUs of the replica = serve's --tp, --ep, --attention-dp) of a row. DP attention: the row's
    ``tp`` is each attention group's tensor parallelism (vLLM --tensor-parallel-size with
    --data-parallel-size, TensorRT-LLM's tp beside enable_attention_dp), so the replica spans
    tp x attention_dp GPUs; a blank attention_dp whose per-rank batch size times tp is the
    concurrency (seven TensorRT-LLM NVFP4 DeepSeek rows) is DP attention over the tp GPUs."""
    tp, ep, adp = int(r["tp"] or 1), int(r["ep"] or 1), int(r["attention_dp"] or 1)
    conc, batch = int(r["concurrency"]), int(r["batch_size"] or r["concurrency"])
    if adp > 1:
        return tp * adp, ep, adp
    if tp > 1 and batch < conc and batch * tp == conc:
        return tp, ep, tp
    return tp, ep, 1


def row_kv_dtype(r: dict[str, str], engine: str) -> str:
    """The KV-cache dtype a row is simulated with (`ASSUMPTIONS` "precision"): "fp8" where its
    kv_precision says so or where ``engine`` takes an FP8 cache from the checkpoint of the row's
    weights (`serving.model.KV_FP8_CHECKPOINTS`), else "auto" (16-bit)."""
    from whichgpu.serving.model import kv_fp8_from_checkpoint

    quantised = kv_fp8_from_checkpoint(engine, PRECISIONS[r["precision"]])
    return "fp8" if "fp8" in (r["kv_precision"] or "").lower() or quantised else "auto"


def apart_reason(r: dict[str, str]) -> str:
    """Why a row is scored apart from the bounded figures (`APART`, `STALLED_RUNS`); "" if it is not."""
    return APART.get(r["hf_model_id"]) or STALLED_RUNS.get((r["gpu"], r["engine"], r["measured_at"][:10]), "")


def launch_knobs(r: dict[str, str]) -> dict[str, Any]:
    """The engine knobs a row's launch script sets beyond AIConfigurator's benchmark rules (module
    doc): for the B200 SGLang DeepSeek rows, SGLang's receive interval
    (`serving.scheduler.SchedulerConfig.recv_interval`) and an FP8 KV cache ({"recv_interval": n,
    "kv_dtype": "fp8"}); {} for the other rows."""
    if r["engine"] != "sglang" or r["gpu"] != "B200" or not r["model_family"].startswith("DeepSeek"):
        return {}
    low = r["precision"] == "fp8" and int(r["tp"] or 1) == 4  # the FP8 script's tp-4 branch: 10 at any concurrency
    return {"recv_interval": 10 if low or int(r["concurrency"]) < 16 else 30, "kv_dtype": "fp8"}


def serving_rows(path: Path, limit: int | None = None, match: str | None = None,
                 trtllm_adp_balance: tuple[int, int] | None = None) -> list[ServeScore]:
    """Score every row of ``serving_dev.csv`` (one per measurement group); `match`: only rows whose
    name contains it; `limit`: stop after that many scored rows; `trtllm_adp_balance`: the TensorRT-LLM
    DP-attention rows run with attention-DP balancing at these (timeout_iters, batching_wait_iters)
    instead of without it (`ASSUMPTIONS`)."""
    from whichgpu.hardware.catalog import load_catalog
    from whichgpu.hardware.system import load_systems
    from whichgpu.serving.model import Setup, build
    from whichgpu.serving.scheduler import simulate
    from whichgpu.serving.workload import ClosedLoop, Workload

    cat, systems = load_catalog(), load_systems()
    models: dict[tuple[Any, ...], Any] = {}
    seen: set[str] = set()
    out: list[ServeScore] = []
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        if r["measurement_group"] in seen:
            continue
        seen.add(r["measurement_group"])
        engine = ENGINES.get(r["engine"], r["engine"])
        adp_txt = f" adp{r['attention_dp']}" if (r["attention_dp"] or "1") != "1" else ""
        name = (f"{r['hf_model_id']} {r['gpu']} {r['engine']} tp{r['tp']}{adp_txt} ep{r['ep'] or 1} {r['precision'] or 'bf16'} "
                f"isl{r['isl']} osl{r['osl']} c{r['concurrency']}")
        if match and match not in name:
            continue
        sc = ServeScore(name, f"{r['gpu']} {r['engine']}", r["gpu"], r["engine"], float(r["ttft_ms"]),
                        float(r["tpot_ms"]), row_id=r.get("row_id", ""), engine_version=r.get("engine_version", ""),
                        apart=apart_reason(r))
        sc.reason = _reason(r)
        if sc.reason:
            out.append(sc)
            continue
        gid, sid = GPUS[r["gpu"]]
        tp, ep, adp = layout(r)
        script = launch_knobs(r)
        kv = script.get("kv_dtype") or row_kv_dtype(r, engine)
        balance = trtllm_adp_balance if engine == "tensorrt-llm" and adp > 1 else None
        key = (ZOO[r["hf_model_id"]], gid, sid, tp, ep, PRECISIONS[r["precision"]], kv, engine, adp, balance)
        try:
            if key not in models:
                models[key] = build(Setup(key[0], cat.get(gid), systems.get(sid), tp=tp, ep=ep, precision=key[5],
                                          kv_dtype=kv, engine=engine, attention_dp=adp, adp_balance=balance))
            m = models[key]
            isl, osl, c = int(r["isl"]), int(r["osl"]), int(r["concurrency"])
            if c % adp:
                raise WhichGPUError(f"concurrency {c} does not split over {adp} attention groups")
            c //= adp  # one attention group, its share of the clients
            seqs = int(r["batch_size"] or c)  # the benchmark's engine knobs (module doc)
            tokens = seqs + isl + BENCH_TOKEN_HEADROOM
            cap = m.capacity(max_seq_len=isl + osl, max_num_batched_tokens=tokens, max_num_seqs=seqs)
            cfg = m.scheduler_config(cap, max_num_seqs=seqs, max_num_batched_tokens=tokens,
                                     recv_interval=script.get("recv_interval", 1))
            n = BENCH_REQUESTS_PER_CONCURRENCY * c
            res = simulate(Workload(bench_lengths(isl, osl, n), ClosedLoop(c)), m.step_time, cfg)
        except WhichGPUError as e:
            sc.reason = f"not expressible: {e}"
            out.append(sc)
            continue
        sc.predicted_ttft_ms = res.ttft.mean * 1e3
        sc.predicted_tpot_ms = res.tpot.mean * 1e3
        sc.extra = {"kv_tokens": cap.num_tokens, "preemptions": res.preemptions,
                    "requests": int((res.requests.finish_s >= 0).sum()), "attention_dp": adp}
        out.append(sc)
        if limit and sum(1 for s in out if s.predicted_tpot_ms is not None) >= limit:
            break
    return out


def accuracy_groups(scores: list[ServeScore]) -> dict[tuple[str, str], tuple[int, list[float], list[float]]]:
    """serve's accuracy figures (serving/accuracy.toml): per (GPU id, engine id), per engine over
    all GPUs ("*", engine) and over all rows ("*", "*"), with at least serving.accuracy.MIN_ROWS
    scored rows: (rows, [p10, p50, p90] of measured / predicted mean TTFT, the same of TPOT)."""
    from whichgpu.measure.validate import percentile
    from whichgpu.serving.accuracy import ANY, MIN_ROWS

    groups: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for s in scores:
        if s.predicted_ttft_ms is None or s.predicted_tpot_ms is None or s.apart:
            continue
        gpu, engine = GPUS[s.gpu][0], ENGINES[s.engine]
        ratio = (s.measured_ttft_ms / s.predicted_ttft_ms, s.measured_tpot_ms / s.predicted_tpot_ms)
        for key in ((gpu, engine), (ANY, engine), (ANY, ANY)):
            groups[key].append(ratio)

    def spread(v: list[tuple[float, float]], i: int) -> list[float]:
        xs = sorted(x[i] for x in v)
        return [percentile(xs, q) or 0.0 for q in (0.1, 0.5, 0.9)]

    return {k: (len(v), spread(v, 0), spread(v, 1)) for k, v in groups.items() if len(v) >= MIN_ROWS}


def summary(scores: list[ServeScore]) -> dict[str, Any]:
    """Median |error| and signed median of TTFT and TPOT, overall and per (GPU, engine) group, of the
    rows not scored apart; "apart": the same per reason (`APART`) and group."""
    def block(ss: list[ServeScore]) -> dict[str, Any]:
        errs = [e for s in ss if (e := s.errors()) is not None]
        if not errs:
            return {"rows": 0}
        ttft = [e[0] for e in errs]
        tpot = [e[1] for e in errs]
        return {"rows": len(errs),
                "ttft_median": statistics.median(abs(x) for x in ttft), "ttft_signed": statistics.median(ttft),
                "tpot_median": statistics.median(abs(x) for x in tpot), "tpot_signed": statistics.median(tpot)}

    groups: dict[str, list[ServeScore]] = defaultdict(list)
    apart: dict[str, list[ServeScore]] = defaultdict(list)
    for s in scores:
        (apart[s.apart] if s.apart else groups[s.group]).append(s)
    main = [s for s in scores if not s.apart]
    return {"all": block(main), "groups": {g: block(v) for g, v in sorted(groups.items())},
            "apart": {why: {"all": block(v), "groups": {g: block([s for s in v if s.group == g])
                                                          for g in sorted({s.group for s in v})}}
                      for why, v in apart.items()},
            "not_scored": sum(1 for s in scores if s.reason)}
