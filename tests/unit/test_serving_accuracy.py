"""Accuracy of the serving simulation on the published serving latencies (a copy of
shared/validation/serving_dev.csv in tests/serving_data). `whichgpu validate-serve --data
tests/serving_data` prints the same figures. The issue's targets are TPOT median 12 %, TTFT 25 %,
each (GPU, engine) group's signed median within +-15 %. The groups' TPOT meets its target and is
asserted at it; the medians do not yet (TPOT 13.2 %, TTFT 44.8 % today): those bounds are regression
guards at today's figures, named so."""

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
    assert s["tpot_median"] <= 0.145  # regression guard (target 0.12): 13.2 % today
    assert s["ttft_median"] <= 0.48  # regression guard (target 0.25): 44.8 % today
    assert abs(s["tpot_signed"]) <= 0.05  # +0.3 % today


def test_every_group_meets_the_tpot_bias_target(rows: list[sv.ServeScore]) -> None:
    groups = {g: b for g, b in sv.summary(rows)["groups"].items() if b["rows"]}
    assert len(groups) >= 8
    for g, b in groups.items():
        assert abs(b["tpot_signed"]) <= 0.15, g  # the target; the widest today: H200 trtllm +13.3 %


def test_dense_llama_on_tensorrt_llm_meets_the_tpot_target(rows: list[sv.ServeScore]) -> None:
    s = sv.summary([r for r in rows if "Llama-3.1-8B-Instruct H100-SXM5-80GB trtllm" in r.name])["all"]
    assert s["rows"] >= 100
    assert s["tpot_median"] <= 0.12 and abs(s["tpot_signed"]) <= 0.15
