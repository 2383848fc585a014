"""Accuracy of the serving simulation on the published serving latencies (a copy of
shared/validation/serving_dev.csv in tests/serving_data). `whichgpu validate-serve --data
tests/serving_data` prints the same figures. The issue's targets (TPOT median 12 %, TTFT 25 %, each
(GPU, engine) group's signed median within +-15 %) are not met yet: these bounds are regression
guards at today's figures, named so, except where a group meets the target."""

from __future__ import annotations

from pathlib import Path

import pytest

from whichgpu.measure import serving_validate as sv

DATA = Path(__file__).resolve().parent.parent / "serving_data" / "serving_dev.csv"


@pytest.fixture(scope="module")
def rows() -> list[sv.ServeScore]:
    return sv.serving_rows(DATA)


def test_every_row_is_scored_or_listed_with_a_reason(rows: list[sv.ServeScore]) -> None:
    scored = [r for r in rows if r.errors() is not None]
    assert len(scored) >= 1200 and all(r.reason for r in rows if r.errors() is None)
    assert any("disaggregated" in r.reason for r in rows)
    # one score per measurement group (rows re-exported under other labels count once)
    import csv

    with DATA.open() as fh:
        groups = {r["measurement_group"] for r in csv.DictReader(fh)}
    assert len(rows) == len(groups) < 2508


def test_overall_regression_guards(rows: list[sv.ServeScore]) -> None:
    s = sv.summary(rows)["all"]
    assert s["tpot_median"] <= 0.24  # regression guard (target 0.12): 21.6 % today
    assert s["ttft_median"] <= 0.50  # regression guard (target 0.25): 46.4 % today
    for g, b in sv.summary(rows)["groups"].items():
        if b["rows"]:
            assert abs(b["tpot_signed"]) <= 0.40, g  # regression guard (target 0.15)


def test_dense_llama_on_tensorrt_llm_meets_the_tpot_target(rows: list[sv.ServeScore]) -> None:
    s = sv.summary([r for r in rows if "Llama-3.1-8B-Instruct H100-SXM5-80GB trtllm" in r.name])["all"]
    assert s["rows"] >= 100
    assert s["tpot_median"] <= 0.12 and abs(s["tpot_signed"]) <= 0.15
