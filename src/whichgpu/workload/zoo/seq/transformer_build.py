"""Builder for Transformer-big on WMT14 en-de (NVIDIA DeepLearningExamples
PyTorch/Translation/Transformer, scripts/run_DGX*.sh).

Training step (fairseq/ddp_trainer.py): ``logits = model(src_tokens, src_lengths,
prev_output_tokens)``, ``log_softmax(logits, dtype=float32)``, label_smoothed_cross_entropy
(0.1) summed over non-pad target tokens; gradients are then divided by the token count.
Optimizer: Adam (betas 0.9/0.997, eps 1e-9).

Batch: DLE's ``--max-tokens`` (10240, 5120 or 2560 per GPU in the README tables) bounds
``sentences x longest sentence``; fairseq rounds the sentence count down to a multiple of 8
(``required_batch_size_multiple=8``). ``BuildRequest.batch_size`` is read as max tokens when the
option ``("batch_in_tokens", True)`` is set or when it exceeds 1000 (no sentence batch of the
reference comes close; the token batches do); otherwise it is a number of sentences.

Throughput: ddp_trainer.py logs ``tokens/s`` from ``sample['ntokens']``, the non-pad target
tokens (EOS included), so ``Built.tokens = sentences * target length``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from whichgpu.errors import InputError
from whichgpu.workload.zoo.base import BuildRequest, Built
from whichgpu.workload.zoo.seq.common import built_layers, check_request
from whichgpu.workload.zoo.seq.fairseq_transformer import PAD, TransformerConfig, TransformerModel

NAME = "transformer-big-wmt14"
# README: "Default vocabulary size is 33708, excluding all special tokens"; fairseq's Dictionary
# adds 4 specials: 33712 rows (a multiple of 8, so no madeupword padding).
VOCAB = 33712
# Mean sentence length in BPE tokens with the EOS fairseq appends. The fairseq preprocessing
# log of the WMT16 en-de BPE-32k training set (the same Europarl/CommonCrawl/News-Commentary
# corpora as WMT14) reads 132,886,171 en / 137,628,246 de tokens for 4,500,966 sentences:
# 29.5 / 30.6 per sentence. We use 30 for both sides.
DEFAULT_LEN = 30
TOKEN_BATCH_THRESHOLD = 1000
SMOOTHING = 0.1


def label_smoothed_nll(logits: Tensor, target: Tensor, eps: float = SMOOTHING) -> Tensor:
    """fairseq/criterions.py LabelSmoothedCrossEntropyCriterion on float32 log-probs.

    The reference drops pad positions with boolean indexing; a multiplication by the non-pad
    mask gives the same sums with static shapes.
    """
    lprobs = F.log_softmax(logits, dim=-1, dtype=torch.float32)
    lprobs = lprobs.view(-1, lprobs.size(-1))
    target = target.reshape(-1, 1)
    keep = target.ne(PAD).to(lprobs.dtype)
    nll_loss = (-lprobs.gather(dim=-1, index=target) * keep).sum()
    smooth_loss = (-lprobs.sum(dim=-1, keepdim=True) * keep).sum()
    return (1.0 - eps) * nll_loss + eps / lprobs.size(-1) * smooth_loss


def sentences_per_batch(req: BuildRequest, length: int) -> tuple[int, bool]:
    """(sentences, batch given in tokens?) for a request."""
    in_tokens = bool(req.option("batch_in_tokens", req.batch_size > TOKEN_BATCH_THRESHOLD))
    if not in_tokens:
        return req.batch_size, False
    n = req.batch_size // length
    if n >= 8:
        n -= n % 8  # fairseq batch_by_size: multiple of required_batch_size_multiple
    if n < 1:
        raise InputError(f"{NAME}: a batch of {req.batch_size} tokens holds no sentence of {length} tokens")
    return n, True


def build(req: BuildRequest) -> Built:
    check_request(req, NAME)
    length = req.seq_len or DEFAULT_LEN
    src_len = req.option("src_len", length)
    if not isinstance(src_len, int) or src_len < 1:
        raise InputError(f"{NAME}: option src_len must be a positive integer, got {src_len!r}")
    n, in_tokens = sentences_per_batch(req, max(length, src_len))
    c = TransformerConfig(vocab=req.option("vocab_size", VOCAB))
    n_enc = built_layers(c.encoder_layers, req.truncate_layers)
    n_dec = built_layers(c.decoder_layers, req.truncate_layers)

    with torch.device("meta"):
        model = TransformerModel(c, n_enc, n_dec)
        src = torch.randint(4, c.vocab, (n, src_len))  # (B, S) source tokens, EOS last
        prev = torch.randint(4, c.vocab, (n, length))  # (B, T) target shifted right
        target = torch.randint(4, c.vocab, (n, length))
    model.train(req.task == "train")

    def loss_fn(out: Tensor, _inputs: object) -> Tensor:
        return label_smoothed_nll(out, target)

    repeats = {}
    if n_enc < c.encoder_layers:
        repeats[f"encoder.layers.{n_enc - 1}"] = c.encoder_layers - n_enc
    if n_dec < c.decoder_layers:
        repeats[f"decoder.layers.{n_dec - 1}"] = c.decoder_layers - n_dec
    enc_layer = sum(p.numel() for p in model.encoder.layers[0].parameters())
    dec_layer = sum(p.numel() for p in model.decoder.layers[0].parameters())
    full = (sum(p.numel() for p in model.parameters())
            + enc_layer * (c.encoder_layers - n_enc) + dec_layer * (c.decoder_layers - n_dec))
    batch = f"max-tokens {req.batch_size} -> " if in_tokens else ""
    notes = [
        f"{batch}{n} sentences of {src_len} source / {length} target tokens, no padding",
        "tokens/s counts target tokens (fairseq ntokens); the per-parameter gradient division "
        "by the token count is not traced",
    ]
    if req.task == "infer":
        notes.append("inference is one teacher-forced forward pass; DLE inference.py runs beam search")
    return Built(
        model=model, inputs={"src_tokens": src, "prev_output_tokens": prev},
        loss_fn=loss_fn if req.task == "train" else None, repeats=repeats,
        samples=n, tokens=n * length, full_params=full, notes=notes,
    )
