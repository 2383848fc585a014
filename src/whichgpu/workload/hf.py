"""Hugging Face config.json models.

Families with a built-in definition (llama, mistral, mixtral, qwen2, gpt2) use it (fast, and
checked against transformers in tests). Any other ``model_type`` is built by transformers
itself from the config (``architectures[0]`` when transformers has that class, else
AutoModel), on the meta device, with repeated layers truncated to two and multiplied.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from whichgpu.errors import CaptureError, InputError, MissingExtraError
from whichgpu.workload.shape import ModelShape
from whichgpu.workload.zoo.base import BuildRequest, Built
from whichgpu.workload.zoo.llm.args import SUPPORTED, args_from_config
from whichgpu.workload.zoo.llm.build import build_decoder

LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")


def model_shape(cfg: dict[str, Any], path: str) -> ModelShape:
    """A built-in decoder's full shape; for other configs, only their ``model_type``."""
    if cfg.get("model_type") in SUPPORTED:
        return args_from_config(cfg, path).shape()
    return ModelShape(arch=cfg.get("model_type", ""))


def build_hf(cfg: dict[str, Any], req: BuildRequest, path: str) -> Built:
    if req.batch_size <= 0:
        raise InputError(f"batch size must be > 0, got {req.batch_size}", field="batch_size")
    if cfg.get("model_type") in SUPPORTED:
        return build_decoder(cfg, req, path)
    return _build_transformers(cfg, req, path)


def _build_transformers(cfg: dict[str, Any], req: BuildRequest, path: str) -> Built:
    try:
        import transformers
    except ImportError:
        raise MissingExtraError(f"building model_type {cfg.get('model_type')!r}", "torch", "transformers") from None
    try:
        conf = transformers.AutoConfig.for_model(**cfg)
    except (ValueError, KeyError, TypeError) as e:
        raise CaptureError(f"{path}: transformers cannot read this config ({_line(e)})") from None
    key = next((k for k in LAYER_KEYS if hasattr(conf, k)), None)
    full_layers = int(getattr(conf, key)) if key else 0
    if key and req.truncate_layers and full_layers > 2:
        setattr(conf, key, 2)
    conf._attn_implementation = "sdpa"
    cls = _model_class(transformers, conf, req)
    try:
        with torch.device("meta"):
            model = cls(conf)
    except Exception as e:
        raise CaptureError(f"{path}: transformers could not build {cls.__name__} ({type(e).__name__}: {_line(e)})") from None
    repeats, per_layer = {}, 0
    if key and req.truncate_layers and full_layers > 2:
        lst = layer_list(model)
        if lst is None:
            raise CaptureError(f"{path}: could not find the repeated layer list in {cls.__name__}")
        repeats = {f"{lst}.1": full_layers - 2}
        per_layer = sum(p.numel() for n, p in model.named_parameters() if n.startswith(f"{lst}.1."))
    inputs, loss_fn, samples, tokens = _inputs(conf, req, path)
    full = sum(p.numel() for p in model.parameters()) + per_layer * max(full_layers - 2, 0)
    return Built(model, inputs, loss_fn if req.task == "train" else None, repeats, samples=samples,
                 tokens=tokens, full_params=full, notes=[f"transformers {cls.__name__} from {path}"])


def _model_class(tf: Any, conf: Any, req: BuildRequest) -> Any:
    for name in getattr(conf, "architectures", None) or []:
        cls = getattr(tf, name, None)
        if cls is not None:
            return cls
    return tf.AutoModel._model_mapping.get(type(conf), tf.AutoModel)


def layer_list(model: nn.Module) -> str | None:
    """Module path of the shallowest 2-long ModuleList named like a layer stack."""
    best = None
    for name, mod in model.named_modules():
        if (isinstance(mod, nn.ModuleList) and len(mod) == 2
                and name.split(".")[-1] in ("layers", "layer", "h", "blocks", "block")
                and (best is None or name.count(".") < best.count("."))):
            best = name
    return best


def _inputs(conf: Any, req: BuildRequest, path: str) -> tuple[dict[str, Any], Any, int, int]:
    b = req.batch_size
    if getattr(conf, "model_type", "") in ("vit", "deit", "beit", "convnext", "resnet", "swin", "dinov2"):
        img = int(req.image_size or getattr(conf, "image_size", 224) or 224)
        x = {"pixel_values": torch.empty(b, int(getattr(conf, "num_channels", 3)), img, img, device="meta")}
        labels = torch.zeros(b, dtype=torch.long, device="meta")
        return x, lambda out, _i: F.cross_entropy(out.logits.float(), labels), b, 0
    s = req.seq_len or 0
    if s <= 0:
        raise InputError(f"sequence length must be > 0, got {s}", field="seq_len")
    limit = getattr(conf, "max_position_embeddings", None)
    if isinstance(limit, int) and s > limit:
        raise InputError(f"sequence length {s} exceeds {path}'s max_position_embeddings {limit}", field="seq_len")
    ids = torch.zeros(b, s, dtype=torch.long, device="meta")
    x = {"input_ids": ids}
    if req.task == "train":
        x["labels"] = torch.zeros(b, s, dtype=torch.long, device="meta")
    return x, None, b, b * s


def _line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0][:200] if s else ""
