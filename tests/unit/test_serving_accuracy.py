"""Accuracy of the serving simulation on the published serving latencies (a copy of
shared/validation/serving_dev.csv in tests/serving_data). `whichgpu validate-serve --data
tests/serving_data` prints the same figures. The issue's targets are TPOT median 12 %, TTFT 25 %,
each (GPU, engine) group's signed median within +-15 %; all are met and asserted at the targets
(TPOT 10.4 % median, TTFT 20.2 %; the widest TTFT bias B200 vLLM -14.5 %, B200 SGLang -11.8 %). Each
row runs AIConfigurator's benchmark (its engine knobs, 10 x concurrency requests, answers spread
10 % around osl: `serving_validate`'s module doc), the B200 SGLang DeepSeek rows with their launch
scripts' receive interval and FP8 KV cache; one day's B200 SGLang runs with multi-second TTFT stalls
are scored apart."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from whichgpu.measure import serving_validate as sv

DATA = Path(__file__).resolve().parent.parent / "serving_data" / "serving_dev.csv"


@pytest.fixture(scope="module")
def rows() -> list[sv.ServeScore]:
    return sv.serving_rows(DATA)


def test_every_row_is_scored_or_listed_with_a_reason(rows: list[sv.ServeScore]) -> None:
    scored = [r for r in rows if r.errors() is not None]
    assert len(scored) >= 1225 and all(r.reason for r in rows if r.errors() is None)
    assert any("disaggregated" in r.reason for r in rows)
    # each score names the CSV row it stands for (validate-serve --json: row_id, engine_version)
    assert all(r.row_id for r in rows) and len({r.row_id for r in rows}) == len(rows)
    assert {"row_id", "engine_version"} <= set(rows[0].to_dict())
    # one score per measurement group (rows re-exported under other labels count once)
    import csv

    with DATA.open() as fh:
        groups = {r["measurement_group"] for r in csv.DictReader(fh)}
    assert len(rows) == len(groups) < 2508


def test_each_row_runs_the_benchmark_length_of_aiconfigurators_runners(rows: list[sv.ServeScore]) -> None:
    # the requests the simulation ran (all sent, all finished), against the runners' 10 x concurrency
    scored = [r for r in rows if r.errors() is not None]
    # (under DP attention one attention group: its share of the clients, 10 x that many requests)
    conc = [int(r.name.rsplit(" c", 1)[1]) for r in scored]
    assert {r.extra["requests"] for r in scored} >= {40, 640}
    assert all(r.extra["requests"] * r.extra["attention_dp"] == 10 * c for r, c in zip(scored, conc, strict=True))
    assert sum(r.extra["attention_dp"] > 1 for r in scored) >= 30


def test_dp_attention_rows_run_as_attention_groups(rows: list[sv.ServeScore]) -> None:
    # vLLM's tp 2 x data parallel 2 with EP 4 is 4 GPUs in 2 attention groups of 2; TensorRT-LLM's
    # tp 1 with attention DP 8 is 8 groups of 1 GPU; batch_size is per rank: 8 x tp 8 = concurrency 64
    # with a blank attention_dp column is attention DP over the 8 GPUs
    row = {"mode": "agg", "hf_model_id": "deepseek-ai/DeepSeek-V3", "gpu": "B200", "engine": "trtllm",
           "attention_dp": "", "pp": "1", "precision": "fp8", "concurrency": "64", "isl": "1024", "osl": "1024",
           "batch_size": "8", "tp": "8", "ep": "8"}
    assert sv._reason(row) == ""
    assert sv.layout(row) == (8, 8, 8)
    assert sv.layout({**row, "batch_size": "64"}) == (8, 8, 1) and sv.layout({**row, "batch_size": ""}) == (8, 8, 1)
    assert sv.layout({**row, "tp": "1", "attention_dp": "8"}) == (8, 8, 8)
    assert sv.layout({**row, "tp": "2", "attention_dp": "2", "ep": "4"}) == (4, 4, 2)
    implied = [r for r in rows if "NVFP4" in r.name and r.extra.get("attention_dp", 1) > 1]
    assert len(implied) >= 5 and all(r.errors() is not None for r in implied)  # of the 7; two run EP 4 over 8 GPUs: listed
    dp = [r for r in rows if " adp" in r.name and r.errors() is not None]
    assert len(dp) >= 25 and all(r.extra["attention_dp"] > 1 for r in dp)


def test_rows_the_command_cannot_express_are_listed(rows: list[sv.ServeScore]) -> None:
    # tp 16 / 64 (more GPUs than one node) and expert parallelism over part of the TP group: `serve`
    # refuses both (a replica serves from one node; --ep is 1 or --tp), so they are not scored
    multi = [r for r in rows if " tp16 " in r.name or " tp64 " in r.name]
    assert all(r.errors() is None for r in multi)
    expressible_else = [r for r in multi if not r.reason.startswith(("model ", "disaggregated"))]
    assert len(expressible_else) >= 50
    assert all("one node" in r.reason or "does not divide the 32 attention heads" in r.reason for r in expressible_else)


def test_overall_targets_and_guards(rows: list[sv.ServeScore]) -> None:
    s = sv.summary(rows)["all"]
    assert s["tpot_median"] <= 0.12  # the target: 10.4 % today
    assert abs(s["tpot_signed"]) <= 0.05  # +1.1 % today
    assert s["ttft_median"] <= 0.25  # the target: 20.2 % today
    assert abs(s["ttft_signed"]) <= 0.12  # regression guard: -7.9 % today


GROUPS = {"B200 sglang", "B200 trtllm", "B200 vllm", "H100-SXM5-80GB trtllm", "H100-SXM5-80GB vllm",
          "H200-SXM-141GB sglang", "H200-SXM-141GB trtllm", "H200-SXM-141GB vllm"}


def test_each_groups_ttft_bias_meets_the_target(rows: list[sv.ServeScore]) -> None:
    groups = {g: b for g, b in sv.summary(rows)["groups"].items() if b["rows"]}
    assert set(groups) == GROUPS
    for g, b in groups.items():
        assert abs(b["ttft_signed"]) <= 0.15, (g, b["ttft_signed"])  # the widest today: B200 vLLM -14.5 %


def test_b200_sglang_deepseek_rows_run_with_their_launch_scripts_knobs(rows: list[sv.ServeScore]) -> None:
    # InferenceMAX's B200 scripts: --scheduler-recv-interval 30 from concurrency 16 (10 below; the FP8
    # script's tp-4 branch 10 throughout) and --kv-cache-dtype fp8_e4m3; other rows: none of it
    row = {"engine": "sglang", "gpu": "B200", "model_family": "DeepSeek-V3/R1", "precision": "fp8", "tp": "8",
           "concurrency": "16"}
    assert sv.launch_knobs(row) == {"recv_interval": 30, "kv_dtype": "fp8"}
    assert sv.launch_knobs({**row, "concurrency": "8"})["recv_interval"] == 10
    assert sv.launch_knobs({**row, "tp": "4", "concurrency": "64"})["recv_interval"] == 10
    assert sv.launch_knobs({**row, "tp": "4", "precision": "fp4", "concurrency": "64"})["recv_interval"] == 30
    assert sv.launch_knobs({**row, "gpu": "H200-SXM-141GB"}) == {}
    assert sv.launch_knobs({**row, "engine": "vllm"}) == {}
    assert sv.launch_knobs({**row, "model_family": "Qwen3.5-397B-A17B"}) == {}
    assert "--scheduler-recv-interval" in sv.assumptions()["launch_scripts"]  # what validate-serve --json states
    # the interval's mark on the rows: measured TTFT rises 2.6x from concurrency 8 to 16 at 1k/1k
    # (FP8, tp 8); predicted, 1.4x (1.05x with every-step polling)
    fp8 = {int(r.name.rsplit(" c", 1)[1]): r for r in rows if r.errors() is not None and not r.apart
           and "B200 sglang tp8 ep1 fp8 isl1024 osl1024" in r.name}
    assert {8, 16} <= set(fp8)
    assert fp8[16].measured_ttft_ms / fp8[8].measured_ttft_ms > 2.5
    assert fp8[16].predicted_ttft_ms / fp8[8].predicted_ttft_ms > 1.3  # type: ignore[operator]


def test_the_stalled_days_runs_are_scored_apart_whole(rows: list[sv.ServeScore]) -> None:
    import csv

    with DATA.open() as fh:
        day = {r["row_id"] for r in csv.DictReader(fh)
               if (r["gpu"], r["engine"], r["measured_at"][:10]) == ("B200", "sglang", "2025-11-10")}
    stalled = [r for r in rows if r.row_id in day and r.errors() is not None]
    assert len(stalled) == 29 and all("stalls" in r.apart for r in stalled)  # every row of that day's sweep
    assert not any("stalls" in r.apart for r in rows if r.row_id not in day)
    # what sets them apart: seconds of TTFT at low load (8k prompts at concurrency 4-8) with TPOTs of 8-39 ms
    slow = [r for r in stalled if r.measured_ttft_ms > 5000]
    assert len(slow) >= 15 and all(r.measured_tpot_ms < 40 for r in slow)
    assert any(" isl8192 " in r.name and r.name.endswith(" c4") and r.measured_ttft_ms > 5000 for r in stalled)


def test_new_families_are_scored_apart_and_guarded(rows: list[sv.ServeScore]) -> None:
    """Qwen3.5-397B-A17B (Gated DeltaNet layers) and GLM-5 (DeepSeek sparse attention), both modelled
    from their kernels' FLOPs and bytes, not calibrated, are scored and listed apart: outside the
    bounded figures above, held by guards at today's figures so a regression shows (Qwen3.5: 130 rows,
    TTFT 30.6 % median at -24.3 %, TPOT 14.4 % at +3.6 %; GLM-5: 36 rows, TTFT 23.5 % at +9.5 %,
    TPOT 19.9 % at -19.9 %)."""
    s = sv.summary(rows)
    apart = [r for r in rows if r.apart and r.errors() is not None]
    assert s["all"]["rows"] == sum(r.errors() is not None for r in rows) - len(apart)
    names = {"linear attention": "Qwen3.5", "sparse attention": "GLM-5", "stalls": "stalled day"}
    parts = {next(v for k, v in names.items() if k in why): p["all"] for why, p in s["apart"].items()}
    assert set(parts) == set(names.values()) and sum(p["rows"] for p in parts.values()) == len(apart)
    q, g = parts["Qwen3.5"], parts["GLM-5"]
    assert q["rows"] >= 120 and g["rows"] >= 30
    assert q["tpot_median"] <= 0.17 and abs(q["tpot_signed"]) <= 0.06
    assert q["ttft_median"] <= 0.35 and abs(q["ttft_signed"]) <= 0.29
    assert g["tpot_median"] <= 0.23 and abs(g["tpot_signed"]) <= 0.23
    assert g["ttft_median"] <= 0.29 and abs(g["ttft_signed"]) <= 0.14


def test_kv_cache_dtype_per_row_follows_the_engines_checkpoint_rule() -> None:
    row = {"precision": "fp8", "kv_precision": ""}
    assert sv.row_kv_dtype(row, "tensorrt-llm") == "fp8"  # ModelOpt checkpoints declare an FP8 KV cache
    assert sv.row_kv_dtype({**row, "precision": "fp4"}, "vllm") == "fp8"
    # SGLang's FP8 rows are the model makers' FP8 checkpoints (no KV scheme: 16-bit); NVFP4 ones
    # are ModelOpt exports, whose declared FP8 cache SGLang's auto takes as vLLM's does
    assert sv.row_kv_dtype(row, "sglang") == "auto"
    assert sv.row_kv_dtype({**row, "precision": "fp4"}, "sglang") == "fp8"
    assert sv.row_kv_dtype({**row, "precision": "fp4"}, "no-such-engine") == "auto"
    assert sv.row_kv_dtype({**row, "precision": "int4"}, "vllm") == "auto"
    assert sv.row_kv_dtype({**row, "precision": ""}, "tensorrt-llm") == "auto"
    assert sv.row_kv_dtype({"precision": "", "kv_precision": "FP8"}, "sglang") == "fp8"


def test_tensorrt_llm_rows_never_preempt(rows: list[sv.ServeScore]) -> None:
    # GUARANTEED_NO_EVICT: the long-answer TensorRT-LLM rows whose requests outgrow the cache queue
    # instead (vLLM's policy preempted 2,798 times on Llama-3.1-70B FP8 on one H200 at 32 x (1k + 8k))
    trt = [r for r in rows if " trtllm " in r.name and r.errors() is not None]
    assert len(trt) > 500 and all(r.extra["preemptions"] == 0 for r in trt)
    assert any(r.extra["preemptions"] > 0 for r in rows if " vllm " in r.name and r.errors() is not None)


def test_each_row_runs_with_the_benchmarks_engine_knobs_and_answer_spread() -> None:
    # AIConfigurator's benchmark configs: a step budget of batch size + isl + 1500 tokens
    assert sv.BENCH_TOKEN_HEADROOM == 1500
    lens = sv.bench_lengths(1024, 1024, 4000)
    assert np.all(lens.input_len == 1024)
    out = lens.output_len
    assert abs(out.mean() / 1024 - 1) < 0.01 and 0.09 < out.std() / 1024 < 0.11
    assert np.array_equal(out, sv.bench_lengths(1024, 1024, 4000).output_len)  # seeded
    assert sv.bench_lengths(2, 1, 50).output_len.min() >= 1


def test_every_group_meets_the_tpot_bias_target(rows: list[sv.ServeScore]) -> None:
    groups = {g: b for g, b in sv.summary(rows)["groups"].items() if b["rows"]}
    assert len(groups) >= 8
    for g, b in groups.items():
        assert abs(b["tpot_signed"]) <= 0.15, g  # the target; the widest today: B200 SGLang +13.6 %


def test_dense_llama_on_tensorrt_llm_meets_the_tpot_target(rows: list[sv.ServeScore]) -> None:
    s = sv.summary([r for r in rows if "Llama-3.1-8B-Instruct H100-SXM5-80GB trtllm" in r.name])["all"]
    assert s["rows"] >= 100
    assert s["tpot_median"] <= 0.12 and abs(s["tpot_signed"]) <= 0.15


def test_dense_fp4_decode_streams_below_the_8_bit_kernels(rows: list[sv.ServeScore]) -> None:
    # Llama-3.1-70B in NVFP4 on B200, vLLM and TensorRT-LLM at TP 1-8: decode time per token within
    # 8 % at the median (6.0 % today; 16.7 % with FP4 weights streamed at the 8-bit kernels' rate,
    # perf/params.toml fp4_stream_efficiency), each engine's bias within +-10 % (-7.6 %, -1.1 %)
    fp4 = [r for r in rows if "Llama-3.1-70B B200" in r.name and " fp4 " in r.name and r.errors() is not None]
    assert len(fp4) >= 100
    assert sv.summary(fp4)["all"]["tpot_median"] <= 0.08
    for engine in (" vllm ", " trtllm "):
        s = sv.summary([r for r in fp4 if engine in r.name])["all"]
        assert s["rows"] >= 40 and abs(s["tpot_signed"]) <= 0.10, engine


def test_serves_packaged_accuracy_figures_are_todays(rows: list[sv.ServeScore]) -> None:
    """serving/accuracy.toml (what `serve` prints next to its latencies) holds the percentiles of
    measured / predicted of today's scores: re-run scripts/serve_accuracy.py after a refit."""
    from whichgpu.serving.accuracy import ANY, load, lookup

    today = sv.accuracy_groups(rows)
    packaged = {(g["gpu"], g["engine"]): g for g in load()["group"]}
    assert set(packaged) == set(today)
    assert today[(ANY, ANY)][0] == sum(r.predicted_ttft_ms is not None and not r.apart for r in rows)
    for key, g in packaged.items():
        n, ttft, tpot = today[key]
        assert g["rows"] == n, key
        assert g["ttft"] == pytest.approx(ttft, abs=1e-3) and g["tpot"] == pytest.approx(tpot, abs=1e-3), key
        assert g["ttft"][0] <= g["ttft"][1] <= g["ttft"][2] and g["tpot"][0] <= g["tpot"][1] <= g["tpot"][2]
    # the narrowest group that holds a GPU and engine, else the engine's, else all rows
    exact = lookup("b200", "vllm")
    assert exact is not None and exact.exact and exact.rows == today[("b200", "vllm")][0]
    fallback = lookup("rtx-4090", "vllm")
    assert fallback is not None and not fallback.exact and fallback.gpu == ANY and fallback.engine == "vllm"
    assert lookup("rtx-4090", "no-such-engine").engine == ANY  # type: ignore[union-attr]
    # the groups are keyed by the catalog's own ids, which reports look them up with: H200 rows once
    # went in under the alias "h200" and `serve --gpu h200` said "not validated for" its 176 rows
    from whichgpu.hardware.catalog import load_catalog

    cat = load_catalog()
    for gid in sv.validated_gpus():
        assert cat.get(gid).id == gid
        got = lookup(cat.get(gid).id, "vllm")
        assert got is not None and got.exact, gid


def test_tensorrt_llm_attention_dp_rows_with_balancing() -> None:
    # The 15 TensorRT-LLM `tp1 adp` rows measure TTFTs of 1.1-8.9 s where the engine without attention-DP
    # balancing (its default, and what AIConfigurator's templates leave) gives 0.2-3.4 s; with
    # balancing at TensorRT-LLM's own AttentionDpConfig defaults (timeout_iters 50, batching_wait_iters
    # 10: validate-serve --trtllm-adp-balance default) they come within reach, TPOT a little closer too.
    # Which setting the runs used the rows do not say: the scored figures keep the default (off).
    def medians(balance: tuple[int, int] | None) -> tuple[float, float, float]:
        rs = [r for r in sv.serving_rows(DATA, match="trtllm tp1 adp", trtllm_adp_balance=balance)
              if r.errors() is not None]
        assert len(rs) >= 15
        e = np.array([r.errors() for r in rs])
        return float(np.median(np.abs(e[:, 0]))), float(np.median(e[:, 0])), float(np.median(np.abs(e[:, 1])))

    off, on = medians(None), medians((50, 10))
    assert off[0] > 0.6 and off[1] < -0.6  # nearly all far under
    assert on[0] < 0.4 and -0.35 < on[1] < 0.0
    assert on[2] < off[2] < 0.25
