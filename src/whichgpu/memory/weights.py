"""Matmul weights of a decoder's blocks and the KV cache, from plain numbers.

(Weights stored quantised for inference are counted by the capture: the trace's parameter bytes
are as stored, see workload/capture.py ``quantized_storages``.)
"""

from __future__ import annotations

from whichgpu.workload.shape import ModelShape


def linear_params(shape: ModelShape) -> int | None:
    """Matmul weights of all transformer blocks of a decoder (biases, norms, embeddings and the LM
    head excluded), from ``trace.shape``; None when the model has no such description."""
    h, layers, inter = shape.hidden, shape.layers, shape.intermediate
    heads, kv, d = shape.heads, shape.kv_heads, shape.head_dim
    if not (h and layers and inter and heads and kv and d):
        return None
    if shape.family == "gpt2":
        per = 4 * h * h + 2 * h * inter  # c_attn 3h^2 + c_proj h^2, c_fc + mlp.c_proj
    else:
        attn = h * heads * d + 2 * h * kv * d + heads * d * h  # q, k, v, o projections
        experts = shape.experts
        mlp = (experts * 3 * h * inter + h * experts) if experts else 3 * h * inter  # gate/up/down (+ router)
        per = attn + mlp
    return layers * per


def kv_cache_bytes(shape: ModelShape, batch: int, positions: int, elem_bytes: float) -> float | None:
    """K and V of every layer: 2 * layers * kv_heads * head_dim * positions * batch * bytes
    (GQA/MQA: kv_heads < heads). None without a decoder description (no K/V heads)."""
    if not (shape.kv_heads and shape.head_dim):
        return None
    return 2.0 * shape.layers * shape.kv_heads * shape.head_dim * positions * batch * elem_bytes
