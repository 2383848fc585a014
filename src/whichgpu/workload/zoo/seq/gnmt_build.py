"""Builder for GNMT v2 (NVIDIA DeepLearningExamples PyTorch/Translation/GNMT), WMT16 en-de.

Training step of DLE train.py / seq2seq/train/trainer.py: the model reads ``src`` (S, B),
``src_length`` and ``tgt[:-1]`` (T-1, B); the loss is LabelSmoothing(PAD, 0.1) summed over
non-pad tokens and divided by the batch size; the optimizer is Adam (lr 2e-3).

Throughput: trainer.py logs ``Tok/s`` = (sum(src_length) + sum(tgt_length - 1)) / step time,
source plus target tokens without padding (README: "Performance is reported in total tokens per
second"), so ``Built.tokens = B * (L + L - 1)`` for sentences of L tokens (BOS/EOS included).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from whichgpu.errors import InputError
from whichgpu.workload.zoo.base import BuildRequest, Built
from whichgpu.workload.zoo.seq.common import check_request
from whichgpu.workload.zoo.seq.gnmt import GNMT, PAD

# DLE Tokenizer: 4 special tokens + vocab.bpe.32000, padded to a multiple of 8 for fp16 math:
# 32320 rows. MLPerf GNMT (the same model) lists embedding [32320, 1024] and 160,671,297
# parameters (NVIDIA apex distributed-optimizer test, "MLPerf GNMT has 160671297 parameters").
VOCAB = 32320
# Mean sentence length, BOS/EOS included. The fairseq preprocessing log of the same WMT16 en-de
# BPE-32k files reads 132,886,171 (en) / 137,628,246 (de) tokens for 4,500,966 sentences with
# one EOS each: 28.5 / 29.6 BPE tokens per sentence. DLE keeps pairs of at most 50 tokens
# (--train-max-length 50, BOS and EOS included), which trims the long tail: we take 24 BPE
# tokens + BOS + EOS = 26.
DEFAULT_LEN = 26
# DLE batches by 5 length buckets of width 10 (BucketingSampler) and pads each batch to its
# longest sentence, about the top of the bucket: on average half a bucket width above the mean.
BUCKET_PADDING = 4
SMOOTHING = 0.1


def label_smoothing_loss(logits: Tensor, labels: Tensor, smoothing: float = SMOOTHING) -> Tensor:
    """seq2seq/train/smoothing.py LabelSmoothing, summed, divided by the batch (trainer.py).

    DLE drops pad positions with boolean indexing (a data-dependent shape); multiplying by the
    non-pad mask gives the same sum with static shapes.
    """
    t, b, v = logits.shape
    logp = F.log_softmax(logits.reshape(t * b, v), dim=-1, dtype=torch.float32)
    target = labels.reshape(t * b)
    keep = target.ne(PAD).to(logp.dtype)
    nll = -logp.gather(dim=-1, index=target.unsqueeze(1)).squeeze(1)
    smooth = -logp.mean(dim=-1)
    loss = ((1.0 - smoothing) * nll + smoothing * smooth) * keep
    return loss.sum() / b


def build(req: BuildRequest) -> Built:
    check_request(req, "gnmt-v2")
    length = req.seq_len or DEFAULT_LEN
    padding = req.option("bucket_padding", BUCKET_PADDING)
    vocab = req.option("vocab_size", VOCAB)
    if not isinstance(padding, int) or padding < 0:
        raise InputError(f"gnmt-v2: option bucket_padding must be an integer >= 0, got {padding!r}")
    if length < 2:
        raise InputError(f"gnmt-v2: sequence length must be >= 2 (BOS and EOS), got {length}")
    b, padded = req.batch_size, length + padding

    with torch.device("meta"):
        model = GNMT(vocab)
        src = torch.randint(4, vocab, (padded, b))  # (S, B) token ids
        tgt = torch.randint(4, vocab, (padded, b))  # (T, B): BOS .. EOS
        src_len = torch.full((b,), padded, dtype=torch.long)
    inputs = {"src": src, "src_len": src_len, "tgt_in": tgt[:-1]}
    labels = tgt[1:]

    def loss_fn(out: Tensor, _inputs: object) -> Tensor:
        return label_smoothing_loss(out, labels)

    if req.task == "train":
        model.train()
    else:
        model.eval()
    notes = [
        f"sentences of {length} tokens (BOS/EOS included) on both sides, tensors padded to "
        f"{padded} ({padding} tokens of length-bucket padding, option bucket_padding)",
        "tokens/s counts source + target-1 tokens without padding, as DLE trainer.py logs Tok/s",
        "encoder layer 1 runs on the padded batch (DLE uses pack_padded_sequence)",
    ]
    if req.task == "infer":
        notes.append("inference is one teacher-forced forward pass; DLE translate.py runs beam search")
    return Built(
        model=model, inputs=inputs, loss_fn=loss_fn if req.task == "train" else None,
        samples=b, tokens=b * (2 * length - 1), full_params=sum(p.numel() for p in model.parameters()),
        notes=notes,
    )
