"""Transformer (fairseq) as in NVIDIA DeepLearningExamples PyTorch/Translation/Transformer
(fairseq/models/transformer.py, fairseq/modules/multihead_attention.py).

DLE trains ``--arch transformer_wmt_en_de_big_t2t --share-all-embeddings``: pre-LayerNorm
layers (``normalize_before``) with final encoder/decoder LayerNorms, 16 heads, FFN 4096, one
embedding table for source, target and output projection, sinusoidal positions. DLE's
MultiheadAttention has separate q/k/v weights (e, e) applied as ``x @ W`` with no biases,
and explicit batched matmuls + softmax (strided_batched_gemm); the query is scaled inside its
GEMM (``addmm(..., beta=0, alpha=head_dim**-0.5)``).

Static-shape differences: every sentence fills its padded length (the reference drops the
key-padding mask when a batch has no padding, and computes positions with a boolean
``masked_scatter_``); positions are 1 + padding_idx + t for all tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

PAD = 1  # fairseq Dictionary: <Lua heritage>, <pad>, </s>, <unk>


@dataclass(frozen=True)
class TransformerConfig:
    vocab: int
    embed_dim: int = 1024
    ffn_dim: int = 4096
    heads: int = 16
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float = 0.1  # run_DGX*.sh --dropout 0.1 (attention/relu dropout 0.1 in _t2t)
    max_positions: int = 1024


def sinusoidal_table(num: int, dim: int, padding_idx: int) -> Tensor:
    """SinusoidalPositionalEmbedding.get_embedding (tensor2tensor variant)."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    ang = torch.arange(num, dtype=torch.float).unsqueeze(1) * freq.unsqueeze(0)
    emb = torch.cat([torch.sin(ang), torch.cos(ang)], dim=1)
    emb[padding_idx] = 0
    return emb


class SinusoidalPositions(nn.Module):
    weights: Tensor

    def __init__(self, dim: int, max_positions: int) -> None:
        super().__init__()
        self.register_buffer("weights", sinusoidal_table(max_positions + PAD + 1, dim, PAD), persistent=False)

    def forward(self, tokens: Tensor) -> Tensor:
        bsz, seq_len = tokens.shape
        positions = torch.arange(PAD + 1, PAD + 1 + seq_len, device=tokens.device).expand(bsz, seq_len)
        return self.weights.index_select(0, positions.reshape(-1)).view(bsz, seq_len, -1).detach()


class MultiheadAttention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.head_dim, self.dropout = heads, dim // heads, dropout
        self.scaling = self.head_dim**-0.5
        self.in_proj_weight_q = nn.Parameter(torch.empty(dim, dim))
        self.in_proj_weight_k = nn.Parameter(torch.empty(dim, dim))
        self.in_proj_weight_v = nn.Parameter(torch.empty(dim, dim))
        self.out_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, query: Tensor, kv: Tensor, causal: bool) -> Tensor:
        # query (t, b, e), kv (s, b, e): self-attention when kv is query
        t, b, e = query.shape
        s = kv.shape[0]
        q2 = query.reshape(t * b, e)
        q = torch.addmm(q2, q2, self.in_proj_weight_q, beta=0.0, alpha=self.scaling)
        kv2 = kv.reshape(s * b, e)
        k = torch.addmm(kv2, kv2, self.in_proj_weight_k, beta=0.0)
        v = torch.addmm(kv2, kv2, self.in_proj_weight_v, beta=0.0)
        q = q.view(t, b * self.heads, self.head_dim).transpose(0, 1)  # (b*h, t, d)
        k = k.view(s, b * self.heads, self.head_dim).transpose(0, 1)
        v = v.view(s, b * self.heads, self.head_dim).transpose(0, 1)
        attn = torch.bmm(q, k.transpose(1, 2))  # (b*h, t, s)
        if causal:  # buffered_mask: -inf above the diagonal
            attn = attn + torch.triu(attn.new_full((t, s), float("-inf")), 1).unsqueeze(0)
        attn = F.dropout(F.softmax(attn, dim=-1), p=self.dropout, training=self.training)
        out = torch.bmm(attn, v)  # (b*h, t, d)
        proj: Tensor = self.out_proj(out.transpose(0, 1).contiguous().view(t, b, e))
        return proj


class FFN(nn.Module):
    def __init__(self, c: TransformerConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(c.embed_dim, c.ffn_dim)
        self.fc2 = nn.Linear(c.ffn_dim, c.embed_dim)
        self.dropout = c.dropout

    def forward(self, x: Tensor) -> Tensor:
        x = F.dropout(F.threshold(self.fc1(x), 0.0, 0.0), p=self.dropout, training=self.training)
        y: Tensor = self.fc2(x)
        return y


class EncoderLayer(nn.Module):
    def __init__(self, c: TransformerConfig) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(c.embed_dim, c.heads, c.dropout)
        self.ln1, self.ln2 = nn.LayerNorm(c.embed_dim), nn.LayerNorm(c.embed_dim)
        self.ffn = FFN(c)
        self.dropout = c.dropout

    def forward(self, x: Tensor) -> Tensor:
        h = self.ln1(x)
        x = x + F.dropout(self.self_attn(h, h, causal=False), p=self.dropout, training=self.training)
        return x + F.dropout(self.ffn(self.ln2(x)), p=self.dropout, training=self.training)


class DecoderLayer(nn.Module):
    def __init__(self, c: TransformerConfig) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(c.embed_dim, c.heads, c.dropout)
        self.encoder_attn = MultiheadAttention(c.embed_dim, c.heads, c.dropout)
        self.self_attn_layer_norm = nn.LayerNorm(c.embed_dim)
        self.encoder_attn_layer_norm = nn.LayerNorm(c.embed_dim)
        self.final_layer_norm = nn.LayerNorm(c.embed_dim)
        self.ffn = FFN(c)
        self.dropout = c.dropout

    def forward(self, x: Tensor, enc: Tensor) -> Tensor:
        h = self.self_attn_layer_norm(x)
        x = x + F.dropout(self.self_attn(h, h, causal=True), p=self.dropout, training=self.training)
        h = self.encoder_attn_layer_norm(x)
        x = x + F.dropout(self.encoder_attn(h, enc, causal=False), p=self.dropout, training=self.training)
        return x + F.dropout(self.ffn(self.final_layer_norm(x)), p=self.dropout, training=self.training)


class Stack(nn.Module):
    """TransformerEncoder / TransformerDecoder body: embed, positions, layers, final LayerNorm."""

    def __init__(self, c: TransformerConfig, embed: nn.Embedding, layers: list[nn.Module]) -> None:
        super().__init__()
        self.embed_tokens = embed
        self.embed_scale = math.sqrt(c.embed_dim)
        self.embed_positions = SinusoidalPositions(c.embed_dim, c.max_positions)
        self.layers = nn.ModuleList(layers)
        self.layer_norm = nn.LayerNorm(c.embed_dim)
        self.dropout = c.dropout

    def embed(self, tokens: Tensor) -> Tensor:
        x = self.embed_scale * self.embed_tokens(tokens) + self.embed_positions(tokens)
        return F.dropout(x, p=self.dropout, training=self.training).transpose(0, 1)  # (t, b, e)


class TransformerModel(nn.Module):
    def __init__(self, c: TransformerConfig, n_encoder: int, n_decoder: int) -> None:
        super().__init__()
        embed = nn.Embedding(c.vocab, c.embed_dim, padding_idx=PAD)
        self.encoder = Stack(c, embed, [EncoderLayer(c) for _ in range(n_encoder)])
        self.decoder = Stack(c, embed, [DecoderLayer(c) for _ in range(n_decoder)])

    def forward(self, src_tokens: Tensor, prev_output_tokens: Tensor) -> Tensor:
        x = self.encoder.embed(src_tokens)
        for layer in self.encoder.layers:
            x = layer(x)
        enc = self.encoder.layer_norm(x)  # (s, b, e)
        y = self.decoder.embed(prev_output_tokens)
        for layer in self.decoder.layers:
            y = layer(y, enc)
        y = self.decoder.layer_norm(y).transpose(0, 1)  # (b, t, e)
        return F.linear(y, self.decoder.embed_tokens.weight)  # shared output projection
