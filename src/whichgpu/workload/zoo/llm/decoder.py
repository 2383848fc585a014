"""A decoder-only transformer (Llama / Mistral / Mixtral / Qwen2/3 / Gemma 2/3 / gpt-oss / DeepSeek /
GLM / MiniMax / GPT-2 families) for capture. (GPT-J and Falcon, whose blocks run attention and the
MLP in parallel, are in `parallel.py`; latent attention and routed experts in `modern.py`.)

Mirrors the Hugging Face `transformers` definitions op for op in eager mode (module names,
parameter shapes, RMSNorm in FP32, rotary embedding, gated MLP, FP32 logits for the loss), so
parameter counts and FLOPs equal theirs (tests check both against transformers). It exists
because importing transformers' model code costs seconds, and because two things must be
static on the meta device:

* MoE routing is data-dependent; here tokens are spread evenly over the experts (see
  `modern.py` for the routing assumption, the capacity factor and the skew).
* Decode uses a static KV cache written in place (as gpt-fast / HF StaticCache / serving
  engines do) and one fused attention call over the whole context.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from whichgpu.workload.zoo.llm.args import DecoderArgs


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, gemma: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self.gemma = gemma

    def forward(self, x: Tensor) -> Tensor:
        # As LlamaRMSNorm: compute in FP32, cast back, then scale. Gemma's scales by (1 + weight)
        # in FP32 before the cast back.
        dt = x.dtype
        h = x.to(torch.float32)
        var = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(var + self.eps)
        if self.gemma:
            return (h * (1.0 + self.weight.float())).to(dt)
        return self.weight * h.to(dt)


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """As transformers' apply_rotary_pos_emb: q, k (B, heads, S, D); cos, sin (B, S, R). With
    R < D (partial rotary: GLM-4.5, MiniMax-M2) only the first R dimensions rotate."""
    c, sn = cos.unsqueeze(1), sin.unsqueeze(1)
    r = cos.shape[-1]
    if r < q.shape[-1]:
        (qr, qp), (kr, kp) = torch.split(q, [r, q.shape[-1] - r], -1), torch.split(k, [r, k.shape[-1] - r], -1)
        return (torch.cat((qr * c + rotate_half(qr) * sn, qp), -1),
                torch.cat((kr * c + rotate_half(kr) * sn, kp), -1))
    return q * c + rotate_half(q) * sn, k * c + rotate_half(k) * sn


class Rotary(nn.Module):
    def __init__(self, head_dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        # inv_freq = 1 / theta ** (arange(0, d, 2) / d); its values do not exist on meta, only its
        # shape matters (and arange on meta would import torch._dynamo: seconds on a cold start).
        self.register_buffer("inv_freq", torch.empty(head_dim // 2, dtype=torch.float32), persistent=False)

    def forward(self, x: Tensor, pos: Tensor) -> tuple[Tensor, Tensor]:
        # pos: (B, S) -> freqs (B, S, D/2) -> cos/sin (B, S, D)
        inv: Tensor = self.inv_freq  # type: ignore[assignment]
        freqs = (inv[None, :, None].float().expand(pos.shape[0], -1, 1) @ pos[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def attend(q: Tensor, k: Tensor, v: Tensor, cache: tuple[Tensor, Tensor] | None, cache_pos: Tensor | None,
           eager: bool, softmax_fp32: bool, scores_fp32: bool = False, window: int = 0, softcap: float = 0.0,
           sinks: Tensor | None = None) -> Tensor:
    """Causal attention of q (B, H, S, D) over k, v (B, KV, S, D); returns (B, S, H*D).

    With a static KV cache (B, KV, T, D) the new positions are written in place; decode attends
    over the whole cache. A sliding-window layer's cache holds its window only (a ring buffer, as
    serving engines keep it): decode attends over all of it, prefill over the fresh keys within the
    window. `softcap`: logits pass through c * tanh(s / c) (Gemma-2); `sinks`: a learned logit per
    head joins each softmax and takes no value (gpt-oss). Eager: matmuls and softmax as
    transformers' eager path (K/V repeated for GQA, FP32 softmax for Llama-style models, FP32 query
    and key for GPT-J's scores with the probabilities cast back to V's dtype); otherwise one fused
    attention kernel (FlashAttention handles windows, soft-capping and sinks itself).
    """
    b, heads, s, d = q.shape
    causal = True
    if cache is not None:
        kc, vc = cache
        assert cache_pos is not None
        kept = kc.shape[2]
        if kept < k.shape[2]:  # a sliding window's ring buffer keeps the last `kept` positions
            kc.index_copy_(2, cache_pos[-kept:], k[:, :, -kept:])
            vc.index_copy_(2, cache_pos[-kept:], v[:, :, -kept:])
        else:
            kc.index_copy_(2, cache_pos, k)
            vc.index_copy_(2, cache_pos, v)
        if kept > s or not window:
            k, v = kc, vc
            causal = s > 1
            window = 0  # every cached position is inside the window
    if not eager:
        o: Tensor
        if window or softcap or sinks is not None:
            o, _lse = torch.ops.whichgpu.attention(q, k, v, None, causal, window, softcap, sinks)
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return o.transpose(1, 2).reshape(b, s, -1)
    rep = heads // k.shape[1]
    if rep > 1:
        k = k[:, :, None].expand(b, k.shape[1], rep, k.shape[2], d).reshape(b, heads, k.shape[2], d)
        v = v[:, :, None].expand(b, v.shape[1], rep, v.shape[2], v.shape[-1]).reshape(b, heads, v.shape[2], v.shape[-1])
    if scores_fp32:
        q, k = q.to(torch.float32), k.to(torch.float32)
    w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
    if softcap:
        w = torch.tanh(w / softcap) * softcap
    if causal or window:
        mask = torch.full((s, k.shape[2]), float("-inf"), device=q.device, dtype=w.dtype).triu(1)
        if window:
            mask = mask + torch.full((s, k.shape[2]), float("-inf"), device=q.device, dtype=w.dtype).tril(-window)
        w = w + mask
    if sinks is not None:  # the sink's logit joins the softmax, then its column is dropped
        w = torch.cat([w, sinks.reshape(1, -1, 1, 1).expand(b, -1, s, 1).to(w.dtype)], dim=-1)
    w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype) if softmax_fp32 else F.softmax(w, dim=-1)
    if sinks is not None:
        w = w[..., :-1]
    if scores_fp32:
        w = w.to(v.dtype)
    o = torch.matmul(w, v)
    return o.transpose(1, 2).reshape(b, s, -1)


def tp_reduce(x: Tensor, a: DecoderArgs) -> Tensor:
    """The all-reduce after a row-parallel projection (tensor parallelism); identity otherwise."""
    if a.tp > 1:
        return torch.ops.whichgpu.all_reduce(x, a.tp)  # type: ignore[no-any-return]
    return x


class Parts(NamedTuple):
    """A decoder's modules by role, in the order transformers registers them."""

    tokens: nn.Embedding
    positions: nn.Embedding | None  # learned position embedding (GPT-2)
    blocks: nn.ModuleList
    norm: nn.Module  # final norm
    rotary: Rotary | None  # one rotary table for every block (Llama, Falcon)


class Names(NamedTuple):
    """transformers' names: the body under the LM head, then its parts (so that parameter paths
    match the checkpoints' and `build.py`'s `repeats` name the blocks)."""

    body: str
    tokens: str
    blocks: str
    norm: str
    positions: str = "wpe"
    rotary: str = "rotary_emb"


LLAMA = Names("model", "embed_tokens", "layers", "norm")
GPT = Names("transformer", "wte", "h", "ln_f")  # GPT-2 and GPT-J
FALCON = Names("transformer", "word_embeddings", "h", "ln_f")


class CausalLM(nn.Module):
    """A `*ForCausalLM`: the `parts` in a body, named as transformers names them, under `lm_head`.

    One step for every family: embed the tokens (plus learned positions), run the blocks, each
    with what `block_inputs` gives it (the rotary cos/sin by default) and its KV cache slot, the
    final norm, then the logits (of the last position only when a prefill asks for `last_only`).
    `lm_head` covers this rank's share of the vocabulary and shares the embedding's weight when
    the config ties them.
    """

    def __init__(self, a: DecoderArgs, eager: bool, names: Names, parts: Parts, head_bias: bool = False) -> None:
        super().__init__()
        self.a = a
        self.eager = eager
        body = nn.Module()
        for role, module in zip(Parts._fields, parts, strict=True):
            if module is not None:
                body.add_module(getattr(names, role), module)
        self.add_module(names.body, body)
        self.parts = parts  # the same modules by role (a plain tuple: registered once, in the body)
        self.lm_head = nn.Linear(a.hidden, a.vocab_out, bias=head_bias)
        if a.tie_embeddings and a.vocab_out == a.vocab:
            self.lm_head.weight = parts.tokens.weight

    def block_inputs(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, ...]:
        """What every block takes after the hidden state (and before its cache)."""
        rotary = self.parts.rotary
        return () if rotary is None else rotary(x, position_ids)

    def forward(self, input_ids: Tensor, position_ids: Tensor, cache: list[tuple[Tensor, Tensor]] | None = None,
                cache_pos: Tensor | None = None, last_only: bool = False) -> Tensor:
        p = self.parts
        x = p.tokens(input_ids)
        if self.a.gemma:  # Gemma scales the embedding by sqrt(hidden), in the activations' dtype
            x = x * torch.tensor(self.a.hidden ** 0.5, dtype=x.dtype, device=x.device)
        if p.positions is not None:
            x = x + p.positions(position_ids)
        extra = self.block_inputs(x, position_ids)
        for i, blk in enumerate(p.blocks):
            x = blk(x, *extra, cache[i] if cache else None, cache_pos, self.eager)
        x = p.norm(x)
        if last_only:
            x = x[:, -1:, :]
        logits: Tensor = self.lm_head(x)
        if self.a.final_softcap:  # Gemma-2: logits -> c * tanh(logits / c)
            logits = torch.tanh(logits / self.a.final_softcap) * self.a.final_softcap
        if self.a.tp > 1 and self.a.tp_head:  # a vocabulary-parallel head all-gathers its shards
            logits = torch.ops.whichgpu.all_gather(logits, self.a.tp, -1)
        return logits


class Attention(nn.Module):
    """Llama-style attention with today's variants (all off for Llama-2/3): biases, QK-norm,
    partial rotary, a sliding window, logit soft-capping and attention sinks."""

    def __init__(self, a: DecoderArgs, window: int = 0) -> None:
        super().__init__()
        self.a = a
        self.window = window
        d = a.head_dim
        if a.sinks:
            self.sinks = nn.Parameter(torch.empty(a.heads))  # registered first, as gpt-oss does
        self.q_proj = nn.Linear(a.hidden, a.heads * d, bias=a.qkv_bias)
        self.k_proj = nn.Linear(a.hidden, a.kv_heads * d, bias=a.qkv_bias)
        self.v_proj = nn.Linear(a.hidden, a.kv_heads * d, bias=a.qkv_bias)
        self.o_proj = nn.Linear(a.heads * d, a.hidden, bias=a.o_bias)
        if a.qk_norm == "head":  # RMSNorm over each head (Qwen3, Gemma-3, GLM-4.5)
            self.q_norm, self.k_norm = RMSNorm(d, a.norm_eps, a.gemma), RMSNorm(d, a.norm_eps, a.gemma)
        elif a.qk_norm == "full":  # RMSNorm over all heads together (MiniMax-M2)
            self.q_norm, self.k_norm = RMSNorm(a.heads * d, a.norm_eps), RMSNorm(a.kv_heads * d, a.norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: tuple[Tensor, Tensor] | None,
                cache_pos: Tensor | None, eager: bool) -> Tensor:
        b, s, _ = x.shape
        d = self.a.head_dim
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.a.qk_norm == "full":
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(b, s, -1, d).transpose(1, 2)  # (B, H, S, D)
        k = k.view(b, s, -1, d).transpose(1, 2)  # (B, KV, S, D)
        v = v.view(b, s, -1, d).transpose(1, 2)
        if self.a.qk_norm == "head":
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, k, cos, sin)
        o = attend(q, k, v, cache, cache_pos, eager, softmax_fp32=True, window=self.window,
                   softcap=self.a.attn_softcap, sinks=self.sinks if self.a.sinks else None)
        return tp_reduce(self.o_proj(o), self.a)


def activation(name: str, x: Tensor) -> Tensor:
    """The gated MLP's activation: SiLU (SwiGLU) or tanh-approximated GELU (Gemma's GeGLU)."""
    return F.gelu(x, approximate="tanh") if name == "gelu_pytorch_tanh" else F.silu(x)


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int, tp: DecoderArgs | None = None, act: str = "silu") -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)
        self.tp = tp
        self.act = act

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self.down_proj(activation(self.act, self.gate_proj(x)) * self.up_proj(x))
        return tp_reduce(y, self.tp) if self.tp is not None else y


class Block(nn.Module):
    """One layer: attention (ordinary or latent) and a dense MLP or routed experts; Gemma adds a
    norm after each sublayer."""

    def __init__(self, a: DecoderArgs, layer: int = 0) -> None:
        super().__init__()
        from whichgpu.workload.zoo.llm.modern import LatentAttention, MoE

        self.a = a
        self.self_attn: nn.Module = LatentAttention(a) if a.mla else Attention(a, a.window(layer))
        if a.is_moe(layer):
            self.mlp: nn.Module = MoE(a)
        else:
            self.mlp = MLP(a.hidden, a.intermediate, a if a.tp > 1 else None, a.activation)
        self.input_layernorm = RMSNorm(a.hidden, a.norm_eps, a.gemma)
        self.post_attention_layernorm = RMSNorm(a.hidden, a.norm_eps, a.gemma)
        if a.gemma:
            self.pre_feedforward_layernorm = RMSNorm(a.hidden, a.norm_eps, True)
            self.post_feedforward_layernorm = RMSNorm(a.hidden, a.norm_eps, True)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: tuple[Tensor, Tensor] | None,
                cache_pos: Tensor | None, eager: bool) -> Tensor:
        if self.a.gemma:
            x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos, sin, cache, cache_pos, eager))
            return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))  # type: ignore[no-any-return]
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, cache_pos, eager)
        return x + self.mlp(self.post_attention_layernorm(x))  # type: ignore[no-any-return]


class LlamaLike(CausalLM):
    """`LlamaForCausalLM`-shaped: model.{embed_tokens, layers, norm, rotary_emb}, lm_head.

    `layers` are the indices (of the full model) of the blocks to build: every layer, or a
    truncated build's templates (see build.py)."""

    def __init__(self, a: DecoderArgs, layers: list[int], theta: float = 10000.0, eager: bool = False) -> None:
        rot = a.qk_rope_dim if a.mla else (a.rotary_dim or a.head_dim)
        super().__init__(a, eager, LLAMA, Parts(
            tokens=nn.Embedding(a.vocab, a.hidden), positions=None,
            blocks=nn.ModuleList(Block(a, i) for i in layers), norm=RMSNorm(a.hidden, a.norm_eps, a.gemma),
            rotary=Rotary(rot, theta)))


class GPT2Attention(nn.Module):
    def __init__(self, a: DecoderArgs) -> None:
        super().__init__()
        self.a = a
        # HF GPT-2 uses Conv1D (weight stored transposed); a Linear has the same parameters.
        self.c_attn = nn.Linear(a.hidden, 3 * a.hidden)
        self.c_proj = nn.Linear(a.hidden, a.hidden)

    def forward(self, x: Tensor, cache: tuple[Tensor, Tensor] | None, cache_pos: Tensor | None, eager: bool) -> Tensor:
        b, s, h = x.shape
        d = self.a.head_dim
        q, k, v = self.c_attn(x).split(h, dim=2)
        q, k, v = (t.view(b, s, -1, d).transpose(1, 2) for t in (q, k, v))
        o = attend(q, k, v, cache, cache_pos, eager, softmax_fp32=False)
        return self.c_proj(o)  # type: ignore[no-any-return]


class GPT2Block(nn.Module):
    def __init__(self, a: DecoderArgs) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(a.hidden, eps=a.norm_eps)
        self.attn = GPT2Attention(a)
        self.ln_2 = nn.LayerNorm(a.hidden, eps=a.norm_eps)
        self.c_fc = nn.Linear(a.hidden, a.intermediate)
        self.c_proj = nn.Linear(a.intermediate, a.hidden)

    def forward(self, x: Tensor, cache: tuple[Tensor, Tensor] | None, cache_pos: Tensor | None, eager: bool) -> Tensor:
        x = x + self.attn(self.ln_1(x), cache, cache_pos, eager)
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))  # type: ignore[no-any-return]


class GPT2Like(CausalLM):
    """`GPT2LMHeadModel`-shaped: transformer.{wte, wpe, h, ln_f}, lm_head tied to wte."""

    def __init__(self, a: DecoderArgs, layers: int, eager: bool = False) -> None:
        super().__init__(a, eager, GPT, Parts(
            tokens=nn.Embedding(a.vocab, a.hidden), positions=nn.Embedding(a.max_positions, a.hidden),
            blocks=nn.ModuleList(GPT2Block(a) for _ in range(layers)), norm=nn.LayerNorm(a.hidden, eps=a.norm_eps),
            rotary=None))


def causal_lm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """As transformers' ForCausalLMLoss: FP32 logits, shift by one, mean cross entropy."""
    logits = logits.float()
    shift = logits[..., :-1, :].contiguous()
    tgt = labels[..., 1:].contiguous()
    return F.cross_entropy(shift.view(-1, shift.shape[-1]), tgt.view(-1))
