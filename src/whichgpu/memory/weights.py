"""Weights as stored (quantized for inference and QLoRA) and the KV cache, from plain numbers.

Weight-only quantization stores the matmul weights of the transformer blocks in few bits with
per-group scales; embeddings, norms, biases and the LM head stay in 16-bit (GPTQ, AWQ and
bitsandbytes leave them unquantized by default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Bits per quantized weight, including the scales:
# * int8: per-output-channel FP16 scale (LLM.int8() / SmoothQuant style): 8 bits + 16 / in_features,
#   i.e. 8 bits to within 0.4% for hidden >= 4096; counted as 8.
# * int4: GPTQ / AWQ group size 128 with an FP16 scale and a zero point per group: 4 + 32 / 128
#   = 4.25 bits.
# * fp8: FP8 E4M3 weights with a per-tensor scale: 8 bits.
# (QLoRA's NF4 base weights are in the trace itself: the capture stores them as 4-bit buffers.)
QUANT_BITS: dict[str, float] = {"int8": 8.0, "int4": 4.0 + 32.0 / 128, "fp8": 8.0}
HALF = 2.0  # bytes of the parts left in 16-bit


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


@dataclass(frozen=True)
class Weights:
    bytes: float
    assumption: str


def quantized_weights(params: int, scheme: str, meta: dict[str, Any]) -> Weights:
    """Weights with the block matmuls in `scheme` (int8/int4/fp8), everything else 16-bit."""
    bits = QUANT_BITS[scheme]
    lin = linear_params(meta)
    note = ""
    if lin is None or lin > params:
        lin = params
        note = "; no layer breakdown for this model: every parameter counted as quantized"
    rest = params - lin
    total = lin * bits / 8 + rest * HALF
    return Weights(total, f"{lin / 1e6:,.1f}M block matmul weights x {bits:.3g} bits ({scheme}) + "
                          f"{rest / 1e6:,.1f}M other parameters x 2 B{note}")


def kv_cache_bytes(meta: dict[str, Any], batch: int, positions: int, elem_bytes: float) -> float | None:
    """K and V of every layer: 2 * layers * kv_heads * head_dim * positions * batch * bytes
    (GQA/MQA: kv_heads < heads). None without a decoder description."""
    try:
        layers, kv, d = int(meta["layers"]), int(meta["kv_heads"]), int(meta["head_dim"])
    except (KeyError, TypeError, ValueError):
        return None
    return 2.0 * layers * kv * d * positions * batch * elem_bytes
