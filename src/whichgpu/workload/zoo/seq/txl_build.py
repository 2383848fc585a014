"""Builders for Transformer-XL Base and Large on WikiText-103 (NVIDIA DeepLearningExamples
PyTorch/LanguageModeling/Transformer-XL, configs pytorch/wt103_base.yaml and wt103_large.yaml).

Training step (train.py `train_iteration`): ``loss, mems = model(data, target, mems)`` on a
segment of ``tgt_len`` tokens per stream with ``mem_len`` cached states per layer, then
``loss.float().mean()``; the optimizer is LAMB (``optim: jitlamb``). Inference follows the
``eval`` config (longer memory, ``same_length``, ``clamp_len``).

Throughput: train.py adds ``target.numel()`` (tgt_len x batch) per step and logs
``tok/s = target_tokens / elapsed``, so ``Built.tokens = tgt_len * batch``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from whichgpu.errors import InputError
from whichgpu.workload.zoo.base import BuildRequest, Built
from whichgpu.workload.zoo.seq.common import built_layers, check_request, layer_repeats
from whichgpu.workload.zoo.seq.txl_adaptive import WT103_SHARES
from whichgpu.workload.zoo.seq.txl_model import MemTransformerLM, TXLConfig


@dataclass(frozen=True)
class Preset:
    config: TXLConfig
    tgt_len: int  # train: tokens predicted per segment
    mem_len: int  # train: cached states per layer
    eval_tgt_len: int  # eval config
    eval_mem_len: int
    eval_clamp_len: int


PRESETS = {
    # wt103_base.yaml: DLE's base (d_model 512, 8 x 64 heads, d_inner 2048), div_val 1
    "transformer-xl-base": Preset(
        TXLConfig(n_layer=16, d_model=512, n_head=8, d_head=64, d_inner=2048, div_val=1,
                  dropout=0.1, dropatt=0.0),
        tgt_len=192, mem_len=192, eval_tgt_len=64, eval_mem_len=640, eval_clamp_len=400),
    # wt103_large.yaml: the paper's large model, adaptive input/softmax with div_val 4
    "transformer-xl-large": Preset(
        TXLConfig(n_layer=18, d_model=1024, n_head=16, d_head=64, d_inner=4096, div_val=4,
                  dropout=0.2, dropatt=0.2),
        tgt_len=384, mem_len=384, eval_tgt_len=128, eval_mem_len=1600, eval_clamp_len=1000),
}


def _build(name: str, req: BuildRequest) -> Built:
    check_request(req, name)
    p = PRESETS[name]
    c = p.config
    train = req.task == "train"
    tgt_len = req.seq_len or (p.tgt_len if train else p.eval_tgt_len)
    mem_len = req.option("mem_len", p.mem_len if train else p.eval_mem_len)
    adaptive = req.option("adaptive", True)
    div_val = req.option("div_val", c.div_val)
    if not isinstance(mem_len, int) or mem_len < 0:
        raise InputError(f"{name}: option mem_len must be an integer >= 0, got {mem_len!r}")
    if not isinstance(adaptive, bool):
        raise InputError(f"{name}: option adaptive must be true or false, got {adaptive!r}")
    if not isinstance(div_val, int) or isinstance(div_val, bool) or div_val < 1:
        raise InputError(f"{name}: option div_val must be an integer >= 1, got {div_val!r}")
    if not adaptive:
        # train.py without --adaptive: no cutoffs, one (tied) softmax and embedding over the vocabulary
        c = replace(c, cutoffs=(), tie_projs=(False,))
    c = replace(c, div_val=div_val)
    shares = tuple(req.option("cluster_shares", WT103_SHARES if adaptive else (1.0,)))
    if len(shares) != len(c.cutoffs) + 1 or abs(sum(shares) - 1.0) > 1e-6 or min(shares) < 0:
        raise InputError(f"{name}: option cluster_shares needs {len(c.cutoffs) + 1} shares >= 0 "
                         f"summing to 1, got {shares!r}")
    n_built = built_layers(c.n_layer, req.truncate_layers)
    b = req.batch_size

    with torch.device("meta"):
        model = MemTransformerLM(c, n_built, shares, mem_len, same_length=not train,
                                 clamp_len=-1 if train else p.eval_clamp_len)
        data = torch.randint(0, c.n_token, (tgt_len, b))  # (tgt_len, bsz) token ids
        target = torch.randint(0, c.n_token, (tgt_len, b))
        mems = torch.zeros(c.n_layer, mem_len, b, c.d_model) if mem_len > 0 else None
    model.train(train)

    # full model: embeddings + crit (shared across depth) + n_layer decoder layers
    per_layer = sum(q.numel() for q in model.layers[0].parameters())
    full = sum(q.numel() for q in model.parameters()) + per_layer * (c.n_layer - n_built)
    notes = [
        f"segment of {tgt_len} tokens with {mem_len} cached states per layer (mems input, no grad)",
        "adaptive softmax/input: static tokens per cluster from expected WikiText-103 unigram shares "
        f"{shares} (the reference selects them with nonzero())" if adaptive else
        f"no adaptive softmax/input (train.py without --adaptive): one softmax over all {c.n_token:,} words",
    ]
    if not train:
        notes.append(f"eval config: same_length, clamp_len {p.eval_clamp_len}")
    return Built(
        model=model, inputs={"data": data, "target": target, "mems": mems},
        loss_fn=(lambda out, _inputs: out[0].float().mean()) if train else None,
        repeats=layer_repeats("layers", c.n_layer, n_built),
        samples=b, tokens=tgt_len * b, full_params=full, notes=notes,
    )


def build_base(req: BuildRequest) -> Built:
    return _build("transformer-xl-base", req)


def build_large(req: BuildRequest) -> Built:
    return _build("transformer-xl-large", req)
