"""estimate, fit and recommend run with their default flags on every model of the zoo.

estimate and fit need a GPU (an H100); recommend compares the catalog. Each must answer: exit 0, or
exit 1 with a one-line "no: ..." when nothing can run the job as asked (a 671B model trained on at
most 8 GPUs), never a traceback, and strict JSON with the model's parameter count.

The default run captures every model once (`estimate`) and runs `fit` and `recommend` on one model
of each builder kind in `REPRESENTATIVE`. `fit` searches the batch size (a capture per probe) and
`recommend` captures each precision it compares, so on every model they are marked ``slow`` and
left out of the default run: ``python -m pytest -n 2 -m slow`` runs them.
"""

from __future__ import annotations

import pytest
from tests.cli.conftest import invoke, strict_json
from tests.conftest import needs_torch

from whichgpu.workload.zoo import all_entries

pytestmark = [needs_torch]

# Serving-only entries (linear-attention decoders the PyTorch zoo does not build: estimate, fit and
# recommend refuse them in one line, tests/unit/test_hybrid_linear_attention.py) are not swept.
ZOO = sorted(m for m, e in all_entries().items() if "serving only" not in (e.notes or ""))
# One model per kind of builder (the capture paths): a CNN, a detector, an encoder, an
# encoder-decoder, a vision transformer, the diffusion UNet, a dense decoder, an MoE decoder, one
# with multi-head latent attention and a hybrid Mamba decoder.
REPRESENTATIVE = ("resnet50-v1.5", "ssd300", "bert-base-squad", "t5-base", "vit-b16", "sd-unet", "gpt2",
                  "mixtral-8x7b", "deepseek-v2-lite", "nemotron-h-8b")
SWEEP = [pytest.param(m, marks=() if m in REPRESENTATIVE else pytest.mark.slow) for m in ZOO]
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


def test_the_representatives_are_zoo_models_of_distinct_builders() -> None:
    from whichgpu.workload.zoo.llm.build import load_packaged_config

    entries = all_entries()
    assert set(REPRESENTATIVE) <= set(ZOO)
    # the builder, and for the config-built models the architecture (the config's model_type)
    kinds = {(entries[m].builder, load_packaged_config(entries[m].config).get("model_type") if entries[m].config
              else None) for m in REPRESENTATIVE}
    assert len(kinds) == len(REPRESENTATIVE)


@pytest.mark.parametrize("model", ZOO)
def test_estimate_runs_on_every_zoo_model(model: str) -> None:
    est = _run("estimate", model, "--gpu", "h100")["results"][0]
    assert est["step_s"] > 0 and est["coverage"]["warning"] is None
    _params_ok(model, est["workload"]["params"], est["workload"]["active_params"])


@pytest.mark.parametrize("model", SWEEP)
def test_fit_runs_on_every_zoo_model(model: str) -> None:
    fit = _run("fit", model, "--gpu", "h100")
    _params_ok(model, fit["workload"]["params"], fit["workload"]["active_params"])
    assert fit["total_bytes"] > 0


@pytest.mark.parametrize("model", SWEEP)
def test_recommend_runs_on_every_zoo_model(model: str) -> None:
    doc = _run("recommend", model)
    (w,) = doc["workloads"]
    _params_ok(model, w["params"], w["active_params"])
    assert doc["rows"] or doc["cannot_run"]
