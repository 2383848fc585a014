"""Hugging Face config.json models.

Families with a built-in definition (`zoo.llm.args.SUPPORTED`) use it (fast, and checked
against transformers in tests). Any other ``model_type`` is built by transformers itself from
the config (``architectures[0]`` when transformers has that class, else AutoModel), on the meta
device, with the kernels whichgpu models registered in transformers' interfaces
(`zoo.hf_interfaces`: fused attention, grouped expert GEMMs), and repeated layers truncated:
two per stack (encoder and decoder each), or, where ``layer_types`` mixes kinds (Mamba,
attention and MLP layers of a hybrid), at most two of each kind, the second standing for the
rest of its kind (`Built.repeats`).

Attention: "whichgpu" where the class dispatches through transformers' AttentionInterface,
else "sdpa" (routed to the fused kernel by the capture), else "eager"; each is tried with one
forward on meta before it is kept, and the one used is echoed in the notes.
"""

from __future__ import annotations

import contextlib
import inspect
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from whichgpu.errors import CaptureError, InputError, MissingExtraError
from whichgpu.workload.shape import ModelShape
from whichgpu.workload.zoo.base import BuildRequest, Built
from whichgpu.workload.zoo.llm.args import SUPPORTED, args_from_config
from whichgpu.workload.zoo.llm.build import build_decoder, moe_options

LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
# Encoder and decoder layer counts of encoder-decoder configs: BART / Whisper / mBART style, T5 style.
ENC_DEC_KEYS = (("encoder_layers", "decoder_layers"), ("num_layers", "num_decoder_layers"))
STACK_NAMES = ("layers", "layer", "h", "blocks", "block")
VISION_TYPES = ("vit", "deit", "beit", "convnext", "resnet", "swin", "dinov2")


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
    return build_transformers(cfg, req, path)


# ---- what to truncate ---------------------------------------------------------------------------

@dataclass
class Stack:
    """One stack of repeated layers: its config key, the role its module path carries ("encoder",
    "decoder", or "" for any), its full length, and the layers built: {position in the built list:
    extra copies it stands for}."""

    key: str
    role: str
    full: int
    built: int
    extra: dict[int, int] = field(default_factory=dict)


def _count(conf: Any, key: str) -> int | None:
    v = getattr(conf, key, None)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _stacks(conf: Any) -> list[Stack]:
    if isinstance(getattr(conf, "depths", None), (list, tuple)):
        return []  # stages of different widths (Swin, ConvNeXt): built whole
    if getattr(conf, "is_encoder_decoder", False):
        for enc, dec in ENC_DEC_KEYS:
            ne, nd = _count(conf, enc), _count(conf, dec)
            if ne is not None and nd is not None:
                return [Stack(enc, "encoder", ne, ne), Stack(dec, "decoder", nd, nd)]
    key = next((k for k in LAYER_KEYS if _count(conf, k) is not None), None)
    return [Stack(key, "", int(getattr(conf, key)), int(getattr(conf, key)))] if key else []


def _truncate(conf: Any, req: BuildRequest) -> tuple[list[Stack], list[str]]:
    """Set the config to build the truncated model; returns the stacks and notes."""
    stacks = _stacks(conf)
    if not req.truncate_layers:
        return stacks, []
    notes: list[str] = []
    types = getattr(conf, "layer_types", None)
    mixed = (len(stacks) == 1 and isinstance(types, list) and len(types) == stacks[0].full
             and len(set(types)) > 1)
    if mixed:
        assert isinstance(types, list)
        s = stacks[0]
        keep, extra = _kinds(types)
        if len(keep) < s.full and _set_layer_types(conf, [types[i] for i in keep], s.key):
            s.built, s.extra = len(keep), extra
            kinds = ", ".join(f"{types.count(t)} {t}" for t in dict.fromkeys(types))
            notes.append(f"layers: {kinds}; built {len(keep)} (two of each kind), the second of each repeated")
        elif len(keep) < s.full:
            notes.append(f"layers: all {s.full} built (the config's layer_types could not be truncated)")
        return stacks, notes
    for s in stacks:
        if s.full > 2:
            try:
                setattr(conf, s.key, 2)
            except Exception as e:  # a config validating its layer counts (strict dataclasses)
                notes.append(f"layers: all {s.full} built ({s.key} could not be set: {_line(e, 80)})")
                continue
            s.built, s.extra = 2, {1: s.full - 2}
    if len(stacks) == 1 and isinstance(types, list) and stacks[0].built < len(types):
        _set_layer_types(conf, types[: stacks[0].built], "")
    return stacks, notes


def _kinds(types: list[str]) -> tuple[list[int], dict[int, int]]:
    """The layers to keep of a mixed stack (the first two of each kind, in order) and the extra
    copies each second one stands for."""
    seen: dict[str, list[int]] = {}
    for i, t in enumerate(types):
        seen.setdefault(t, []).append(i)
    keep = sorted(i for idx in seen.values() for i in idx[:2])
    extra = {keep.index(idx[1]): len(idx) - 2 for idx in seen.values() if len(idx) > 2}
    return keep, extra


def _set_layer_types(conf: Any, types: list[str], key: str) -> bool:
    """Set the config's layer kinds (and count) to `types`; False, the config as it was, if it
    does not take them (Jamba derives its kinds from attn_layer_period / offset)."""
    before = (list(getattr(conf, "layer_types", []) or []), getattr(conf, key, None) if key else None)
    try:
        conf.layer_types = list(types)
        if key:
            setattr(conf, key, len(types))  # (a derived count, as Nemotron-H's, ignores this)
        if list(getattr(conf, "layer_types", []) or []) == list(types):
            return True
    except Exception:
        pass
    with contextlib.suppress(Exception):
        conf.layer_types = before[0]
        if key:
            setattr(conf, key, before[1])
    return False


def _find_stack(model: nn.Module, n: int, role: str) -> str | None:
    """Module path of the shallowest n-long ModuleList named like a layer stack (under `role`)."""
    best = None
    for name, mod in model.named_modules():
        parts = name.split(".")
        if (isinstance(mod, nn.ModuleList) and len(mod) == n and parts[-1] in STACK_NAMES
                and (not role or role in parts) and (best is None or name.count(".") < best.count("."))):
            best = name
    return best


def layer_list(model: nn.Module) -> str | None:
    """Module path of the shallowest 2-long ModuleList named like a layer stack."""
    return _find_stack(model, 2, "")


def _repeats(model: nn.Module, stacks: list[Stack], path: str, cls: str) -> tuple[dict[str, int], int]:
    """(Built.repeats, full parameter count) of the truncated model."""
    full = sum(p.numel() for p in model.parameters())
    repeats: dict[str, int] = {}
    for s in stacks:
        if not s.extra:
            continue
        lst = _find_stack(model, s.built, s.role)
        if lst is None:
            raise CaptureError(f"{path}: could not find the repeated {s.role or 'layer'} list in {cls}")
        for i, extra in s.extra.items():
            repeats[f"{lst}.{i}"] = extra
            full += extra * sum(p.numel() for n, p in model.named_parameters() if n.startswith(f"{lst}.{i}."))
    return repeats, full


# ---- inputs -------------------------------------------------------------------------------------

@dataclass
class Inputs:
    values: dict[str, Any]
    loss_fn: Any
    samples: int
    tokens: int
    notes: list[str]
    prefill: dict[str, Any] | None = None  # decode: the prompt whose cache the step reads (its forward runs at build)


def _ids(b: int, s: int) -> torch.Tensor:
    return torch.zeros(b, s, dtype=torch.long, device="meta")


def _lm_loss(labels: torch.Tensor) -> Any:
    def loss_fn(out: Any, _inp: Any) -> torch.Tensor:
        # Cross-entropy over the decoder's logits (FP32, as transformers' ForCausalLMLoss upcasts).
        logits = out.logits
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))

    return loss_fn


def _inputs(conf: Any, cls: Any, req: BuildRequest, path: str) -> Inputs:
    b = req.batch_size
    if getattr(conf, "model_type", "") in VISION_TYPES:
        img = int(req.image_size or getattr(conf, "image_size", 224) or 224)
        pixels = {"pixel_values": torch.empty(b, int(getattr(conf, "num_channels", 3)), img, img, device="meta")}
        labels = torch.zeros(b, dtype=torch.long, device="meta")
        head = cls.__name__.endswith("ForImageClassification")  # (a bare backbone has no logits)
        loss = (lambda out, _i: F.cross_entropy(out.logits.float(), labels)) if head else None
        return Inputs(pixels, loss, b, 0, [])
    speech = getattr(cls, "main_input_name", "") == "input_features"
    seq2seq = speech or getattr(conf, "is_encoder_decoder", False)
    if req.phase == "decode":
        if seq2seq:
            raise InputError(f"{path}: phase decode applies to causal LMs", field="phase")
        return _decode_inputs(conf, cls, req, path)
    s = req.seq_len or 0
    if s <= 0:
        raise InputError(f"sequence length must be > 0, got {s}", field="seq_len")
    if seq2seq:
        return _seq2seq_inputs(conf, cls, req, path, speech)
    _check_limit(conf, "max_position_embeddings", s, path, "sequence length", "seq_len")
    x: dict[str, Any] = {"input_ids": _ids(b, s)}
    if req.task == "train":
        x["labels"] = _ids(b, s)
    params = inspect.signature(cls.forward).parameters
    notes = []
    if "use_cache" in params:
        x["use_cache"] = req.phase == "prefill"  # training and a plain forward fill no cache
    if req.phase == "prefill" and "logits_to_keep" in params:
        x["logits_to_keep"] = 1
        notes.append("prefill fills the cache and computes logits for the last position only")
    return Inputs(x, None, b, b * s, notes)


def _decode_inputs(conf: Any, cls: Any, req: BuildRequest, path: str) -> Inputs:
    """One token per sequence after a prompt of `context` tokens. The prompt's cache is filled by
    a forward on meta at build time (not traced); `hf_interfaces.CachedStep` then runs the step."""
    b = req.batch_size
    ctx = req.context if req.context is not None else (req.seq_len or 0)
    if ctx <= 0:
        raise InputError(f"decode needs a context length > 0, got {ctx}", field="context")
    _check_limit(conf, "max_position_embeddings", ctx + 1, path, "context + 1 (the decoded token)", "context")
    if "past_key_values" not in inspect.signature(cls.forward).parameters:
        raise InputError(f"{path}: {cls.__name__} takes no cache (past_key_values); phase decode is not modelled",
                         field="phase")
    prefill = {"input_ids": _ids(b, ctx), "use_cache": True}
    return Inputs({"input_ids": _ids(b, 1)}, None, b, b, [
        f"decode one token per sequence over transformers' cache of a {ctx}-token prompt (DynamicCache: "
        "attention K/V concatenated each step, recurrent states updated in place); the cache held is "
        "that of the layers built"], prefill=prefill)


def _seq2seq_inputs(conf: Any, cls: Any, req: BuildRequest, path: str, speech: bool) -> Inputs:
    """An encoder pass over the source and a decoder pass over the target (the labels, shifted:
    teacher forcing), training and inference alike. Speech (Whisper): the source is 30 s of
    log-mel features, (B, num_mel_bins, 2 x max_source_positions) (the encoder's stride-2 conv
    halves the frames), and the sequence length is the target's."""
    b = req.batch_size
    notes = []
    if speech:
        frames = 2 * int(getattr(conf, "max_source_positions", 0) or 0)
        mels = int(getattr(conf, "num_mel_bins", 0) or 0)
        if not frames or not mels:
            raise CaptureError(f"{path}: the audio input of {cls.__name__} is not modelled (no max_source_positions "
                               "/ num_mel_bins in the config)")
        t = req.seq_len or 0
        src: dict[str, Any] = {"input_features": torch.empty(b, mels, frames, device="meta")}
        src_tokens = 0
        notes.append(f"source: {frames} log-mel frames x {mels} bins (30 s of audio); sequence length = "
                     "target tokens")
    else:
        s = req.seq_len or 0
        t = int(req.option("target_len", s))
        src = {"input_ids": _ids(b, s)}
        src_tokens = b * s
        notes.append(f"source {s} tokens, target {t} tokens (option target_len); tokens = source + target")
        _check_limit(conf, "max_position_embeddings", s, path, "sequence length", "seq_len")
    if t <= 0:
        raise InputError(f"target length must be > 0, got {t}", field="seq_len")
    _check_limit(conf, "max_target_positions" if speech else "max_position_embeddings", t, path, "target length",
                 "seq_len")
    x = {**src, "decoder_input_ids": _ids(b, t)}
    if "use_cache" in inspect.signature(cls.forward).parameters:
        x["use_cache"] = False  # one decoder pass over the whole target, no cache to fill
    head = cls.__name__.endswith("ForConditionalGeneration")  # (a bare model has no logits to train)
    loss_fn = _lm_loss(_ids(b, t)) if req.task == "train" and head else None
    notes.append("training: cross-entropy over the decoder's logits; inference: one encoder pass and one "
                 "decoder pass over the target (teacher forcing), not autoregressive generation")
    return Inputs(x, loss_fn, b, src_tokens + b * t, notes)


def _check_limit(conf: Any, key: str, n: int, path: str, what: str, fld: str) -> None:
    limit = getattr(conf, key, None)
    if isinstance(limit, int) and not isinstance(limit, bool) and n > limit:
        raise InputError(f"{what} {n} exceeds {path}'s {key} {limit}", field=fld)


# ---- building -----------------------------------------------------------------------------------

def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise MissingExtraError("building this model", "torch", "transformers") from None
    return transformers


def build_transformers(cfg: dict[str, Any], req: BuildRequest, path: str, model_class: str | None = None) -> Built:
    """Build `cfg` with transformers on meta (module docstring); `model_class` overrides the
    config's architectures."""
    mt = cfg.get("model_type")
    try:
        tf = _transformers()
    except MissingExtraError:
        raise MissingExtraError(f"building model_type {mt!r}", "torch", "transformers") from None
    from whichgpu.workload.zoo import hf_interfaces as hfi

    hfi.register()
    cap, _skew = moe_options(req)  # (the skew changes no FLOPs on one GPU: zoo/llm/modern.py)
    try:
        conf = tf.AutoConfig.for_model(**{k: v for k, v in cfg.items() if not k.startswith("_")})
    except Exception as e:  # ValueError, KeyError, TypeError; huggingface_hub's strict validation errors
        raise CaptureError(f"{path}: transformers cannot read this config ({_line(e.__cause__ or e)})") from None
    cls = getattr(tf, model_class) if model_class else _model_class(tf, conf)
    stacks, notes = _truncate(conf, req)
    experts = hfi.supports_experts(cls)
    if experts:
        conf._experts_implementation = hfi.NAME
    inp = _inputs(conf, cls, req, path)
    model, attention, out = _build(cls, conf, inp, req, path, str(mt))
    if inp.prefill is not None:
        cache = getattr(out, "past_key_values", None)
        if cache is None or not hasattr(cache, "layers"):
            raise CaptureError(f"{path}: {cls.__name__} returned no cache to decode from")
        model = hfi.CachedStep(model, cache)
    repeats, full = _repeats(model, stacks, path, cls.__name__)
    notes = [f"transformers {cls.__name__} from {path}", attention, *notes, *inp.notes]
    if experts and hfi.set_moe_capacity(model, cap):
        notes.append("experts: grouped GEMMs, balanced routing, " + (f"capacity factor {cap:g}" if cap else "dropless"))
    return Built(model, inp.values, inp.loss_fn if req.task == "train" else None, repeats, samples=inp.samples,
                 tokens=inp.tokens, full_params=full, notes=notes)


def _model_class(tf: Any, conf: Any) -> Any:
    for name in getattr(conf, "architectures", None) or []:
        cls = getattr(tf, name, None)
        if cls is not None:
            return cls
    return tf.AutoModel._model_mapping.get(type(conf), tf.AutoModel)


def _build(cls: Any, conf: Any, inp: Inputs, req: BuildRequest, path: str, mt: str) -> tuple[nn.Module, str, Any]:
    """The model with the first attention implementation that builds and runs a forward on meta
    (the prompt's, for decode): (model, the note naming it and why the ones before it were passed
    over, that forward's output)."""
    from whichgpu.workload.zoo import hf_interfaces as hfi

    why: list[str] = []
    # (implementation, why it is passed over without a try; "" to try it)
    candidates = [
        (hfi.NAME, "" if hfi.supports_interface(cls) else
         f"{cls.__name__} does not dispatch through transformers' AttentionInterface"),
        ("sdpa", "" if getattr(cls, "_supports_sdpa", False) else f"{cls.__name__} does not support SDPA"),
        ("eager", ""),
    ]
    failure = ""
    for impl, skip in candidates:
        if skip:
            why.append(skip)
            continue
        conf._attn_implementation = impl
        try:
            with torch.device("meta"):
                model = cls(conf)
        except Exception as e:
            failure = f"transformers could not build {cls.__name__} ({type(e).__name__}: {_line(e)})"
            why.append(f"{impl}: {type(e).__name__}: {_line(e, 120)}")
            continue
        err, out = _try_forward(model, inp.prefill if inp.prefill is not None else inp.values, req.task)
        if err is None:
            label = "whichgpu fused kernel" if impl == hfi.NAME else impl
            return model, f"attention: {label}" + (f" ({'; '.join(why)})" if why else ""), out
        failure = f"{cls.__name__}'s forward failed on the meta device: {err}"
        why.append(f"{impl}: {err}")
    raise CaptureError(f"{path}: model_type {mt!r}: {failure}")


def _try_forward(model: nn.Module, inputs: dict[str, Any], task: str) -> tuple[str | None, Any]:
    """One forward on meta (no autograd, no recording): (None, its output), or (what failed, in
    one line, None)."""
    model.train(task == "train")
    try:
        with torch.no_grad():
            return None, model(**inputs)
    except Exception as e:
        where = _where(e)
        if "item() cannot be called on meta tensors" in str(e) or "data-dependent" in str(e):
            return f"it reads tensor values (.item() on a meta tensor){where}", None
        return f"{type(e).__name__}: {_line(e, 160)}{where}", None


def _where(e: BaseException) -> str:
    """' in file.py:line' of the innermost frame of transformers' code in the traceback."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "transformers" in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f" in {f.filename.rpartition('transformers/')[2]}:{f.lineno}"


def _line(e: BaseException, n: int = 200) -> str:
    s = str(e).strip().splitlines()
    return s[0][:n] if s else ""
