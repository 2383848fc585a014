"""The web app's JSON API (whichgpu/web) through Starlette's TestClient: every endpoint with good
and bad input. The answers are the CLI's --json documents (compared field for field where the
question is the same), bad input is HTTP 400 with the CLI's one-line message, uploads are
size-limited (413) and parsed as data, no answer carries NaN or a traceback.

plan, serve, recommend-serving, gpus, models and uploads are torch-free; recommend, compare and fit capture GPT-2
(a few seconds, once per module: the module has its own trace cache)."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from tests.cli.conftest import invoke, strict_json
from tests.conftest import needs_torch

from whichgpu.web import api
from whichgpu.web.app import create_app
from whichgpu.web.uploads import MAX_BYTES

pytestmark = pytest.mark.usefixtures("isolated_cache")

GPT2 = {"model": "gpt2", "batch_size": "2", "seq_len": "128"}
TWO_GPUS = "h100-sxm5-80gb,rtx-4090"
SERVE = {"model": "llama-3.1-8b", "gpu": "h100", "rate": "2", "input_len": "128", "output_len": "32", "requests": "50"}
# A two-layer Llama: the planner and the serving model build it from its config, no torch needed.
TINY_LLAMA = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
              "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 512}


@pytest.fixture(scope="module")
def client(isolated_cache: None) -> Any:
    with TestClient(create_app(), raise_server_exceptions=False) as c:
        yield c


def get(client: TestClient, endpoint: str, status: int = 200, **params: str) -> dict[str, Any]:
    """GET /api/ENDPOINT?params: the status checked, the body parsed as strict JSON (no NaN)."""
    res = client.get(f"/api/{endpoint}", params=params)
    assert res.status_code == status, res.text
    assert res.headers["content-type"].startswith("application/json")
    doc: dict[str, Any] = strict_json(res.text)
    return doc


def error_of(client: TestClient, endpoint: str, status: int = 400, **params: str) -> str:
    doc = get(client, endpoint, status, **params)
    assert set(doc) == {"error"}, doc
    msg: str = doc["error"]
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def cli_error(*args: str) -> str:
    """The CLI's one-line error for the same question, without its "error: " prefix."""
    res = invoke(*args)
    assert res.exit_code == 2, res.output
    line: str = res.stderr.strip()
    assert line.startswith("error: ") and "\n" not in line
    return line.removeprefix("error: ")


def cli_json(*args: str, code: int = 0) -> dict[str, Any]:
    res = invoke(*args, "--json")
    assert res.exit_code == code, res.output
    doc: dict[str, Any] = strict_json(res.stdout)
    return doc


def without(doc: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in keys}


# ---- catalog and zoo ----------------------------------------------------------------------------

def test_gpus_is_the_catalog_as_the_cli_lists_it(client: TestClient) -> None:
    doc = get(client, "gpus")
    assert doc == cli_json("gpus")
    assert doc["schema"] == "whichgpu.gpus/1" and doc["count"] == len(doc["gpus"]) > 50


def test_models_is_the_zoo(client: TestClient) -> None:
    doc = get(client, "models")
    assert doc == cli_json("models")
    ids = {m["id"] for m in doc["models"]}
    assert {"gpt2", "llama-3-8b", "resnet50-v1.5"} <= ids


def test_a_parameter_an_endpoint_does_not_take_is_refused(client: TestClient) -> None:
    assert error_of(client, "gpus", vendor="nvidia") == "unknown parameter 'vendor': this endpoint takes none"
    msg = error_of(client, "recommend", modle="gpt2")
    assert msg.startswith("unknown parameter 'modle'; did you mean") and "'model'" in msg


# ---- recommend ------------------------------------------------------------------------------------

@needs_torch
def test_recommend_is_the_cli_ranking(client: TestClient) -> None:
    doc = get(client, "recommend", **GPT2, gpu=TWO_GPUS)
    assert doc["answer"] == "yes" and doc["reason"] is None
    cli = cli_json("recommend", "gpt2", "-b", "2", "--seq-len", "128", "--gpu", TWO_GPUS)
    assert without(doc, "answer", "reason") == cli
    assert [r["rank"] for r in doc["rows"]] == list(range(1, len(doc["rows"]) + 1))
    assert {r["gpu"] for r in doc["rows"]} == {"h100-sxm5-80gb", "rtx-4090"}


@needs_torch
def test_recommend_follows_the_batch_and_the_buy_or_rent_choice(client: TestClient) -> None:
    small = get(client, "recommend", **GPT2, gpu=TWO_GPUS)
    big = get(client, "recommend", **{**GPT2, "batch_size": "8"}, gpu=TWO_GPUS)
    assert small["workloads"][0]["batch_size"] == 2 and big["workloads"][0]["batch_size"] == 8
    assert small["rows"][0]["speed"] != big["rows"][0]["speed"]
    rent = get(client, "recommend", **GPT2, gpu=TWO_GPUS, mode="rent")
    assert rent["request"]["mode"] == "rent" and small["request"]["mode"] == "buy"


@needs_torch
def test_recommend_post_takes_a_json_body(client: TestClient) -> None:
    res = client.post("/api/recommend", json={**GPT2, "gpu": TWO_GPUS, "batch_size": 2})
    assert res.status_code == 200, res.text
    assert strict_json(res.text)["workloads"][0]["batch_size"] == 2


@needs_torch
def test_recommend_with_no_gpu_that_can_run_it_answers_no(client: TestClient) -> None:
    doc = get(client, "recommend", **GPT2, gpu="rtx-3090", precision="fp8")  # Ampere: no FP8
    assert doc["answer"] == "no" and doc["rows"] == [] and doc["cannot_run"][0]["kind"] == "precision"
    assert doc["reason"].startswith("none of the 1 GPUs compared can run this job")


def test_recommend_bad_numbers_get_the_cli_message(client: TestClient) -> None:
    for value in ("0", "abc", "1e400", "nan", "2.5"):
        msg = error_of(client, "recommend", model="gpt2", batch_size=value)
        assert msg == cli_error("recommend", "gpt2", "-b", value), value
    assert error_of(client, "recommend", model="gpt2", budget="-5") == cli_error("recommend", "gpt2", "--budget", "-5")
    assert error_of(client, "recommend", model="gpt2", step_host_ms="-1") == cli_error("recommend", "gpt2",
                                                                                       "--step-host-ms", "-1")
    assert error_of(client, "recommend", model="gpt2", mode="lease") == "--buy/--rent: 'lease' is not one of buy, rent"


def test_recommend_bad_names_get_the_cli_message(client: TestClient) -> None:
    assert error_of(client, "recommend", model="gtp2") == cli_error("recommend", "gtp2")
    assert (error_of(client, "recommend", use_case="llm-finetune", batch_size="4")
            == cli_error("recommend", "--use-case", "llm-finetune", "-b", "4"))
    assert error_of(client, "recommend", model="gpt2", gpu="h200x") == cli_error("recommend", "gpt2", "--gpu", "h200x")


def test_the_web_never_takes_a_path_or_a_factory(client: TestClient, tmp_path: Path) -> None:
    factory = tmp_path / "f.py"
    factory.write_text("raise SystemExit('must not run')\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    for model in (f"{factory}:make", "f.py:make", str(config), "./config.json", "../x.json"):
        msg = error_of(client, "plan", model=model, gpu="h100")
        assert "the web app takes a zoo name or an uploaded config.json, not a path" in msg
    assert "unknown model" in error_of(client, "plan", model="some/dir", gpu="h100")
    # a speculative-decoding draft model is a model too
    msg = error_of(client, "serve", model="llama-3.1-8b", gpu="h100", rate=1, input_len=10, output_len=10,
                   spec_draft_len=2, spec_acceptance=0.5, spec_draft_model=str(config))
    assert "not a path" in msg


def test_post_body_must_be_a_json_object(client: TestClient) -> None:
    res = client.post("/api/plan", content=b"[1, 2]")
    assert res.status_code == 400 and res.json() == {"error": "request body: expected a JSON object of parameters"}
    res = client.post("/api/plan", content=b"{model")
    assert res.status_code == 400 and res.json()["error"].startswith("request body: not valid JSON")


# ---- compare (estimate on several GPUs) -------------------------------------------------------------

@needs_torch
def test_compare_is_estimate_on_each_gpu_with_memory_and_roofline(client: TestClient) -> None:
    doc = get(client, "compare", **GPT2, gpu=TWO_GPUS)
    cli = cli_json("estimate", "gpt2", "-b", "2", "--seq-len", "128", "--gpu", TWO_GPUS, "--explain")
    assert [r["gpu"] for r in doc["results"]] == ["h100-sxm5-80gb", "rtx-4090"]
    for web, ref in zip(doc["results"], cli["results"]):
        assert without(web, "memory_breakdown", "roofline") == ref
        assert set(web["split"]) == {"compute", "memory", "overhead", "communication"}
        # the breakdown adds up to the total the estimate reports
        assert sum(line["bytes"] for line in web["memory_breakdown"]) == pytest.approx(web["memory"]["total_bytes"])
        assert web["roofline"]["peak_tflops"] > 0 and web["roofline"]["memory_bandwidth_gbps"] > 0
        assert web["top_ops"] and all(op["flops"] >= 0 and op["bytes"] > 0 for op in web["top_ops"])
    h100, r4090 = doc["results"]
    assert h100["roofline"]["memory_bandwidth_gbps"] > r4090["roofline"]["memory_bandwidth_gbps"]


def test_compare_needs_a_model_and_checks_its_numbers(client: TestClient) -> None:
    assert error_of(client, "compare").startswith("give a model: a zoo name")
    assert error_of(client, "compare", model="gpt2", gpus="0") == cli_error("estimate", "gpt2", "--gpu", "h100",
                                                                            "--gpus", "0")
    assert error_of(client, "compare", model="gpt2", gpu="nope-9000") == cli_error("estimate", "gpt2", "--gpu",
                                                                                  "nope-9000")
    assert error_of(client, "compare", model="gpt2", step_host_ms="-1") == cli_error("estimate", "gpt2",
                                                                                     "--step-host-ms", "-1")


def test_compare_takes_the_users_step_host_time(client: TestClient) -> None:
    doc = get(client, "compare", **GPT2, gpu="h100", step_host_ms="4")
    cli = cli_json("estimate", "gpt2", "-b", "2", "--seq-len", "128", "--gpu", "h100", "--explain", "--step-host-ms", "4")
    assert doc["plan"]["step_host_ms"] == 4.0
    assert without(doc["results"][0], "memory_breakdown", "roofline") == cli["results"][0]


# ---- fit ---------------------------------------------------------------------------------------------

@needs_torch
def test_fit_gives_the_breakdown_and_the_largest_batch(client: TestClient) -> None:
    doc = get(client, "fit", **GPT2, gpu="rtx-4090")
    assert without(doc, "answer", "reason") == cli_json("fit", "gpt2", "-b", "2", "--seq-len", "128", "--gpu",
                                                         "rtx-4090")
    assert doc["answer"] == "yes" and doc["fits"] is True
    assert doc["max_batch"]["batch_size"] > 2
    assert sum(line["bytes"] for line in doc["breakdown"]) == pytest.approx(doc["total_bytes"])


@needs_torch
def test_fit_that_does_not_fit_answers_no_with_what_would(client: TestClient) -> None:
    doc = get(client, "fit", **{**GPT2, "batch_size": "64", "seq_len": "1024"}, gpu="rtx-4060")
    assert doc["answer"] == "no" and doc["fits"] is False
    assert "does not fit on" in doc["reason"]
    assert doc["suggestions"], "what would make it fit"


def test_fit_bad_input(client: TestClient) -> None:
    assert error_of(client, "fit", model="gpt2", gpu="rtx-4090", sharding="zero9").startswith("--sharding")
    assert (error_of(client, "fit", model="gpt2", gpu="rtx-4090", grad_accum="-1")
            == cli_error("fit", "gpt2", "--gpu", "rtx-4090", "--grad-accum", "-1"))
    assert error_of(client, "fit", model="gpt2", gpu="rtx-4090", offload_optimizer="maybe") == (
        "--offload-optimizer: 'maybe' is not true or false")


# ---- plan (torch-free) --------------------------------------------------------------------------

def test_plan_is_the_cli_plan_with_a_gantt_chart(client: TestClient) -> None:
    q = {"model": "llama-3-8b", "gpu": "h100", "gpus": "8", "pp": "2", "global_batch": "16", "seq_len": "2048"}
    doc = get(client, "plan", **q)
    cli = cli_json("plan", "llama-3-8b", "--gpu", "h100", "--gpus", "8", "--pp", "2", "--global-batch", "16",
                   "--seq-len", "2048")
    assert without(doc, "gantt_svg", "answer", "reason") == cli
    assert doc["answer"] == "yes" and doc["plans"] and all(p["pp"] == 2 for p in doc["plans"])
    assert doc["gantt_svg"].startswith("<svg") and "stage 1" in doc["gantt_svg"]


def test_plan_of_an_moe_model_carries_the_measured_caveat(client: TestClient) -> None:
    doc = get(client, "plan", model="qwen3-30b-a3b", gpu="b200", gpus="8", ep="8", global_batch="64",
              seq_len="4096", precision="fp8")
    assert doc["answer"] == "yes" and len(doc["notes"]) == 1
    assert doc["notes"][0].startswith("not calibrated for MoE") and "validate-plan --only moe" in doc["notes"][0]
    assert get(client, "plan", model="llama-3-8b", gpu="h100", gpus="8", global_batch="16",
               seq_len="2048")["notes"] == []


def test_plan_on_one_stage_has_no_gantt_chart(client: TestClient) -> None:
    doc = get(client, "plan", model="llama-3-8b", gpu="h100", gpus="8", pp="1", global_batch="16", seq_len="2048")
    assert doc["gantt_svg"] == "" and doc["plans"]


def test_plan_that_cannot_fit_answers_no(client: TestClient) -> None:
    doc = get(client, "plan", model="llama-3-70b", gpu="rtx-4090", gpus="1")
    res = invoke("plan", "llama-3-70b", "--gpu", "rtx-4090", "--gpus", "1")
    assert res.exit_code == 1
    assert doc["answer"] == "no" and doc["plans"] == []
    assert "no: " + doc["reason"] == res.stderr.strip()


def test_plan_bad_degrees_get_the_cli_message(client: TestClient) -> None:
    assert (error_of(client, "plan", model="llama-3-8b", gpu="h100", gpus="8", tp="3")
            == cli_error("plan", "llama-3-8b", "--gpu", "h100", "--gpus", "8", "--tp", "3"))
    assert (error_of(client, "plan", model="llama-3-8b", gpu="h100", schedule="zb-h9")
            == cli_error("plan", "llama-3-8b", "--gpu", "h100", "--schedule", "zb-h9"))
    assert (error_of(client, "plan", model="resnet50-v1.5", gpu="h100")
            == cli_error("plan", "resnet50-v1.5", "--gpu", "h100"))


# ---- serve (torch-free) -------------------------------------------------------------------------

def test_serve_is_the_cli_run_with_the_latency_curve(client: TestClient) -> None:
    doc = get(client, "serve", **SERVE)
    cli = cli_json("serve", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--input-len", "128", "--output-len",
                   "32", "--requests", "50")
    assert without(doc, "sweep", "answer", "reason") == cli
    sweep = doc["sweep"]
    assert len(sweep) == 8
    rates = [p["requests_per_s"] for p in sweep]
    assert rates == sorted(rates) and rates[0] > 0
    # latency grows with the load: the last point (saturation) waits longer than the first
    assert sweep[-1]["ttft_ms"]["p90"] > sweep[0]["ttft_ms"]["p90"]
    assert all(p["output_tokens_per_s_per_gpu"] > 0 for p in sweep)


def test_serve_takes_expert_parallelism_and_dp_attention(client: TestClient) -> None:
    args = ("qwen3-30b-a3b", "--gpu", "h100", "--tp", "2", "--ep", "2", "--attention-dp", "2", "--concurrency", "8",
            "--input-len", "128", "--output-len", "32", "--requests", "40")
    doc = get(client, "serve", model="qwen3-30b-a3b", gpu="h100", tp="2", ep="2", attention_dp="2", concurrency="8",
              input_len="128", output_len="32", requests="40")
    assert without(doc, "sweep", "answer", "reason") == cli_json("serve", *args)
    assert doc["setup"]["attention_dp"] == 2 and doc["workload"]["concurrency_per_scheduler"] == 4
    bad = {"model": "qwen3-30b-a3b", "gpu": "h100", "tp": "2", "attention_dp": "3", "rate": "1", "input_len": "128",
           "output_len": "32"}
    assert error_of(client, "serve", **bad) == cli_error(
        "serve", "qwen3-30b-a3b", "--gpu", "h100", "--tp", "2", "--attention-dp", "3", "--rate", "1", "--input-len",
        "128", "--output-len", "32")


def test_serve_takes_tensorrt_llm_attention_dp_balancing(client: TestClient) -> None:
    args = ("qwen3-30b-a3b", "--gpu", "h100", "--tp", "2", "--ep", "2", "--attention-dp", "2", "--engine", "trtllm",
            "--adp-balance", "20,2", "--concurrency", "8", "--input-len", "128", "--output-len", "32", "--requests", "40")
    doc = get(client, "serve", model="qwen3-30b-a3b", gpu="h100", tp="2", ep="2", attention_dp="2", engine="trtllm",
              adp_balance="20,2", concurrency="8", input_len="128", output_len="32", requests="40")
    assert without(doc, "sweep", "answer", "reason") == cli_json("serve", *args)
    assert doc["setup"]["adp_balance"] == {"timeout_iters": 20, "batching_wait_iters": 2}
    bad = {"model": "qwen3-30b-a3b", "gpu": "h100", "tp": "2", "ep": "2", "attention_dp": "2", "engine": "trtllm",
           "adp_balance": "twenty", "rate": "1", "input_len": "128", "output_len": "32"}
    assert error_of(client, "serve", **bad) == cli_error(
        "serve", "qwen3-30b-a3b", "--gpu", "h100", "--tp", "2", "--ep", "2", "--attention-dp", "2", "--engine",
        "trtllm", "--adp-balance", "twenty", "--rate", "1", "--input-len", "128", "--output-len", "32")


def test_serve_with_unreachable_slos_answers_no(client: TestClient) -> None:
    doc = get(client, "serve", **SERVE, slo_tpot_ms="0.01")
    assert doc["answer"] == "no" and doc["reason"].startswith("no request rate meets TPOT P90 <= 0.01 ms")
    assert doc["slo"]["max_rate_per_s"] is None


def test_serve_bad_input_gets_the_cli_message(client: TestClient) -> None:
    both = {**SERVE, "concurrency": "3"}
    assert error_of(client, "serve", **both) == cli_error(
        "serve", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--concurrency", "3", "--input-len", "128",
        "--output-len", "32")
    assert (error_of(client, "serve", **{**SERVE, "rate": "-1"})
            == cli_error("serve", "llama-3.1-8b", "--gpu", "h100", "--rate", "-1"))
    assert error_of(client, "serve", **{**SERVE, "requests": "1000000"}).startswith("--requests: 1000000 is out of range")


# ---- recommend-serving: which GPUs for a rate (torch-free) -------------------------------------------

RATE = {"model": "llama-3.1-8b", "rate": "2", "input_len": "512", "output_len": "128", "slo_ttft_ms": "500",
        "slo_tpot_ms": "50", "gpu": TWO_GPUS, "mode": "rent"}
RATE_FLAGS = ("recommend", "llama-3.1-8b", "--rate", "2", "--input-len", "512", "--output-len", "128", "--slo-ttft-ms",
              "500", "--slo-tpot-ms", "50", "--gpu", TWO_GPUS, "--rent")


def test_recommend_serving_is_the_cli_ranking_and_runs_as_a_job(client: TestClient) -> None:
    doc = get(client, "recommend-serving", **RATE)
    assert doc["answer"] == "yes" and doc["reason"] is None
    assert without(doc, "answer", "reason", "out_by_kind", "validated_on") == cli_json(*RATE_FLAGS)
    assert doc["schema"] == api.SCHEMAS["recommend-serving"] == "whichgpu.recommend-serving/1"
    ranked = doc["ranking"]
    assert 1 <= len(ranked) <= 5 and {o["gpu"] for o in ranked} <= {"h100-sxm5-80gb", "rtx-4090"}
    cost = [o["usd_per_million_output_tokens"] for o in ranked]
    assert cost == sorted(cost) and all(o["meets_slo"] for o in ranked)
    # the console's "out" lines, counted by kind; H100 SXM is one of the GPUs serving is validated on
    assert sum(k["count"] for k in doc["out_by_kind"]) == len(doc["not_meeting"])
    assert {k["kind"] for k in doc["out_by_kind"]} == {o["reason_kind"] for o in doc["not_meeting"]}
    assert "H100-SXM5-80GB" in doc["validated_on"]
    assert {o["gpu"]: o["validated_gpu"] for o in ranked + doc["not_meeting"]} == {"h100-sxm5-80gb": True,
                                                                                   "rtx-4090": False}
    # the page asks it as a job: the same answer (from memory)
    job = client.post("/api/jobs", json={"endpoint": "recommend-serving", "params": RATE}).json()
    for _ in range(500):
        job = client.get(f"/api/jobs/{job['id']}").json()
        if job["status"] == "done":
            break
        threading.Event().wait(0.01)
    assert job["http_status"] == 200 and job["result"] == doc


def test_recommend_serving_with_an_impossible_tpot_answers_no(client: TestClient) -> None:
    doc = get(client, "recommend-serving", **{**RATE, "slo_tpot_ms": "1"})
    assert doc["answer"] == "no" and doc["ranking"] == [] and doc["more_meeting"] == []
    assert doc["reason"] == ("no GPU x TP configuration serves 2 requests/s of llama-3.1-8b within the targets on at "
                             "most 8 GPUs (see the reasons listed; raise --max-gpus, relax the SLOs or lower the rate)")
    assert doc["not_meeting"] and sum(k["count"] for k in doc["out_by_kind"]) == len(doc["not_meeting"])
    flags = list(RATE_FLAGS)
    flags[flags.index("--slo-tpot-ms") + 1] = "1"
    assert without(doc, "answer", "reason", "out_by_kind", "validated_on") == cli_json(*flags, code=1)


def test_recommend_serving_bad_input_gets_the_cli_message(client: TestClient) -> None:
    m = "llama-3.1-8b"
    assert (error_of(client, "recommend-serving", model=m, rate="2")  # a rate without a target
            == cli_error("recommend", m, "--rate", "2")
            == "--rate ranks serving configurations within latency targets: give --slo-ttft-ms and/or --slo-tpot-ms")
    assert (error_of(client, "recommend-serving", model=m, slo_tpot_ms="50")
            == cli_error("recommend", m, "--slo-tpot-ms", "50"))
    for name, flag, value in (("rate", "--rate", "-1"), ("rate", "--rate", "abc"), ("max_gpus", "--max-gpus", "0"),
                              ("slo_percentile", "--slo-percentile", "75"), ("engine", "--engine", "ollama"),
                              ("precision", "--precision", "tf32"), ("input_len", "--input-len", "0")):
        params = {"model": m, "rate": "2", "slo_tpot_ms": "50", name: value}
        assert (error_of(client, "recommend-serving", **params)
                == cli_error("recommend", m, "--rate", "2", "--slo-tpot-ms", "50", flag, value)), name
    assert (error_of(client, "recommend-serving", use_case="llm-finetune", rate="2", slo_tpot_ms="50")
            == cli_error("recommend", "--use-case", "llm-finetune", "--rate", "2", "--slo-tpot-ms", "50"))
    assert (error_of(client, "recommend-serving", model="resnet50-v1.5", rate="2", slo_tpot_ms="50")
            == cli_error("recommend", "resnet50-v1.5", "--rate", "2", "--slo-tpot-ms", "50"))
    assert error_of(client, "recommend-serving", model=m, rate="2", slo_tpot_ms="50", gpu="h100x").startswith(
        cli_error("recommend", m, "--rate", "2", "--slo-tpot-ms", "50", "--gpu", "h100x"))
    msg = error_of(client, "recommend-serving", model=m, rate="2", slo_tpot_ms="50", batch_size="4")
    assert msg.startswith("unknown parameter 'batch_size'")  # a training flag is not a serving question's
    assert "not a path" in error_of(client, "recommend-serving", model="./config.json", rate="2", slo_tpot_ms="50")


# ---- config.json uploads --------------------------------------------------------------------------

def upload(client: TestClient, data: bytes, name: str = "config.json", multipart: bool = True) -> Any:
    if multipart:
        return client.post("/api/config", files={"file": (name, data, "application/json")})
    return client.post(f"/api/config?filename={name}", content=data)


def test_an_uploaded_config_is_a_model_for_plan_and_serve(client: TestClient) -> None:
    for multipart in (True, False):
        res = upload(client, json.dumps(TINY_LLAMA).encode(), "tiny.json", multipart)
        assert res.status_code == 200, res.text
        up = strict_json(res.text)
        assert up["model"].startswith("upload:") and up["model_type"] == "llama" and up["filename"] == "tiny.json"
    plan = get(client, "plan", model=up["model"], gpu="h100", gpus="2", global_batch="4", seq_len="256")
    assert plan["answer"] == "yes" and plan["params"] > 0
    serve = get(client, "serve", model=up["model"], gpu="l4", rate="1", input_len="64", output_len="16", requests="20")
    assert serve["requests_per_s"] > 0
    text = json.dumps(plan) + json.dumps(serve)
    assert "/uploads/" not in text, "the server's paths never reach the browser"


def test_a_malformed_config_gets_the_cli_message(client: TestClient, tmp_path: Path) -> None:
    cases = {b"{not json": "not valid JSON", b"[1, 2]": "expected a JSON object", b'{"hidden_size": 8}': "no 'model_type'"}
    for data, words in cases.items():
        res = upload(client, data)
        assert res.status_code == 400, res.text
        msg = res.json()["error"]
        assert words in msg
        path = tmp_path / "config.json"
        path.write_bytes(data)
        cli = cli_error("fit", str(path), "--gpu", "h100")  # (the CLI names the file by its full path)
        assert msg == cli.replace(str(path.resolve()), "config.json")


def test_an_oversize_upload_is_refused_with_413(client: TestClient) -> None:
    big = b'{"model_type": "llama", "pad": "' + b"x" * MAX_BYTES + b'"}'
    for multipart in (True, False):
        res = upload(client, big, multipart=multipart)
        assert res.status_code == 413, res.text
        assert "256 KiB limit" in res.json()["error"]

    def chunks() -> Any:  # no Content-Length: refused while reading
        for _ in range(40):
            yield b"x" * 16384

    res = client.post("/api/config", content=chunks())
    assert res.status_code == 413 and "256 KiB limit" in res.json()["error"]


def test_an_unknown_upload_is_an_error(client: TestClient) -> None:
    msg = error_of(client, "plan", model="upload:0123456789abcdef", gpu="h100")
    assert msg == "no uploaded config.json 'upload:0123456789abcdef' on this server; upload it again"
    assert "upload it again" in error_of(client, "plan", model="upload:../../etc", gpu="h100")


# ---- the server's own behaviour ------------------------------------------------------------------------

def test_without_torch_a_new_trace_says_so_and_cached_ones_still_answer(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "torch", None)  # `import torch` fails from here on
    doc = get(client, "compare", 501, model="gpt2", batch_size="3", seq_len="96", gpu="h100")
    assert doc == {"error": "tracing a model needs the optional package 'torch'; install it with "
                            "pip install 'whichgpu[torch]'"}
    assert get(client, "plan", model="llama-3-8b", gpu="h100", gpus="8")["answer"] == "yes"


def test_an_internal_error_is_one_line_without_a_traceback(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(raw: Any) -> Any:
        raise RuntimeError("boom\n  File 'secret.py', line 1")

    monkeypatch.setitem(api.ENDPOINTS, "models", boom)
    res = client.get("/api/models", params={"x": "1"})  # (a new query: not from the answer cache)
    assert res.status_code == 500
    assert res.json() == {"error": "internal error: RuntimeError: boom"}


def test_answers_are_strict_json_without_nan(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(api.ENDPOINTS, "gpus", lambda raw: {"schema": "t", "x": float("nan"), "y": [float("inf")]})
    res = client.get("/api/gpus", params={"n": "1"})
    assert res.status_code == 200 and "NaN" not in res.text and "Infinity" not in res.text
    assert res.json() == {"schema": "t", "x": None, "y": [None]}


def test_a_repeated_question_is_answered_from_memory(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []

    def counted(raw: Any) -> Any:
        calls.append(raw)
        return {"schema": "t", "n": len(calls)}

    monkeypatch.setitem(api.ENDPOINTS, "plan", counted)
    a = get(client, "plan", model="x-count", gpus="8")
    b = client.post("/api/plan", json={"gpus": "8", "model": "x-count"}).json()  # same question, other order
    assert a == b == {"schema": "t", "n": 1} and len(calls) == 1


def test_slow_work_does_not_block_other_requests(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    started, release = threading.Event(), threading.Event()

    def slow(raw: Any) -> Any:
        started.set()
        assert release.wait(30)
        return {"schema": "t", "slow": True}

    monkeypatch.setitem(api.ENDPOINTS, "serve", slow)
    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.update(client.get("/api/serve", params={"model": "slow"}).json()))
    t.start()
    try:
        assert started.wait(30)
        assert client.get("/api/models").status_code == 200  # answered while serve is still computing
        assert client.get("/").status_code == 200
    finally:
        release.set()
        t.join(30)
    assert out == {"schema": "t", "slow": True}


def test_a_job_runs_in_the_background_and_is_polled(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def slow(raw: Any) -> Any:
        assert release.wait(30)
        return {"schema": "t", "model": raw["model"]}

    monkeypatch.setitem(api.ENDPOINTS, "fit", slow)
    res = client.post("/api/jobs", json={"endpoint": "fit", "params": {"model": "job-1"}})
    assert res.status_code == 202
    job = res.json()
    assert job["status"] == "running" and job["result"] is None and job["elapsed_s"] >= 0
    polled = client.get(f"/api/jobs/{job['id']}").json()
    assert polled["status"] == "running" and polled["elapsed_s"] >= job["elapsed_s"]
    release.set()
    for _ in range(300):
        polled = client.get(f"/api/jobs/{job['id']}").json()
        if polled["status"] == "done":
            break
        threading.Event().wait(0.01)
    assert polled["status"] == "done" and polled["http_status"] == 200
    assert polled["result"] == {"schema": "t", "model": "job-1"}


def test_a_job_carries_the_endpoints_error(client: TestClient) -> None:
    job = client.post("/api/jobs", json={"endpoint": "plan", "params": {"model": "llama-3-8b", "gpu": "h100",
                                                                        "gpus": "8", "tp": "3"}}).json()
    for _ in range(500):
        job = client.get(f"/api/jobs/{job['id']}").json()
        if job["status"] == "done":
            break
        threading.Event().wait(0.01)
    assert job["http_status"] == 400
    assert job["result"] == {"error": "the fixed degrees (tp x pp x cp = 3) do not divide --gpus 8"}


def test_bad_jobs_are_refused(client: TestClient) -> None:
    res = client.post("/api/jobs", json={"endpoint": "fitt", "params": {}})
    assert res.status_code == 400 and res.json()["error"].startswith("unknown endpoint 'fitt'; did you mean 'fit'")
    res = client.post("/api/jobs", json={"endpoint": "fit", "params": [1]})
    assert res.status_code == 400 and res.json() == {"error": "params: expected a JSON object of parameters"}
    res = client.get("/api/jobs/0123456789abcdef")
    assert res.status_code == 404 and res.json()["error"].startswith("no job '0123456789abcdef'")


def test_unknown_endpoints_and_methods_are_json_errors(client: TestClient) -> None:
    res = client.get("/api/nothing")
    assert res.status_code == 404 and res.json() == {"error": "no such endpoint: GET /api/nothing"}
    res = client.delete("/api/plan")
    assert res.status_code == 405 and res.json() == {"error": "DELETE is not allowed on /api/plan"}


def test_the_page_and_its_assets_come_from_the_package(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    import re

    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert "/static/vendor/uplot/uPlot.iife.min.js" in assets and "/static/app.js" in assets
    for a in assets:
        assert a.startswith(("/static/", "data:")), f"{a}: not served by the app"
        if a.startswith("/static/"):
            assert client.get(a).status_code == 200, a
    lic = client.get("/static/vendor/uplot/LICENSE")
    assert lic.status_code == 200 and "MIT License" in lic.text
    for a in ("/static/app.js", "/static/app.css"):
        assert "http://" not in client.get(a).text and "https://" not in client.get(a).text


# ---- the command ---------------------------------------------------------------------------------------

def test_ui_refuses_a_bad_port_in_one_line() -> None:
    assert cli_error("ui", "--port", "70000").startswith("--port: 70000 is out of range")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        msg = cli_error("ui", "--port", str(port), "--no-browser")
    assert msg.startswith(f"cannot listen on 127.0.0.1:{port}")


def test_opening_the_browser_never_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    import webbrowser

    from whichgpu.commands import ui

    opened: list[str] = []

    def broken(url: str) -> bool:
        opened.append(url)
        raise webbrowser.Error("could not locate runnable browser")

    monkeypatch.setattr(webbrowser, "open", broken)
    monkeypatch.setattr(threading, "Timer", lambda delay, fn: _Now(fn))
    monkeypatch.setenv("DISPLAY", ":0")
    ui._open_later("http://localhost:1/")  # the browser's error is swallowed
    assert opened == ["http://localhost:1/"]
    monkeypatch.delenv("DISPLAY")
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    ui._open_later("http://localhost:2/")  # no display: a text browser would take the terminal
    assert opened == ["http://localhost:1/"]


class _Now:
    """threading.Timer that runs at once (start)."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.daemon = fn, False

    def start(self) -> None:
        self.fn()
