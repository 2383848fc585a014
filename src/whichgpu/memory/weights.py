"""Matmul weights of a decoder's blocks and the KV cache, from plain numbers.

(Weights stored quantised for inference are counted by the capture: the trace's parameter bytes
are as stored, see workload/capture.py ``quantized_storages``.)
"""

from __future__ import annotations

from typing import Any


def linear_params(meta: dict[str, Any]) -> int | None:
    """Matmul weights of all transformer blocks of a decoder (biases, norms, embeddings and the LM
    head excluded), from ``trace.model_meta``; None when the model has no such description."""
    try:
        h, layers, inter = int(meta["hidden"]), int(meta["layers"]), int(meta["intermediate"])
        heads, kv, d = int(meta["heads"]), int(meta["kv_heads"]), int(meta["head_dim"])
    except (KeyError, TypeError, ValueError):
        return None
    if meta.get("family") == "gpt2":
        per = 4 * h * h + 2 * h * inter  # c_attn 3h^2 + c_proj h^2, c_fc + mlp.c_proj
    else:
        attn = h * heads * d + 2 * h * kv * d + heads * d * h  # q, k, v, o projections
        experts = int(meta.get("experts") or 0)
        mlp = (experts * 3 * h * inter + h * experts) if experts else 3 * h * inter  # gate/up/down (+ router)
        per = attn + mlp
    return layers * per


def kv_cache_bytes(meta: dict[str, Any], batch: int, positions: int, elem_bytes: float) -> float | None:
    """K and V of every layer: 2 * layers * kv_heads * head_dim * positions * batch * bytes
    (GQA/MQA: kv_heads < heads). None without a decoder description."""
    try:
        layers, kv, d = int(meta["layers"]), int(meta["kv_heads"]), int(meta["head_dim"])
    except (KeyError, TypeError, ValueError):
        return None
    return 2.0 * layers * kv * d * positions * batch * elem_bytes
