"""Builders that use the field's own definitions from transformers / diffusers."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from whichgpu.errors import InputError, MissingExtraError
from whichgpu.workload.zoo.base import BuildRequest, Built
from whichgpu.workload.zoo.llm.build import load_packaged_config

DLE_VOCAB = 30528  # NVIDIA DLE pads BERT's 30522-token vocabulary to a multiple of 8


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise MissingExtraError("building this model", "torch", "transformers") from None
    return transformers


def _check(req: BuildRequest, image: bool = False) -> None:
    if req.batch_size <= 0:
        raise InputError(f"batch size must be > 0, got {req.batch_size}")
    n = req.image_size if image else req.seq_len
    if n is None or n <= 0:
        raise InputError(f"{'image size' if image else 'sequence length'} must be > 0, got {n}")


def _bert_config(cfg: dict[str, Any], seq: int, dle_vocab: bool = True, attention: str = "eager") -> Any:
    tf = _transformers()
    c = {k: v for k, v in cfg.items() if not k.startswith("_") and k != "model_type"}
    if dle_vocab:
        c["vocab_size"] = DLE_VOCAB
    if seq > c.get("max_position_embeddings", 512):
        raise InputError(f"sequence length {seq} exceeds BERT's {c['max_position_embeddings']} positions")
    if attention not in ("eager", "sdpa"):
        raise InputError(f"attention must be 'eager' or 'sdpa', got {attention!r}")
    conf = tf.BertConfig(**c)
    conf._attn_implementation = attention
    return conf


def _truncate(conf: Any, req: BuildRequest) -> int:
    """Build at most two layers when truncating; returns the full layer count."""
    full = int(conf.num_hidden_layers)
    if req.truncate_layers and full > 2:
        conf.num_hidden_layers = 2
    return full


def _repeated(model: nn.Module, full_layers: int, built_layers: int) -> tuple[dict[str, int], int]:
    """(repeats, full parameter count) for a model built with `built_layers` of `full_layers` layers."""
    params = sum(p.numel() for p in model.parameters())
    if built_layers >= full_layers:
        return {}, params
    from whichgpu.workload.hf import layer_list

    lst = layer_list(model)
    if lst is None:
        raise RuntimeError("repeated layer list not found")
    per_layer = sum(p.numel() for n, p in model.named_parameters() if n.startswith(f"{lst}.1."))
    return {f"{lst}.1": full_layers - 2}, params + per_layer * (full_layers - 2)


def build_bert_squad(req: BuildRequest, config: str) -> Built:
    _check(req)
    tf = _transformers()
    cfg = load_packaged_config(config)
    conf = _bert_config(cfg, req.seq_len or 0)
    full_layers = _truncate(conf, req)
    with torch.device("meta"):
        model = tf.BertForQuestionAnswering(conf)
    repeats, full = _repeated(model, full_layers, conf.num_hidden_layers)
    b, s = req.batch_size, req.seq_len or 0
    inputs = {"input_ids": torch.zeros(b, s, dtype=torch.long, device="meta"),
              "token_type_ids": torch.zeros(b, s, dtype=torch.long, device="meta")}
    start = torch.zeros(b, dtype=torch.long, device="meta")
    end = torch.zeros(b, dtype=torch.long, device="meta")

    def loss_fn(out: Any, _inp: Any) -> torch.Tensor:
        # (CE(start) + CE(end)) / 2, as BertForQuestionAnswering / DLE run_squad.py
        return (F.cross_entropy(out.start_logits, start) + F.cross_entropy(out.end_logits, end)) / 2

    return Built(model, inputs, loss_fn if req.task == "train" else None, repeats, samples=b, tokens=b * s,
                 full_params=full, notes=["attention mask omitted (all tokens valid), as in padded benchmark batches"])


def build_bert_cls(req: BuildRequest, config: str) -> Built:
    """BertForSequenceClassification (2 labels) as HF's "efficient training on one GPU" guide runs it
    with the Trainer: the Hub checkpoint's 30522-token vocabulary, input_ids and labels only (no
    attention mask or token types: the model's zero token-type buffer is used). Eager attention
    by default, as transformers ran BERT in 2022; option ("attention", "sdpa") for today's."""
    _check(req)
    tf = _transformers()
    conf = _bert_config(load_packaged_config(config), req.seq_len or 0, dle_vocab=False,
                        attention=req.option("attention", "eager"))
    conf.num_labels = 2
    full_layers = _truncate(conf, req)
    with torch.device("meta"):
        model = tf.BertForSequenceClassification(conf)
    repeats, full = _repeated(model, full_layers, conf.num_hidden_layers)
    b, s = req.batch_size, req.seq_len or 0
    inputs = {"input_ids": torch.zeros(b, s, dtype=torch.long, device="meta")}
    labels = torch.zeros(b, dtype=torch.long, device="meta")

    def loss_fn(out: Any, _inp: Any) -> torch.Tensor:
        return F.cross_entropy(out.logits.view(-1, 2), labels)  # as the model's single-label loss

    return Built(model, inputs, loss_fn if req.task == "train" else None, repeats, samples=b, tokens=b * s,
                 full_params=full, notes=["attention mask omitted (all tokens valid), as the guide's random batches"])


class _BertPretrain(nn.Module):
    """BertModel + NSP head + MLM head evaluated on the masked positions only (static count)."""

    def __init__(self, conf: Any, masked: int) -> None:
        super().__init__()
        tf = _transformers()
        self.bert = tf.BertModel(conf)
        self.cls = tf.models.bert.modeling_bert.BertPreTrainingHeads(conf)
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight
        self.masked = masked

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, masked_index: torch.Tensor) -> Any:
        out = self.bert(input_ids=input_ids, token_type_ids=token_type_ids)
        seq, pooled = out.last_hidden_state, out.pooler_output
        flat = seq.reshape(-1, seq.shape[-1]).index_select(0, masked_index)  # (masked, hidden)
        return self.cls(flat, pooled)


def build_bert_pretraining(req: BuildRequest, config: str) -> Built:
    _check(req)
    cfg = load_packaged_config(config)
    s = req.seq_len or 0
    conf = _bert_config(cfg, s)
    full_layers = _truncate(conf, req)
    b = req.batch_size
    # max_predictions_per_seq of NVIDIA's BERT data: 20 at sequence length 128, 80 at 512.
    per_seq = 20 if s <= 128 else 80
    masked = b * per_seq
    with torch.device("meta"):
        model = _BertPretrain(conf, masked)
    repeats, full = _repeated(model, full_layers, conf.num_hidden_layers)
    inputs = {"input_ids": torch.zeros(b, s, dtype=torch.long, device="meta"),
              "token_type_ids": torch.zeros(b, s, dtype=torch.long, device="meta"),
              "masked_index": torch.zeros(masked, dtype=torch.long, device="meta")}
    mlm_labels = torch.zeros(masked, dtype=torch.long, device="meta")
    nsp_labels = torch.zeros(b, dtype=torch.long, device="meta")

    def loss_fn(out: Any, _inp: Any) -> torch.Tensor:
        scores, nsp = out
        return F.cross_entropy(scores.float(), mlm_labels) + F.cross_entropy(nsp.float(), nsp_labels)

    return Built(model, inputs, loss_fn if req.task == "train" else None, repeats, samples=b, tokens=b * s,
                 full_params=full, notes=[f"MLM head on {per_seq} masked positions per sequence"])


def build_vit(req: BuildRequest, config: str) -> Built:
    _check(req, image=True)
    tf = _transformers()
    cfg = {k: v for k, v in load_packaged_config(config).items() if not k.startswith("_") and k != "model_type"}
    img = req.image_size or 224
    cfg["image_size"] = img
    if img % cfg["patch_size"]:
        raise InputError(f"image size {img} is not a multiple of the patch size {cfg['patch_size']}")
    conf = tf.ViTConfig(**cfg)
    attention = req.option("attention", "sdpa")
    if attention not in ("eager", "sdpa"):
        raise InputError(f"attention must be 'eager' or 'sdpa', got {attention!r}")
    conf._attn_implementation = attention  # eager: matmul + softmax (timm on torch 1.x; no fused SDPA)
    full_layers = _truncate(conf, req)
    with torch.device("meta"):
        model = tf.ViTForImageClassification(conf)
    repeats, full = _repeated(model, full_layers, conf.num_hidden_layers)
    b = req.batch_size
    inputs = {"pixel_values": torch.empty(b, 3, img, img, device="meta")}
    labels = torch.zeros(b, dtype=torch.long, device="meta")

    def loss_fn(out: Any, _inp: Any) -> torch.Tensor:
        return F.cross_entropy(out.logits, labels)

    return Built(model, inputs, loss_fn if req.task == "train" else None, repeats, samples=b, full_params=full)


def build_sd_unet(req: BuildRequest, config: str) -> Built:
    _check(req, image=True)
    try:
        import diffusers
    except ImportError:
        raise MissingExtraError("building the Stable Diffusion UNet", "torch", "diffusers") from None
    cfg = {k: v for k, v in load_packaged_config(config).items() if not k.startswith("_") and k != "model_type"}
    img = req.image_size or 512
    if img % 64:
        raise InputError(f"image size {img} must be a multiple of 64 (latents are 1/8, UNet downsamples 3x)")
    lat = img // 8
    cfg["sample_size"] = lat
    with torch.device("meta"):
        model: nn.Module = diffusers.UNet2DConditionModel(**cfg)  # type: ignore[no-untyped-call,assignment]
    b = req.batch_size
    inputs = {"sample": torch.empty(b, 4, lat, lat, device="meta"),
              "timestep": torch.zeros(b, dtype=torch.long, device="meta"),
              "encoder_hidden_states": torch.empty(b, 77, cfg["cross_attention_dim"], device="meta")}
    noise = torch.empty(b, 4, lat, lat, device="meta")

    def loss_fn(out: Any, _inp: Any) -> torch.Tensor:
        return F.mse_loss(out.sample.float(), noise.float())  # epsilon-prediction objective

    return Built(model, inputs, loss_fn if req.task == "train" else None, {}, samples=b,
                 full_params=sum(p.numel() for p in model.parameters()),
                 notes=["one denoising step of the UNet (inference: multiply by the number of sampling steps)"])


# ---- encoder-decoder, speech and hybrid models through the generic transformers path -------------

# The class each packaged config is built as (the hub config of bart-large names BartModel, the
# bare encoder-decoder; fine-tuning and generation use the LM head, tied to the embedding).
SEQ2SEQ_CLASSES = {"t5": "T5ForConditionalGeneration", "bart": "BartForConditionalGeneration",
                   "whisper": "WhisperForConditionalGeneration"}
CAUSAL_LM_CLASSES = {"nemotron_h": "NemotronHForCausalLM"}
TARGET_LEN = 128  # default target tokens of the text encoder-decoders (run_summarization.py's max_target_length)


def build_seq2seq(req: BuildRequest, config: str) -> Built:
    """T5 / BART / Whisper from the packaged config, built by transformers (`hf.build_transformers`):
    an encoder pass over the source and a decoder pass over the target. Text models take a
    target of 128 tokens unless the option ``target_len`` says otherwise; Whisper's source is 30 s
    of log-mel features and the sequence length is the target's."""
    from whichgpu.workload.hf import build_transformers

    cfg = load_packaged_config(config)
    mt = cfg["model_type"]
    if mt != "whisper" and req.option("target_len") is None:
        req = replace(req, options=(*req.options, ("target_len", TARGET_LEN)))
    return build_transformers(cfg, req, config, SEQ2SEQ_CLASSES[mt])


def build_causal_lm(req: BuildRequest, config: str) -> Built:
    """A decoder the in-house definitions do not cover (Nemotron-H's Mamba-2 hybrid), built by
    transformers from the packaged config with its LM head."""
    from whichgpu.workload.hf import build_transformers

    cfg = load_packaged_config(config)
    return build_transformers(cfg, req, config, CAUSAL_LM_CLASSES.get(cfg["model_type"]))
