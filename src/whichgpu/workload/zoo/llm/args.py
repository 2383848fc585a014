"""Decoder-only LLM arguments from a Hugging Face config (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from whichgpu.errors import CaptureError
from whichgpu.workload.shape import ModelShape

SUPPORTED = ("llama", "mistral", "mixtral", "qwen2", "gpt2", "gptj", "falcon")
# MLP activations of the parallel-block families (config `activation_function` / `activation`):
# "gelu" is erf GELU; "gelu_new" (GPT-J, as GPT-2) is the tanh approximation.
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu")


@dataclass(frozen=True)
class DecoderArgs:
    """The facts of a decoder-only transformer (names as in Llama's config.json)."""

    family: str  # "llama" (RMSNorm, RoPE, gated SiLU MLP), "gpt2" (LayerNorm, learned positions, GELU),
    # "gptj" or "falcon" (LayerNorm, RoPE, plain GELU MLP, attention and MLP in parallel)
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
    # Parallel-block families (gptj, falcon) only:
    rotary_dim: int = 0  # RoPE on the first rotary_dim dims of each head (GPT-J: 64 of 256); 0 = whole head
    parallel_norms: int = 0  # LayerNorms feeding attention and MLP in parallel (GPT-J 1, Falcon-40B/180B 2);
    # 0 = sequential block (x + attn(ln1(x)), then + mlp(ln2(.)): Falcon with parallel_attn false)
    linear_bias: bool = False  # Falcon `bias`: biases on query_key_value, dense and the MLP
    activation: str = "gelu"  # MLP activation (one of ACTIVATIONS): GPT-J gelu_new, Falcon gelu
    # Tensor parallelism (Megatron-LM's split; set by `sharded`): the ranks of the group, this
    # rank's head size when heads are split, and whether the LM head is split over the vocabulary.
    tp: int = 1
    head_dim_override: int = 0
    tp_head: bool = True

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.hidden // self.heads

    @property
    def vocab_out(self) -> int:
        """Logits this rank computes: the vocabulary, or its share when the LM head is split."""
        return -(-self.vocab // self.tp) if self.tp > 1 and self.tp_head else self.vocab

    def sharded(self, tp: int, split_head: bool = True) -> DecoderArgs:
        """One rank of a tensor-parallel group of `tp` (Shoeybi et al. 2019, Megatron-LM): query
        heads, K/V heads (replicated when fewer than `tp`, as vLLM and TensorRT-LLM do) and the
        MLP's intermediate size split `tp` ways; attention output and MLP down projections are
        row-parallel and all-reduce their output; the LM head is split over the vocabulary and
        all-gathers the logits (`split_head`), or replicated (gpt-fast)."""
        if tp == 1:
            return self
        if self.family == "gpt2":
            raise CaptureError("tensor parallelism is built for the llama, gptj and falcon families, not gpt2")
        if self.heads % tp:
            raise CaptureError(f"tensor parallelism {tp} does not divide the {self.heads} attention heads")
        if self.intermediate % tp:
            raise CaptureError(f"tensor parallelism {tp} does not divide the MLP's intermediate size {self.intermediate}")
        if self.kv_heads % tp and tp % self.kv_heads:
            raise CaptureError(f"tensor parallelism {tp} and the {self.kv_heads} key/value heads do not divide "
                               "one another")
        return replace(self, heads=self.heads // tp, kv_heads=max(1, self.kv_heads // tp),
                       intermediate=self.intermediate // tp, tp=tp, head_dim_override=self.head_dim,
                       tp_head=split_head)

    def shape(self, kv_bytes: float | None = None) -> ModelShape:
        """The trace's model shape. Heads and intermediate size are this rank's (one of `tp`);
        hidden and vocab whole. `kv_bytes`: the KV cache's bytes per value when not the
        activations' dtype."""
        parallel = self.family in ("gptj", "falcon")  # attention and MLP side by side
        return ModelShape(
            arch="decoder", family=self.family, layers=self.layers, hidden=self.hidden, heads=self.heads,
            kv_heads=self.kv_heads, head_dim=self.head_dim, intermediate=self.intermediate, vocab=self.vocab,
            experts=self.experts, active_experts=self.experts_per_token, tie_embeddings=self.tie_embeddings,
            max_positions=self.max_positions, gated_mlp=self.family == "llama", parallel_norms=self.parallel_norms,
            rotary_dim=(self.rotary_dim or self.head_dim) if parallel else 0, tp=self.tp, tp_head=self.tp_head,
            kv_bytes=kv_bytes)


def _req(cfg: dict[str, Any], key: str, path: str) -> Any:
    if key not in cfg:
        raise CaptureError(f"{path}: config.json has no {key!r} (needed for a {cfg.get('model_type')} model)")
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise CaptureError(f"{path}: config field {key!r} must be a positive integer, got {v!r}")
    return v


def _opt_int(cfg: dict[str, Any], key: str, path: str) -> int | None:
    """An optional positive integer field (absent or null: None)."""
    return _req(cfg, key, path) if cfg.get(key) is not None else None


def _activation(cfg: dict[str, Any], key: str, default: str, path: str) -> str:
    act = cfg.get(key) or default
    if act not in ACTIVATIONS:
        raise CaptureError(f"{path}: {key} {act!r} is not built in (valid: {', '.join(ACTIVATIONS)})")
    return str(act)


def _heads(h: int, heads: int, kv: int, path: str) -> None:
    if h % heads:
        raise CaptureError(f"{path}: hidden size {h} is not divisible by the {heads} attention heads")
    if heads % kv:
        raise CaptureError(f"{path}: {heads} attention heads are not divisible by {kv} key/value heads")


def _gptj(cfg: dict[str, Any], path: str) -> DecoderArgs:
    """GPT-J (transformers GPTJConfig defaults: n_inner 4 x n_embd, gelu_new, untied lm_head)."""
    h, heads = _req(cfg, "n_embd", path), _req(cfg, "n_head", path)
    _heads(h, heads, heads, path)
    rot = _opt_int(cfg, "rotary_dim", path) or h // heads
    if rot > h // heads or rot % 2:
        raise CaptureError(f"{path}: rotary_dim {rot} must be even and at most the head size {h // heads}")
    return DecoderArgs("gptj", h, _req(cfg, "n_layer", path), heads, heads, _opt_int(cfg, "n_inner", path) or 4 * h,
                       _req(cfg, "vocab_size", path), _req(cfg, "n_positions", path),
                       bool(cfg.get("tie_word_embeddings", False)), norm_eps=float(cfg.get("layer_norm_epsilon", 1e-5)),
                       rotary_dim=rot, parallel_norms=1, activation=_activation(cfg, "activation_function", "gelu_new", path))


def _falcon(cfg: dict[str, Any], path: str) -> DecoderArgs:
    """Falcon (transformers FalconConfig defaults: ffn 4 x hidden, GELU, tied lm_head, no biases).

    new_decoder_architecture (40B/180B): num_kv_heads K/V heads, always parallel, with
    num_ln_in_parallel_attn LayerNorms (default 2: ln_attn, ln_mlp). Otherwise (7B): one K/V head
    when multi_query, else as many as query heads; parallel_attn picks one shared LayerNorm or a
    sequential block."""
    if cfg.get("alibi"):
        raise CaptureError(f"{path}: Falcon with ALiBi positions (alibi: true, falcon-rw) is not built in; "
                           "Falcon with rotary positions (alibi: false) is")
    h, heads = _req(cfg, "hidden_size", path), _req(cfg, "num_attention_heads", path)
    if cfg.get("new_decoder_architecture"):
        kv = _opt_int(cfg, "num_kv_heads", path) or heads
        norms = _opt_int(cfg, "num_ln_in_parallel_attn", path) or 2
        if norms > 2:
            raise CaptureError(f"{path}: num_ln_in_parallel_attn must be 1 or 2, got {norms}")
    else:
        kv = 1 if cfg.get("multi_query", True) else heads
        norms = 1 if cfg.get("parallel_attn", True) else 0
    _heads(h, heads, kv, path)
    return DecoderArgs("falcon", h, _req(cfg, "num_hidden_layers", path), heads, kv,
                       _opt_int(cfg, "ffn_hidden_size", path) or 4 * h, _req(cfg, "vocab_size", path),
                       int(cfg.get("max_position_embeddings") or 2048), bool(cfg.get("tie_word_embeddings", True)),
                       norm_eps=float(cfg.get("layer_norm_epsilon") or 1e-5), parallel_norms=norms,
                       linear_bias=bool(cfg.get("bias", False)), activation=_activation(cfg, "activation", "gelu", path))


def args_from_config(cfg: dict[str, Any], path: str = "config.json") -> DecoderArgs:
    mt = cfg.get("model_type")
    if mt not in SUPPORTED:
        raise CaptureError(f"{path}: model_type {mt!r} is not a built-in decoder ({', '.join(SUPPORTED)})")
    if mt == "gptj":
        return _gptj(cfg, path)
    if mt == "falcon":
        return _falcon(cfg, path)
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
