"""Engines that run on one vendor's GPUs only (the engine profile's ``vendors``)."""

from __future__ import annotations

import json

from tests.cli.conftest import invoke

from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.engine import get_engine


def test_tensorrt_llm_runs_on_nvidia_gpus_only() -> None:
    trt, vllm = get_engine("tensorrt-llm"), get_engine("vllm")
    cat = load_catalog()
    amd, nv = cat.get("mi300x"), cat.get("h100-sxm5-80gb")
    assert trt.vendors == ("NVIDIA",) and get_engine("tensorrt-llm-0.6").vendors == ("NVIDIA",)
    assert trt.unsupported_on(nv.name, nv.vendor) is None
    assert "NVIDIA GPUs only" in (trt.unsupported_on(amd.name, amd.vendor) or "")
    assert vllm.vendors == () and vllm.unsupported_on(amd.name, amd.vendor) is None


def test_estimate_refuses_an_engine_on_a_gpu_it_does_not_run_on() -> None:
    res = invoke("estimate", "llama-3.1-8b", "--gpu", "mi300x", "--engine", "tensorrt-llm", "--task", "infer")
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert err.startswith("error:") and "\n" not in err and "--engine" in err and "NVIDIA GPUs only" in err


def test_estimate_on_all_gpus_leaves_out_those_the_engine_does_not_run_on() -> None:
    res = invoke("estimate", "llama-3.1-8b", "--gpu", "all", "--engine", "tensorrt-llm", "--task", "infer", "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["results"]
    vendors = {load_catalog().get(r["gpu_id"]).vendor for r in rows}
    assert vendors == {"NVIDIA"} and len(rows) > 20


def test_recommend_weighs_only_the_gpus_the_engine_runs_on() -> None:
    from whichgpu.commands.common import engine_gpus

    cat = load_catalog()
    every = cat.get_many("all")
    kept = engine_gpus("tensorrt-llm", every, every=True)
    assert kept and {g.vendor for g in kept} == {"NVIDIA"}
    assert engine_gpus("vllm", every, every=True) == every  # every GPU
    h100 = cat.get_many("h100-sxm5-80gb")
    assert engine_gpus("tensorrt-llm", h100, every=False) == h100
    res = invoke("recommend", "llama-3.1-8b", "--task", "infer", "--engine", "tensorrt-llm", "--gpu", "mi300x,h100")
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert err.startswith("error:") and "\n" not in err and "--engine" in err and "MI300X" in err
