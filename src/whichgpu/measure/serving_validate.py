"""Score the serving simulation against published serving latencies (``serving_dev.csv``:
NVIDIA AIConfigurator's silicon sample of vLLM, SGLang and TensorRT-LLM). Torch-free.

Each row is a closed-loop run at fixed concurrency with fixed prompt (``isl``) and answer (``osl``)
lengths: the simulation runs the same workload through the engine model (`serving.model.build`,
`serving.scheduler.simulate`) and compares mean TTFT and mean TPOT (the source does not say mean
or median). Rows sharing ``measurement_group`` are one measurement re-labelled: scored once.

What each row is run with (stated in `ASSUMPTIONS`): the engine's default batch knobs (vLLM's
max_num_seqs / max_num_batched_tokens by GPU, `serving.kv.vllm_batch_defaults`, for every engine),
90 % of GPU memory for the engine, 16-bit KV cache unless the row says FP8, weights in the row's
precision (blank: BF16), 10 x concurrency requests, the first C sent together (the benchmark
length of AIConfigurator's own evaluation runners, ``aiconfigurator/eval/benchmarks``: genai-perf
with ``--request-count`` 10 x concurrency, SGLang's bench_serving with ``--num-prompts`` 10 x
concurrency and no warm-up; the rows do not say which harness measured them).

Not scored, listed with the reason: disaggregated rows (separate prefill and decode workers whose
counts are mostly not published), attention data parallelism (DP attention), models without a
packaged config, and layouts `serve` refuses (`serving.model.build`: tensor parallelism over more
GPUs than one node, expert parallelism over part of the tensor-parallel group).
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whichgpu.errors import WhichGPUError

ZOO = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b", "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b", "deepseek-ai/DeepSeek-R1": "deepseek-v3",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3", "nvidia/DeepSeek-R1-NVFP4": "deepseek-v3",
    "nvidia/DeepSeek-V3.1-NVFP4": "deepseek-v3", "moonshotai/Kimi-K2.5": "kimi-k2",
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2",
}
GPUS = {"H100-SXM5-80GB": ("h100-sxm5-80gb", "dgx-h100"), "H200-SXM-141GB": ("h200", "dgx-h200"),
        "B200": ("b200", "hgx-b200")}


def validated_gpus() -> dict[str, str]:
    """The GPUs the serving dev rows measure, {catalog id: the rows' name}: serving's validated ground."""
    return {gid: name for name, (gid, _system) in GPUS.items()}


BENCH_REQUESTS_PER_CONCURRENCY = 10
"""Requests per unit of concurrency each row's benchmark is simulated with (see the module doc)."""
ENGINES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm"}
PRECISIONS = {"": "bf16", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp4": "fp4", "int4": "int4"}
ASSUMPTIONS = {
    "workload": "closed loop at the row's concurrency, fixed isl / osl, 10 x concurrency requests "
                "(AIConfigurator's evaluation runners' benchmark length), the first wave sent together",
    "engine": "vLLM v1 scheduling for every engine (chunked prefill, the GPU's default max_num_seqs and "
              "max_num_batched_tokens), 90 % of GPU memory; SGLang with vLLM's kernel profile",
    "precision": "weights in the row's precision (blank: BF16); KV cache 16-bit unless kv_precision says FP8",
    "metric": "mean TTFT and mean TPOT (the source does not say mean or median); one score per measurement_group",
}


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

    def to_dict(self) -> dict[str, Any]:
        e = self.errors()
        return {"name": self.name, "group": self.group, "gpu": self.gpu, "engine": self.engine,
                "measured_ttft_ms": self.measured_ttft_ms, "measured_tpot_ms": self.measured_tpot_ms,
                "predicted_ttft_ms": self.predicted_ttft_ms, "predicted_tpot_ms": self.predicted_tpot_ms,
                "ttft_error": e[0] if e else None, "tpot_error": e[1] if e else None, **self.extra}

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
    if (r["attention_dp"] or "1") not in ("", "1"):
        return f"attention data parallelism {r['attention_dp']} (DP attention) is not modelled"
    if int(r["pp"] or 1) > 1:
        return "pipeline-parallel serving is not modelled"
    if r["precision"] not in PRECISIONS:
        return f"precision {r['precision']} not modelled"
    if not (r["concurrency"] and r["isl"] and r["osl"]):
        return "concurrency or lengths not published"
    return ""


def serving_rows(path: Path, limit: int | None = None, match: str | None = None) -> list[ServeScore]:
    """Score every row of ``serving_dev.csv`` (one per measurement group); `match`: only rows whose
    name contains it; `limit`: stop after that many scored rows."""
    from whichgpu.hardware.catalog import load_catalog
    from whichgpu.hardware.system import load_systems
    from whichgpu.serving.kv import vllm_batch_defaults
    from whichgpu.serving.model import Setup, build
    from whichgpu.serving.scheduler import SchedulerConfig, simulate
    from whichgpu.serving.workload import ClosedLoop, Workload, fixed_lengths

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
        name = (f"{r['hf_model_id']} {r['gpu']} {r['engine']} tp{r['tp']} ep{r['ep'] or 1} {r['precision'] or 'bf16'} "
                f"isl{r['isl']} osl{r['osl']} c{r['concurrency']}")
        if match and match not in name:
            continue
        sc = ServeScore(name, f"{r['gpu']} {r['engine']}", r["gpu"], r["engine"], float(r["ttft_ms"]),
                        float(r["tpot_ms"]))
        sc.reason = _reason(r)
        if sc.reason:
            out.append(sc)
            continue
        gid, sid = GPUS[r["gpu"]]
        tp, ep = int(r["tp"] or 1), int(r["ep"] or 1)
        kv = "fp8" if "fp8" in (r["kv_precision"] or "").lower() else "auto"
        key = (ZOO[r["hf_model_id"]], gid, sid, tp, ep, PRECISIONS[r["precision"]], kv, engine)
        try:
            if key not in models:
                models[key] = build(Setup(key[0], cat.get(gid), systems.get(sid), tp=tp, ep=ep, precision=key[5],
                                          kv_dtype=kv, engine=engine))
            m = models[key]
            isl, osl, c = int(r["isl"]), int(r["osl"]), int(r["concurrency"])
            tokens, seqs = vllm_batch_defaults(int(m.setup.gpu.memory_gb * 1e9), m.setup.gpu.name)
            cap = m.capacity(max_seq_len=isl + osl, max_num_batched_tokens=tokens, max_num_seqs=seqs)
            cfg = SchedulerConfig.from_capacity(cap, max_num_seqs=seqs, max_num_batched_tokens=tokens,
                                                cpu_overhead_s=m.cpu_overhead_s)
            n = BENCH_REQUESTS_PER_CONCURRENCY * c
            res = simulate(Workload(fixed_lengths(isl, osl, n), ClosedLoop(c)), m.step_time, cfg)
        except WhichGPUError as e:
            sc.reason = f"not expressible: {e}"
            out.append(sc)
            continue
        sc.predicted_ttft_ms = res.ttft.mean * 1e3
        sc.predicted_tpot_ms = res.tpot.mean * 1e3
        sc.extra = {"kv_tokens": cap.num_tokens, "preemptions": res.preemptions,
                    "requests": int((res.requests.finish_s >= 0).sum())}
        out.append(sc)
        if limit and sum(1 for s in out if s.predicted_tpot_ms is not None) >= limit:
            break
    return out


def summary(scores: list[ServeScore]) -> dict[str, Any]:
    """Median |error| and signed median of TTFT and TPOT, overall and per (GPU, engine) group."""
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
    for s in scores:
        groups[s.group].append(s)
    return {"all": block(scores), "groups": {g: block(v) for g, v in sorted(groups.items())},
            "not_scored": sum(1 for s in scores if s.reason)}
