"""`whichgpu recommend`: the default use case, a model, every preset, JSON, HTML, bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import invoke, invoke_json
from typer.testing import Result

from whichgpu.recommend.presets import PRESETS

pytest.importorskip("torch")

FEW = "rtx-4090,rtx-3090,a100-sxm4-80gb"  # BF16 cards: one trace per workload


pytestmark = pytest.mark.usefixtures("isolated_cache")  # the module's own trace cache (tests/conftest.py)


def run(*args: str) -> Result:
    return invoke("recommend", *args)


def run_json(*args: str, code: int = 0) -> dict[str, Any]:
    return invoke_json("recommend", "whichgpu.recommend/1", *args, code=code)


def test_default_use_case_table() -> None:
    res = run("--gpu", "rtx-4090,rtx-3090,t4,rtx-3060-12gb")
    assert res.exit_code == 0, res.output
    out = res.stdout
    for text in ("use case llm-finetune", "ranked by value", "best overall (value)", "best value", "no budget",
                 "free notebooks", "cannot run this job or left out", "below the rule of thumb of 24 GB",
                 "assumption cost", "compute-bound"):
        assert text in out, text
    wide = run("--gpu", "rtx-4090,rtx-3090,t4,rtx-3060-12gb", "--wide")
    assert wide.exit_code == 0 and "break-even" in wide.stdout.split("ranked by value")[1].split("best overall")[0]


def test_json_schema() -> None:
    doc = run_json("gpt2", "--seq-len", "256", "-b", "4", "--gpu", FEW + ",rtx-4060", "--rent", "--max-gpus", "2")
    assert doc["objective"] == "value" and doc["unit"] == "tokens/s" and doc["request"]["mode"] == "rent"
    assert {"title", "workloads", "picks", "rows", "configurations", "cannot_run", "assumptions", "notes"} <= set(doc)
    assert [r["rank"] for r in doc["rows"]] == list(range(1, len(doc["rows"]) + 1))
    assert {r["gpu"] for r in doc["rows"]} == {"rtx-4090", "rtx-3090", "a100-sxm4-80gb", "rtx-4060"}
    assert {c["gpus"] for c in doc["configurations"]} == {1, 2}
    for r in doc["rows"]:
        assert r["reason"] and r["speed"] > 0 and r["runs"][0]["precision"] == "amp-bf16"
        assert {"buy", "rent"} <= set(r["price"]) and "stale" in r["price"]["buy"]
        assert r["value_per_usd"] is None or r["value_per_usd"] > 0
    assert "memory" in doc["rows"][0] and doc["rows"][0]["memory"]["fits"]
    kinds = [p["kind"] for p in doc["picks"]]
    assert kinds[:3] == ["best-overall", "best-value", "fastest"] and "no-budget" in kinds
    # ranked by value: work per dollar never increases down the rows that have a price
    values = [r["value_per_usd"] for r in doc["rows"] if r["value_per_usd"] is not None]
    assert values == sorted(values, reverse=True)


def test_a_model_too_big_is_listed_apart_with_a_suggestion() -> None:
    # GPT-2 XL (1.6B) full training: ~16 bytes of model states per parameter, over 24 GB
    doc = run_json("gpt2-xl", "--seq-len", "512", "-b", "1", "--gpu", "rtx-4090,a100-sxm4-80gb", "--max-gpus", "1")
    apart = {r["gpu"]: r for r in doc["cannot_run"]}
    assert set(apart) == {"rtx-4090"} and apart["rtx-4090"]["reason"].startswith("does not fit: needs ")
    assert apart["rtx-4090"]["suggestion"]  # e.g. "fits on 2 GPUs with ZeRO-3 (--max-gpus 2)"
    assert [r["gpu"] for r in doc["rows"]] == ["a100-sxm4-80gb"]


def test_budget_job_and_power() -> None:
    doc = run_json("gpt2", "--seq-len", "256", "-b", "4", "--gpu", FEW, "--budget", "1500", "--objective",
                   "cost-per-job", "--job-tokens", "1e9", "--max-power-w", "800", "--power-limit-w", "300")
    within = next(p for p in doc["picks"] if p["kind"] == "best-within-budget")
    assert within["gpu"] in ("rtx-3090", "rtx-4090")
    assert all(r["power_w"] <= 800 for r in doc["configurations"])
    assert all(r["job_usd"] > 0 and r["job_hours"] > 0 for r in doc["rows"])
    assert "Dettmers" in doc["assumptions"]["power"]


def test_step_host_ms_is_the_users_loop_and_moves_the_fast_cards_most() -> None:
    """A bare loop (--step-host-ms 0) removes the engine's per-step host time from every card's
    step: the faster card's throughput grows by the larger share; the request and the assumptions
    echo the figure."""
    args = ("gpt2", "--seq-len", "1024", "-b", "8", "--gpu", "rtx-3090,a100-sxm4-80gb", "--max-gpus", "1",
            "--objective", "time")
    base, bare = run_json(*args), run_json(*args, "--step-host-ms", "0")
    assert base["request"]["step_host_ms"] is None and bare["request"]["step_host_ms"] == 0.0
    gain = {r["gpu"]: b["speed"] / r["speed"] for r in base["rows"] for b in bare["rows"] if b["gpu"] == r["gpu"]}
    assert set(gain) == {"rtx-3090", "a100-sxm4-80gb"} and gain["a100-sxm4-80gb"] > gain["rtx-3090"] > 1.0
    assert bare["assumptions"]["perf_step_host"].endswith("(--step-host-ms)")
    assert "--step-host-ms sets your own loop's" in base["assumptions"]["perf_step_host"]


def test_html_report(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = run("gpt2", "--seq-len", "256", "-b", "4", "--gpu", FEW, "--html", str(out))
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and 'id="value-chart"' in page and 'id="roofline-chart"' in page
    assert 'id="memory-chart"' in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page


@pytest.mark.parametrize("preset", [p.name for p in PRESETS])
def test_every_preset_runs_what_the_doc_says(preset: str) -> None:
    doc = run_json("--use-case", preset, "--gpu", "rtx-4090,a100-sxm4-80gb")
    p = next(x for x in PRESETS if x.name == preset)
    assert doc["preset"] == preset and doc["objective"] == p.objective
    assert [(w["model"], w["task"], w["batch_size"]) for w in doc["workloads"]] == \
        [(w.spec.model, w.spec.task, w.spec.batch_size) for w in p.workloads]
    assert doc["request"]["min_memory_gb"] == p.min_memory_gb and doc["request"]["max_gpus"] == p.max_gpus
    assert doc["rows"], doc["cannot_run"]


@pytest.mark.parametrize(("args", "message"), [
    (["--max-power-w", "50"], "--max-power-w: no GPU draws 50 W or less"),
    (["--budget", "-1"], "--budget: -1 is out of range; valid: a finite number > 0"),
    (["--min-memory-gb", "1000"], "--min-memory-gb: no GPU has 1000 GB of memory"),
    (["--use-case", "gaming"], "unknown use case 'gaming'"),
    (["--price", "rtx-4090=cheap"], "expected NAME=USD"),
    (["--prices", "nope.xlsx"], "a prices file must be .toml or .csv"),
    (["--objective", "cost-per-job"], "--job-tokens: the cost-per-job objective needs the job's size"),
    (["--use-case", "kaggle", "--batch-size", "4"], "--batch-size describe a MODEL's workload"),
    (["gpt2", "--use-case", "kaggle"], "give a MODEL or --use-case, not both"),
    (["gpt2", "--job-epochs", "2"], "--dataset-size: a job in epochs needs the dataset size"),
    (["gpt2", "--gpu", "rtx-9999"], "unknown GPU"),
])
def test_bad_input_is_a_one_line_error(args: list[str], message: str) -> None:
    res = run(*args)
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err, err


def test_bad_prices_file(tmp_path: Path) -> None:
    f = tmp_path / "p.csv"
    f.write_text("gpu,buy_usd\nRTX 4090,1500\nRTX 9999,100\n")
    res = run("gpt2", "--gpu", FEW, "--prices", str(f))
    assert res.exit_code == 2 and "line 3: unknown GPU 'RTX 9999'" in res.stderr and "\n" not in res.stderr.strip()


def test_what_would_make_it_fit() -> None:
    # the example: LoRA on an 8B model without checkpointing is over 24 GB
    doc = run_json("llama-3-8b", "--finetune", "lora", "--seq-len", "2048", "-b", "1", "--gpu", "rtx-4090,rtx-4070",
                   "--max-gpus", "1", code=1)
    why = {r["gpu"]: r["reason"] for r in doc["cannot_run"]}
    assert why["rtx-4090"].startswith("does not fit: needs ") and why["rtx-4090"].endswith(
        "has 25.4 GB; fits with full activation checkpointing")
    assert why["rtx-4070"].endswith("fits with QLoRA and full activation checkpointing")


def test_when_no_gpu_runs_the_job_the_picks_say_so_not_that_prices_are_missing() -> None:
    doc = run_json("llama-3.1-405b", "--task", "train", "--seq-len", "4096", "--max-gpus", "1", code=1)
    picks = {p["kind"]: p for p in doc["picks"]}
    for kind in ("best-overall", "best-value", "fastest"):
        assert picks[kind]["config"] is None and picks[kind]["text"] == "no configuration compared runs this job"
    assert "cannot run it" in picks["no-budget"]["text"]
