"""Today's models in the zoo: parameter counts against the published figures, training FLOPs per
token against 6 x active + attention, MoE cost scaling with top-k and the capacity factor, sliding
windows, latent attention and the KV cache each implies.

(That the in-house decoder equals transformers' definitions, parameter by parameter, is
tests/unit/test_decoder_vs_transformers.py; here the full-size configs are checked.)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tests.conftest import needs_torch

from whichgpu.workload.zoo import get_entry, load_entries
from whichgpu.workload.zoo.llm.args import DecoderArgs, args_from_config

MODERN = [e.id for e in load_entries("modern")]


def _args(config: str) -> DecoderArgs:
    from whichgpu.workload.zoo.llm.build import CONFIGS

    with open(CONFIGS / f"{config}.json") as fh:
        return args_from_config(json.load(fh), config)


# Published totals, as their publishers state them, with the tolerance each rounding allows (0.5 %
# unless said). The counts are of the model transformers builds from the config (no multi-token-
# prediction layers).
PUBLISHED: dict[str, tuple[float, float, str]] = {
    # id: (published total, relative tolerance, where)
    "llama-3.1-8b": (8.03e9, 0.005, "HF hub safetensors total of meta-llama/Llama-3.1-8B: 8.03B"),
    "llama-3.1-70b": (70.6e9, 0.005, "HF hub safetensors total of meta-llama/Llama-3.1-70B: 70.6B"),
    "llama-3.2-1b": (1.23e9, 0.005, "Llama 3.2 model card: 1.23B parameters (1B)"),
    "llama-3.2-3b": (3.21e9, 0.005, "Llama 3.2 model card: 3.21B parameters (3B)"),
    "qwen2.5-7b": (7.61e9, 0.005, "Qwen2.5-7B model card: Number of Parameters 7.61B"),
    "qwen2.5-72b": (72.7e9, 0.005, "Qwen2.5-72B model card: Number of Parameters 72.7B"),
    "qwen3-8b": (8.2e9, 0.005, "Qwen3-8B model card: Number of Parameters 8.2B"),
    "qwen3-32b": (32.8e9, 0.005, "Qwen3-32B model card: 32.8B"),
    "qwen3-30b-a3b": (30.5e9, 0.005, "Qwen3-30B-A3B model card: 30.5B in total, 3.3B activated"),
    "qwen3-235b-a22b": (235e9, 0.005, "Qwen3-235B-A22B model card: 235B in total, 22B activated"),
    "deepseek-v3": (671e9, 0.005, "DeepSeek-V3 technical report: 671B total, 37B activated (685B on the hub "
                                  "adds the 14B MTP module)"),
    "deepseek-v2-lite": (15.7e9, 0.005, "DeepSeek-V2-Lite model card: 15.7B total, 2.4B activated"),
    "kimi-k2": (1_026_470_731_056, 0.005, "sum of the moonshotai/Kimi-K2-Instruct safetensors (model card: "
                                          "1T total, 32B activated), FP8 scale tensors included"),
    "gpt-oss-20b": (20.9e9, 0.005, "gpt-oss model card (arXiv 2508.10925): 20.9B total, 3.6B active"),
    "gpt-oss-120b": (116.8e9, 0.005, "gpt-oss model card: 116.8B total, 5.1B active"),
    "gemma-2-9b": (917_504_000 + 8_324_201_984, 0.005, "Gemma 2 report: embedding + non-embedding parameters"),
    "gemma-2-27b": (1_179_648_000 + 26_047_480_320, 0.005, "Gemma 2 report: embedding + non-embedding parameters"),
    "gemma-3-1b": (302e6 + 698e6, 0.005, "Gemma 3 report, Table 1: 302M embedding + 698M non-embedding"),
    "gemma-3-27b": (1416e6 + 25600e6, 0.005, "Gemma 3 report, Table 1, language model: 1,416M + 25,600M "
                                             "(the 417M vision encoder is not built)"),
    # Rounded to 5B / 1B / 10B by their publishers, who count the MTP layers differently: 1 %.
    "glm-4.5": (355e9, 0.01, "GLM-4.5 README: 355 billion total, 32 billion active"),
    "glm-4.5-air": (106e9, 0.01, "GLM-4.5 README: 106 billion total, 12 billion active"),
    "minimax-m2": (230e9, 0.01, "MiniMax-M2 model card: 230 billion total, 10 billion active"),
    "glm-5": (744e9, 0.005, "GLM-5: 744B total, 40B active (the MTP layer not built)"),
    "qwen3.5-397b-a17b": (397e9, 0.005, "Qwen3.5-397B-A17B: 397B total, 17B activated (its name; the vision "
                                        "tower and the MTP layer are not built)"),
}


def test_every_modern_entry_has_a_published_count() -> None:
    assert set(MODERN) == set(PUBLISHED)


@pytest.mark.parametrize("model", MODERN)
def test_parameters_equal_the_published_count(model: str) -> None:
    entry = get_entry(model)
    total, active = _args(entry.config).params()
    assert total == entry.params_reference  # transformers' count of the same config (see modern.toml)
    published, tol, _where = PUBLISHED[model]
    assert total == pytest.approx(published, rel=tol)
    assert 0 < active <= total


@pytest.mark.parametrize(("model", "active_published", "embedding_rows"), [
    # Active parameters as their publishers count them: Qwen counts the input embedding and the head;
    # DeepSeek ("36.7B including 0.9B embedding and 0.9B head", README_WEIGHTS) too; OpenAI counts the
    # unembedding but not the embedding (5.13B, 3.61B).
    ("qwen3-30b-a3b", 3.3e9, 0),
    ("qwen3-235b-a22b", 22e9, 0),
    ("deepseek-v3", 37e9, 0),
    ("gpt-oss-120b", 5.13e9, 1),
    ("gpt-oss-20b", 3.61e9, 1),
])
def test_active_parameters_equal_the_published_count(model: str, active_published: float, embedding_rows: int) -> None:
    a = _args(get_entry(model).config)
    active = a.params()[1] - embedding_rows * a.vocab * a.hidden
    assert active == pytest.approx(active_published, rel=0.02)  # published to 2-3 significant figures


# ---- FLOPs ----------------------------------------------------------------------------------

def _expected_train_flops_per_token(a: DecoderArgs, seq: int) -> float:
    """6 x (matmul weights a token goes through: the active parameters less an untied input embedding)
    plus attention: per layer and head, forward 2 x (d_qk + d_v) per (query, key) pair and
    backward 2.5x that (FlashAttention-2), over the causal pairs (a sliding-window layer: those in
    its window), per token of the sequence. For DeepSeek-V3 at 512 tokens: 6 x 37.55e9 - 6 x 0.93e9
    (embedding) ~ 2.2e11, attention 61 x 128 x 320 x 7 x 256.5 / 1 ~ 4.5e9 per token."""
    from whichgpu.workload.flops import attention_pairs

    # The input embedding is a lookup, not a matmul; a tied LM head is the same matrix and does multiply.
    active = a.params()[1] - (0 if a.tie_embeddings else a.vocab * a.hidden)
    attention = 0.0
    for i in range(a.layers):
        pairs = attention_pairs(seq, seq, True, a.window(i))
        attention += a.heads * pairs * 2 * (a.qk_dim + a.v_dim) * 3.5
    return 6.0 * active + attention / seq


@needs_torch
@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen3-8b", "qwen3-30b-a3b", "deepseek-v3", "deepseek-v2-lite",
                                   "gpt-oss-20b", "gemma-2-9b", "gemma-3-1b", "glm-4.5-air", "minimax-m2", "kimi-k2"])
def test_training_flops_per_token_are_6_active_plus_attention(model: str) -> None:
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.spec import WorkloadSpec

    seq = 512
    t = get_trace(WorkloadSpec(model=model, task="train", batch_size=1, seq_len=seq, precision="amp-bf16"))
    traced = (t.total_flops("forward") + t.total_flops("backward")) / t.tokens
    expected = _expected_train_flops_per_token(_args(get_entry(model).config), seq)
    # The rest (norms, activations, softmax, router, loss) is a few per cent at most.
    assert traced == pytest.approx(expected, rel=0.03)


def _moe_flops(tmp: Path, **over: object) -> float:
    """Grouped-GEMM FLOPs of a training step of a small Qwen3-MoE (8 experts, top-2, 2 x 256 tokens)."""
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.spec import WorkloadSpec

    cfg = dict(model_type="qwen3_moe", hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=1000,
               num_experts=8, num_experts_per_tok=2, max_position_embeddings=4096)
    options = tuple((k, v) for k, v in over.items() if k.startswith("moe_"))
    cfg.update({k: v for k, v in over.items() if not k.startswith("moe_")})
    path = tmp / f"moe-{len(list(tmp.iterdir()))}.json"
    path.write_text(json.dumps(cfg))
    trace = get_trace(WorkloadSpec(model=str(path), task="train", batch_size=2, seq_len=256, precision="amp-bf16",
                                   options=options), use_cache=False)
    return sum(o.total_flops for o in trace.ops if o.name.startswith("whichgpu.grouped_mm"))


@needs_torch
def test_moe_flops_scale_with_top_k_not_with_the_number_of_experts(tmp_path: Path) -> None:
    base = _moe_flops(tmp_path)
    assert _moe_flops(tmp_path, num_experts=64) == pytest.approx(base, rel=1e-9)
    assert _moe_flops(tmp_path, num_experts_per_tok=4) == pytest.approx(2 * base, rel=1e-9)
    # 2 layers x 3 (forward + backward) x 2 FLOPs x 512 tokens x 2 experts x 3 GEMMs (gate, up, down) of 256 x 128
    assert base == pytest.approx(2 * 3 * 2 * 512 * 2 * 3 * 256 * 128, rel=1e-9)


@needs_torch
def test_a_capacity_factor_pads_every_expert_to_its_capacity(tmp_path: Path) -> None:
    base = _moe_flops(tmp_path)
    # capacity ceil(1.5 x 1024 routed rows / 8 experts) = 192 rows per expert: 1536 rows, 1.5x
    assert _moe_flops(tmp_path, moe_capacity=1.5) == pytest.approx(1.5 * base, rel=1e-9)
    assert _moe_flops(tmp_path, moe_skew=4.0) == pytest.approx(base, rel=1e-9)  # dropless: skew moves no FLOPs


@needs_torch
def test_moe_options_are_checked(tmp_path: Path) -> None:
    from whichgpu.errors import InputError

    with pytest.raises(InputError, match="skew"):
        _moe_flops(tmp_path, moe_skew=0.5)
    with pytest.raises(InputError, match="capacity"):
        _moe_flops(tmp_path, moe_capacity=-1.0)


@needs_torch
def test_decode_reads_the_weights_of_the_experts_it_touches_only() -> None:
    """Batch 1 decode of DeepSeek-V3 touches 8 of 256 experts: the grouped GEMMs read 8/256 of the
    expert weights; at batch 64 (512 routed rows) every expert."""
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.spec import WorkloadSpec

    def expert_bytes(batch: int) -> float:
        t = get_trace(WorkloadSpec(model="deepseek-v3", task="infer", batch_size=batch, phase="decode", context=1024,
                                   precision="bf16"))
        return sum(o.bytes_read * o.count for o in t.ops if o.name == "whichgpu.grouped_mm")

    a = _args("deepseek-v3")
    moe_layers = a.layers - a.dense_layers
    full = moe_layers * a.experts * 3 * a.hidden * a.expert_intermediate * 2  # bf16
    assert expert_bytes(1) == pytest.approx(full * 8 / 256, rel=0.01)
    assert expert_bytes(64) == pytest.approx(full, rel=0.01)


# ---- attention variants and the KV cache -------------------------------------------------------

@needs_torch
def test_sliding_window_layers_attend_within_their_window() -> None:
    """Gemma-2 9B prefill of 8192 tokens: 21 global layers see the causal square, 21 local layers a
    4096 band (FlashAttention skips the blocks outside it)."""
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.flops import attention_pairs, sdpa_flops
    from whichgpu.workload.spec import WorkloadSpec

    t = get_trace(WorkloadSpec(model="gemma-2-9b", task="infer", batch_size=1, phase="prefill", seq_len=8192,
                               precision="bf16"))
    att = [o for o in t.ops if o.category == "attention"]
    local = sum(o.total_flops for o in att if "window=4096" in o.tags)
    total = sum(o.total_flops for o in att)
    a = _args("gemma-2-9b")
    per_layer = sdpa_flops(1, a.heads, 8192, 8192, a.head_dim, a.head_dim, True)
    # plus the soft-capping, 8 FLOPs per pair
    cap = a.heads * attention_pairs(8192, 8192, True) * 8
    assert total - local == pytest.approx(21 * (per_layer + cap), rel=1e-6)
    windowed = sdpa_flops(1, a.heads, 8192, 8192, a.head_dim, a.head_dim, True, 4096)
    assert local == pytest.approx(21 * (windowed + a.heads * attention_pairs(8192, 8192, True, 4096) * 8), rel=1e-6)
    assert all("softcap" in o.tags for o in att)


@pytest.mark.parametrize(("model", "positions", "expected"), [
    # DeepSeek-V3: 61 layers x (512 latent + 64 rotary key) x 4096 positions x 2 bytes
    ("deepseek-v3", 4096, 61 * 576 * 4096 * 2),
    # gpt-oss-120b: 18 global layers x 4096 + 18 local layers x 128 positions, 2 x 8 KV heads x 64, 2 bytes
    ("gpt-oss-120b", 4096, (18 * 4096 + 18 * 128) * 2 * 8 * 64 * 2),
    # Gemma-3 27B: 10 global x 32768 + 52 local x 1024 positions, 2 x 16 KV heads x 128, 2 bytes
    ("gemma-3-27b", 32768, (10 * 32768 + 52 * 1024) * 2 * 16 * 128 * 2),
    # Llama-3.1 8B: 32 layers x 2 x 8 KV heads x 128 x 8192 x 2 bytes (1 GiB)
    ("llama-3.1-8b", 8192, 32 * 2 * 8 * 128 * 8192 * 2),
])
def test_kv_cache_per_sequence(model: str, positions: int, expected: int) -> None:
    from whichgpu.memory.weights import kv_cache_bytes

    assert kv_cache_bytes(_args(get_entry(model).config).shape(), 1, positions, 2.0) == expected


@needs_torch
def test_decode_memory_holds_the_latent_cache() -> None:
    """The KV cache line of a DeepSeek-V3 decode at batch 8 and 8K context is the latent cache (61 x 576
    values x 8193 positions x 8 x 2 bytes = 4.6 GB), not 128 heads of keys and values (~0.3 TB)."""
    from whichgpu.hardware.catalog import load_catalog
    from whichgpu.memory.estimate import memory_estimate
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.spec import WorkloadSpec

    t = get_trace(WorkloadSpec(model="deepseek-v3", task="infer", batch_size=8, phase="decode", context=8192,
                               precision="bf16"))
    m = memory_estimate(t, load_catalog().get("h200"))
    assert m.kv_cache.bytes == 61 * 576 * 8193 * 8 * 2
    assert "576 latent values (MLA)" in m.kv_cache.assumption
    assert m.inputs.bytes < 1e6  # token ids and positions: the cache is not counted twice


def test_attention_variants_are_described() -> None:
    text = _args("gpt-oss-120b").attention_text()
    assert text == "GQA 64/8, sliding window 128 on 18 of 36 layers, attention sinks"
    assert "logit soft-cap 50" in _args("gemma-2-9b").attention_text()
    assert _args("deepseek-v3").attention_text().startswith("multi-head latent attention, 128 heads")
    assert math.isclose(_args("glm-4.5").rotary_dim / _args("glm-4.5").head_dim, 0.5)
