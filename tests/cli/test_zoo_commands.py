"""estimate, fit and recommend run with their default flags on every model of the zoo.

estimate and fit need a GPU (an H100); recommend compares the catalog. Each must answer: exit 0, or
exit 1 with a one-line "no: ..." when nothing can run the job as asked (a 671B model trained on at
most 8 GPUs), never a traceback, and strict JSON with the model's parameter count.
"""

from __future__ import annotations

import pytest
from tests.cli.conftest import invoke, strict_json
from tests.conftest import needs_torch

from whichgpu.workload.zoo import all_entries

pytestmark = [needs_torch, pytest.mark.slow]

ZOO = sorted(all_entries())
SCHEMAS = {"estimate": "whichgpu.estimate/1", "fit": "whichgpu.memory/1", "recommend": "whichgpu.recommend/1"}


def _run(command: str, model: str, *args: str) -> dict:  # type: ignore[type-arg]
    res = invoke(command, model, *args, "--json")
    assert res.exit_code in (0, 1), f"{command} {model}: exit {res.exit_code}: {res.output[-2000:]}"
    assert "Traceback" not in res.output
    if res.exit_code == 1:
        assert res.stderr.strip().startswith("no: ") and len(res.stderr.strip().splitlines()) == 1, res.stderr
    doc = strict_json(res.stdout)
    assert doc["schema"] == SCHEMAS[command]
    return doc  # type: ignore[no-any-return]


def _params_ok(model: str, params: int, active: int | None) -> None:
    ref = all_entries()[model].params_reference
    if ref is not None:
        assert params == pytest.approx(ref, rel=0.005)
    assert active is None or 0 < active <= params


@pytest.mark.parametrize("model", ZOO)
def test_estimate_and_fit_run_on_every_zoo_model(model: str) -> None:
    est = _run("estimate", model, "--gpu", "h100")["results"][0]
    assert est["step_s"] > 0 and est["coverage"]["warning"] is None
    _params_ok(model, est["workload"]["params"], est["workload"]["active_params"])
    fit = _run("fit", model, "--gpu", "h100")
    _params_ok(model, fit["workload"]["params"], fit["workload"]["active_params"])
    assert fit["total_bytes"] > 0


@pytest.mark.parametrize("model", ZOO)
def test_recommend_runs_on_every_zoo_model(model: str) -> None:
    doc = _run("recommend", model)
    (w,) = doc["workloads"]
    _params_ok(model, w["params"], w["active_params"])
    assert doc["rows"] or doc["cannot_run"]
