"""GNMT v2 as defined by NVIDIA DeepLearningExamples (PyTorch/Translation/GNMT, seq2seq/models).

4-layer LSTM encoder (layer 1 bidirectional, residuals from layer 3), 4-layer LSTM decoder whose
first layer feeds a normalized Bahdanau attention; the attention context is concatenated to the
input of every later decoder layer. Shared encoder/decoder embedding, linear classifier.
Tensors are (time, batch, feature) as in DLE (``batch_first=False``).

Static-shape difference from DLE: the bidirectional layer runs on the padded batch instead of a
`pack_padded_sequence` (lengths are data; on meta they have no values). With DLE's length
bucketing, padding inside a batch is small; the attention mask is still built and applied.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

PAD = 0  # seq2seq/data/config.py: PAD, UNK, BOS, EOS = 0, 1, 2, 3


class BahdanauAttention(nn.Module):
    """Normalized Bahdanau attention (seq2seq/models/attention.py, ``normalize=True``)."""

    def __init__(self, query_size: int, key_size: int, num_units: int) -> None:
        super().__init__()
        self.linear_q = nn.Linear(query_size, num_units, bias=False)
        self.linear_k = nn.Linear(key_size, num_units, bias=False)
        self.linear_att = nn.Parameter(torch.empty(num_units))
        self.normalize_scalar = nn.Parameter(torch.empty(1))
        self.normalize_bias = nn.Parameter(torch.empty(num_units))

    def forward(self, query: Tensor, keys: Tensor, context_len: Tensor) -> tuple[Tensor, Tensor]:
        # query (t_q, b, n_q), keys (t_k, b, n_k) -> batch-first for bmm
        keys = keys.transpose(0, 1)
        query = query.transpose(0, 1)
        b, t_q = query.shape[:2]
        t_k = keys.shape[1]
        mask = torch.arange(t_k, device=keys.device) >= context_len.unsqueeze(1)  # (b, t_k)

        pq = self.linear_q(query)  # (b, t_q, n)
        pk = self.linear_k(keys)  # (b, t_k, n)
        n = pk.shape[-1]
        # score(i, j) = v . tanh(q_i + k_j + bias), v = g * v / |v|: a (b, t_q, t_k, n) tensor
        sum_qk = pq.unsqueeze(2).expand(b, t_q, t_k, n) + pk.unsqueeze(1).expand(b, t_q, t_k, n)
        sum_qk = sum_qk + self.normalize_bias
        v = self.linear_att / self.linear_att.norm() * self.normalize_scalar
        scores = torch.tanh(sum_qk).matmul(v)  # (b, t_q, t_k)
        scores.masked_fill_(mask.unsqueeze(1).expand(b, t_q, t_k), -65504.0)  # fp16-safe -inf, as DLE
        probs = F.softmax(scores, dim=-1)
        context = torch.bmm(probs, keys)  # (b, t_q, t_k) x (b, t_k, n_k) -> (b, t_q, n_k)
        return context.transpose(0, 1), probs.transpose(0, 1)


class Encoder(nn.Module):
    """ResidualRecurrentEncoder (seq2seq/models/encoder.py)."""

    def __init__(self, embedder: nn.Embedding, hidden: int, num_layers: int, dropout: float) -> None:
        super().__init__()
        self.embedder = embedder
        self.rnn_layers = nn.ModuleList([nn.LSTM(hidden, hidden, bidirectional=True),
                                         nn.LSTM(2 * hidden, hidden)])
        self.rnn_layers.extend(nn.LSTM(hidden, hidden) for _ in range(num_layers - 2))
        self.dropout = nn.Dropout(dropout)

    def forward(self, src: Tensor) -> Tensor:
        x = self.dropout(self.embedder(src))  # (s, b, h)
        x, _ = self.rnn_layers[0](x)  # (s, b, 2h); DLE packs by length here (see module doc)
        x, _ = self.rnn_layers[1](self.dropout(x))
        for layer in self.rnn_layers[2:]:
            residual = x
            x, _ = layer(self.dropout(x))
            x = x + residual
        out: Tensor = x
        return out


class Decoder(nn.Module):
    """ResidualRecurrentDecoder with RecurrentAttention and Classifier (seq2seq/models/decoder.py)."""

    def __init__(self, embedder: nn.Embedding, vocab: int, hidden: int, num_layers: int,
                 dropout: float) -> None:
        super().__init__()
        self.embedder = embedder
        self.att_rnn = nn.LSTM(hidden, hidden)  # RecurrentAttention.rnn
        self.attn = BahdanauAttention(hidden, hidden, hidden)  # RecurrentAttention.attn
        self.rnn_layers = nn.ModuleList(nn.LSTM(2 * hidden, hidden) for _ in range(num_layers - 1))
        self.classifier = nn.Linear(hidden, vocab)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tgt_in: Tensor, context: Tensor, context_len: Tensor) -> Tensor:
        x = self.dropout(self.embedder(tgt_in))  # (t, b, h)
        x, _ = self.att_rnn(x)
        attn, _ = self.attn(x, context, context_len)  # (t, b, h)
        x = torch.cat((self.dropout(x), attn), dim=2)
        x, _ = self.rnn_layers[0](x)
        for layer in self.rnn_layers[1:]:
            residual = x
            x, _ = layer(torch.cat((self.dropout(x), attn), dim=2))
            x = x + residual
        logits: Tensor = self.classifier(x)  # (t, b, vocab)
        return logits


class GNMT(nn.Module):
    """GNMT v2 (seq2seq/models/gnmt.py) with ``share_embedding=True`` as train.py sets it."""

    def __init__(self, vocab: int, hidden: int = 1024, num_layers: int = 4, dropout: float = 0.2) -> None:
        super().__init__()
        embedder = nn.Embedding(vocab, hidden, padding_idx=PAD)
        self.encoder = Encoder(embedder, hidden, num_layers, dropout)
        self.decoder = Decoder(embedder, vocab, hidden, num_layers, dropout)

    def forward(self, src: Tensor, src_len: Tensor, tgt_in: Tensor) -> Tensor:
        context = self.encoder(src)
        logits: Tensor = self.decoder(tgt_in, context, src_len)
        return logits
