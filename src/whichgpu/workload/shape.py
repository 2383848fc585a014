"""The shape of the traced model: the architecture facts the memory and performance models read
beside the op list (layer count, heads, KV cache layout, tensor parallelism). Torch-free.

Built-in decoders (``zoo/llm/args.py``) describe themselves fully; other models carry only what
is known of them (their architecture name or zoo family), the rest left at the "unknown" zero.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """Facts of the model one trace was captured from (one tensor-parallel rank's where split)."""

    arch: str = ""
    """"decoder" for the built-in decoder-only LLMs; the config's ``model_type`` for other
    Hugging Face configs ("bert", "t5", ...); "" when unknown (zoo models, factories)."""
    family: str = ""
    """Built-in decoders: "llama" (incl. mistral, mixtral, qwen2), "gpt2", "gptj", "falcon";
    other zoo models: their zoo family ("cnn", "detection", "encoder", "decoder", "seq2seq",
    "vit", "diffusion", "rnn"); "" when unknown."""
    layers: int = 0
    """Transformer blocks of the full model (0: not a described transformer)."""
    hidden: int = 0
    """Model (residual stream) width."""
    heads: int = 0
    """Query heads of this rank (the model's divided by ``tp``)."""
    kv_heads: int = 0
    """Key/value heads of this rank (fewer than ``heads``: GQA/MQA; replicated when fewer than tp)."""
    head_dim: int = 0
    """Width of one attention head."""
    intermediate: int = 0
    """MLP (FFN) inner width of this rank; per expert for mixture-of-experts models."""
    vocab: int = 0
    """Vocabulary size (whole, not split by tensor parallelism)."""
    experts: int = 0
    """Routed MLP experts per layer (0: a dense MLP)."""
    active_experts: int = 0
    """Experts each token is routed to (0: a dense MLP)."""
    tie_embeddings: bool = False
    """The LM head shares the input embedding's weights."""
    max_positions: int = 0
    """Longest sequence the model's position scheme supports (``max_position_embeddings``)."""
    gated_mlp: bool = False
    """Three MLP matrices (gate, up, down: Llama's SwiGLU), else two (up, down)."""
    parallel_norms: int = 0
    """LayerNorms feeding attention and MLP side by side (GPT-J 1, Falcon-40B/180B 2); 0: a
    sequential block."""
    rotary_dim: int = 0
    """GPT-J/Falcon: dimensions of each head that RoPE rotates; 0: not recorded (other families)."""
    tp: int = 1
    """Tensor-parallel ranks the model is split over (the trace is one rank's)."""
    tp_head: bool = True
    """With tp > 1: the LM head is split over the vocabulary (else replicated on every rank)."""
    kv_bytes: float | None = None
    """Bytes a cached key/value is stored in when not the activations' dtype (an FP8 KV cache: 1);
    None: the activations' dtype."""
    qk_head_dim: int = 0
    """Width of a query/key head when not ``head_dim`` (multi-head latent attention: 192); 0: head_dim."""
    v_head_dim: int = 0
    """Width of a value head when not ``head_dim``; 0: head_dim."""
    kv_values: int = 0
    """Values one token keeps per layer in the KV cache when not ``2 x kv_heads x head_dim``
    (multi-head latent attention: the latent and the rotary key, 576 for DeepSeek-V3); 0: that."""
    sliding_window: int = 0
    """The local layers' attention window (Mistral, Gemma-2/3, gpt-oss); 0: every layer global."""
    sliding_layers: int = 0
    """Layers that attend within ``sliding_window`` (their KV cache holds at most that many positions)."""
    matmul_params: int = 0
    """Block matmul weights one token goes through (routed experts: its top-k; router and shared
    experts included), this rank's; 0: derived from the widths (older traces)."""
    block_params: int = 0
    """Block matmul weights of every expert, this rank's; 0: derived from the widths."""
    active_params: int = 0
    """Parameters of the full model one token uses (total minus the routed experts it skips;
    equal to the total for a dense model); 0: not known."""
    attention: str = ""
    """The attention variant in words ("GQA 32/8, sliding window 4096 on 24 of 48 layers"), for reports."""

    @property
    def kv_per_token_layer(self) -> int:
        """Values cached per token per layer (see ``kv_values``)."""
        return self.kv_values or 2 * self.kv_heads * self.head_dim

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelShape:
        """Inverse of `to_dict`; an unknown key raises TypeError (a trace from other code)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise TypeError(f"unknown ModelShape field(s): {', '.join(unknown)}")
        return cls(**d)
