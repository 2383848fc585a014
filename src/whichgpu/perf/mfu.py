"""Model FLOPs (for MFU) and hardware FLOPs (for HFU) of one traced step.

MFU follows PaLM (Chowdhery et al. 2022, appendix B): the FLOPs the model needs per token,
whatever the implementation does, over the time and the dense peak. For a transformer with N
matmul parameters per token (the embedding lookup excluded, the LM head included), L layers,
H heads of dimension Q and a sequence of T tokens:

    training:  6 N + 12 L H Q T   per token (forward 2 N + 4 L H Q T, backward twice that)
    inference: 2 N +  4 L H Q T   per token (T = the positions attended: the context when decoding)

Attention is counted over the whole T x T square, as PaLM does, also for causal models; a
sliding-window layer over its window (min(T, W)), and heads with different query/key and value
widths (multi-head latent attention) by their mean width. Mixture-of-experts layers count the
experts a token is routed to (active parameters) and the shared experts. LoRA and
QLoRA train adapters on a frozen base, which needs no weight gradients: 4 N + 12 L H Q T.

HFU counts what the hardware executes: every traced forward and backward FLOP, activation
recomputation included (an optimizer step is not counted in either). For models without a
transformer description (convolutional, recurrent, factory models) the model FLOPs are the
traced forward and backward FLOPs without the recomputed ops.
"""

from __future__ import annotations

from dataclasses import dataclass

from whichgpu.memo import IdentityMemo
from whichgpu.workload.trace import ModelShape, Trace

PALM = "PaLM appendix B: 6N + 12LHQT per trained token (2N + 4LHQT per inferred token)"


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one step on one GPU (one rank's share under tensor parallelism)."""

    model: float  # for MFU
    hardware: float  # for HFU
    definition: str  # how `model` was counted


def matmul_params_per_token(shape: ModelShape) -> float | None:
    """N of PaLM's formula for one tensor-parallel rank: the block matmul weights a token goes
    through (routed experts only; the shape's widths are the rank's) plus the rank's share of the
    LM head; None without a transformer description."""
    if not (shape.layers and shape.hidden and shape.heads and shape.head_dim and shape.intermediate):
        return None
    h, inter, d = shape.hidden, shape.intermediate, shape.head_dim
    head = shape.vocab * h / (shape.tp if shape.tp > 1 and shape.tp_head else 1)
    if shape.matmul_params:  # counted by the model's builder (latent attention, shared experts, dense layers)
        return float(shape.matmul_params + head)
    kv = shape.kv_heads or shape.heads
    if shape.family == "gpt2":
        per = 4 * h * h + 2 * h * inter
    else:
        attn = h * shape.heads * d + 2 * h * kv * d + shape.heads * d * h  # q, k, v, o
        mats = 3 if shape.gated_mlp else 2
        mlp = mats * h * inter
        if shape.experts:
            mlp = (shape.active_experts or 1) * mlp + h * shape.experts  # routed experts + router
        per = attn + mlp
    return float(shape.layers * per + head)


def attended_width(shape: ModelShape, positions: int) -> float:
    """L H Q T of PaLM's attention term, generalised: per layer, heads x the mean of the query/key
    and value widths x the positions it attends (a sliding-window layer: at most its window)."""
    q = ((shape.qk_head_dim or shape.head_dim) + (shape.v_head_dim or shape.head_dim)) / 2.0
    local = min(shape.sliding_layers, shape.layers)
    window = min(positions, shape.sliding_window) if shape.sliding_window else positions
    return shape.heads * q * ((shape.layers - local) * positions + local * window)


_FLOPS: IdentityMemo[StepFlops] = IdentityMemo(256)


def step_flops(trace: Trace) -> StepFlops:
    """Model and hardware FLOPs of one step of `trace` (computed once per trace: a search asks for
    every card and GPU count)."""
    return _FLOPS.get((trace,), (), lambda: _step_flops(trace))


def _step_flops(trace: Trace) -> StepFlops:
    hardware = trace.total_flops("forward") + trace.total_flops("backward")
    recomputed = sum(o.flops * o.count for o in trace.ops if o.phase == "backward" and "recompute" in o.tags)
    shape = trace.shape
    n = matmul_params_per_token(shape)
    tokens = trace.tokens
    if n is None or not tokens:
        return StepFlops(hardware - recomputed, hardware,
                         "traced forward and backward FLOPs without recomputation (no transformer description)")
    attended = trace.context if trace.phase == "decode" and trace.context else (trace.seq_len or 0)
    lhqt = attended_width(shape, attended)
    per_token = 2.0 * n + 4.0 * lhqt
    note = ""
    if trace.task == "train":
        if (trace.finetune or "full").split()[0] in ("lora", "qlora"):
            # A frozen base needs no weight gradients: backward is 2N (input gradients) + attention.
            per_token = 4.0 * n + 12.0 * lhqt
            note = "; LoRA: 4N (no weight gradients of the frozen base)"
        else:
            per_token *= 3.0
    rank = f", one of {shape.tp} tensor-parallel ranks" if shape.tp > 1 else ""
    return StepFlops(per_token * tokens, hardware, PALM + note + rank)
