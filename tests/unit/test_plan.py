"""The one Plan: validation in the library's terms, derived values, what is not modelled yet."""

from __future__ import annotations

import inspect
from dataclasses import FrozenInstanceError, fields

import pytest

from whichgpu.errors import InputError, NotModelledError, WhichGPUError
from whichgpu.parallel.plan import FULL_SHARD, GRAD_SHARD, LABELS, SHARDINGS, Plan, make_plan
from whichgpu.report.flags import flag_message


def test_plan_is_frozen_keyword_only_and_documented() -> None:
    with pytest.raises(TypeError):
        Plan(2)  # type: ignore[misc]
    p = Plan(dp=2)
    with pytest.raises(FrozenInstanceError):
        p.dp = 3  # type: ignore[misc]
    src = inspect.getsource(Plan)
    for f in fields(Plan):  # a docstring under every field
        assert f'    {f.name}:' in src
        after = src.split(f"\n    {f.name}:", 1)[1].split("\n", 2)[1]
        assert after.strip().startswith('"""'), f.name


def test_gpus_and_labels() -> None:
    assert Plan().gpus == 1 and Plan().parallel_label() == "single GPU"
    p = Plan(dp=4, tp=2, sharding="zero3")
    assert p.gpus == 8
    assert p.parallel_label() == "ZeRO-3 x 4, TP 2"
    assert set(LABELS) == set(SHARDINGS)
    assert set(FULL_SHARD) <= set(GRAD_SHARD) <= set(SHARDINGS)


def test_hybrid_sharding_shards_inside_a_node() -> None:
    assert Plan(dp=32, sharding="fsdp-hybrid").shard_gpus(8) == 8
    assert Plan(dp=32, tp=2, sharding="fsdp-hybrid").shard_gpus(8) == 4  # 4 data-parallel ranks per node
    assert Plan(dp=4, sharding="fsdp-hybrid").shard_gpus(8) == 4
    assert Plan(dp=32, sharding="zero3").shard_gpus(8) == 32


@pytest.mark.parametrize(("changes", "field", "text"), [
    ({"dp": 0}, "dp", "data-parallel degree must be a whole number >= 1"),
    ({"tp": -1}, "tp", "tensor-parallel degree"),
    ({"grad_accum": 0}, "grad_accum", "gradient accumulation steps"),
    ({"micro_batch": 0}, "micro_batch", "micro_batch must be >= 1"),
    ({"offload": "optimizer"}, "offload", "needs a sharding"),
    ({"schedule": "interleaved-1f1b", "pp": 2}, "vp", "needs vp >= 2"),
    ({"vp": 2}, "vp", "need pipeline parallelism"),
    ({"power_limit_w": -5.0}, "power_limit_w", "power_limit_w must be a number > 0"),
    ({"power_limit_w": float("nan")}, "power_limit_w", "power_limit_w must be a number > 0 and <= 5000"),
    ({"dp": 2**70}, "dp", "data-parallel degree must be a whole number >= 1 and <= 65536"),
])
def test_bad_plans_name_the_field_not_a_flag(changes: dict[str, object], field: str, text: str) -> None:
    with pytest.raises(InputError) as e:
        make_plan(**changes)
    assert e.value.field == field and text in str(e.value)
    assert "--" not in str(e.value)  # the library's terms; the CLI maps the field to its flag


def test_unknown_modes_suggest_valid_ones() -> None:
    with pytest.raises(WhichGPUError, match="unknown sharding 'zero4'"):
        make_plan(sharding="zero4")
    with pytest.raises(WhichGPUError, match="unknown schedule"):
        make_plan(schedule="zigzag")


def test_cli_prefixes_the_flag() -> None:
    with pytest.raises(InputError) as e:
        make_plan(dp=0)
    assert flag_message(e.value).startswith("--gpus: data-parallel degree")


def test_inference_plans_refuse_training_switches() -> None:
    with pytest.raises(InputError, match="apply to training"):
        make_plan("infer", dp=2, sharding="zero3")
    with pytest.raises(InputError, match="recomputation applies to training"):
        make_plan("infer", recompute="full")


def test_degrees_not_modelled_yet_are_a_clear_error() -> None:
    Plan(dp=8).require_modelled()
    for name in ("pp", "cp", "ep"):
        with pytest.raises(NotModelledError, match="not modelled yet") as e:
            Plan(**{name: 2}).require_modelled()  # type: ignore[arg-type]
        assert e.value.field == name
    with pytest.raises(NotModelledError, match="tensor parallelism"):
        Plan(tp=2).require_modelled()
    Plan(tp=2).require_modelled(tp_traced=True)


def test_plan_must_match_its_trace() -> None:
    Plan().check_trace(4, "none", "amp-bf16")
    with pytest.raises(InputError, match="micro-batch 8 differs from the traced batch 4"):
        Plan(micro_batch=8).check_trace(4, "none")
    with pytest.raises(InputError, match="recomputes 'full'"):
        Plan(recompute="full").check_trace(4, "none")
    with pytest.raises(InputError, match="precision 'fp8' differs"):
        Plan(precision="fp8").check_trace(4, "none", "amp-bf16")


def test_to_dict_echoes_every_field() -> None:
    d = Plan(dp=4, sharding="fsdp-hybrid", recompute="full").to_dict()
    assert {f.name for f in fields(Plan)} <= set(d)
    assert d["gpus"] == 4 and d["sharding_label"] == "FSDP HYBRID_SHARD" and d["recompute"] == "full"


def test_performance_parameters_live_in_params_toml_only(tmp_path: object) -> None:
    from pathlib import Path

    from whichgpu.errors import CatalogError
    from whichgpu.perf.params import load_params

    p = Path(str(tmp_path)) / "params.toml"
    p.write_text("[params]\nmm_ceiling = 0.8\n")
    with pytest.raises(CatalogError, match="missing parameter\\(s\\): fp32_ceiling"):
        load_params(p)
