"""Model states: weights against real parameter counts, optimizer states per optimizer, and the
ZeRO / FSDP per-GPU formulas against DeepSpeed's own estimators."""

from __future__ import annotations

import math

import pytest

from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.spec import GpuSpec
from whichgpu.memory import memory_estimate
from whichgpu.memory.states import (
    EIGHT_BIT_STATE_BYTES,
    OptimizerInfo,
    model_states,
    optimizer_state_bytes,
    optimizer_temp_bytes,
    parse_optimizer,
)
from whichgpu.memory.weights import kv_cache_bytes, linear_params
from whichgpu.parallel.plan import Plan
from whichgpu.workload.precision import get_precision
from whichgpu.workload.shape import ModelShape
from whichgpu.workload.spec import WorkloadSpec
from whichgpu.workload.trace import Trace

LLAMA2_7B = 6_738_415_616  # sum of the parameter shapes of meta-llama/Llama-2-7b-hf
GPT2 = 124_439_808


pytestmark = pytest.mark.usefixtures("isolated_cache")  # the module's own trace cache (tests/conftest.py)


@pytest.fixture(scope="module")
def h100() -> GpuSpec:
    return load_catalog(None).get("h100-sxm5-80gb")


def trace(model: str, **kw: object) -> Trace:
    pytest.importorskip("torch")
    from whichgpu.workload.api import get_trace

    return get_trace(WorkloadSpec(model, **kw))  # type: ignore[arg-type]


# ---- DeepSpeed's estimators, transcribed ---------------------------------------------------------
# deepspeed/runtime/zero/stage_1_and_2.py, estimate_zero2_model_states_mem_needs (deepspeedai/DeepSpeed):
#   cpu_offload:  gpu_mem = 2 * total_params
#   else:         gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
#   "18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit"
# (docs/code-docs/source/memory.rst still shows the older 4 * params + 16 * params / gpus.)
def ds_zero2(total_params: int, total_gpus: int, cpu_offload: bool) -> int:
    if cpu_offload:
        return int(2 * total_params)
    return int(2 * total_params + int(18 * total_params / total_gpus))


# deepspeed/runtime/zero/stage3.py, estimate_zero3_model_states_mem_needs (offload_param=none):
#   largest_layer_memory = 4 * largest_layer_params    (2 B gathered params + 2 B grads)
#   cpu_offload:  gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
#   else:         gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
def ds_zero3(total_params: int, largest_layer_params: int, total_gpus: int, cpu_offload: bool) -> int:
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload:
        return int(largest_layer_memory + int(2 * total_params / total_gpus))
    return int(largest_layer_memory + int(18 * total_params / total_gpus))


def ours(params: int, gpus: int, sharding: str, offload: bool, largest: int = 0) -> float:
    """DeepSpeed's setting: 16-bit parameters, FP32 master weights, Adam with FP32 states."""
    adam = optimizer_state_bytes(OptimizerInfo("adamw", "fused", False), params, 4.0)
    return model_states(weight_bytes=2.0 * params, trainable=params, grad_elem_bytes=2.0, master=True,
                        state_bytes=adam, sharding=sharding, gpus=gpus, offload=offload,
                        unit_params=largest, gather_elem_bytes=2.0).gpu_total


CASES = [(2_851_000_000, 8), (LLAMA2_7B, 1), (LLAMA2_7B, 8), (GPT2, 3), (175_000_000_000, 1024), (70_553_706_496, 64)]


@pytest.mark.parametrize(("params", "gpus"), CASES)
@pytest.mark.parametrize("offload", [False, True])
def test_zero2_matches_deepspeed(params: int, gpus: int, offload: bool) -> None:
    assert ours(params, gpus, "zero2", offload) == pytest.approx(ds_zero2(params, gpus, offload), abs=1)
    # FSDP SHARD_GRAD_OP shards the same states as ZeRO-2
    assert ours(params, gpus, "fsdp-grad-op", offload) == ours(params, gpus, "zero2", offload)


@pytest.mark.parametrize(("params", "gpus"), CASES)
@pytest.mark.parametrize("offload", [False, True])
def test_zero3_matches_deepspeed(params: int, gpus: int, offload: bool) -> None:
    largest = 202_375_168  # one Llama-2-7B block's matmul weights
    assert ours(params, gpus, "zero3", offload, largest) == pytest.approx(
        ds_zero3(params, largest, gpus, offload), abs=1)
    assert ours(params, gpus, "fsdp-full", offload, largest) == ours(params, gpus, "zero3", offload, largest)


def test_zero3_matches_deepspeed_documented_example() -> None:
    # memory.rst: estimate_zero3_model_states_mem_needs_all_cold(total_params=2851e6,
    # largest_layer_params=32e6, num_gpus_per_node=8) prints 6.09GB (offload none) and 0.78GB
    # (offload_optimizer=cpu, offload_param=none) per GPU, in GiB.
    assert round(ours(2_851_000_000, 8, "zero3", False, 32_000_000) / 2**30, 2) == 6.09
    assert round(ours(2_851_000_000, 8, "zero3", True, 32_000_000) / 2**30, 2) == 0.78


def test_zero1_and_ddp_by_construction() -> None:
    p, n = 1_000_000_000, 8
    # ZeRO paper (Rajbhandari et al. 2020) Figure 1 with DeepSpeed's FP32 gradient copy:
    # ddp: 2 + 2 + (4 + 4 + 8) = 20 B/param; zero1: 2 + 2 + 16 / N
    assert ours(p, n, "ddp", False) == 20 * p
    assert ours(p, n, "zero1", False) == pytest.approx(4 * p + 16 * p / n)


def test_zero2_formula_holds_for_a_traced_model() -> None:
    # the quantities memory_estimate derives from a bf16 GPT-2 trace reproduce DeepSpeed's number
    t = trace("gpt2", batch_size=1, seq_len=32, precision="bf16", optimizer="adamw")
    assert t.param_bytes == 2 * GPT2 and t.trainable_params == GPT2
    adam = optimizer_state_bytes(parse_optimizer(t.optimizer), t.trainable_params, 4.0)
    ms = model_states(weight_bytes=t.param_bytes, trainable=t.trainable_params, grad_elem_bytes=2.0, master=True,
                      state_bytes=adam, sharding="zero2", gpus=8, offload=False)
    assert ms.gpu_total == pytest.approx(ds_zero2(GPT2, 8, False), abs=1)


# ---- weights ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("precision", "elem"), [("fp32", 4), ("amp-bf16", 4), ("bf16", 2), ("fp16", 2)])
def test_llama2_7b_weights_exact(precision: str, elem: int, h100: GpuSpec) -> None:
    t = trace("llama-2-7b", batch_size=1, seq_len=64, precision=precision)
    assert t.params == LLAMA2_7B
    e = memory_estimate(t, h100)
    # parameters x bytes per dtype + the rotary inv_freq buffer (64 values)
    assert t.buffer_bytes == 64 * elem
    assert e.weights.bytes == LLAMA2_7B * elem + 64 * elem


def test_llama2_7b_linear_params() -> None:
    # per layer: q, k, v, o 4 x 4096^2 = 67,108,864; gate/up/down 3 x 4096 x 11008 = 135,266,304
    shape = ModelShape(family="llama", hidden=4096, layers=32, heads=32, kv_heads=32, head_dim=128,
                       intermediate=11008)
    assert linear_params(shape) == 32 * (67_108_864 + 135_266_304) == 6_476_005_376
    # the rest: embeddings 2 x 32000 x 4096 + 65 RMSNorm weights of 4096 = 262,410,240
    assert LLAMA2_7B - 6_476_005_376 == 2 * 32000 * 4096 + 65 * 4096


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_llama2_7b_quantized_inference_weights(precision: str, h100: GpuSpec) -> None:
    t = trace("llama-2-7b", task="infer", batch_size=1, seq_len=64, precision=precision)
    e = memory_estimate(t, h100)
    lin = 6_476_005_376
    bits = {"int8": 8.0, "int4": 4.25}[precision]  # int4: group 128 with FP16 scale + zero point
    assert get_precision(precision, "infer").weight_bits == bits
    assert e.weights.bytes == pytest.approx(lin * bits / 8 + (LLAMA2_7B - lin) * 2 + t.buffer_bytes)


def test_kv_cache_gqa() -> None:
    # Llama-3-8B: 32 layers, 8 KV heads of 128: 2 * 32 * 8 * 128 * 2 B = 131,072 B per token
    shape = ModelShape(layers=32, kv_heads=8, head_dim=128)
    assert kv_cache_bytes(shape, batch=4, positions=8192, elem_bytes=2.0) == 131_072 * 4 * 8192
    assert kv_cache_bytes(ModelShape(layers=2), 1, 1, 2.0) is None


def test_decode_kv_cache_line(h100: GpuSpec) -> None:
    t = trace("llama-3-8b", task="infer", phase="decode", batch_size=8, context=1024, precision="bf16")
    e = memory_estimate(t, h100)
    assert e.kv_cache.bytes == 131_072 * 8 * 1025  # static cache of context + 1 positions
    assert e.inputs.bytes < 1e6  # the traced cache tensors are not counted twice
    assert e.activations.bytes < 0.1e9  # a decode step's activations are tiny


# ---- optimizer states ---------------------------------------------------------------------------

@pytest.mark.parametrize(("optimizer", "per_param"), [
    ("sgd", 4.0), ("adamw", 8.0), ("adam", 8.0), ("lamb", 8.0), ("rmsprop", 8.0),
    ("adamw-8bit", 2 * (1 + 4 / 2048)),
])
def test_optimizer_states_exact(optimizer: str, per_param: float, h100: GpuSpec) -> None:
    t = trace("gpt2", batch_size=1, seq_len=32, optimizer=optimizer)
    e = memory_estimate(t, h100)
    assert e.optimizer_states.bytes == pytest.approx(GPT2 * per_param, rel=1e-12)


def test_adafactor_states_factored(h100: GpuSpec) -> None:
    t = trace("gpt2", batch_size=1, seq_len=32, optimizer="adafactor")
    e = memory_estimate(t, h100)
    # GPT-2 parameter tensors (weights and biases), per layer and shared
    layer = [768, 768, 768 * 2304, 2304, 768 * 768, 768, 768, 768, 768 * 3072, 3072, 3072 * 768, 768]
    tensors = [50257 * 768, 1024 * 768, 768, 768] + layer * 12
    assert sum(tensors) == GPT2
    assert e.optimizer_states.bytes == pytest.approx(4 * sum(2 * math.sqrt(n) for n in tensors), rel=1e-9)
    assert e.optimizer_states.bytes < 0.002 * GPT2 * 4  # factored: a tiny fraction of Adam's 8 B


def test_bf16_without_master_weights_keeps_states_in_bf16(h100: GpuSpec) -> None:
    t = trace("gpt2", batch_size=1, seq_len=32, precision="bf16", optimizer="adamw")
    with_master = memory_estimate(t, h100)
    plain = memory_estimate(t, h100, Plan(master_weights=False))
    assert with_master.optimizer_states.bytes == 8 * GPT2
    assert with_master.master_weights.bytes == 8 * GPT2  # FP32 params + FP32 gradient copy
    assert plain.optimizer_states.bytes == 4 * GPT2 and plain.master_weights.bytes == 0


def test_optimizer_temporaries() -> None:
    # foreach AdamW: denom = _foreach_sqrt(exp_avg_sq) for all parameters at once
    assert optimizer_temp_bytes(OptimizerInfo("adamw", "foreach", False), 1000) == 4000
    assert optimizer_temp_bytes(OptimizerInfo("adamw", "fused", False), 1000) == 0
    assert optimizer_temp_bytes(OptimizerInfo("adamw", "foreach", True), 1000) == 0  # bitsandbytes
    assert optimizer_temp_bytes(OptimizerInfo("sgd", "foreach", False), 1000) == 0
    assert EIGHT_BIT_STATE_BYTES == 1 + 4 / 2048


def test_offload_moves_states_to_host(h100: GpuSpec) -> None:
    t = trace("gpt2", batch_size=1, seq_len=32, precision="bf16", optimizer="adamw")
    e = memory_estimate(t, h100, Plan(dp=2, sharding="zero2", offload="optimizer"))
    assert e.optimizer_states.bytes == 0
    assert e.optimizer_states.host_bytes == pytest.approx(8 * GPT2 / 2)
    assert e.master_weights.host_bytes == pytest.approx(8 * GPT2 / 2)
    assert e.gradients.bytes == 0 and e.gradients.host_bytes == pytest.approx(2 * GPT2 / 2)


def test_capacity_is_binary_gb(h100: GpuSpec) -> None:
    e = memory_estimate(trace("gpt2", batch_size=1, seq_len=32), h100)
    assert e.capacity_bytes == pytest.approx(80 * 2**30 * 0.985)
    assert e.fits and e.headroom_bytes == pytest.approx(e.capacity_bytes - e.total_bytes)
    assert e.total_bytes == pytest.approx(sum(line.bytes for _k, line in e.lines()))
