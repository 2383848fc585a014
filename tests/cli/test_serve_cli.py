"""`whichgpu serve` through the CLI: the JSON document (whichgpu.serve/1) in closed loop and at a
rate, replicas, a lengths file, the SLO search and its "no" answer, the HTML report, the console
report, and the exit codes (2: bad input, 1: a valid question answered "no")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import invoke, invoke_json

SCHEMA = "whichgpu.serve/1"
BASE = ("llama-3.1-8b", "--gpu", "h100", "--input-len", "200", "--output-len", "50", "--requests", "100")
STATS = ("mean", "p50", "p90", "p99")


def serve(*args: str, code: int = 0) -> dict[str, Any]:
    return invoke_json("serve", SCHEMA, *args, code=code)


def check_stats(d: Any) -> None:
    assert set(d) == set(STATS)
    assert all(isinstance(d[k], float) and d[k] > 0 for k in STATS)
    assert d["p50"] <= d["p90"] <= d["p99"]


def test_closed_loop_json() -> None:
    doc = serve(*BASE, "--concurrency", "8")
    for k in ("ttft_ms", "tpot_ms", "e2e_ms"):
        check_stats(doc[k])
    for k in ("output_tokens_per_s", "requests_per_s", "total_tokens_per_s", "max_concurrency"):
        assert isinstance(doc[k], float) and doc[k] > 0
    assert isinstance(doc["kv_cache_tokens"], int) and doc["kv_cache_tokens"] == doc["memory"]["kv_cache_tokens"]
    assert doc["total_tokens_per_s"] == pytest.approx(doc["output_tokens_per_s"] * 250 / 50)
    assert doc["workload"] == {"mode": "closed-loop", "concurrency": 8, "rate_per_s": None, "concurrency_per_replica": 8,
                               "rate_per_s_per_replica": None, "concurrency_per_scheduler": 8, "overloaded": None,
                               "requests_per_replica": 100, "lengths_file": None,
                               "mean_input_len": 200.0, "mean_output_len": 50.0, "output_len_stddev": 0.0,
                               "seed": 0}
    setup = doc["setup"]
    assert (setup["tp"], setup["gpus"], setup["engine"], setup["precision"]) == (1, 1, "vllm", "bf16")
    # vLLM's defaults on an 80 GB H100: 8192 tokens a step, 1024 sequences
    assert (setup["max_num_batched_tokens"], setup["max_num_seqs"]) == (8192, 1024)
    mem = doc["memory"]
    assert 15 < mem["weights_gb_per_gpu"] < 17 and mem["kv_cache_gb"] > 40 and mem["kv_blocks"] > 0
    assert mem["max_seq_len"] == 250
    assert doc["slo"] is None
    assert doc["price"]["usd_per_gpu_hour"] > 0 and doc["price"]["source"]
    # cost: one GPU's rent per second over its output tokens per second, per million
    assert doc["cost_per_million_output_tokens"] == pytest.approx(
        doc["price"]["usd_per_gpu_hour"] / 3600 / doc["output_tokens_per_s"] * 1e6)
    assert set(doc["assumptions"]) >= {"weights", "kv_cache", "engine"}


def test_rate_json_and_replicas() -> None:
    one = serve(*BASE, "--rate", "2")
    two = serve(*BASE, "--rate", "4", "--replicas", "2", "--tp", "2")
    assert one["workload"]["mode"] == "poisson" and one["workload"]["rate_per_s"] == 2.0
    assert two["workload"]["rate_per_s_per_replica"] == 2.0
    assert two["setup"]["gpus"] == 4 and two["setup"]["gpus_per_replica"] == 2
    # the same arrivals per replica: totals are twice one replica's
    assert two["requests_per_s"] == pytest.approx(2 * (two["requests_per_s"] / 2))
    assert two["output_tokens_per_s_per_gpu"] == pytest.approx(two["output_tokens_per_s"] / 4)
    assert any("replicas" in n for n in two["notes"])


def test_dp_attention_splits_the_clients_over_attention_groups() -> None:
    base = ("deepseek-v3", "--gpu", "b200", "--tp", "8", "--ep", "8", "--precision", "fp8", "--engine", "sglang",
            "--input-len", "256", "--output-len", "32", "--requests", "40", "--concurrency", "16")
    dp = serve(*base, "--attention-dp", "8")
    tp = serve(*base)
    assert dp["setup"]["attention_dp"] == 8 and tp["setup"]["attention_dp"] == 1
    assert dp["setup"]["gpus"] == tp["setup"]["gpus"] == 8
    assert dp["workload"]["concurrency_per_scheduler"] == 2 and tp["workload"]["concurrency_per_scheduler"] == 16
    # each GPU holds every attention head's weights (its group's copy) and, MLA, the same latent per token
    assert dp["memory"]["weights_gb_per_gpu"] > tp["memory"]["weights_gb_per_gpu"] + 5
    # throughput is one group's x 8; the cost is one group's GPU (8 GPUs / 8 groups) over its tokens
    assert dp["output_tokens_per_s_per_gpu"] == pytest.approx(dp["output_tokens_per_s"] / 8)
    assert dp["cost_per_million_output_tokens"] == pytest.approx(
        dp["price"]["usd_per_gpu_hour"] / 3600 / (dp["output_tokens_per_s"] / 8) * 1e6)
    assert "attention_dp" in dp["assumptions"] and any("DP attention" in n for n in dp["notes"])
    # clients that do not split over the groups, and groups that do not divide --tp, are exit 2
    bad = invoke("serve", *base[:-1], "12", "--attention-dp", "8")
    assert bad.exit_code == 2 and "attention groups" in bad.output
    bad = invoke("serve", *base, "--attention-dp", "3")
    assert bad.exit_code == 2 and "attention data parallelism 3" in bad.output


def test_tensorrt_llm_attention_dp_balancing_holds_new_requests() -> None:
    base = ("deepseek-v3", "--gpu", "b200", "--tp", "8", "--ep", "8", "--attention-dp", "8", "--precision", "fp8",
            "--engine", "trtllm", "--input-len", "256", "--output-len", "64", "--output-len-stddev", "16",
            "--requests", "80", "--concurrency", "64")
    off = serve(*base)
    on = serve(*base, "--adp-balance", "60,0")
    default = serve(*base, "--adp-balance", "default")
    # held until every group has a request (or the counter's 60 steps): later first tokens, the same decode
    assert on["ttft_ms"]["mean"] > 1.5 * off["ttft_ms"]["mean"]
    assert on["tpot_ms"]["mean"] == pytest.approx(off["tpot_ms"]["mean"], rel=0.2)
    assert "no attention-DP balancing" in off["assumptions"]["scheduler"]
    assert "timeout_iters 60, batching_wait_iters 0" in on["assumptions"]["scheduler"]
    assert off["setup"]["adp_balance"] is None
    assert on["setup"]["adp_balance"] == {"timeout_iters": 60, "batching_wait_iters": 0}
    # 'default' is TensorRT-LLM's AttentionDpConfig: timeout_iters 50, batching_wait_iters 10
    assert "timeout_iters 50, batching_wait_iters 10" in default["assumptions"]["scheduler"]


def test_lengths_file(tmp_path: Path) -> None:
    f = tmp_path / "lengths.csv"
    f.write_text("prompt_tokens,completion_tokens\n100,20\n300,60\n")
    doc = serve("llama-3.1-8b", "--gpu", "h100", "--lengths", str(f), "--concurrency", "4", "--requests", "50")
    assert doc["workload"]["lengths_file"] == str(f)
    assert 100 <= doc["workload"]["mean_input_len"] <= 300
    assert doc["memory"]["max_seq_len"] == 360


def test_answer_spread_desynchronises_a_closed_loop() -> None:
    # 32 equal requests in a closed loop stay in lockstep: every wave of prompts arrives together and
    # waits for its wave's prefill; answers spread by 20 tokens let the clients drift apart
    args = ("llama-3.1-8b", "--gpu", "h100", "--input-len", "2000", "--output-len", "200", "--requests", "320",
            "--concurrency", "32")
    equal = serve(*args)
    spread = serve(*args, "--output-len-stddev", "20")
    assert spread["workload"]["output_len_stddev"] == 20.0
    assert spread["workload"]["mean_output_len"] != 200.0 and abs(spread["workload"]["mean_output_len"] - 200) < 5
    assert spread["ttft_ms"]["mean"] < 0.7 * equal["ttft_ms"]["mean"]
    assert spread["tpot_ms"]["mean"] == pytest.approx(equal["tpot_ms"]["mean"], rel=0.15)
    assert any("lockstep" in n for n in equal["notes"]) and not any("lockstep" in n for n in spread["notes"])
    assert serve(*args, "--output-len-stddev", "20") == spread  # seeded by --seed
    assert serve(*args, "--output-len-stddev", "20", "--seed", "1")["ttft_ms"] != spread["ttft_ms"]


def test_slo_search() -> None:
    doc = serve(*BASE, "--rate", "2", "--slo-ttft-ms", "200", "--slo-tpot-ms", "12", "--slo-percentile", "99",
                "--max-num-seqs", "128")
    slo = doc["slo"]
    assert (slo["ttft_ms"], slo["tpot_ms"], slo["percentile"]) == (200.0, 12.0, 99)
    assert isinstance(slo["max_rate_per_s"], float) and 0 < slo["max_rate_per_s"] <= slo["ceiling_per_s"]
    at = slo["at_rate"]
    assert at["requests_per_s"] == slo["max_rate_per_s"]
    assert at["ttft_ms"]["p99"] <= 200 and at["tpot_ms"]["p99"] <= 12
    assert at["output_tokens_per_s"] == pytest.approx(slo["max_rate_per_s"] * 50)
    assert at["cost_per_million_output_tokens"] > 0 and slo["reason"] is None


def test_slo_no_rate_meets_exit_1() -> None:
    res = invoke("serve", *BASE, "--rate", "1", "--slo-ttft-ms", "1", "--json")
    assert res.exit_code == 1
    assert res.stderr.startswith("no: no request rate meets TTFT P90 <= 1 ms") and res.stderr.count("\n") == 1
    assert '"max_rate_per_s": null' in res.stdout


def test_a_rate_beyond_what_the_engine_serves_is_called_overloaded() -> None:
    """Poisson arrivals faster than the replica serves: the queue grows through the run, so its
    latencies depend on the run's length; the report says so (JSON workload.overloaded and a
    note), and a rate it keeps up with is not flagged."""
    args = ("llama-3.1-8b", "--gpu", "l4", "--input-len", "1000", "--output-len", "200", "--requests", "400")
    calm = serve(*args, "--rate", "0.5")
    assert calm["workload"]["overloaded"] is False and not any(n.startswith("overloaded") for n in calm["notes"])
    over = serve(*args, "--rate", "20")
    assert over["workload"]["overloaded"] is True
    note = next(n for n in over["notes"] if n.startswith("overloaded"))
    # the figures in the note: about 20/s arrive, and the run serves what its throughput says
    arrive = float(note.split("arrive at ")[1].split("/s")[0])
    served = float(note.split("token at about ")[1].split("/s")[0])
    assert 17 < arrive < 23 and served < 0.2 * arrive
    assert served == pytest.approx(over["requests_per_s"], rel=0.3)
    # the longer the run, the longer the wait: no steady state
    longer = serve(*args[:-1], "800", "--rate", "20")
    assert longer["ttft_ms"]["p50"] > 1.5 * over["ttft_ms"]["p50"]


def test_a_bf16_checkpoint_serves_in_fp16_on_a_gpu_without_bf16() -> None:
    """T4 has no BF16: the engines' --dtype auto serves a BF16 checkpoint in FP16 on its tensor
    cores (not at a CUDA-core rate), as fast as asking for fp16, and the assumptions say so."""
    args = ("llama-3.1-8b", "--gpu", "t4", "--tp", "2", "--concurrency", "4", "--input-len", "500", "--output-len",
            "100", "--requests", "40")
    auto = serve(*args)
    fp16 = serve(*args, "--precision", "fp16")
    assert auto["setup"]["precision"] == "fp16" and "has no BF16" in auto["assumptions"]["weights"]
    assert auto["ttft_ms"] == fp16["ttft_ms"] and auto["tpot_ms"] == fp16["tpot_ms"]
    assert "has no BF16" not in serve(*BASE, "--concurrency", "4")["assumptions"]["weights"]


def test_html_report(tmp_path: Path) -> None:
    page = tmp_path / "serve.html"
    res = invoke("serve", *BASE, "--concurrency", "4", "--slo-tpot-ms", "10", "--max-num-seqs", "64",
                 "--html", str(page))
    assert res.exit_code == 0, res.output
    text = page.read_text()
    assert text.count("<svg") == 2 and "TTFT P90" in text and "TPOT P90" in text and "SLO 10 ms" in text
    assert "<script src" not in text and "<link" not in text  # self-contained


def test_console_report() -> None:
    res = invoke("serve", *BASE, "--concurrency", "8", "--slo-tpot-ms", "30")
    assert res.exit_code == 0, res.output
    out = res.stdout
    for s in ("memory per GPU", "KV cache", "throughput", "latency (ms)", "TTFT", "TPOT", "E2E", "preemptions",
              "per million output tokens", "SLO: highest Poisson rate", "assumptions:", "lockstep",
              "accuracy: on ", "published runs of vllm on NVIDIA H100"):
        assert s in out, s
    res = invoke("serve", *BASE, "--concurrency", "8", "--output-len-stddev", "5")
    assert res.exit_code == 0 and "lockstep" not in res.stdout and "standard deviation of 5 tokens" in res.stdout


def test_the_published_runs_of_the_same_gpu_and_engine_say_how_far_off_we_were() -> None:
    doc = serve(*BASE, "--concurrency", "8")
    acc = doc["accuracy"]
    assert (acc["gpu"], acc["engine"], acc["exact"]) == ("h100-sxm5-80gb", "vllm", True) and acc["rows"] >= 8
    for k in ("ttft_measured_over_predicted", "tpot_measured_over_predicted"):
        assert 0 < acc[k]["p10"] <= acc[k]["p50"] <= acc[k]["p90"]
    # a GPU no published run measured: the engine's runs on the validated GPUs, said so
    doc = serve("llama-3.1-8b", "--gpu", "rtx-4090", "--input-len", "200", "--output-len", "50", "--requests", "50",
                "--concurrency", "4")
    acc = doc["accuracy"]
    assert (acc["gpu"], acc["engine"], acc["exact"]) == ("*", "vllm", False)
    assert acc["scope"] == "vllm on all validated GPUs"


def test_no_price_gives_null_cost() -> None:
    doc = serve("llama-3.1-8b", "--gpu", "a100-pcie-40gb", "--input-len", "200", "--output-len", "50",
                "--requests", "50", "--concurrency", "4")
    assert doc["price"] is None and doc["cost_per_million_output_tokens"] is None
    assert any("no rental price" in n for n in doc["notes"])
    # vLLM's defaults below 70 GiB: 2048 tokens a step, 256 sequences
    assert (doc["setup"]["max_num_batched_tokens"], doc["setup"]["max_num_seqs"]) == (2048, 256)


@pytest.mark.parametrize("args, flag", [
    (("--tp", "3", "--rate", "1"), "--tp"),  # 3 does not divide 32 heads
    (("--rate", "-1"), "--rate"),
    (("--rate", "0"), "--rate"),
    (("--concurrency", "0"), "--concurrency"),
    (("--rate", "1", "--concurrency", "2"), "--concurrency"),
    ((), "--concurrency"),  # neither
    (("--rate", "1", "--precision", "fp5"), "--precision"),
    (("--rate", "1", "--engine", "tgi"), "--engine"),
    (("--rate", "1", "--engine", "tensorrt-llm", "--gpu", "mi300x"), "--engine"),  # NVIDIA GPUs only
    (("--rate", "1", "--kv-dtype", "int3"), "--kv-dtype"),
    (("--rate", "1", "--slo-ttft-ms", "100", "--slo-percentile", "95"), "--slo-percentile"),
    (("--rate", "1", "--ep", "2"), "--ep"),
    (("--concurrency", "3", "--replicas", "2"), "--concurrency"),
    (("--rate", "1", "--gpu-memory-utilization", "1.5"), "--gpu-memory-utilization"),
    (("--rate", "1", "--lengths", "x.csv"), "--lengths"),
    (("--rate", "1", "--output-len-stddev", "-1"), "--output-len-stddev"),
    (("--rate", "1", "--output-len-stddev", "nan"), "--output-len-stddev"),
    (("--rate", "1", "--pp", "40"), "--pp"),  # more stages than the 32 layers
    (("--rate", "1", "--spec-draft-len", "4"), "--spec-draft-len"),  # without an acceptance rate
    (("--rate", "1", "--spec-draft-len", "4", "--spec-acceptance", "0"), "--spec-acceptance"),
    (("--rate", "1", "--spec-draft-len", "17", "--spec-acceptance", "0.5"), "--spec-draft-len"),
    (("--rate", "1", "--spec-draft-len", "4", "--spec-acceptance", "0.5", "--spec-draft-model", "qwen3-8b"),
     "--spec-draft-model"),  # another tokenizer
    (("--rate", "1", "--mixed-chunk"), "--mixed-chunk"),  # SGLang's flag; vLLM always mixes
    (("--rate", "1", "--scheduler-recv-interval", "30"), "--scheduler-recv-interval"),  # SGLang's flag
    (("--rate", "1", "--engine", "sglang", "--scheduler-recv-interval", "0"), "--scheduler-recv-interval"),
    (("--rate", "1", "--adp-balance", "50"), "--adp-balance"),  # TensorRT-LLM's, under DP attention only
    (("--rate", "1", "--engine", "trtllm", "--adp-balance", "50"), "--adp-balance"),  # no DP attention
    (("--rate", "1", "--engine", "trtllm", "--adp-balance", "x"), "--adp-balance"),
    (("--rate", "1", "--engine", "trtllm", "--adp-balance", "0,1"), "--adp-balance"),
    (("--rate", "1", "--engine", "trtllm", "--adp-balance", "5,1,2"), "--adp-balance"),
])
def test_bad_input_exit_2(args: tuple[str, ...], flag: str) -> None:
    res = invoke("serve", *BASE, *args)
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert err.startswith("error:") and "\n" not in err and flag in err, err


def test_sglang_prefills_first_unless_mixed_chunk() -> None:
    # SGLang's default: a step prefills or decodes, so the decoding requests wait out each prefill
    # (TPOT up); with --mixed-chunk its prefill steps carry the decode, as vLLM's
    args = ("llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--concurrency", "64", "--input-len", "2000",
            "--output-len", "500", "--output-len-stddev", "50", "--requests", "640")
    first = invoke_json("serve", SCHEMA, *args)
    mixed = invoke_json("serve", SCHEMA, *args, "--mixed-chunk")
    assert "prefill-first" in first["assumptions"]["scheduler"]
    assert "--enable-mixed-chunk: prefill steps carry the decode" in mixed["assumptions"]["scheduler"]
    assert first["tpot_ms"]["mean"] > mixed["tpot_ms"]["mean"]
    assert invoke_json("serve", SCHEMA, *args, "--no-mixed-chunk")["tpot_ms"] == first["tpot_ms"]


def test_sglang_recv_interval_delays_new_requests_to_its_polls() -> None:
    # --scheduler-recv-interval 30: a request reaching the scheduler mid-decode waits for the poll
    # every 30 decode steps, so TTFT grows (by up to 30 decode steps) while TPOT barely moves
    args = ("llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--concurrency", "32", "--input-len", "500",
            "--output-len", "300", "--output-len-stddev", "30", "--requests", "320")
    every = invoke_json("serve", SCHEMA, *args)
    polled = invoke_json("serve", SCHEMA, *args, "--scheduler-recv-interval", "30")
    assert "--scheduler-recv-interval 30" in polled["assumptions"]["scheduler"]
    assert "recv-interval" not in every["assumptions"]["scheduler"]
    assert polled["ttft_ms"]["mean"] > every["ttft_ms"]["mean"] + 3 * every["tpot_ms"]["mean"]
    assert polled["tpot_ms"]["mean"] == pytest.approx(every["tpot_ms"]["mean"], rel=0.1)
    assert invoke_json("serve", SCHEMA, *args, "--scheduler-recv-interval", "1") == every


def test_engine_aliases_are_accepted() -> None:
    doc = invoke_json("serve", SCHEMA, *BASE, "--rate", "1", "--requests", "50", "--engine", "trtllm")
    assert "GUARANTEED_NO_EVICT" in doc["assumptions"]["scheduler"]
    assert "no chunked prefill" in doc["assumptions"]["scheduler"]


def test_tensorrt_llm_takes_whole_prompts_within_its_max_num_tokens() -> None:
    # no chunked prefill (TensorRT-LLM's default): a prompt over the step budget (its max_num_tokens,
    # 8192 by default) is refused, a larger budget serves it
    args = ("llama-3.1-8b", "--gpu", "h100", "--engine", "tensorrt-llm", "--rate", "1", "--input-len", "10000",
            "--output-len", "20", "--requests", "20")
    res = invoke("serve", *args)
    assert res.exit_code == 1, res.output
    assert res.stderr.startswith("no: tensorrt-llm does not chunk prefills") and "8,192" in res.stderr
    assert "--max-batched-tokens 10000" in res.stderr and "\n" not in res.stderr.strip()
    doc = invoke_json("serve", SCHEMA, *args, "--max-batched-tokens", "12000")
    assert doc["ttft_ms"]["mean"] > 0
    vllm = invoke_json("serve", SCHEMA, *args[:3], *args[5:])  # vLLM chunks the same prompt in 8,192-token steps
    assert vllm["ttft_ms"]["mean"] > 0


def test_bad_names_and_lengths_exit_2() -> None:
    for args in (("llama-9b", "--gpu", "h100"), ("llama-3.1-8b", "--gpu", "h100x")):
        res = invoke("serve", *args, "--rate", "1", "--input-len", "10", "--output-len", "10")
        assert res.exit_code == 2 and res.stderr.startswith("error:"), res.output
    res = invoke("serve", "llama-3.1-8b", "--gpu", "h100", "--rate", "1", "--input-len", "-5", "--output-len", "10")
    assert res.exit_code == 2 and "--input-len" in res.stderr


def test_requests_beyond_the_context_window_exit_2(tmp_path: Path) -> None:
    # llama-3.1-8b: max_position_embeddings 131,072; the engines refuse longer requests
    res = invoke("serve", "llama-3.1-8b", "--gpu", "h100", "--rate", "1", "--input-len", "131000",
                 "--output-len", "100")
    err = res.stderr.strip()
    assert res.exit_code == 2 and "--input-len" in err and "131,100 tokens" in err and "131,072" in err, err
    assert "\n" not in err
    f = tmp_path / "lengths.csv"
    f.write_text("input_len,output_len\n100,20\n200000,10\n")
    res = invoke("serve", "llama-3.1-8b", "--gpu", "h100", "--lengths", str(f), "--concurrency", "4")
    assert res.exit_code == 2 and "--lengths" in res.stderr and "200,010 tokens" in res.stderr, res.stderr
    res = invoke("recommend", "llama-3-8b", "--rate", "1", "--input-len", "8000",
                 "--output-len", "500", "--slo-ttft-ms", "1000", "--rent")
    assert res.exit_code == 2 and "8,500 tokens" in res.stderr and "8,192" in res.stderr, res.stderr
    # at the window exactly: served
    ok = invoke("serve", "llama-3-8b", "--gpu", "h100", "--concurrency", "1", "--input-len", "8000",
                "--output-len", "192", "--requests", "2")
    assert ok.exit_code == 0, ok.output


def test_answer_spread_with_a_lengths_file_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "lengths.csv"
    f.write_text("input_len,output_len\n100,20\n")
    res = invoke("serve", "llama-3.1-8b", "--gpu", "h100", "--lengths", str(f), "--concurrency", "4",
                 "--output-len-stddev", "5")
    assert res.exit_code == 2 and "--output-len-stddev" in res.stderr and "\n" not in res.stderr.strip()


def test_does_not_fit_exit_1(tmp_path: Path) -> None:
    page = tmp_path / "no.html"
    res = invoke("serve", "llama-3.1-405b", "--gpu", "rtx-4090", "--rate", "1", "--input-len", "100",
                 "--output-len", "10", "--html", str(page))
    assert res.exit_code == 1
    assert res.stderr.startswith("no: the weights") and "do not fit" in res.stderr
    assert "over the 8 GPUs of one node" in res.stderr  # what was tried, then what would do
    # the HTML report asked for says "no" with the same reason (not a missing file)
    text = page.read_text()
    assert "<h2>No</h2>" in text and "llama-3.1-405b on rtx-4090: vllm, bf16 weights, TP1" in text
    assert "do not fit" in text and "<svg" not in text
    # one request longer than the KV cache holds
    res = invoke("serve", "llama-3.1-8b", "--gpu", "rtx-4090", "--rate", "1", "--input-len", "100000",
                 "--output-len", "10")
    assert res.exit_code == 1 and "the longest that fits" in res.stderr


def test_speculative_decoding_and_pipeline_parallelism() -> None:
    plain = serve(*BASE, "--concurrency", "4")
    spec = serve(*BASE, "--concurrency", "4", "--spec-draft-len", "4", "--spec-acceptance", "0.8")
    assert spec["setup"]["speculative"] == {"draft_len": 4, "acceptance": 0.8, "draft_model": None}
    assert plain["setup"]["speculative"] is None
    # E = (1 - 0.8^5) / 0.2 = 3.36 tokens a step: decode is much faster per token, but not 3.36x (drafts cost)
    assert spec["tpot_ms"]["mean"] < plain["tpot_ms"]["mean"] / 1.5
    assert spec["tpot_ms"]["mean"] > plain["tpot_ms"]["mean"] / 3.36
    assert "speculative" in spec["assumptions"]
    pp = serve(*BASE, "--concurrency", "4", "--pp", "2")
    assert (pp["setup"]["pp"], pp["setup"]["gpus_per_replica"], pp["setup"]["gpus"]) == (2, 2, 2)
    # half the layers' weights per GPU (plus the embedding or LM head), more KV tokens per GPU
    assert pp["memory"]["weights_gb_per_gpu"] < 0.6 * plain["memory"]["weights_gb_per_gpu"]
    assert pp["kv_cache_tokens"] > plain["kv_cache_tokens"]
    assert "pipeline" in pp["assumptions"]


def test_sglang_admits_and_retracts_by_its_own_rules() -> None:
    # about 19 requests of 2,000 tokens fit an L4's cache beside Llama-3.1-8B: 48 in flight run short
    args = ("llama-3.1-8b", "--gpu", "l4", "--input-len", "1000", "--output-len", "1000", "--requests", "96",
            "--concurrency", "48", "--output-len-stddev", "100")
    sglang = serve(*args, "--engine", "sglang")
    vllm = serve(*args)
    # SGLang keeps room for the running requests' answers, so it starts fewer and retracts less often
    # than vLLM preempts
    assert 0 < sglang["preemptions"] < vllm["preemptions"] / 2
    assert "new_token_ratio" in sglang["assumptions"]["scheduler"]
    assert "retracted to the back of the queue" in sglang["assumptions"]["scheduler"]
    assert "the newest is preempted" in vllm["assumptions"]["scheduler"]
    # the console and the HTML use the engine's word for it
    args_small = ("llama-3.1-8b", "--gpu", "l4", "--input-len", "1000", "--output-len", "1000", "--requests", "48",
                  "--concurrency", "48")
    con = invoke("serve", *args_small, "--engine", "sglang")
    assert con.exit_code == 0 and "retractions:" in con.stdout and "preemptions:" not in con.stdout
    assert "preemptions:" in invoke("serve", *args_small).stdout


def test_sglang_admits_up_to_its_own_request_pool_by_default() -> None:
    # SGLang's max_running_requests follows from its KV pool (2,048 on an H100 for Llama-3.1-8B), not
    # vLLM's 1,024 sequences; --max-num-seqs still sets it
    args = ("llama-3.1-8b", "--gpu", "h100", "--rate", "1", "--input-len", "500", "--output-len", "50",
            "--requests", "30")
    sg = invoke_json("serve", SCHEMA, *args, "--engine", "sglang")
    vl = invoke_json("serve", SCHEMA, *args, "--engine", "vllm")
    assert sg["setup"]["max_num_seqs"] == 2048 and vl["setup"]["max_num_seqs"] == 1024
    assert invoke_json("serve", SCHEMA, *args, "--engine", "sglang", "--max-num-seqs", "300")["setup"]["max_num_seqs"] == 300


def test_weights_that_do_not_fit_say_what_would_hold_them() -> None:
    import re

    def gib(msg: str, what: str) -> float:
        return float(re.search(re.escape(what) + r"\(?([0-9.]+) GiB per GPU", msg).group(1))  # type: ignore[union-attr]

    # DeepSeek-V3 in 16 bits on 8 H200: 671,026,404,352 parameters x 2 bytes / 8 GPUs = 156.24 GiB each,
    # over the 0.9 x 138.9 GiB vLLM takes; FP8 about halves them (the embedding and head stay 16-bit),
    # and no larger tensor parallelism is in the node
    res = invoke("serve", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--concurrency", "8", "--input-len", "1000",
                 "--output-len", "100", "--requests", "40")
    assert res.exit_code == 1, res.output
    msg = res.stderr.strip()
    assert msg.startswith("no: the weights (") and "\n" not in msg
    bf16 = gib(msg, "the weights ")
    assert bf16 == pytest.approx(671_026_404_352 * 2 / 8 / 2**30, abs=0.01)
    assert gib(msg, "--precision fp8: ") == pytest.approx(bf16 / 2, rel=0.02)
    assert "--tp" not in msg.split("would fit with")[1]
    # Llama-3.1-70B on one H100: FP8, INT4, or two GPUs holding half the weights each
    res = invoke("serve", "llama-3.1-70b", "--gpu", "h100", "--concurrency", "8", "--input-len", "1000",
                 "--output-len", "100", "--requests", "40")
    assert res.exit_code == 1 and "--precision int4" in res.stderr
    assert gib(res.stderr, "--tp 2: ") == pytest.approx(gib(res.stderr, "the weights ") / 2, abs=0.6)
    # Llama-3.1-70B on T4s: neither a smaller precision on one GPU nor 16 bits over the node's eight
    # holds it; together they do, the fewest GPUs first
    res = invoke("serve", "llama-3.1-70b", "--gpu", "t4", "--concurrency", "8", "--input-len", "1000",
                 "--output-len", "100", "--requests", "40")
    assert res.exit_code == 1
    hint = res.stderr.split("would fit with ")[1]
    assert hint.startswith("--precision int4 --tp 4: ") and "--precision int8 --tp 8: " in hint
    assert gib(res.stderr, "--precision int4 --tp 4: ") < 0.9 * 14.77
