"""ModelShape: produced by the decoder builders, carried by the trace, read by attribute."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from whichgpu.perf.bands import workload_family
from whichgpu.report.trace import trace_document
from whichgpu.workload import cache
from whichgpu.workload.shape import ModelShape
from whichgpu.workload.trace import SCHEMA, Op, Trace
from whichgpu.workload.zoo.llm.args import args_from_config

CONFIGS = Path(__file__).resolve().parents[2] / "src" / "whichgpu" / "workload" / "configs"


def _config(name: str) -> dict[str, Any]:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def _trace(shape: ModelShape) -> Trace:
    return Trace(model="t", task="infer", phase="decode", batch_size=1, seq_len=None, image_size=None,
                 context=8, precision="bf16", optimizer="none", sparsity="none", samples=1, tokens=1,
                 params=0, trainable_params=0, param_bytes=0, buffer_bytes=0, input_bytes=0,
                 ops=[Op("aten.mm", "matmul", "forward", "", "bf16", 2.0, 1.0, 1.0, mm=(1, 1, 1, 1))], shape=shape)


def test_llama_2_7b_shape() -> None:
    s = args_from_config(_config("llama-2-7b")).shape()
    # Block matmul weights: 32 layers x (4 x 4096^2 attention + 3 x 4096 x 11008 MLP) = 6,476,005,376;
    # a dense model's active parameters are all of them (6,738,415,616 with embeddings and head).
    assert s == ModelShape(arch="decoder", family="llama", layers=32, hidden=4096, heads=32, kv_heads=32,
                           head_dim=128, intermediate=11008, vocab=32000, max_positions=4096, gated_mlp=True,
                           matmul_params=6_476_005_376, block_params=6_476_005_376, active_params=6_738_415_616,
                           attention="MHA 32")
    assert (s.experts, s.active_experts, s.tp, s.kv_bytes) == (0, 0, 1, None)


def test_mixtral_shape_and_tensor_parallel_rank() -> None:
    a = args_from_config(_config("mixtral-8x7b"))
    s = a.shape(kv_bytes=1.0)
    assert (s.experts, s.active_experts, s.kv_heads, s.intermediate, s.kv_bytes) == (8, 2, 8, 14336, 1.0)
    # one rank of 4: 32/4 = 8 query heads, 8/4 = 2 K/V heads, 14336/4 = 3584; hidden and vocab whole
    r = a.sharded(4).shape()
    assert (r.heads, r.kv_heads, r.head_dim, r.intermediate, r.hidden, r.vocab, r.tp, r.tp_head) == (
        8, 2, 128, 3584, 4096, 32000, 4, True)


def test_parallel_block_families() -> None:
    gptj = args_from_config(_config("gpt-j-6b")).shape()
    assert (gptj.family, gptj.gated_mlp, gptj.parallel_norms, gptj.rotary_dim) == ("gptj", False, 1, 64)
    gpt2 = args_from_config(_config("gpt2")).shape()
    assert (gpt2.family, gpt2.gated_mlp, gpt2.rotary_dim, gpt2.tie_embeddings) == ("gpt2", False, 0, True)


def test_workload_family() -> None:
    assert workload_family(ModelShape(arch="decoder", family="llama")) == "decoder"
    assert workload_family(ModelShape(family="cnn")) == "cnn"
    assert workload_family(ModelShape(arch="bert")) == "other"
    assert workload_family(ModelShape()) == "other"


def test_the_trace_round_trips_its_shape() -> None:
    shape = args_from_config(_config("llama-3-8b")).sharded(2).shape(kv_bytes=1.0)
    back = Trace.from_json(_trace(shape).to_json())
    assert back.shape == shape
    assert back.ops == _trace(shape).ops
    assert json.loads(_trace(shape).to_json())["schema"] == SCHEMA == "whichgpu.trace/3"


def test_a_cached_trace_of_the_old_schema_is_recaptured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    old = json.loads(_trace(ModelShape()).to_json())
    old["schema"] = "whichgpu.trace/1"
    del old["shape"]
    old["model_meta"] = {"arch": "decoder"}
    (tmp_path / "k.json").write_text(json.dumps(old))
    assert cache.load("k") is None
    cache.store("k", _trace(ModelShape(arch="decoder")))
    hit = cache.load("k")
    assert hit is not None and hit.shape.arch == "decoder"


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(TypeError, match="experts_per_token"):
        ModelShape.from_dict({"arch": "decoder", "experts_per_token": 2})


def test_json_report_emits_the_shape_under_both_names() -> None:
    shape = args_from_config(_config("mixtral-8x7b")).shape()
    doc = trace_document(_trace(shape))
    assert doc["model_shape"] == shape.to_dict()
    assert doc["model_shape"]["active_experts"] == 2 and doc["model_shape"]["heads"] == 32
    # model_meta keeps its fields (experts_per_token included) for readers of the old key
    assert doc["model_meta"] == {**doc["model_shape"], "experts_per_token": 2}
