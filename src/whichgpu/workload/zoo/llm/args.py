"""Decoder-only LLM arguments from a Hugging Face config (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from whichgpu.errors import CaptureError

SUPPORTED = ("llama", "mistral", "mixtral", "qwen2", "gpt2")


@dataclass(frozen=True)
class DecoderArgs:
    """The facts of a decoder-only transformer (names as in Llama's config.json)."""

    family: str  # "llama" (RMSNorm, RoPE, gated SiLU MLP) or "gpt2" (LayerNorm, learned positions, GELU)
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    max_positions: int
    tie_embeddings: bool = False
    qkv_bias: bool = False
    experts: int = 0  # MoE: routed experts per layer (0 = dense)
    experts_per_token: int = 0
    norm_eps: float = 1e-5
    sliding_window: int | None = None

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def meta(self) -> dict[str, Any]:
        return {"arch": "decoder", "family": self.family, "hidden": self.hidden, "layers": self.layers,
                "heads": self.heads, "kv_heads": self.kv_heads, "head_dim": self.head_dim,
                "intermediate": self.intermediate, "vocab": self.vocab, "experts": self.experts,
                "experts_per_token": self.experts_per_token, "tie_embeddings": self.tie_embeddings,
                "max_positions": self.max_positions}


def _req(cfg: dict[str, Any], key: str, path: str) -> Any:
    if key not in cfg:
        raise CaptureError(f"{path}: config.json has no {key!r} (needed for a {cfg.get('model_type')} model)")
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise CaptureError(f"{path}: config field {key!r} must be a positive integer, got {v!r}")
    return v


def args_from_config(cfg: dict[str, Any], path: str = "config.json") -> DecoderArgs:
    mt = cfg.get("model_type")
    if mt not in SUPPORTED:
        raise CaptureError(f"{path}: model_type {mt!r} is not a built-in decoder ({', '.join(SUPPORTED)})")
    if mt == "gpt2":
        h = _req(cfg, "n_embd", path)
        return DecoderArgs("gpt2", h, _req(cfg, "n_layer", path), _req(cfg, "n_head", path),
                           _req(cfg, "n_head", path), cfg.get("n_inner") or 4 * h,
                           _req(cfg, "vocab_size", path), _req(cfg, "n_positions", path), True, True,
                           norm_eps=float(cfg.get("layer_norm_epsilon", 1e-5)))
    heads = _req(cfg, "num_attention_heads", path)
    kv = cfg.get("num_key_value_heads") or heads
    h = _req(cfg, "hidden_size", path)
    if h % heads:
        raise CaptureError(f"{path}: hidden_size {h} is not divisible by num_attention_heads {heads}")
    if heads % kv:
        raise CaptureError(f"{path}: num_attention_heads {heads} is not divisible by num_key_value_heads {kv}")
    experts = int(cfg.get("num_local_experts", 0) or 0)
    return DecoderArgs(
        "llama", h, _req(cfg, "num_hidden_layers", path), heads, kv, _req(cfg, "intermediate_size", path),
        _req(cfg, "vocab_size", path), int(cfg.get("max_position_embeddings", 4096)),
        bool(cfg.get("tie_word_embeddings", False)), mt == "qwen2" or bool(cfg.get("attention_bias", False)),
        experts, int(cfg.get("num_experts_per_tok", 0) or 0) if experts else 0,
        float(cfg.get("rms_norm_eps", 1e-5)), cfg.get("sliding_window"),
    )
