"""Transformer-XL (``attn_type=0``: relative positions, partially learnable) as in NVIDIA
DeepLearningExamples PyTorch/LanguageModeling/Transformer-XL/pytorch/mem_transformer.py.

Post-LayerNorm decoder layers with relative multi-head attention over [memory; segment]
(einsum scores AC + rel-shifted BD, explicit softmax), a ReLU FFN, adaptive input embedding and
projected adaptive softmax. ``forward(data, target, mems)`` returns the per-token loss
(tgt_len, bsz) and the new memory, as the reference's ``MemTransformerLM.forward`` does.

``mems`` is one tensor (n_layer, mem_len, bsz, d_model) of cached hidden states, carried from
the previous segment without gradient. A model built with fewer layers than ``n_layer`` (see
`Built.repeats`) still reads and writes the full memory, so its bytes are counted in full.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from whichgpu.workload.zoo.seq.txl_adaptive import AdaptiveEmbedding, ProjectedAdaptiveLogSoftmax


@dataclass(frozen=True)
class TXLConfig:
    n_layer: int
    d_model: int
    n_head: int
    d_head: int
    d_inner: int
    div_val: int
    dropout: float
    dropatt: float
    n_token: int = 267735  # WikiText-103 word vocabulary (wt103_large.yaml manual_config)
    cutoffs: tuple[int, ...] = (19997, 39997, 199997)  # train.py, dataset wt103
    tie_projs: tuple[bool, ...] = (False, True, True, True)  # train.py: [False] + [True] * 3


class RelPartialLearnableMultiHeadAttn(nn.Module):
    def __init__(self, c: TXLConfig) -> None:
        super().__init__()
        self.n_head, self.d_head = c.n_head, c.d_head
        self.qkv_net = nn.Linear(c.d_model, 3 * c.n_head * c.d_head, bias=False)
        self.r_net = nn.Linear(c.d_model, c.n_head * c.d_head, bias=False)
        self.o_net = nn.Linear(c.n_head * c.d_head, c.d_model, bias=False)
        self.drop = nn.Dropout(c.dropout)
        self.dropatt = nn.Dropout(c.dropatt)
        self.layer_norm = nn.LayerNorm(c.d_model)
        self.scale = 1 / c.d_head**0.5

    @staticmethod
    def _rel_shift(x: Tensor) -> Tensor:
        # (b, n, qlen, klen): pad one zero column, reinterpret, drop the first row
        zero_pad = x.new_zeros(x.size(0), x.size(1), x.size(2), 1)
        x_padded = torch.cat([zero_pad, x], dim=3).view(x.size(0), x.size(1), x.size(3) + 1, x.size(2))
        return x_padded.narrow(2, 1, x_padded.size(2) - 1).view_as(x)

    def forward(self, w: Tensor, r: Tensor, r_w_bias: Tensor, r_r_bias: Tensor, attn_mask: Tensor,
                mems: Tensor | None) -> Tensor:
        qlen, bsz, rlen = w.size(0), w.size(1), r.size(0)
        cat = w if mems is None else torch.cat([mems, w], 0)  # (klen, b, d)
        w_head_q, w_head_k, w_head_v = torch.chunk(self.qkv_net(cat), 3, dim=-1)
        w_head_q = w_head_q[-qlen:]
        r_head_k = self.r_net(r)
        klen = w_head_k.size(0)
        w_head_q = w_head_q.view(qlen, bsz, self.n_head, self.d_head)
        w_head_k = w_head_k.view(klen, bsz, self.n_head, self.d_head)
        w_head_v = w_head_v.view(klen, bsz, self.n_head, self.d_head)
        r_head_k = r_head_k.view(rlen, self.n_head, self.d_head)

        ac = torch.einsum("ibnd,jbnd->bnij", w_head_q + r_w_bias, w_head_k)  # (b, n, qlen, klen)
        bd = self._rel_shift(torch.einsum("ibnd,jnd->bnij", w_head_q + r_r_bias, r_head_k))
        attn_score = self.scale * (ac + bd)
        attn_score.masked_fill_(attn_mask[None, None, :, :], -float("inf"))
        attn_prob = self.dropatt(F.softmax(attn_score, dim=3))
        attn_vec = torch.einsum("bnij,jbnd->ibnd", attn_prob, w_head_v)  # (qlen, b, n, d_head)
        attn_vec = attn_vec.contiguous().view(qlen, bsz, self.n_head * self.d_head)
        out: Tensor = self.layer_norm(w + self.drop(self.o_net(attn_vec)))
        return out


class PositionwiseFF(nn.Module):
    def __init__(self, c: TXLConfig) -> None:
        super().__init__()
        # DLE: nn.ReLU(inplace=True). Same kernel and bytes out of place; an in-place module
        # returns its input, so torch's ModuleTracker never closes its backward scope and would
        # attribute every later backward op to it (wrong under Built.repeats).
        self.CoreNet = nn.Sequential(
            nn.Linear(c.d_model, c.d_inner), nn.ReLU(), nn.Dropout(c.dropout),
            nn.Linear(c.d_inner, c.d_model), nn.Dropout(c.dropout),
        )
        self.layer_norm = nn.LayerNorm(c.d_model)

    def forward(self, inp: Tensor) -> Tensor:
        out: Tensor = self.layer_norm(inp + self.CoreNet(inp))
        return out


class DecoderLayer(nn.Module):
    """RelPartialLearnableDecoderLayer."""

    def __init__(self, c: TXLConfig) -> None:
        super().__init__()
        self.dec_attn = RelPartialLearnableMultiHeadAttn(c)
        self.pos_ff = PositionwiseFF(c)

    def forward(self, x: Tensor, r: Tensor, r_w_bias: Tensor, r_r_bias: Tensor, mask: Tensor,
                mems: Tensor | None) -> Tensor:
        out: Tensor = self.pos_ff(self.dec_attn(x, r, r_w_bias, r_r_bias, mask, mems))
        return out


class MemTransformerLM(nn.Module):
    inv_freq: Tensor

    def __init__(self, c: TXLConfig, n_built: int, shares: tuple[float, ...], mem_len: int,
                 same_length: bool = False, clamp_len: int = -1) -> None:
        super().__init__()
        self.n_layer, self.mem_len = c.n_layer, mem_len
        self.same_length, self.clamp_len = same_length, clamp_len
        cutoffs = list(c.cutoffs)
        self.word_emb = AdaptiveEmbedding(c.n_token, c.d_model, c.d_model, cutoffs, c.div_val, shares)
        self.drop = nn.Dropout(c.dropout)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(n_built))
        self.crit = ProjectedAdaptiveLogSoftmax(self.word_emb, c.n_token, c.d_model, c.d_model,
                                                cutoffs, c.div_val, list(c.tie_projs))
        # PositionalEmbedding: inv_freq buffer of sinusoid frequencies
        self.register_buffer("inv_freq", 1 / (10000 ** (torch.arange(0.0, c.d_model, 2.0) / c.d_model)))
        self.r_w_bias = nn.Parameter(torch.zeros(c.n_head, c.d_head))
        self.r_r_bias = nn.Parameter(torch.zeros(c.n_head, c.d_head))

    def _mask(self, like: Tensor, qlen: int, mlen: int) -> Tensor:
        ones = like.new_ones(qlen, mlen + qlen)
        if not self.same_length:
            return torch.triu(ones, diagonal=1 + mlen).bool()
        mask_len = mlen + qlen - self.mem_len - 1
        shift = qlen - mask_len if mask_len > 0 else qlen
        return (torch.triu(ones, 1 + mlen) + torch.tril(ones, -shift)).bool()

    def forward(self, data: Tensor, target: Tensor, mems: Tensor | None) -> tuple[Tensor, Tensor | None]:
        qlen = data.size(0)
        word_emb = self.word_emb(data)  # (qlen, b, d)
        mlen = 0 if mems is None else mems.size(1)
        klen = mlen + qlen
        mask = self._mask(word_emb, qlen, mlen)
        pos_seq = torch.arange(klen - 1, -1, -1.0, device=word_emb.device, dtype=word_emb.dtype)
        if self.clamp_len > 0:
            pos_seq.clamp_(max=self.clamp_len)
        sinusoid = torch.outer(pos_seq, self.inv_freq.to(pos_seq.dtype))
        pos_emb = self.drop(torch.cat([sinusoid.sin(), sinusoid.cos()], dim=-1)[:, None, :])
        core_out = self.drop(word_emb)
        hids = []
        for i, layer in enumerate(self.layers):
            hids.append(core_out.detach())
            core_out = layer(core_out, pos_emb, self.r_w_bias, self.r_r_bias, mask,
                             None if mems is None else mems[i])
        core_out = self.drop(core_out)
        new_mems = None
        if mems is not None:
            with torch.no_grad():  # _update_mems (ext_len 0): the layer inputs become the memory
                hids += hids[-1:] * (self.n_layer - len(hids))  # full-depth memory (module doc)
                stacked = torch.stack(hids)
                new_mems = stacked if stacked.size(1) == self.mem_len else \
                    torch.cat([mems, stacked], dim=1)[:, -self.mem_len:]
        tgt_len = target.size(0)
        pred_hid = core_out[-tgt_len:]
        loss = self.crit(pred_hid.reshape(-1, pred_hid.size(-1)), target.reshape(-1))
        return loss.view(tgt_len, -1), new_mems
