"""Adaptive input embedding and projected adaptive log-softmax of Transformer-XL, static shapes.

Follows NVIDIA DeepLearningExamples PyTorch/LanguageModeling/Transformer-XL/pytorch
(mem_transformer.py `AdaptiveEmbedding`, utils/proj_adaptive_softmax.py
`ProjectedAdaptiveLogSoftmax`): the vocabulary is split at ``cutoffs`` into a head (frequent
words plus one logit per tail cluster) and tail clusters; with ``div_val > 1`` cluster i has
embedding width d_embed / div_val**i and a projection to d_model.

The reference picks the tokens of each cluster with ``nonzero()`` (data-dependent sizes). Here
cluster i holds a fixed ``round(share_i * N)`` of the N tokens, with ``share`` the expected
token share of each cluster under the corpus unigram distribution (see `WT103_SHARES`);
index_select / index_copy_ with static index ranges stand for the reference's gathers; the
ids are clamped into their cluster so that materialised placeholder inputs stay in range.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# Expected share of WikiText-103 training tokens in each cluster for cutoffs
# [19997, 39997, 199997, 267735]: a Zipf-Mandelbrot fit f(r) = C / (r + b)^a to the corpus'
# published statistics (103,227,021 training tokens, 267,735 types, every type seen >= 3 times;
# a = 1.37, b = 7.6) gives 96.6% / 1.3% / 1.9% / 0.2%. An estimate, not a count of the corpus.
WT103_SHARES = (0.966, 0.013, 0.019, 0.002)


def cluster_sizes(n: int, shares: tuple[float, ...]) -> list[int]:
    """Tokens per cluster for n tokens: tails round(share * n), the head takes the rest."""
    tails = [round(s * n) for s in shares[1:]]
    return [n - sum(tails), *tails]


class AdaptiveEmbedding(nn.Module):
    """mem_transformer.py AdaptiveEmbedding, scaled by sqrt(d_proj)."""

    def __init__(self, n_token: int, d_embed: int, d_proj: int, cutoffs: list[int], div_val: int,
                 shares: tuple[float, ...]) -> None:
        super().__init__()
        self.d_embed, self.d_proj, self.div_val, self.shares = d_embed, d_proj, div_val, shares
        self.cutoff_ends = [0, *cutoffs, n_token]
        self.emb_scale = d_proj**0.5
        self.emb_layers = nn.ModuleList()
        self.emb_projs = nn.ParameterList()
        if div_val == 1:
            self.emb_layers.append(nn.Embedding(n_token, d_embed))
            if d_proj != d_embed:
                self.emb_projs.append(nn.Parameter(torch.zeros(d_proj, d_embed)))
        else:
            for i in range(len(self.cutoff_ends) - 1):
                lo, hi = self.cutoff_ends[i], self.cutoff_ends[i + 1]
                d_i = d_embed // div_val**i
                self.emb_layers.append(nn.Embedding(hi - lo, d_i))
                self.emb_projs.append(nn.Parameter(torch.zeros(d_proj, d_i)))

    def forward(self, inp: Tensor) -> Tensor:
        if self.div_val == 1:
            embed = self.emb_layers[0](inp)
            if self.d_proj != self.d_embed:
                embed = F.linear(embed, self.emb_projs[0])
        else:
            flat = inp.reshape(-1)
            emb_flat = torch.zeros(flat.shape[0], self.d_proj, dtype=self.emb_projs[0].dtype,
                                   device=flat.device)
            start = 0
            for i, n_i in enumerate(cluster_sizes(flat.shape[0], self.shares)):
                lo, hi = self.cutoff_ends[i], self.cutoff_ends[i + 1]
                idx = torch.arange(start, start + n_i, device=flat.device)  # static stand-in
                tok = (flat.index_select(0, idx) - lo).clamp_(0, hi - lo - 1)
                emb_i = F.linear(self.emb_layers[i](tok), self.emb_projs[i])  # (n_i, d_proj)
                emb_flat.index_copy_(0, idx, emb_i.to(emb_flat.dtype))
                start += n_i
            embed = emb_flat.view(*inp.shape, self.d_proj)
        out: Tensor = embed.mul_(self.emb_scale)
        return out

    def table(self, i: int) -> Tensor:
        """Embedding table of cluster i (the tied output weight)."""
        layer = self.emb_layers[i]
        assert isinstance(layer, nn.Embedding)
        return layer.weight


class ProjectedAdaptiveLogSoftmax(nn.Module):
    """utils/proj_adaptive_softmax.py; returns the per-token NLL (not kept in token order).

    Output weights are tied to the embedding tables; projections of clusters with
    ``tie_projs[i]`` are the embedding's projections, the others are own parameters.
    """

    def __init__(self, emb: AdaptiveEmbedding, n_token: int, d_embed: int, d_proj: int,
                 cutoffs: list[int], div_val: int, tie_projs: list[bool]) -> None:
        super().__init__()
        # the (tied) embedding, held in a list so it is not registered a second time here
        self.emb, self.div_val, self.tie_projs, self.shares = [emb], div_val, tie_projs, emb.shares
        self.cutoff_ends = [0, *cutoffs, n_token]
        n_clusters = len(cutoffs)
        self.cluster_weight = nn.Parameter(torch.zeros(n_clusters, d_embed))
        self.cluster_bias = nn.Parameter(torch.zeros(n_clusters))
        self.out_projs = nn.ParameterDict()
        self.out_layers_biases = nn.ParameterList()
        if div_val == 1:
            if d_proj != d_embed:
                for i, tied in enumerate(tie_projs):
                    if not tied:
                        self.out_projs[str(i)] = nn.Parameter(torch.zeros(d_proj, d_embed))
            self.out_layers_biases.append(nn.Parameter(torch.zeros(n_token)))
        else:
            for i, tied in enumerate(tie_projs):
                lo, hi = self.cutoff_ends[i], self.cutoff_ends[i + 1]
                if not tied:
                    self.out_projs[str(i)] = nn.Parameter(torch.zeros(d_proj, d_embed // div_val**i))
                self.out_layers_biases.append(nn.Parameter(torch.zeros(hi - lo)))

    def _proj(self, i: int) -> Tensor | None:
        if not self.tie_projs[i]:
            own: Tensor | None = self.out_projs.get(str(i))
            return own
        shared = self.emb[0].emb_projs
        return None if len(shared) == 0 else shared[0] if len(shared) == 1 else shared[i]

    def _weight_bias(self, i: int) -> tuple[Tensor, Tensor]:
        if self.div_val == 1:
            lo, hi = self.cutoff_ends[i], self.cutoff_ends[i + 1]
            return self.emb[0].table(0)[lo:hi], self.out_layers_biases[0][lo:hi]
        return self.emb[0].table(i), self.out_layers_biases[i]

    @staticmethod
    def _logit(hidden: Tensor, weight: Tensor, bias: Tensor, proj: Tensor | None) -> Tensor:
        if proj is None:
            return F.linear(hidden, weight, bias)
        return torch.einsum("bd,de,ev->bv", hidden, proj, weight.t()) + bias

    def forward(self, hidden: Tensor, target: Tensor) -> Tensor:
        # hidden (N, d_proj), target (N,) -> nll (N,)
        w0, b0 = self._weight_bias(0)
        head_w = torch.cat([w0, self.cluster_weight], dim=0)  # (shortlist + clusters, d_embed)
        head_b = torch.cat([b0, self.cluster_bias], dim=0)
        head_logprob = F.log_softmax(self._logit(hidden, head_w, head_b, self._proj(0)), dim=1)
        nll = torch.zeros_like(target, dtype=hidden.dtype)
        start = 0
        for i, n_i in enumerate(cluster_sizes(hidden.shape[0], self.shares)):
            lo, hi = self.cutoff_ends[i], self.cutoff_ends[i + 1]
            idx = torch.arange(start, start + n_i, device=hidden.device)  # static stand-in
            tgt_i = (target.index_select(0, idx) - lo).clamp_(0, hi - lo - 1)
            head_i = head_logprob.index_select(0, idx)
            if i == 0:
                logprob_i = head_i.gather(1, tgt_i[:, None]).squeeze(1)
            else:
                w_i, b_i = self._weight_bias(i)
                tail = F.log_softmax(self._logit(hidden.index_select(0, idx), w_i, b_i, self._proj(i)), dim=1)
                logprob_i = head_i[:, -i] + tail.gather(1, tgt_i[:, None]).squeeze(1)
            nll[start:start + n_i].copy_(-logprob_i)
            start += n_i
        return nll
