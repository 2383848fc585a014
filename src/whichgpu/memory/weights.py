"""Matmul weights of a decoder's blocks and the KV cache, from plain numbers.

(Weights stored quantised for inference are counted by the capture: the trace's parameter bytes
are as stored, see workload/capture.py ``quantized_storages``.)
"""

from __future__ import annotations

from whichgpu.workload.shape import ModelShape


def linear_params(shape: ModelShape) -> int | None:
    """Matmul weights of all transformer blocks of a decoder (biases, norms, embeddings and the LM
    head excluded), from ``trace.shape``; None when the model has no such description."""
    if shape.block_params:
        return shape.block_params
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
    """The KV cache of every layer: values per token per layer (K and V: 2 x kv_heads x head_dim;
    GQA/MQA: kv_heads < heads; multi-head latent attention: its latent) x positions x batch x
    bytes. A sliding-window layer keeps at most its window of positions (as vLLM and TensorRT-LLM
    allocate it). None without a decoder description (no K/V heads)."""
    if not (shape.kv_per_token_layer and (shape.kv_values or shape.head_dim)):
        return None
    local = min(shape.sliding_layers, shape.layers)
    kept = (shape.layers - local) * positions + local * min(positions, shape.sliding_window or positions)
    return float(shape.kv_per_token_layer) * kept * batch * elem_bytes


def kv_cache_text(shape: ModelShape, batch: int, positions: int, elem_bytes: float) -> str:
    """How `kv_cache_bytes` counted, in words."""
    if shape.kv_values:
        per = f"{shape.kv_values} latent values (MLA)"
    else:
        per = f"2 x {shape.kv_heads} KV heads x {shape.head_dim}" + (
            f" (GQA: {shape.heads} query heads)" if shape.kv_heads != shape.heads else "")
    local = min(shape.sliding_layers, shape.layers)
    if local and shape.sliding_window and shape.sliding_window < positions:
        layers = (f"{shape.layers - local} global layers x {positions} positions + {local} sliding-window layers "
                  f"x {shape.sliding_window}")
    else:
        layers = f"{shape.layers} layers x {positions} positions"
    return f"{per} x {layers} x batch {batch} x {elem_bytes:g} B"
