"""Parallel-block decoders (GPT-J, Falcon) for capture: x + attn(ln(x)) + mlp(ln'(x)).

Mirrors transformers' `GPTJForCausalLM` and `FalconForCausalLM` op for op in eager mode (module
names, parameter shapes, GPT-J's per-layer sin/cos table and interleaved partial rotary, FP32
query/key in GPT-J's eager scores, Falcon's fused grouped QKV), so parameter counts and GEMM
FLOPs equal theirs (tests check both). As in `decoder.py`, decode uses a static KV cache written
in place. One difference: Falcon's new decoder architecture (40B/180B) keeps K and V at
num_kv_heads, in the cache too; transformers broadcasts them to every query head first (the
same matmul FLOPs; serving engines keep the grouped size). Dropout is left out (p = 0 in both
configs).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from whichgpu.workload.zoo.llm.args import DecoderArgs
from whichgpu.workload.zoo.llm.decoder import (
    FALCON,
    GPT,
    CausalLM,
    Parts,
    Rotary,
    apply_rotary,
    attend,
    tp_reduce,
)

Cache = tuple[Tensor, Tensor] | None


def activation(name: str) -> Callable[[Tensor], Tensor]:
    """transformers' ACT2FN for the built-in names. gelu_new is written there as the tanh formula
    in elementwise ops; here it is the one fused op with the same value (as for GPT-2)."""
    if name == "gelu":
        return F.gelu
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    return F.relu if name == "relu" else F.silu


# ---------------------------------------------------------------------------------------------
# GPT-J
# ---------------------------------------------------------------------------------------------

def rotate_every_two(x: Tensor) -> Tensor:
    """GPT-J's interleaved rotation: pairs (x0, x1), (x2, x3), ... -> (-x1, x0), (-x3, x2), ..."""
    x1, x2 = x[:, :, :, ::2], x[:, :, :, 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def rotary_every_two(x: Tensor, sin: Tensor, cos: Tensor) -> Tensor:
    # sin, cos (P, S, R/2) -> (P, S, 1, R), each angle repeated for its pair of dims
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return x * cos + rotate_every_two(x) * sin


class GPTJAttention(nn.Module):
    def __init__(self, a: DecoderArgs) -> None:
        super().__init__()
        self.a = a
        width = a.heads * a.head_dim  # the hidden size, or this rank's share under tensor parallelism
        self.k_proj = nn.Linear(a.hidden, width, bias=False)
        self.v_proj = nn.Linear(a.hidden, width, bias=False)
        self.q_proj = nn.Linear(a.hidden, width, bias=False)
        self.out_proj = nn.Linear(width, a.hidden, bias=False)
        # [sin | cos] of every position for the rotary dims (create_sinusoidal_positions), one table
        # per layer as in transformers; its values do not exist on meta, only its shape matters.
        self.register_buffer("embed_positions", torch.empty(a.max_positions, a.rotary_dim, dtype=torch.float32),
                             persistent=False)

    def forward(self, x: Tensor, pos: Tensor, cache: Cache, cache_pos: Tensor | None, eager: bool) -> Tensor:
        b, s, _ = x.shape
        d, r = self.a.head_dim, self.a.rotary_dim
        q = self.q_proj(x).view(b, s, -1, d)  # (B, S, H, D): rotary before the heads transpose
        k = self.k_proj(x).view(b, s, -1, d)
        v = self.v_proj(x).view(b, s, -1, d).permute(0, 2, 1, 3)  # (B, H, S, D)
        table: Tensor = self.embed_positions  # type: ignore[assignment]
        table = table.repeat(pos.shape[0], 1, 1)  # (P, positions, R)
        sincos = torch.gather(table, 1, pos.unsqueeze(-1).repeat(1, 1, r)).to(k.dtype)  # (P, S, R)
        sin, cos = torch.split(sincos, r // 2, dim=-1)
        if r < d:
            k = torch.cat([rotary_every_two(k[:, :, :, :r], sin, cos), k[:, :, :, r:]], dim=-1)
            q = torch.cat([rotary_every_two(q[:, :, :, :r], sin, cos), q[:, :, :, r:]], dim=-1)
        else:
            k, q = rotary_every_two(k, sin, cos), rotary_every_two(q, sin, cos)
        k, q = k.permute(0, 2, 1, 3), q.permute(0, 2, 1, 3)
        o = attend(q, k, v, cache, cache_pos, eager, softmax_fp32=False, scores_fp32=True)
        return tp_reduce(self.out_proj(o), self.a)


class GPTJMLP(nn.Module):
    def __init__(self, a: DecoderArgs) -> None:
        super().__init__()
        self.a = a
        self.fc_in = nn.Linear(a.hidden, a.intermediate)
        self.fc_out = nn.Linear(a.intermediate, a.hidden)
        self.act = activation(a.activation)

    def forward(self, x: Tensor) -> Tensor:
        return tp_reduce(self.fc_out(self.act(self.fc_in(x))), self.a)


class GPTJBlock(nn.Module):
    def __init__(self, a: DecoderArgs) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(a.hidden, eps=a.norm_eps)
        self.attn = GPTJAttention(a)
        self.mlp = GPTJMLP(a)

    def forward(self, x: Tensor, pos: Tensor, cache: Cache, cache_pos: Tensor | None, eager: bool) -> Tensor:
        h = self.ln_1(x)
        return self.attn(h, pos, cache, cache_pos, eager) + self.mlp(h) + x  # type: ignore[no-any-return]


class GPTJLike(CausalLM):
    """`GPTJForCausalLM`-shaped: transformer.{wte, h, ln_f}, lm_head with a bias (untied by default)."""

    def __init__(self, a: DecoderArgs, layers: int, eager: bool = False) -> None:
        super().__init__(a, eager, GPT, Parts(
            tokens=nn.Embedding(a.vocab, a.hidden), positions=None,
            blocks=nn.ModuleList(GPTJBlock(a) for _ in range(layers)), norm=nn.LayerNorm(a.hidden, eps=a.norm_eps),
            rotary=None), head_bias=True)

    def block_inputs(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, ...]:
        return (position_ids,)  # each layer looks its sin/cos up in its own table


# ---------------------------------------------------------------------------------------------
# Falcon
# ---------------------------------------------------------------------------------------------

class FalconAttention(nn.Module):
    def __init__(self, a: DecoderArgs) -> None:
        super().__init__()
        self.a = a
        self.query_key_value = nn.Linear(a.hidden, (a.heads + 2 * a.kv_heads) * a.head_dim, bias=a.linear_bias)
        self.dense = nn.Linear(a.heads * a.head_dim, a.hidden, bias=a.linear_bias)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: Cache, cache_pos: Tensor | None,
                eager: bool) -> Tensor:
        b, s, _ = x.shape
        a, d = self.a, self.a.head_dim
        # The fused output is grouped per K/V head: [the group's H/KV queries, its key, its value].
        # (This layout also covers Falcon-7B: multi-query is KV = 1, and KV = H interleaves q, k, v.)
        qkv = self.query_key_value(x).view(b, s, a.kv_heads, a.heads // a.kv_heads + 2, d)
        q = qkv[:, :, :, :-2].reshape(b, s, a.heads, d).transpose(1, 2)  # (B, H, S, D)
        k = qkv[:, :, :, -2].transpose(1, 2)  # (B, KV, S, D)
        v = qkv[:, :, :, -1].transpose(1, 2)
        q, k = apply_rotary(q, k, cos, sin)
        o = attend(q, k, v, cache, cache_pos, eager, softmax_fp32=False)
        return tp_reduce(self.dense(o), self.a)


class FalconMLP(nn.Module):
    def __init__(self, a: DecoderArgs) -> None:
        super().__init__()
        self.a = a
        self.dense_h_to_4h = nn.Linear(a.hidden, a.intermediate, bias=a.linear_bias)
        self.act = activation(a.activation)
        self.dense_4h_to_h = nn.Linear(a.intermediate, a.hidden, bias=a.linear_bias)

    def forward(self, x: Tensor) -> Tensor:
        return tp_reduce(self.dense_4h_to_h(self.act(self.dense_h_to_4h(x))), self.a)


class FalconBlock(nn.Module):
    """Two LayerNorms on the same input (ln_attn, ln_mlp), one shared (input_layernorm), or a
    sequential block (input_layernorm, then post_attention_layernorm): `DecoderArgs.parallel_norms`."""

    def __init__(self, a: DecoderArgs) -> None:
        super().__init__()
        self.norms = a.parallel_norms
        self.self_attention = FalconAttention(a)
        self.mlp = FalconMLP(a)
        if self.norms == 2:
            self.ln_attn = nn.LayerNorm(a.hidden, eps=a.norm_eps)
            self.ln_mlp = nn.LayerNorm(a.hidden, eps=a.norm_eps)
        else:
            if self.norms == 0:
                self.post_attention_layernorm = nn.LayerNorm(a.hidden, eps=a.norm_eps)
            self.input_layernorm = nn.LayerNorm(a.hidden, eps=a.norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: Cache, cache_pos: Tensor | None,
                eager: bool) -> Tensor:
        if self.norms == 2:
            attn_in, mlp_in = self.ln_attn(x), self.ln_mlp(x)
        else:
            attn_in = mlp_in = self.input_layernorm(x)
        attn = self.self_attention(attn_in, cos, sin, cache, cache_pos, eager)
        if self.norms == 0:
            x = x + attn
            return x + self.mlp(self.post_attention_layernorm(x))  # type: ignore[no-any-return]
        out = self.mlp(mlp_in)
        out += attn
        return x + out  # type: ignore[no-any-return]


class FalconLike(CausalLM):
    """`FalconForCausalLM`-shaped: transformer.{word_embeddings, h, ln_f, rotary_emb}, lm_head (tied by default)."""

    def __init__(self, a: DecoderArgs, layers: int, theta: float = 10000.0, eager: bool = False) -> None:
        super().__init__(a, eager, FALCON, Parts(
            tokens=nn.Embedding(a.vocab, a.hidden), positions=None,
            blocks=nn.ModuleList(FalconBlock(a) for _ in range(layers)), norm=nn.LayerNorm(a.hidden, eps=a.norm_eps),
            rotary=Rotary(a.head_dim, theta)))
