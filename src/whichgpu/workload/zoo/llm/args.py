"""Decoder-only LLM arguments from a Hugging Face config (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from whichgpu.errors import CaptureError
from whichgpu.workload.shape import ModelShape

SUPPORTED = ("llama", "mistral", "mixtral", "qwen2", "gpt2", "gptj", "falcon", "qwen3", "qwen3_moe", "gemma2",
             "gemma3_text", "gpt_oss", "deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe", "minimax_m2",
             "qwen3_next", "qwen3_5_moe", "glm_moe_dsa", "deepseek_v32")
HYBRID = ("qwen3_next", "qwen3_5_moe")  # Gated DeltaNet (linear attention) layers between full-attention ones
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
    # Today's Llama-style variants (all off by default: Llama-2/3, Mistral, Qwen2, Mixtral).
    o_bias: bool = False  # o_proj bias (gpt-oss; Llama's attention_bias)
    qk_norm: str = ""  # RMSNorm of queries and keys: "head" (per head: Qwen3, Gemma-3, GLM) or "full" (MiniMax-M2)
    layer_windows: tuple[int, ...] = ()  # per layer: its sliding window (0: global attention); (): all global
    attn_softcap: float = 0.0  # attention logit soft-capping (Gemma-2)
    final_softcap: float = 0.0  # LM-head logit soft-capping (Gemma-2)
    sinks: bool = False  # a learned attention-sink logit per head (gpt-oss)
    gemma: bool = False  # Gemma block: four RMSNorms (pre/post attention and MLP), scaled embedding
    moe_intermediate: int = 0  # inner width of a routed expert (0: `intermediate`)
    shared_experts: int = 0  # shared experts every token goes through (DeepSeek, GLM); their MLP is this many wide
    dense_layers: int = 0  # the first layers with a dense MLP of `intermediate` (DeepSeek first_k_dense_replace)
    moe_style: str = ""  # router: "" softmax (Mixtral, Qwen3, DeepSeek-V2), "sigmoid" (DeepSeek-V3, GLM, MiniMax-M2),
    # "gpt_oss" (biased router, softmax over the top-k, biased experts with a clamped SwiGLU)
    moe_capacity: float = 0.0  # expert capacity factor (0: dropless, every routed row computed)
    moe_skew: float = 1.0  # load of the busiest expert over the mean (1: balanced)
    # Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): 0 = ordinary attention.
    q_lora_rank: int = 0  # queries through a low-rank bottleneck (0: a direct q_proj)
    kv_lora_rank: int = 0  # the compressed key/value latent (what the KV cache stores)
    qk_nope_dim: int = 0
    qk_rope_dim: int = 0
    v_head_dim: int = 0
    # Hybrid linear attention (Qwen3-Next, Qwen3.5: Gated DeltaNet, Yang et al. 2024, arXiv:2412.06464):
    linear_layers: tuple[bool, ...] = ()  # per layer: Gated DeltaNet (True) or full attention; (): none
    lin_k_heads: int = 0  # query/key heads of a linear-attention layer
    lin_v_heads: int = 0  # value heads (each keeps a lin_k_dim x lin_v_dim state per sequence)
    lin_k_dim: int = 0
    lin_v_dim: int = 0
    lin_conv: int = 0  # causal depthwise convolution width over q, k and v
    attn_gate: bool = False  # full attention's sigmoid output gate (q_proj doubled: Qwen3-Next, Qwen3.5)
    shared_gate: bool = False  # a sigmoid gate (hidden x 1) on the shared expert's output (Qwen2-MoE style)
    # DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5): MLA over the index_topk keys a lightning
    # indexer picks, the indexer scoring every earlier key with index_heads heads of index_dim.
    index_heads: int = 0
    index_dim: int = 0
    index_topk: int = 0

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.hidden // self.heads

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2)."""
        return self.kv_lora_rank > 0

    @property
    def qk_dim(self) -> int:
        """Width of one query/key head (MLA: the no-position part plus the rotary part)."""
        return self.qk_nope_dim + self.qk_rope_dim if self.mla else self.head_dim

    @property
    def v_dim(self) -> int:
        return self.v_head_dim if self.mla else self.head_dim

    @property
    def expert_intermediate(self) -> int:
        return self.moe_intermediate or self.intermediate

    def window(self, layer: int) -> int:
        """The sliding window of `layer` (0: global attention)."""
        return self.layer_windows[layer] if self.layer_windows else 0

    def is_moe(self, layer: int) -> bool:
        return bool(self.experts) and layer >= self.dense_layers

    def is_linear(self, layer: int) -> bool:
        """Whether `layer` is a Gated DeltaNet (linear attention) layer: no KV cache, a fixed state."""
        return bool(self.linear_layers) and self.linear_layers[layer]

    @property
    def dsa(self) -> bool:
        """DeepSeek sparse attention (`index_topk` keys per query, picked by the indexer)."""
        return self.index_topk > 0

    def indexer_params(self) -> int:
        """The lightning indexer of one DSA layer: its query projection from the query latent, its
        key projection and LayerNorm, and the per-head weights projection."""
        if not self.dsa:
            return 0
        return self.q_lora_rank * self.index_heads * self.index_dim + self.hidden * self.index_dim \
            + 2 * self.index_dim + self.hidden * self.index_heads

    @property
    def serving_only(self) -> str:
        """What only the serving model models in this decoder ("" when the planner and the PyTorch
        zoo build it all): linear-attention layers, DeepSeek sparse attention."""
        if self.hybrid:
            return "linear-attention (Gated DeltaNet) layers"
        return "DeepSeek sparse attention (its lightning indexer)" if self.dsa else ""

    @property
    def hybrid(self) -> bool:
        """Whether some layers are linear attention (`is_linear`)."""
        return any(self.linear_layers)

    def attention_layers(self, lo: int = 0, hi: int | None = None) -> int:
        """Layers lo..hi-1 that attend over a KV cache (all but the linear-attention ones)."""
        hi = self.layers if hi is None else hi
        return sum(1 for i in range(lo, hi) if not self.is_linear(i))

    @property
    def lin_conv_dim(self) -> int:
        """Channels of a linear-attention layer's convolution: q, k and v."""
        return 2 * self.lin_k_heads * self.lin_k_dim + self.lin_v_heads * self.lin_v_dim

    def linear_params(self) -> int:
        """Parameters of one Gated DeltaNet layer (transformers' Qwen3NextGatedDeltaNet): the q, k, v
        and output-gate projection, the per-head beta and decay projection, the convolution, the
        decay's A and bias, the gated RMSNorm and the output projection."""
        h, hv, vd = self.hidden, self.lin_v_heads, self.lin_v_heads * self.lin_v_dim
        return h * (self.lin_conv_dim + vd) + h * 2 * hv + self.lin_conv_dim * self.lin_conv + 2 * hv \
            + self.lin_v_dim + vd * h

    def mixer_params(self, layer: int) -> int:
        """Parameters of `layer`'s token mixer: its attention, or its linear attention."""
        return self.linear_params() if self.is_linear(layer) else self.attention_params()

    def kind(self, layer: int) -> tuple[int, bool, bool]:
        """What makes layers cost alike: (sliding window, routed experts, linear attention)."""
        return self.window(layer), self.is_moe(layer), self.is_linear(layer)

    def kinds(self) -> list[tuple[int, bool, bool]]:
        """`kind` of every layer."""
        return [self.kind(i) for i in range(self.layers)]

    def attention_params(self) -> int:
        """Parameters of one layer's attention (projections, biases, q/k norms, sinks)."""
        h, heads, kv, d = self.hidden, self.heads, self.kv_heads, self.head_dim
        if self.mla:
            q = (h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * self.qk_dim
                 if self.q_lora_rank else h * heads * self.qk_dim)
            kv_a = h * (self.kv_lora_rank + self.qk_rope_dim) + self.kv_lora_rank
            kv_b = self.kv_lora_rank * heads * (self.qk_nope_dim + self.v_dim)
            return q + kv_a + kv_b + heads * self.v_dim * h + self.indexer_params()
        n = h * heads * d * (2 if self.attn_gate else 1) + 2 * h * kv * d + heads * d * h
        if self.qkv_bias:
            n += heads * d + 2 * kv * d
        if self.o_bias:
            n += h
        n += {"head": 2 * d, "full": heads * d + kv * d}.get(self.qk_norm, 0)
        return n + (heads if self.sinks else 0)

    def expert_params(self) -> int:
        """One routed expert (gate, up and down matrices, and their biases for gpt-oss)."""
        h, i = self.hidden, self.expert_intermediate
        return 3 * h * i + ((2 * i + h) if self.moe_style == "gpt_oss" else 0)

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of a dense MLP: gate, up and down (Llama's gated SiLU), or up and down
        (the GELU MLPs of GPT-2, GPT-J and Falcon)."""
        return 3 if self.family == "llama" else 2

    def mlp_params(self, layer: int) -> int:
        h = self.hidden
        if not self.is_moe(layer):
            return self.mlp_matrices * h * self.intermediate
        router = h * self.experts + (self.experts if self.moe_style == "gpt_oss" else 0)
        shared = 3 * h * self.expert_intermediate * self.shared_experts + (h if self.shared_gate else 0)
        return router + self.experts * self.expert_params() + shared

    def layer_params(self, layer: int) -> int:
        return self.mixer_params(layer) + self.mlp_params(layer) + (4 if self.gemma else 2) * self.hidden

    def params(self) -> tuple[int, int]:
        """(total, active) parameters of the full model, this rank's widths: the routed experts a
        token does not go through are the difference (embeddings and LM head count in both, as
        model cards count "active parameters")."""
        h = self.hidden
        head = 0 if self.tie_embeddings and self.vocab_out == self.vocab else self.vocab_out * h
        total = self.vocab * h + sum(self.layer_params(i) for i in range(self.layers)) + h + head
        idle = max(self.experts - self.experts_per_token, 0) * self.expert_params()
        moe_layers = sum(1 for i in range(self.layers) if self.is_moe(i))
        return total, total - idle * moe_layers

    def matmul_params(self) -> int:
        """Matmul weights one token goes through in the blocks (routed experts: top-k of them;
        router included), this rank's: N of the 6N rule without the LM head."""
        h = self.hidden
        n = 0
        for i in range(self.layers):
            attn = self.mixer_params(i)
            if self.is_moe(i):
                mlp = (self.experts_per_token + self.shared_experts) * 3 * h * self.expert_intermediate + h * self.experts
            else:
                mlp = self.mlp_matrices * h * self.intermediate
            n += attn + mlp
        return n

    def block_params(self) -> int:
        """Matmul weights of all blocks (every expert), this rank's."""
        return sum(self.mixer_params(i) + self.mlp_params(i) for i in range(self.layers))

    def kv_values(self, layer: int) -> int:
        """Values one token keeps in layer's KV cache: K and V of every K/V head; MLA: the latent
        and the rotary key, shared by all heads."""
        return self.kv_lora_rank + self.qk_rope_dim if self.mla else 2 * self.kv_heads * self.head_dim

    @property
    def vocab_out(self) -> int:
        """Logits this rank computes: the vocabulary, or its share when the LM head is split."""
        return -(-self.vocab // self.tp) if self.tp > 1 and self.tp_head else self.vocab

    def sharded(self, tp: int, split_head: bool = True) -> DecoderArgs:
        """One rank of a tensor-parallel group of `tp` (Shoeybi et al. 2019, Megatron-LM): query
        heads, K/V heads (replicated when fewer than `tp`, as vLLM and TensorRT-LLM do) and the
        MLP's intermediate size (every expert's too) split `tp` ways; attention output and MLP
        down projections are row-parallel and all-reduce their output; the LM head is split over
        the vocabulary and all-gathers the logits (`split_head`), or replicated (gpt-fast)."""
        if tp == 1:
            return self
        if self.family == "gpt2":
            raise CaptureError("tensor parallelism is built for the llama, gptj and falcon families, not gpt2")
        if self.mla:
            raise CaptureError("tensor parallelism of multi-head latent attention (DeepSeek, Kimi-K2) is not built; "
                               "trace one GPU's model (--tp 1)")
        if self.heads % tp:
            raise CaptureError(f"tensor parallelism {tp} does not divide the {self.heads} attention heads")
        for name, width in (("MLP's intermediate size", self.intermediate if self.dense_layers or not self.experts else 0),
                            ("experts' intermediate size", self.expert_intermediate if self.experts else 0)):
            if width % tp:
                raise CaptureError(f"tensor parallelism {tp} does not divide the {name} {width}")
        if self.kv_heads % tp and tp % self.kv_heads:
            raise CaptureError(f"tensor parallelism {tp} and the {self.kv_heads} key/value heads do not divide "
                               "one another")
        return replace(self, heads=self.heads // tp, kv_heads=max(1, self.kv_heads // tp),
                       intermediate=self.intermediate // tp, moe_intermediate=self.moe_intermediate // tp,
                       tp=tp, head_dim_override=self.head_dim, tp_head=split_head)

    def attention_text(self) -> str:
        """The attention variant in words, for reports."""
        if self.mla:
            parts = [f"multi-head latent attention, {self.heads} heads, KV latent {self.kv_lora_rank}+{self.qk_rope_dim}"]
        elif self.kv_heads == 1:
            parts = [f"MQA {self.heads}/1"]
        elif self.kv_heads < self.heads:
            parts = [f"GQA {self.heads}/{self.kv_heads}"]
        else:
            parts = [f"MHA {self.heads}"]
        local = [w for w in self.layer_windows if w]
        if local:
            parts.append(f"sliding window {max(local)} on {len(local)} of {self.layers} layers")
        if self.attn_softcap:
            parts.append(f"logit soft-cap {self.attn_softcap:g}")
        if self.sinks:
            parts.append("attention sinks")
        if self.qk_norm:
            parts.append("QK-norm")
        if self.hybrid:
            parts.append(f"Gated DeltaNet linear attention on {self.layers - self.attention_layers()} of {self.layers} "
                         f"layers ({self.lin_v_heads} value heads, state {self.lin_k_dim}x{self.lin_v_dim})")
        return ", ".join(parts)

    def shape(self, kv_bytes: float | None = None) -> ModelShape:
        """The trace's model shape. Heads and intermediate size are this rank's (one of `tp`);
        hidden and vocab whole. `kv_bytes`: the KV cache's bytes per value when not the
        activations' dtype."""
        parallel = self.family in ("gptj", "falcon")  # attention and MLP side by side
        local = [w for w in self.layer_windows if w]
        described = self.family == "llama"
        active = self.params()[1] if described else 0
        return ModelShape(
            arch="decoder", family=self.family, layers=self.layers, hidden=self.hidden, heads=self.heads,
            kv_heads=1 if self.mla else self.kv_heads, head_dim=self.head_dim,
            intermediate=self.expert_intermediate if self.experts else self.intermediate, vocab=self.vocab,
            experts=self.experts, active_experts=self.experts_per_token, tie_embeddings=self.tie_embeddings,
            max_positions=self.max_positions, gated_mlp=self.family == "llama", parallel_norms=self.parallel_norms,
            rotary_dim=(self.rotary_dim or self.head_dim) if parallel else 0, tp=self.tp, tp_head=self.tp_head,
            kv_bytes=kv_bytes, qk_head_dim=self.qk_dim if self.mla else 0, v_head_dim=self.v_dim if self.mla else 0,
            kv_values=self.kv_values(0) if self.mla else 0, sliding_window=max(local, default=0),
            sliding_layers=len(local), matmul_params=self.matmul_params() if described else 0,
            block_params=self.block_params() if described else 0, active_params=active if self.tp == 1 else 0,
            attention=self.attention_text())


@lru_cache(maxsize=65536)
def layer_kinds(a: DecoderArgs, lo: int, hi: int) -> tuple[tuple[int, int], ...]:
    """Layers lo..hi-1 grouped by `DecoderArgs.kind`: (first layer of the kind, count). Layers of a
    kind cost alike, so a stage or a step sums kinds, not layers."""
    seen: dict[tuple[int, bool, bool], list[int]] = {}
    for i in range(lo, hi):
        k = a.kind(i)
        if k in seen:
            seen[k][1] += 1
        else:
            seen[k] = [i, 1]
    return tuple((first, n) for first, n in seen.values())


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
    text = cfg.get("text_config")
    if isinstance(text, dict) and cfg.get("model_type") in HYBRID:  # Qwen3.5's vision-language wrapper
        cfg = {**text, "model_type": cfg["model_type"]}  # its language model (the vision tower is not modelled)
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
    return _llama_like(cfg, str(mt), path)


# Config keys of the routed experts, by model_type: (experts, expert width) (top-k is num_experts_per_tok).
_EXPERT_KEYS = {"mixtral": ("num_local_experts", "intermediate_size"), "qwen3_moe": ("num_experts", "moe_intermediate_size"),
                "gpt_oss": ("num_local_experts", "intermediate_size"), "minimax_m2": ("num_local_experts", "intermediate_size"),
                "deepseek_v2": ("n_routed_experts", "moe_intermediate_size"),
                "deepseek_v3": ("n_routed_experts", "moe_intermediate_size"),
                "kimi_k2": ("n_routed_experts", "moe_intermediate_size"), "glm4_moe": ("n_routed_experts", "moe_intermediate_size"),
                "qwen3_next": ("num_experts", "moe_intermediate_size"), "qwen3_5_moe": ("num_experts", "moe_intermediate_size"),
                "glm_moe_dsa": ("n_routed_experts", "moe_intermediate_size"),
                "deepseek_v32": ("n_routed_experts", "moe_intermediate_size")}
_MLA = ("deepseek_v2", "deepseek_v3", "kimi_k2", "glm_moe_dsa", "deepseek_v32")
_GEMMA = ("gemma2", "gemma3_text")
_SIGMOID = ("deepseek_v3", "kimi_k2", "glm4_moe", "minimax_m2", "glm_moe_dsa", "deepseek_v32")  # sigmoid router scores


def _layer_windows(cfg: dict[str, Any], mt: str, layers: int, path: str) -> tuple[int, ...]:
    """Each layer's sliding window (0: global), as transformers lays them out: `layer_types` when
    the config lists them, else Gemma-2's alternation (even layers local), Gemma-3's pattern (every
    sliding_window_pattern-th layer global), or one window on every layer (Mistral; Qwen only with
    use_sliding_window)."""
    window = cfg.get("sliding_window")
    if not window:
        return ()
    window = _req(cfg, "sliding_window", path)
    if mt in ("qwen2", "qwen3", "qwen3_moe") and not cfg.get("use_sliding_window"):
        return ()
    types = cfg.get("layer_types")
    if types:
        if len(types) != layers or any(t not in ("sliding_attention", "full_attention") for t in types):
            raise CaptureError(f"{path}: layer_types must list 'sliding_attention' or 'full_attention' for each of the "
                               f"{layers} layers")
        return tuple(window if t == "sliding_attention" else 0 for t in types)
    if mt == "gemma2":
        return tuple(window if (i + 1) % 2 else 0 for i in range(layers))
    if mt == "gemma3_text":
        pattern = int(cfg.get("sliding_window_pattern") or 6)
        return tuple(window if (i + 1) % pattern else 0 for i in range(layers))
    if mt == "gpt_oss":
        return tuple(window if i % 2 == 0 else 0 for i in range(layers))
    return (window,) * layers


def _llama_like(cfg: dict[str, Any], mt: str, path: str) -> DecoderArgs:
    """The Llama-style families: RMSNorm, rotary positions, gated MLP or routed experts."""
    heads = _req(cfg, "num_attention_heads", path)
    kv = cfg.get("num_key_value_heads") or heads
    h = _req(cfg, "hidden_size", path)
    layers = _req(cfg, "num_hidden_layers", path)
    head_dim = _opt_int(cfg, "head_dim", path) or 0
    mla = mt in _MLA
    if not head_dim and not mla and h % heads:
        raise CaptureError(f"{path}: hidden_size {h} is not divisible by num_attention_heads {heads}")
    if heads % kv:
        raise CaptureError(f"{path}: num_attention_heads {heads} is not divisible by num_key_value_heads {kv}")
    d = head_dim or h // heads
    experts_key, width_key = _EXPERT_KEYS.get(mt, ("", ""))
    experts = int(cfg.get(experts_key) or 0) if experts_key else 0
    top_k = int(cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or 0) if experts else 0
    if experts and not 0 < top_k <= experts:
        raise CaptureError(f"{path}: num_experts_per_tok must be 1..{experts} (the routed experts), got {top_k}")
    gemma = mt in _GEMMA
    rotary = 0
    if cfg.get("partial_rotary_factor") not in (None, 1, 1.0):
        rotary = int(d * float(cfg["partial_rotary_factor"]))
    elif mt == "minimax_m2" and cfg.get("rotary_dim"):
        rotary = _req(cfg, "rotary_dim", path)
    if rotary % 2 or rotary > d:
        raise CaptureError(f"{path}: the rotary part of each head ({rotary}) must be even and at most the head size {d}")
    qk_norm = ""
    if mt in ("qwen3", "qwen3_moe", "gemma3_text", *HYBRID) or (mt == "glm4_moe" and cfg.get("use_qk_norm")):
        qk_norm = "head"
    elif mt == "minimax_m2" and cfg.get("use_qk_norm", True):
        qk_norm = "full"
    attention_bias = bool(cfg.get("attention_bias", mt == "gpt_oss"))  # transformers' defaults
    hybrid = mt in HYBRID
    inter = (_opt_int(cfg, "intermediate_size", path) or _req(cfg, width_key, path)) if hybrid \
        else _req(cfg, "intermediate_size", path)  # Qwen3.5: every layer MoE, no dense width given
    a = DecoderArgs(
        "llama", h, layers, heads, kv, inter,
        _req(cfg, "vocab_size", path), int(cfg.get("max_position_embeddings") or 4096),
        bool(cfg.get("tie_word_embeddings", gemma)), mt == "qwen2" or attention_bias,
        experts, top_k, float(cfg.get("rms_norm_eps") or (1e-6 if gemma else 1e-5)),
        rotary_dim=rotary,
        activation="gelu_pytorch_tanh" if gemma else "silu", head_dim_override=0 if mla else d,
        o_bias=attention_bias and mt in ("llama", "gpt_oss"), qk_norm=qk_norm,
        layer_windows=_layer_windows(cfg, mt, layers, path),
        attn_softcap=float(cfg.get("attn_logit_softcapping") or 0.0) if gemma else 0.0,
        final_softcap=float(cfg.get("final_logit_softcapping") or 0.0) if gemma else 0.0,
        sinks=mt == "gpt_oss", gemma=gemma,
        moe_intermediate=_req(cfg, width_key, path) if experts and width_key != "intermediate_size" else 0,
        shared_experts=int(cfg.get("n_shared_experts") or 0) if experts else 0,
        dense_layers=int(cfg.get("first_k_dense_replace") or 0) if experts else 0,
        moe_style="gpt_oss" if mt == "gpt_oss" else "sigmoid" if mt in _SIGMOID else "")
    if mla:
        a = replace(a, q_lora_rank=int(cfg.get("q_lora_rank") or 0),
                    kv_lora_rank=_req(cfg, "kv_lora_rank", path), qk_nope_dim=_req(cfg, "qk_nope_head_dim", path),
                    qk_rope_dim=_req(cfg, "qk_rope_head_dim", path), v_head_dim=_req(cfg, "v_head_dim", path),
                    head_dim_override=_req(cfg, "v_head_dim", path))
        if cfg.get("index_topk"):  # DSA
            a = replace(a, index_heads=_req(cfg, "index_n_heads", path), index_dim=_req(cfg, "index_head_dim", path),
                        index_topk=_req(cfg, "index_topk", path))
    if hybrid:
        a = _hybrid(cfg, a, path)
    if a.dense_layers > layers:
        raise CaptureError(f"{path}: first_k_dense_replace {a.dense_layers} exceeds the {layers} layers")
    return a


def _hybrid(cfg: dict[str, Any], a: DecoderArgs, path: str) -> DecoderArgs:
    """Qwen3-Next / Qwen3.5: Gated DeltaNet layers with a full-attention layer every
    `full_attention_interval` (or as `layer_types` lists them), gated attention output, one shared
    expert of `shared_expert_intermediate_size` beside the routed ones."""
    types = cfg.get("layer_types")
    if types:
        if len(types) != a.layers or any(t not in ("linear_attention", "full_attention") for t in types):
            raise CaptureError(f"{path}: layer_types must list 'linear_attention' or 'full_attention' for each of the "
                               f"{a.layers} layers")
        linear = tuple(t == "linear_attention" for t in types)
    else:
        every = int(cfg.get("full_attention_interval") or 4)
        linear = tuple((i + 1) % every != 0 for i in range(a.layers))
    if cfg.get("mlp_only_layers") or int(cfg.get("decoder_sparse_step") or 1) != 1:
        raise CaptureError(f"{path}: dense-MLP layers between the MoE ones (mlp_only_layers, decoder_sparse_step) "
                           "are not built for this model type")
    shared = int(cfg.get("shared_expert_intermediate_size") or 0)
    if shared % a.expert_intermediate:
        raise CaptureError(f"{path}: shared_expert_intermediate_size {shared} is not a multiple of the expert width "
                           f"{a.expert_intermediate}")
    return replace(a, linear_layers=linear, lin_k_heads=_req(cfg, "linear_num_key_heads", path),
                   lin_v_heads=_req(cfg, "linear_num_value_heads", path), lin_k_dim=_req(cfg, "linear_key_head_dim", path),
                   lin_v_dim=_req(cfg, "linear_value_head_dim", path), lin_conv=_req(cfg, "linear_conv_kernel_dim", path),
                   attn_gate=bool(cfg.get("attn_output_gate", True)), shared_experts=shared // a.expert_intermediate,
                   shared_gate=bool(shared))
