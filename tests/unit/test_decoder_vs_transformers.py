"""The built-in decoder equals transformers' definitions: parameters and forward FLOPs.

whichgpu builds Llama/Mistral/Mixtral/Qwen2/GPT-2/GPT-J/Falcon with its own compact definition
(importing transformers' model code costs seconds). These tests build both on the meta device
from the same small config and compare exactly.
"""

from __future__ import annotations

import pytest
from tests.conftest import needs_torch

pytestmark = needs_torch

_SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              vocab_size=100, head_dim=32, max_position_embeddings=512)
CONFIGS = {
    "llama": dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                  num_attention_heads=8, num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256),
    "mistral": dict(model_type="mistral", hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                    num_attention_heads=8, num_key_value_heads=4, vocab_size=1000, max_position_embeddings=256),
    "qwen2": dict(model_type="qwen2", hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=8, num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256),
    "mixtral": dict(model_type="mixtral", hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, vocab_size=500, max_position_embeddings=256,
                    num_local_experts=4, num_experts_per_tok=2),
    "gpt2": dict(model_type="gpt2", n_embd=128, n_layer=2, n_head=4, vocab_size=1000, n_positions=256),
    # GPT-J 6B scaled down: rotary on the first quarter of each head (64 of 256 there, 16 of 64 here).
    "gptj": dict(model_type="gptj", n_embd=256, n_layer=2, n_head=4, rotary_dim=16, vocab_size=50400,
                 n_positions=256),
    "gptj-tied": dict(model_type="gptj", n_embd=128, n_layer=2, n_head=4, rotary_dim=32, vocab_size=50400,
                      n_positions=256, tie_word_embeddings=True),
    # Falcon-180B scaled down: new decoder architecture, GQA (232 / 8 there, 8 / 2 here), ln_attn + ln_mlp.
    "falcon": dict(model_type="falcon", hidden_size=256, num_hidden_layers=2, num_attention_heads=8,
                   num_kv_heads=2, new_decoder_architecture=True, vocab_size=1000),
    # Falcon-11B style (new architecture, one LayerNorm), Falcon-7B style (multi-query, one LayerNorm)
    # and the sequential block with biases (parallel_attn false, bias true, untied head).
    "falcon-1ln": dict(model_type="falcon", hidden_size=256, num_hidden_layers=2, num_attention_heads=8,
                       num_kv_heads=2, new_decoder_architecture=True, num_ln_in_parallel_attn=1, vocab_size=1000),
    "falcon-mq": dict(model_type="falcon", hidden_size=256, num_hidden_layers=2, num_attention_heads=8,
                      vocab_size=1000),
    "falcon-seq": dict(model_type="falcon", hidden_size=256, num_hidden_layers=2, num_attention_heads=8,
                       multi_query=False, parallel_attn=False, bias=True, tie_word_embeddings=False,
                       vocab_size=1000),
    # Today's families, scaled down (4 layers: local and global, dense and routed layers both occur).
    "qwen3": dict(_SMALL, model_type="qwen3"),
    "qwen3_moe": dict(_SMALL, model_type="qwen3_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48),
    "gemma2": dict(_SMALL, model_type="gemma2", sliding_window=16, attn_logit_softcapping=50.0,
                   final_logit_softcapping=30.0, query_pre_attn_scalar=32),
    "gemma3_text": dict(_SMALL, model_type="gemma3_text", sliding_window=16),
    "gpt_oss": dict(_SMALL, model_type="gpt_oss", num_local_experts=4, num_experts_per_tok=2, sliding_window=16,
                    layer_types=["sliding_attention", "full_attention"] * 2),
    "deepseek_v3": dict(_SMALL, model_type="deepseek_v3", n_routed_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=48, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16,
                        qk_rope_head_dim=8, v_head_dim=16, first_k_dense_replace=1, n_shared_experts=1,
                        n_group=1, topk_group=1),
    "deepseek_v2": dict(_SMALL, model_type="deepseek_v2", n_routed_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=48, q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=16,
                        qk_rope_head_dim=8, v_head_dim=16, first_k_dense_replace=1, n_shared_experts=2,
                        n_group=1, topk_group=1),
    "glm4_moe": dict(_SMALL, model_type="glm4_moe", n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                     first_k_dense_replace=1, n_shared_experts=1, use_qk_norm=True, attention_bias=True, n_group=1,
                     topk_group=1, partial_rotary_factor=0.5),
    "minimax_m2": dict(_SMALL, model_type="minimax_m2", num_local_experts=4, num_experts_per_tok=2, rotary_dim=16,
                       use_qk_norm=True),
}
MODERN = ["qwen3", "qwen3_moe", "gemma2", "gemma3_text", "gpt_oss", "deepseek_v3", "deepseek_v2", "glm4_moe",
          "minimax_m2"]


def _hf_model(cfg: dict):  # type: ignore[no-untyped-def]
    import torch
    import transformers

    conf = transformers.AutoConfig.for_model(**cfg)
    conf._attn_implementation = "eager"
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(conf)


def _ours(cfg: dict, seq: int):  # type: ignore[no-untyped-def]
    from whichgpu.workload.zoo.base import BuildRequest
    from whichgpu.workload.zoo.llm.build import build_decoder

    return build_decoder(cfg, BuildRequest("infer", 2, seq_len=seq, truncate_layers=False,
                                           options=(("attention", "eager"),)))


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_parameter_count_equals_transformers(family: str) -> None:
    cfg = CONFIGS[family]
    hf = _hf_model(cfg)
    ours = _ours(cfg, 16)
    n_hf = sum(p.numel() for p in hf.parameters())
    assert sum(p.numel() for p in ours.model.parameters()) == n_hf
    assert ours.full_params == n_hf  # the closed-form count used for truncated builds


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "gpt2", "gptj", "gptj-tied", "falcon", "falcon-1ln",
                                    "falcon-mq", "falcon-seq", "qwen3", "gemma2", "gemma3_text"])
def test_forward_flops_equal_transformers(family: str) -> None:
    """Dense families: the same GEMM FLOPs (torch's FlopCounterMode on both, eager attention).

    The only difference allowed is the rotary-angle product (inv_freq x positions, head_dim/2 x seq
    multiply-adds: ~2e3 FLOPs here), which transformers computes without a matmul."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    cfg = CONFIGS[family]
    seq = 64
    hf = _hf_model(cfg)
    ids = torch.zeros(2, seq, dtype=torch.long, device="meta")
    with torch.no_grad(), FlopCounterMode(display=False) as f_hf:
        hf(input_ids=ids)
    built = _ours(cfg, seq)
    with torch.no_grad(), FlopCounterMode(display=False) as f_ours:
        built.model(**built.inputs)
    ours, theirs = f_ours.get_total_flops(), f_hf.get_total_flops()
    head_dim = cfg.get("head_dim") or cfg.get("hidden_size", cfg.get("n_embd", 0)) // cfg.get("num_attention_heads",
                                                                                              cfg.get("n_head", 1))
    assert 0 <= ours - theirs <= 2 * (head_dim // 2) * seq


@pytest.mark.parametrize("family", ["gptj", "falcon", "falcon-seq", "mixtral", *MODERN])
def test_module_names_equal_transformers(family: str) -> None:
    """Parameter names and shapes as transformers' (per-module reports read like theirs)."""
    cfg = CONFIGS[family]
    hf = {n: tuple(p.shape) for n, p in _hf_model(cfg).named_parameters()}
    ours = {n: tuple(p.shape) for n, p in _ours(cfg, 16).model.named_parameters()}
    assert ours == hf


@pytest.mark.parametrize(("config", "params"), [
    # transformers' GPTJForCausalLM / FalconForCausalLM built on meta from the packaged configs;
    # the arithmetic by shapes is in whichgpu/workload/zoo/entries/decoders.toml.
    ("gpt-j-6b", 6_050_882_784),
    ("falcon-180b", 178_557_088_768),
])
def test_full_size_parameter_count_equals_transformers(config: str, params: int) -> None:
    from whichgpu.workload.zoo import get_entry
    from whichgpu.workload.zoo.base import BuildRequest
    from whichgpu.workload.zoo.llm.build import build_packaged, load_packaged_config

    cfg = {k: v for k, v in load_packaged_config(config).items() if not k.startswith("_")}
    hf = _hf_model(cfg)
    assert sum(p.numel() for p in hf.parameters()) == params
    built = build_packaged(BuildRequest("train", 1, seq_len=16), config)  # two layers built, the rest repeated
    assert built.full_params == params
    assert get_entry(config).params_reference == params
