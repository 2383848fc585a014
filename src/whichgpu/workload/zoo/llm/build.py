"""Builders for the decoder-only LLM zoo entries and HF configs of supported families."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from whichgpu.errors import InputError
from whichgpu.workload.zoo.base import BuildRequest, Built
from whichgpu.workload.zoo.llm.args import DecoderArgs, args_from_config
from whichgpu.workload.zoo.llm.decoder import GPT2Like, LlamaLike, causal_lm_loss
from whichgpu.workload.zoo.llm.parallel import FalconLike, GPTJLike

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
# KV cache storage: "auto" = the activations' dtype; fp8 (TensorRT-LLM --fp8_kv_cache, vLLM
# kv_cache_dtype=fp8) stores one byte a value; fp16/bf16 two.
KV_BYTES: dict[str, float | None] = {"auto": None, "fp8": 1.0, "fp16": 2.0, "bf16": 2.0}


def load_packaged_config(name: str) -> dict[str, Any]:
    with open(CONFIGS / f"{name}.json") as fh:
        return json.load(fh)  # type: ignore[no-any-return]


def build_decoder(cfg: dict[str, Any], req: BuildRequest, path: str = "config.json") -> Built:
    a = args_from_config(cfg, path)
    return build_from_args(a, req, float(cfg.get("rope_theta", 10000.0)))


def templates(a: DecoderArgs, truncate: bool) -> tuple[list[int], dict[int, int]]:
    """The layers to build and how many times each stands for another: every layer, or (truncated)
    at most two of each kind of layer (same window, dense or routed MLP), the second of a kind
    repeated for the rest of that kind. Returns (layer indices, {position in the built list: extra
    copies})."""
    if not truncate:
        return list(range(a.layers)), {}
    kinds = a.kinds()
    built: list[int] = []
    extra: dict[int, int] = {}
    for kind in dict.fromkeys(kinds):
        members = [i for i, k in enumerate(kinds) if k == kind]
        built.extend(members[:2])
        if len(members) > 2:
            extra[len(built) - 1] = len(members) - 2
    return built, extra


def moe_options(req: BuildRequest) -> tuple[float, float]:
    """(capacity factor, skew) of the request's routing assumption (see zoo/llm/modern.py)."""
    capacity = float(req.option("moe_capacity", 0.0) or 0.0)
    skew = float(req.option("moe_skew", 1.0) or 1.0)
    if capacity < 0 or not math.isfinite(capacity):
        raise InputError(f"expert capacity factor must be > 0 (or 0 for dropless), got {capacity:g}", field="moe_capacity")
    if skew < 1 or not math.isfinite(skew):
        raise InputError(f"expert load skew must be >= 1 (1 = balanced), got {skew:g}", field="moe_skew")
    return capacity, skew


def _routing_note(a: DecoderArgs, tokens: int) -> str:
    """The routing assumption in words, with the tokens a capacity factor drops under the skew."""
    routed = tokens * a.experts_per_token
    mean = routed / a.experts
    what = (f"MoE: {a.experts} routed experts, top-{a.experts_per_token}"
            + (f", {a.shared_experts} shared" if a.shared_experts else "")
            + f"; {routed} routed rows per MoE layer")
    if a.moe_capacity:
        cap = math.ceil(a.moe_capacity * mean)
        dropped = max(0.0, a.moe_skew * mean - cap)
        return (what + f", capacity factor {a.moe_capacity:g}: every expert computes {cap} rows (padding included)"
                + (f"; skew {a.moe_skew:g} drops {dropped:.0f} rows ({100 * dropped / routed:.1f}%) at the busiest expert"
                   if dropped else ""))
    if routed < a.experts:  # decode: fewer routed rows than experts
        return what + f", balanced, dropless: {routed} of the {a.experts} experts get one row each"
    skew = f" (skew {a.moe_skew:g}: the busiest expert gets {a.moe_skew * mean:.0f})" if a.moe_skew > 1 else ""
    return what + f", balanced, dropless: {mean:.1f} rows per expert on average{skew}"


def build_from_args(a: DecoderArgs, req: BuildRequest, theta: float = 10000.0) -> Built:
    if a.serving_only:
        raise InputError(f"models with {a.serving_only} are not built in PyTorch yet, so fit, predict and train "
                         "cannot trace them; `whichgpu serve` and `whichgpu recommend MODEL --rate` model them",
                         field="model")
    b = req.batch_size
    if b <= 0:
        raise InputError(f"batch size must be > 0, got {b}", field="batch_size")
    eager = req.option("attention", "sdpa") == "eager"
    tp = int(req.option("tp", 1))
    if tp < 1:
        raise InputError(f"tensor parallelism must be >= 1, got {tp}", field="tp")
    capacity, skew = moe_options(req)
    a = replace(a, moe_capacity=capacity, moe_skew=skew)
    full_active = a.params()[1] if a.family == "llama" else 0
    # Tensor parallelism: the trace is one rank's (its shards and the group's collectives).
    a = a.sharded(tp, split_head=req.option("tp_head", "sharded") == "sharded")
    kv_dtype = req.option("kv_dtype", "auto")
    if kv_dtype not in KV_BYTES:
        raise InputError(f"KV cache dtype must be one of {', '.join(KV_BYTES)}, got {kv_dtype!r}")
    kv_bytes = KV_BYTES[kv_dtype]
    shape = replace(a.shape(kv_bytes), active_params=full_active)
    if a.family == "llama":
        layers, extra = templates(a, req.truncate_layers)
        prefix = "model.layers"
    else:
        n = min(a.layers, 2) if req.truncate_layers else a.layers
        layers, extra = list(range(n)), ({1: a.layers - 2} if n == 2 and a.layers > 2 else {})
        prefix = "transformer.h"
    with torch.device("meta"):
        model = _model(a, layers, theta, eager)
    repeats = {f"{prefix}.{pos}": n for pos, n in extra.items()}
    full_params = _full_params(a)
    notes = [_routing_note(a, b * (1 if req.phase == "decode" else (req.seq_len or 0)))] if a.experts else []
    if a.family == "llama" and (a.layer_windows or a.mla or a.sinks or a.attn_softcap or a.qk_norm):
        notes.append(f"attention: {a.attention_text()}")
    if req.phase == "decode":
        ctx = req.context if req.context is not None else (req.seq_len or 0)
        ctx_field = "context" if req.context is not None else "seq_len"  # the context defaults to seq_len
        if ctx <= 0:
            raise InputError(f"decode needs a context length > 0, got {ctx}", field=ctx_field)
        if ctx + 1 > a.max_positions and a.family == "gpt2":
            raise InputError(f"context {ctx} exceeds the model's {a.max_positions} positions", field=ctx_field)
        t = ctx + 1
        ids = torch.zeros(b, 1, dtype=torch.long, device="meta")
        pos = torch.full((1, 1), ctx, dtype=torch.long, device="meta")
        cache = _caches(a, layers, b, t)
        cache_pos = torch.tensor([ctx], dtype=torch.long, device="meta")
        inputs = {"input_ids": ids, "position_ids": pos, "cache": cache, "cache_pos": cache_pos}
        return Built(model, inputs, None, repeats, samples=b, tokens=b, full_params=full_params,
                     notes=[f"decode one token per sequence with a static KV cache of {t} positions", *notes],
                     shape=shape, kv_key="cache", kv_bytes=kv_bytes)
    s = req.seq_len or 0
    if s <= 0:
        raise InputError(f"sequence length must be > 0, got {s}", field="seq_len")
    if s > a.max_positions:
        raise InputError(f"sequence length {s} exceeds the model's max_position_embeddings {a.max_positions}",
                         field="seq_len")
    ids = torch.zeros(b, s, dtype=torch.long, device="meta")
    pos = torch.zeros(1, s, dtype=torch.long, device="meta")  # as transformers' default position_ids
    if req.task == "train":
        inputs = {"input_ids": ids, "position_ids": pos}
        labels = torch.zeros(b, s, dtype=torch.long, device="meta")
        return Built(model, inputs, lambda out, _inp: causal_lm_loss(out, labels), repeats, samples=b,
                     tokens=b * s, full_params=full_params, shape=shape, notes=notes)
    if req.phase == "prefill":
        cache = _caches(a, layers, b, s)
        cache_pos = torch.zeros(s, dtype=torch.long, device="meta")
        inputs = {"input_ids": ids, "position_ids": pos, "cache": cache, "cache_pos": cache_pos, "last_only": True}
        return Built(model, inputs, None, repeats, samples=b, tokens=b * s, full_params=full_params,
                     notes=["prefill writes the KV cache and computes logits for the last position only", *notes],
                     shape=shape, kv_key="cache", kv_bytes=kv_bytes)
    inputs = {"input_ids": ids, "position_ids": pos}
    return Built(model, inputs, None, repeats, samples=b, tokens=b * s, full_params=full_params, shape=shape,
                 notes=notes)


def _caches(a: DecoderArgs, layers: list[int], b: int, t: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The static KV cache of each built layer for `t` positions: K and V per K/V head; a
    sliding-window layer's holds its window only; MLA's one latent tensor serves as both."""
    out = []
    for i in layers:
        if a.mla:
            latent = torch.empty(b, 1, t, a.kv_lora_rank + a.qk_rope_dim, device="meta")
            out.append((latent, latent))
            continue
        kept = min(t, a.window(i)) if a.window(i) else t
        out.append((torch.empty(b, a.kv_heads, kept, a.head_dim, device="meta"),
                    torch.empty(b, a.kv_heads, kept, a.head_dim, device="meta")))
    return out


def _model(a: DecoderArgs, layers: list[int], theta: float, eager: bool) -> torch.nn.Module:
    if a.family == "gpt2":
        return GPT2Like(a, len(layers), eager)
    if a.family == "gptj":
        return GPTJLike(a, len(layers), eager)
    if a.family == "falcon":
        return FalconLike(a, len(layers), theta, eager)
    return LlamaLike(a, layers, theta, eager)


def _parallel_params(a: DecoderArgs) -> int:
    """GPT-J / Falcon, from the module shapes in parallel.py."""
    h, d, f = a.hidden, a.head_dim, a.intermediate
    qkv = (a.heads + 2 * a.kv_heads) * d  # q, k, v outputs (Falcon: one fused query_key_value)
    per = h * qkv + a.heads * d * h + 2 * h * f  # q, k, v; out_proj / dense; MLP up and down
    per += 2 * h * (a.parallel_norms or 2)  # LayerNorms, weight and bias (a sequential block has two)
    head = 0 if a.tie_embeddings and a.vocab_out == a.vocab else a.vocab_out * h
    if a.family == "gptj":
        per += f + h  # fc_in, fc_out biases (attention has none)
        head += a.vocab_out  # lm_head bias
    elif a.linear_bias:
        per += qkv + h + f + h  # Falcon `bias`: query_key_value, dense, dense_h_to_4h, dense_4h_to_h
    return a.vocab * h + a.layers * per + 2 * h + head


def _full_params(a: DecoderArgs) -> int:
    h = a.hidden
    if a.family in ("gptj", "falcon"):
        return _parallel_params(a)
    if a.family == "gpt2":
        per = 2 * 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * a.intermediate + a.intermediate) + (a.intermediate * h + h)
        return a.vocab * h + a.max_positions * h + a.layers * per + 2 * h
    return a.params()[0]


def build_packaged(req: BuildRequest, config_name: str) -> Built:
    """Zoo builder: a packaged config.json of a supported decoder family."""
    return build_decoder(load_packaged_config(config_name), req, f"{config_name}.json")
