"""Zoo entries GPT-J 6B, Falcon-180B and BERT-Large sequence classification: names, parameter
counts, and captured FLOPs against the 2 x params x tokens rule.

The forward matmuls of a transformer cost 2 FLOPs per weight of each linear layer per token it
processes (Kaplan et al. 2020, C_forward ~ 2N). Embedding lookups are no matmul, norms and
biases are no matmul weight, and fused attention (SDPA) is counted apart ("attention"), so the
forward "matmul" FLOPs are 2 x (linear weights) x tokens; the arithmetic per model is below.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from whichgpu.errors import CaptureError, InputError  # noqa: E402
from whichgpu.workload.api import get_trace  # noqa: E402
from whichgpu.workload.spec import WorkloadSpec  # noqa: E402
from whichgpu.workload.trace import Trace  # noqa: E402
from whichgpu.workload.zoo import get_entry  # noqa: E402
from whichgpu.workload.zoo.base import BuildRequest  # noqa: E402

pytestmark = pytest.mark.usefixtures("isolated_cache")

NAMES = {
    "gpt-j-6b": ("GPT-J 6B", "gptj-6b", "EleutherAI/gpt-j-6b", "gpt-j"),
    "falcon-180b": ("Falcon 180B", "tiiuae/falcon-180B", "falcon180b"),
    "bert-large-cls": ("bert-large-uncased (sequence classification)", "BERT-Large sequence classification",
                       "bert-large-uncased-cls"),
}

# Linear weights (the matmul operands), from the configs:
# GPT-J 6B: h 4096, f 16384, V 50400, 28 layers: 28 x (q, k, v, out 4h^2 + fc_in, fc_out 2hf)
#   + lm_head Vh = 28 x 201,326,592 + 206,438,400 = 5,843,582,976 (of 6,050,882,784: 96.6%;
#   the rest is the wte lookup, LayerNorms and biases).
GPTJ_LINEAR = 28 * (4 * 4096**2 + 2 * 4096 * 16384) + 50400 * 4096
# Falcon-180B: h 14848, 232 heads and 8 K/V heads of 64, f 4h, V 65024, 80 layers:
#   80 x (query_key_value h x 248 x 64 + dense h^2 + MLP 2hf) + lm_head Vh (tied: the same weight
#   as the embedding, so it counts once in the parameters and once as a matmul)
#   = 178,552,307,712 (of 178,557,088,768: all but the LayerNorms).
FALCON_LINEAR = 80 * (14848 * 248 * 64 + 14848**2 + 2 * 14848 * 4 * 14848) + 65024 * 14848
# BERT-Large: h 1024, f 4096, 24 layers: 24 x (4h^2 + 2hf) = 301,989,888 per token; pooler h^2
#   and classifier 2h per sequence (first token only).
BERT_LINEAR = 24 * (4 * 1024**2 + 2 * 1024 * 4096)


def _trace(model: str, **kw: object) -> Trace:
    return get_trace(WorkloadSpec(model, **kw), use_cache=False)  # type: ignore[arg-type]


def _forward_matmul(t: Trace) -> float:
    return sum(o.flops * o.count for o in t.ops if o.phase == "forward" and o.category == "matmul")


# ---------------------------------------------------------------------------------------------
# names, metadata, parameter counts
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("zoo_id", sorted(NAMES))
def test_entry_resolves_by_every_name(zoo_id: str) -> None:
    e = get_entry(zoo_id)
    assert e.id == zoo_id
    for name in (*NAMES[zoo_id], e.title, *e.aliases, *e.validation_names):
        assert get_entry(name).id == zoo_id


def test_bert_large_uncased_still_means_squad() -> None:
    assert get_entry("bert-large-uncased").id == "bert-large-squad"
    assert get_entry("bert-large").id == "bert-large-squad"
    assert "bert-large-uncased (sequence classification)" in get_entry("bert-large-cls").validation_names


def test_entry_defaults() -> None:
    for zoo_id in ("gpt-j-6b", "falcon-180b"):
        e = get_entry(zoo_id)
        assert e.causal_lm and e.family == "decoder" and e.default_seq_len == 2048
        assert e.throughput_unit == "tokens/s"
    e = get_entry("bert-large-cls")
    assert (e.default_batch_size, e.default_seq_len, e.default_optimizer) == (4, 512, "adamw")
    assert e.family == "encoder" and not e.causal_lm


def test_bert_cls_parameter_count_equals_transformers() -> None:
    import transformers

    from whichgpu.workload.zoo.llm.build import load_packaged_config

    cfg = {k: v for k, v in load_packaged_config("bert-large-uncased").items()
           if not k.startswith("_") and k != "model_type"}
    conf = transformers.BertConfig(**cfg)
    conf.num_labels = 2
    with torch.device("meta"):
        hf = transformers.BertForSequenceClassification(conf)
    n = sum(p.numel() for p in hf.parameters())
    assert n == get_entry("bert-large-cls").params_reference == 335_143_938
    build = get_entry("bert-large-cls").load_builder()
    full = build(BuildRequest("train", 2, seq_len=16, truncate_layers=False))
    assert sum(p.numel() for p in full.model.parameters()) == n
    truncated = build(BuildRequest("train", 2, seq_len=16))
    assert truncated.full_params == n and truncated.repeats == {"bert.encoder.layer.1": 22}


@pytest.mark.parametrize(("zoo_id", "layers"), [("gpt-j-6b", 28), ("falcon-180b", 80)])
def test_llm_builds_two_layers_and_repeats(zoo_id: str, layers: int) -> None:
    e = get_entry(zoo_id)
    built = e.load_builder()(BuildRequest("train", 1, seq_len=16))
    assert built.repeats == {"transformer.h.1": layers - 2}
    assert built.full_params == e.params_reference


# ---------------------------------------------------------------------------------------------
# capture: FLOPs against 2 x params x tokens
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("zoo_id", "linear"), [("gpt-j-6b", GPTJ_LINEAR), ("falcon-180b", FALCON_LINEAR)])
def test_llm_train_step_flops(zoo_id: str, linear: int) -> None:
    t = _trace(zoo_id, task="train", batch_size=2, seq_len=256)
    n = get_entry(zoo_id).params_reference
    assert t.params == n and t.tokens == 2 * 256
    fwd = _forward_matmul(t)
    assert fwd == pytest.approx(2 * linear * t.tokens, rel=1e-9)
    # GPT-J: 5.84e9 / 6.05e9 = 0.966 (untied wte is a lookup); Falcon: 0.99997 (tied head)
    assert fwd == pytest.approx(2 * n * t.tokens, rel=0.04)
    # backward: input and weight gradients, 2 x forward (the first layer's input grad included)
    bwd = sum(o.flops * o.count for o in t.ops if o.phase == "backward" and o.category == "matmul")
    assert bwd == pytest.approx(2 * fwd, rel=1e-3)
    assert any(o.category == "optimizer" for o in t.ops)


@pytest.mark.parametrize(("zoo_id", "linear"), [("gpt-j-6b", GPTJ_LINEAR), ("falcon-180b", FALCON_LINEAR)])
def test_llm_decode_step_flops(zoo_id: str, linear: int) -> None:
    t = _trace(zoo_id, task="infer", phase="decode", batch_size=4, context=1000, precision="bf16")
    assert t.tokens == 4 and t.context == 1000
    assert _forward_matmul(t) == pytest.approx(2 * linear * 4, rel=1e-9)  # one token per sequence
    assert _forward_matmul(t) == pytest.approx(2 * t.params * 4, rel=0.04)
    # fused attention of each new token over the 1001-position cache (costs.sdpa_flops): per
    # query head and key position, QK^T 2d + PV 2d + softmax 5 FLOPs (GPT-J 16 heads of 256,
    # Falcon 232 of 64; Falcon's 8 K/V heads change bytes, not FLOPs)
    attn = sum(o.flops * o.count for o in t.ops if o.category == "attention")
    heads, d, layers = (16, 256, 28) if zoo_id == "gpt-j-6b" else (232, 64, 80)
    assert attn == pytest.approx(layers * 4 * heads * 1001 * (4 * d + 5), rel=1e-9)


def test_falcon_kv_cache_keeps_grouped_heads() -> None:
    """232 query heads share 8 K/V heads: the static cache is (B, 8, T, 64) per layer."""
    built = get_entry("falcon-180b").load_builder()(BuildRequest("infer", 3, phase="decode", context=100))
    k, v = built.inputs["cache"][0]
    assert tuple(k.shape) == tuple(v.shape) == (3, 8, 101, 64)
    shape = _trace("falcon-180b", task="infer", phase="decode", batch_size=1, context=8, precision="bf16").shape
    assert (shape.kv_heads, shape.head_dim, shape.gated_mlp, shape.parallel_norms) == (8, 64, False, 2)


def test_gptj_eager_scores_in_fp32() -> None:
    """transformers' GPT-J eager attention casts query and key to FP32 for QK^T."""
    t = _trace("gpt-j-6b", task="infer", batch_size=1, seq_len=64, precision="fp16", options=(("attention", "eager"),))
    bmm = [o for o in t.ops if o.name == "aten.bmm" and o.module == "transformer.h.0.attn"]
    assert [o.dtype for o in bmm] == ["fp32", "fp16"]  # QK^T in FP32, probabilities x V in FP16


def test_bert_cls_train_step_flops() -> None:
    t = _trace("bert-large-uncased (sequence classification)", task="train", precision="amp-fp16")
    b, s = 4, 512  # entry defaults
    assert (t.batch_size, t.seq_len, t.tokens, t.params) == (b, s, b * s, 335_143_938)
    # eager attention (as transformers of 2022): QK^T and PV are matmuls too, 2 x 2 x s x h per
    # token and layer; pooler and classifier on the first token of each sequence.
    expected = 2 * BERT_LINEAR * b * s + 24 * 2 * 2 * s * 1024 * b * s + 2 * b * (1024**2 + 1024 * 2)
    assert _forward_matmul(t) == pytest.approx(expected, rel=1e-9)  # 1.340e12
    # 2 x 335.1M x 2048 = 1.373e12: 0.976 of it (the embedding tables are lookups)
    assert _forward_matmul(t) == pytest.approx(2 * t.params * t.tokens, rel=0.03)


def test_bert_cls_sdpa_option_and_bad_option() -> None:
    t = _trace("bert-large-cls", task="train", batch_size=2, seq_len=128, options=(("attention", "sdpa"),))
    assert any(o.category == "attention" for o in t.ops)
    with pytest.raises(InputError, match="attention must be"):
        _trace("bert-large-cls", task="train", batch_size=2, seq_len=128, options=(("attention", "flash"),))


# ---------------------------------------------------------------------------------------------
# a user's config.json with model_type gptj / falcon goes through the in-house decoder
# ---------------------------------------------------------------------------------------------

def _config(tmp_path: Path, cfg: dict[str, object]) -> str:
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return str(p)


@pytest.mark.parametrize(("name", "family"), [("gpt-j-6b", "gptj"), ("falcon-180b", "falcon")])
def test_config_json_uses_builtin_decoder(tmp_path: Path, name: str, family: str) -> None:
    from whichgpu.workload.zoo.llm.build import load_packaged_config

    path = _config(tmp_path, load_packaged_config(name))
    t = _trace(path, task="infer", phase="decode", batch_size=2, context=64, precision="bf16")
    assert t.params == get_entry(name).params_reference
    assert not any("transformers" in n for n in t.notes)  # not the transformers fallback
    assert t.shape.family == family


def test_falcon_with_alibi_is_refused_clearly(tmp_path: Path) -> None:
    path = _config(tmp_path, {"model_type": "falcon", "hidden_size": 64, "num_hidden_layers": 2,
                              "num_attention_heads": 4, "vocab_size": 100, "alibi": True})
    with pytest.raises(CaptureError, match="ALiBi"):
        _trace(path, task="infer", batch_size=1, seq_len=8)
