"""The built-in decoder equals transformers' definitions: parameters and forward FLOPs.

whichgpu builds Llama/Mistral/Mixtral/Qwen2/GPT-2 with its own compact definition (importing
transformers' model code costs seconds). These tests build both on the meta device from the same
small config and compare exactly.
"""

from __future__ import annotations

import pytest
from tests.conftest import needs_torch

pytestmark = needs_torch

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
}


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


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "gpt2"])
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
    head_dim = cfg.get("hidden_size", cfg.get("n_embd", 0)) // cfg.get("num_attention_heads", cfg.get("n_head", 1))
    assert 0 <= ours - theirs <= 2 * (head_dim // 2) * seq
