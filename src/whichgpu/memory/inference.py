"""Inference step memory: weights at the inference precision, the KV cache, one step's activations."""

from __future__ import annotations

from whichgpu.memory.lifetime import simulate
from whichgpu.memory.lines import MemoryLine, count
from whichgpu.memory.weights import kv_cache_bytes, kv_cache_text
from whichgpu.parallel.plan import Plan
from whichgpu.workload.precision import Precision
from whichgpu.workload.trace import Trace

Parts = tuple[dict[str, MemoryLine], str, str, float, list[str]]


def inference(trace: Trace, plan: Plan, prec: Precision) -> Parts:
    """(lines, peak phase, peak module, activation peak, notes) of an inference step."""
    notes: list[str] = []
    tl = simulate(trace, grads_in_step=False)
    pk = tl.activation_peak()
    shape = trace.shape
    if prec.weight_bits:
        # The trace's parameter bytes are as stored: quantised linear weights (scales included)
        # and the rest in 16 bits (workload/capture.py quantized_storages).
        weights = MemoryLine(float(trace.param_bytes + trace.buffer_bytes),
                             f"{count(trace.params)} parameters as stored: linear weights in {prec.name} "
                             f"({prec.weight_bits:g} bits each, scales included), the rest in 16 bits")
    else:
        weights = MemoryLine(float(trace.param_bytes + trace.buffer_bytes),
                             f"{count(trace.params)} parameters x {trace.param_bytes / max(trace.params, 1):.3g} B ({prec.name})")
    parts: dict[str, MemoryLine] = {"weights": weights}
    inputs = float(trace.input_bytes)
    if trace.phase in ("prefill", "decode"):
        positions = (trace.seq_len or 0) if trace.phase == "prefill" else (trace.context or 0) + 1
        kv_elem = float(shape.kv_bytes or (4.0 if prec.name in ("fp32", "tf32") else 2.0))
        kv = kv_cache_bytes(shape, trace.batch_size, positions, kv_elem)
        if kv is not None:
            parts["kv_cache"] = MemoryLine(kv, kv_cache_text(shape, trace.batch_size, positions, kv_elem))
        else:
            notes.append("KV cache not separated: the model has no decoder description")
    parts["inputs"] = MemoryLine(inputs, "model inputs of the step (token ids, positions)"
                                 if trace.seq_len or trace.context else "model inputs of the step")
    parts["activations"] = MemoryLine(pk.activations, f"lifetime simulation of the trace's {len(trace.mem_events)} "
                                      f"allocations, one {trace.phase if trace.phase != 'full' else 'forward'} step")
    if plan.gpus > 1:
        notes.append(f"{plan.gpus} GPUs: each holds a full replica (data-parallel inference); memory is per GPU")
    return parts, trace.phase if trace.phase != "full" else "forward", pk.module, pk.activations, notes
