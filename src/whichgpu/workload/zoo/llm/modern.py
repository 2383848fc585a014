"""Today's decoder parts: multi-head latent attention and routed experts.

Both mirror transformers' definitions (parameter names and shapes; tests compare counts and
names), with two things made static for the meta device:

* Routing is data-dependent. Here the router runs (its GEMM, softmax or sigmoid, top-k) but the
  tokens go to the experts by a stated assumption: balanced (every expert gets
  tokens x top-k / experts rows, the load-balanced case auxiliary losses and DeepSeek's bias
  aim for), all routed rows computed (dropless, as vLLM, SGLang, Megatron's default and
  transformers run). With a capacity factor c (GShard / Switch; Megatron's
  ``--moe-expert-capacity-factor`` with padding) every expert computes exactly
  ceil(c x tokens x top-k / experts) rows, padding included, so FLOPs scale with c. A skew s
  (the busiest expert gets s times the mean) changes no FLOPs on one GPU, where a grouped GEMM
  runs the experts' rows back to back; under a capacity factor it sets the tokens dropped.
* The experts' GEMMs are one grouped GEMM each way (`whichgpu::grouped_mm`: CUTLASS grouped
  GEMM, vLLM's fused_moe, torch._grouped_mm), reading the weights of the experts that receive
  tokens only: at decode a few of many.

Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2) runs as engines run it: training and
prefill decompress the latent into per-head keys and values (the "naive" form of transformers
and Megatron); decode keeps only the latent and the rotary key in the cache and folds the
key and value up-projections into the query and output (the "absorbed" form of FlashMLA,
vLLM and SGLang), attending over the latent as one shared key/value head.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import whichgpu.workload.ops  # noqa: F401  (defines whichgpu::grouped_mm and whichgpu::attention)
from whichgpu.workload.zoo.llm.args import DecoderArgs
from whichgpu.workload.zoo.llm.decoder import MLP, RMSNorm, apply_rotary, attend, tp_reduce


def route_rows(tokens: int, top_k: int, experts: int, capacity: float = 0.0) -> tuple[int, int, int]:
    """(rows the experts compute, experts that receive rows, padding rows) for `tokens` routed to
    `top_k` of `experts` each, balanced: dropless, every routed row (tokens x top_k) and
    min(experts, rows) experts touched; with a capacity factor, every expert computes
    ceil(capacity x rows / experts) rows, padding included."""
    routed = tokens * top_k
    if capacity:
        per = math.ceil(capacity * routed / experts)
        return per * experts, experts, max(per * experts - routed, 0)
    return routed, min(experts, routed), 0


class LatentAttention(nn.Module):
    """DeepseekV3Attention's parameters: q_a_proj, q_a_layernorm, q_b_proj (or q_proj without a
    query bottleneck), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj."""

    def __init__(self, a: DecoderArgs) -> None:
        super().__init__()
        self.a = a
        h, heads = a.hidden, a.heads
        if a.q_lora_rank:
            self.q_a_proj = nn.Linear(h, a.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(a.q_lora_rank, a.norm_eps)
            self.q_b_proj = nn.Linear(a.q_lora_rank, heads * a.qk_dim, bias=False)
        else:
            self.q_proj = nn.Linear(h, heads * a.qk_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, a.kv_lora_rank + a.qk_rope_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(a.kv_lora_rank, a.norm_eps)
        self.kv_b_proj = nn.Linear(a.kv_lora_rank, heads * (a.qk_nope_dim + a.v_dim), bias=False)
        self.o_proj = nn.Linear(heads * a.v_dim, h, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: tuple[Tensor, Tensor] | None,
                cache_pos: Tensor | None, eager: bool) -> Tensor:
        a = self.a
        b, s, _ = x.shape
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))) if a.q_lora_rank else self.q_proj(x)
        q = q.view(b, s, a.heads, a.qk_dim).transpose(1, 2)
        q_nope, q_pe = q.split([a.qk_nope_dim, a.qk_rope_dim], dim=-1)
        latent, k_pe = self.kv_a_proj_with_mqa(x).split([a.kv_lora_rank, a.qk_rope_dim], dim=-1)
        latent = self.kv_a_layernorm(latent)
        k_pe = k_pe.view(b, 1, s, a.qk_rope_dim)
        q_pe, k_pe = apply_rotary(q_pe, k_pe, cos, sin)
        if cache is not None:
            assert cache_pos is not None
            kc = cache[0]  # (B, 1, T, latent + rope): the latent cache, key and value at once
            kc.index_copy_(2, cache_pos, torch.cat((latent.view(b, 1, s, a.kv_lora_rank), k_pe), dim=-1))
            if kc.shape[2] > s:
                return self._absorbed(q_nope, q_pe, kc, eager)
        kv = self.kv_b_proj(latent).view(b, s, a.heads, a.qk_nope_dim + a.v_dim).transpose(1, 2)
        k_nope, v = kv.split([a.qk_nope_dim, a.v_dim], dim=-1)
        k = torch.cat((k_nope, k_pe.expand(b, a.heads, s, a.qk_rope_dim)), dim=-1)
        q = torch.cat((q_nope, q_pe), dim=-1)
        o = attend(q, k, v, None, None, eager, softmax_fp32=True)
        return tp_reduce(self.o_proj(o), a)

    def _absorbed(self, q_nope: Tensor, q_pe: Tensor, kc: Tensor, eager: bool) -> Tensor:
        """Decode over the latent cache: q_nope through W_UK into the latent space, attention with
        the latent as the one K/V head (values: its first kv_lora_rank entries, the same memory),
        the output back through W_UV."""
        a = self.a
        b, heads, s, _ = q_nope.shape
        w = self.kv_b_proj.weight.view(heads, a.qk_nope_dim + a.v_dim, a.kv_lora_rank)
        w_uk, w_uv = torch.split(w, [a.qk_nope_dim, a.v_dim], dim=1)  # per-head slices, read in place
        q_h = q_nope.permute(1, 0, 2, 3).reshape(heads, b * s, a.qk_nope_dim)
        q_lat = torch.bmm(q_h, w_uk).view(heads, b, s, a.kv_lora_rank).permute(1, 0, 2, 3)  # (B, H, S, latent)
        q = torch.cat((q_lat, q_pe), dim=-1)
        o = attend(q, kc, kc[..., : a.kv_lora_rank], None, None, eager, softmax_fp32=True)  # (B, S, H*latent)
        o_h = o.view(b * s, heads, a.kv_lora_rank).transpose(0, 1)  # (H, B*S, latent)
        o = torch.bmm(o_h, w_uv.transpose(1, 2))  # (H, B*S, v)
        return tp_reduce(self.o_proj(o.transpose(0, 1).reshape(b, s, heads * a.v_dim)), a)


class Experts(nn.Module):
    """The routed experts' weights stacked, as transformers stores them: gate_up_proj
    (E, 2I, H) and down_proj (E, H, I); gpt-oss transposed, (E, H, 2I) and (E, I, H), with biases."""

    QUANTIZED = ("gate_up_proj", "down_proj")  # the weights a quantised format stores quantised

    def __init__(self, a: DecoderArgs) -> None:
        super().__init__()
        e, h, i = a.experts, a.hidden, a.expert_intermediate
        self.transposed = a.moe_style == "gpt_oss"
        if self.transposed:
            self.gate_up_proj = nn.Parameter(torch.empty(e, h, 2 * i))
            self.gate_up_proj_bias = nn.Parameter(torch.empty(e, 2 * i))
            self.down_proj = nn.Parameter(torch.empty(e, i, h))
            self.down_proj_bias = nn.Parameter(torch.empty(e, h))
        else:
            self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h))
            self.down_proj = nn.Parameter(torch.empty(e, h, i))

    def weight(self, name: str) -> Tensor:
        """(E, N, K) for a grouped GEMM of (rows, K) inputs."""
        w: Tensor = getattr(self, name)
        return w.transpose(1, 2) if self.transposed else w


# gpt-oss's clamped SwiGLU (modeling_gpt_oss.GptOssExperts): limit and sigmoid scale.
GPT_OSS_LIMIT, GPT_OSS_ALPHA = 7.0, 1.702


class MoE(nn.Module):
    """Router, routed experts and shared experts (see the module docstring for the routing)."""

    def __init__(self, a: DecoderArgs) -> None:
        super().__init__()
        self.a = a
        if a.moe_style == "gpt_oss":
            self.router = nn.Linear(a.hidden, a.experts, bias=True)
        else:
            self.gate = nn.Linear(a.hidden, a.experts, bias=False)
        self.experts = Experts(a)
        if a.shared_experts:
            self.shared_experts = MLP(a.hidden, a.shared_experts * a.expert_intermediate)

    def rows(self, tokens: int) -> tuple[int, int, int]:
        a = self.a
        return route_rows(tokens, a.experts_per_token, a.experts, a.moe_capacity)

    def forward(self, x: Tensor) -> Tensor:
        a = self.a
        b, s, h = x.shape
        flat = x.reshape(-1, h)
        t = flat.shape[0]
        router = self.router if a.moe_style == "gpt_oss" else self.gate
        logits = router(flat)  # (T, E)
        if a.moe_style == "gpt_oss":  # top-k of the logits, softmax over the k
            top, _ = torch.topk(logits, a.experts_per_token, dim=-1)
            weights = F.softmax(top, dim=-1, dtype=top.dtype)
        else:  # softmax (Mixtral, Qwen3, DeepSeek-V2) or sigmoid (DeepSeek-V3, GLM, MiniMax) scores, top-k, renormalised
            scores = torch.sigmoid(logits.float()) if a.moe_style == "sigmoid" else F.softmax(
                logits, dim=-1, dtype=torch.float32)
            weights, _ = torch.topk(scores, a.experts_per_token, dim=-1)
            weights = weights / weights.sum(dim=-1, keepdim=True)
        rows, touched, padded = self.rows(t)
        idx = torch.zeros(rows, dtype=torch.long, device=x.device)  # token of each row, grouped by expert
        xs = flat.index_select(0, idx)
        ex = self.experts
        up = torch.ops.whichgpu.grouped_mm(xs, ex.weight("gate_up_proj"), touched, padded)
        eid = torch.zeros(rows, dtype=torch.long, device=x.device)  # expert of each row
        if ex.transposed:
            up = up + ex.gate_up_proj_bias.index_select(0, eid)
            gate, lin = up[..., ::2], up[..., 1::2]
            gate, lin = gate.clamp(max=GPT_OSS_LIMIT), lin.clamp(-GPT_OSS_LIMIT, GPT_OSS_LIMIT)
            act = (lin + 1) * (gate * torch.sigmoid(gate * GPT_OSS_ALPHA))
        else:
            gate, lin = up.chunk(2, dim=-1)
            act = F.silu(gate) * lin
        y = torch.ops.whichgpu.grouped_mm(act, ex.weight("down_proj"), touched, padded)
        if ex.transposed:
            y = y + ex.down_proj_bias.index_select(0, eid)
        w = weights.reshape(-1).to(y.dtype)
        y = y * (w if rows == w.shape[0] else w.index_select(0, idx))[:, None]
        out = torch.zeros_like(flat).index_add_(0, idx, y)
        if a.shared_experts:
            out = out + self.shared_experts(flat)
        return tp_reduce(out.view(b, s, h), a)
