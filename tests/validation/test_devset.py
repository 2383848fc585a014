"""Scores of the performance model on the dev validation set (tests/data/throughput_dev.csv).

A regression in modelling or calibration fails here. The bounds are the contract of the
performance issue (README "Accuracy" has the measured figures).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import needs_torch

pytestmark = [needs_torch, pytest.mark.slow]

DATA = Path(__file__).resolve().parents[1] / "data" / "throughput_dev.csv"

MIN_MODELLED = 0.95  # share of rows the model can predict
MAX_MEDIAN_APE = 15.0  # %
MAX_P90_APE = 40.0  # %
MIN_RANK_CORRELATION = 0.9  # mean Spearman over (model, precision, batch, GPU count) groups


@pytest.fixture(scope="module")
def result():  # type: ignore[no-untyped-def]
    from whichgpu.hardware.catalog import load_catalog
    from whichgpu.measure.validate import read_rows, run

    return run(read_rows(str(DATA)), load_catalog())


def test_modelled_share(result) -> None:  # type: ignore[no-untyped-def]
    s = result.summary
    assert s["rows"] == 849
    assert s["modelled_fraction"] >= MIN_MODELLED
    assert all(r.reason for r in result.rows if r.status != "ok")


def test_error_bounds(result) -> None:  # type: ignore[no-untyped-def]
    s = result.summary
    assert s["median_ape"] <= MAX_MEDIAN_APE
    assert s["p90_ape"] <= MAX_P90_APE


def test_gpu_ranking(result) -> None:  # type: ignore[no-untyped-def]
    s = result.summary
    assert s["rank_groups"] >= 20
    assert s["rank_correlation"] >= MIN_RANK_CORRELATION
