"""MFU against PaLM's definition, HFU beside it; the system's links in the collectives; hybrid sharding."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.system import default_system, load_systems
from whichgpu.memory import memory_estimate
from whichgpu.parallel.comm import dp_link, node_link
from whichgpu.parallel.plan import Plan
from whichgpu.perf import estimate
from whichgpu.perf.mfu import matmul_params_per_token, step_flops
from whichgpu.perf.params import load_params
from whichgpu.predict import predict, serving_specs
from whichgpu.workload.api import get_trace
from whichgpu.workload.shape import ModelShape
from whichgpu.workload.spec import WorkloadSpec
from whichgpu.workload.trace import Trace

CAT = load_catalog()


@cache
def _trace(model: str, **kw: object) -> Trace:
    return get_trace(WorkloadSpec(model, **kw))  # type: ignore[arg-type]


def test_palm_parameter_count_of_llama_2_7b() -> None:
    # Llama-2-7B: 32 layers, h = 4096, 32 heads of 128, FFN 11008 (SwiGLU: 3 matrices), vocab 32000.
    # per layer: q,k,v,o 4 x 4096 x 4096 = 67,108,864; MLP 3 x 4096 x 11008 = 135,266,304
    # 32 x 202,375,168 = 6,476,005,376; + head 32000 x 4096 = 131,072,000 -> 6,607,077,376
    shape = ModelShape(arch="decoder", family="llama", layers=32, hidden=4096, heads=32, kv_heads=32, head_dim=128,
                       intermediate=11008, vocab=32000, gated_mlp=True)
    assert matmul_params_per_token(shape) == 6_607_077_376
    # tensor parallelism: the trace's widths are one rank's; the head is split over the vocabulary
    half = replace(shape, heads=16, kv_heads=16, intermediate=5504, tp=2)
    assert matmul_params_per_token(half) == 6_607_077_376 / 2
    # a model without a transformer description has no N
    assert matmul_params_per_token(ModelShape(family="cnn")) is None


def test_mfu_follows_palm_and_hfu_counts_recomputation() -> None:
    t = _trace("llama-2-7b", batch_size=1, seq_len=512, checkpointing="full")
    f = step_flops(t)
    n = matmul_params_per_token(t.shape)
    assert n is not None
    # 6N + 12 L H Q T per token, T = 512: 12 x 32 x 32 x 128 x 512 = 805,306,368
    assert f.model == pytest.approx((6 * n + 12 * 32 * 32 * 128 * 512) * 512, rel=1e-12)
    assert "PaLM" in f.definition
    # full checkpointing runs the forward twice: hardware FLOPs exceed the model's
    assert f.hardware > 1.2 * f.model
    e = estimate(t, CAT.get("h100-sxm5-80gb"))
    assert 0 < e.mfu < e.hfu < 1
    assert e.model_tflops_per_gpu == pytest.approx(f.model / e.step_s / 1e12)
    assert e.hardware_tflops_per_gpu == pytest.approx(f.hardware / e.step_s / 1e12)
    assert e.hfu / e.mfu == pytest.approx(f.hardware / f.model)


def test_lora_counts_no_weight_gradients() -> None:
    full = step_flops(_trace("llama-2-7b", batch_size=1, seq_len=256))
    lora = step_flops(_trace("llama-2-7b", batch_size=1, seq_len=256, finetune="lora"))
    n = matmul_params_per_token(_trace("llama-2-7b", batch_size=1, seq_len=256).shape) or 0.0
    attn = 12 * 32 * 32 * 128 * 256
    assert full.model == pytest.approx((6 * n + attn) * 256)
    assert lora.model == pytest.approx((4 * n + attn) * 256)


def test_models_without_a_description_use_traced_flops_without_recompute() -> None:
    t = _trace("resnet50", batch_size=8)
    f = step_flops(t)
    assert f.model == f.hardware == t.total_flops("forward") + t.total_flops("backward")


def test_the_system_sets_the_data_parallel_link() -> None:
    p = load_params()
    h100 = CAT.get("h100-sxm5-80gb")
    dgx = default_system(h100)
    assert dgx.id == "dgx-h100"
    inside = dp_link(dgx, Plan(dp=8), p)
    across = dp_link(dgx, Plan(dp=16), p)
    assert inside.bytes_per_s == pytest.approx(450e9 * p.nccl_efficiency)
    # across nodes, one ring per rail: the 8 GPUs of a node drive their 8 NICs (50 GB/s each)
    assert across.bytes_per_s == pytest.approx(8 * 50e9 * p.nccl_efficiency) and "infiniband" in across.text
    # a group with one GPU per node (dp ranks strided by tp 8) has one rail per node
    strided = dp_link(dgx, Plan(dp=2, tp=8), p)
    assert strided.bytes_per_s == pytest.approx(50e9 * p.nccl_efficiency)
    gcp = load_systems().get("gcp-a3-highgpu-8g")  # GPUDirect-TCPX: a quarter of DGX H100's network
    t = _trace("llama-2-7b", batch_size=1, seq_len=512)
    slow = estimate(t, h100, Plan(dp=16), system=gcp)
    fast = estimate(t, h100, Plan(dp=16), system=dgx)
    assert slow.comm_total_s > 1.5 * fast.comm_total_s  # a quarter of the bandwidth; the same latency steps
    assert fast.assumptions["system"].startswith("dgx-h100")


def test_pcie_workstation_has_no_network_beyond_its_gpus() -> None:
    ws = load_systems().get("workstation-4gpu")
    l40s = CAT.get("l40s")
    assert node_link(ws, 4, load_params()).text.startswith("PCIe")
    t = _trace("gpt2", batch_size=4, seq_len=256)
    with pytest.raises(Exception, match="no scale-out network"):
        estimate(t, l40s, Plan(dp=8), system=ws)


def test_hybrid_sharding_memory_and_communication() -> None:
    h100 = CAT.get("h100-sxm5-80gb")
    dgx = default_system(h100)
    t = _trace("llama-2-7b", batch_size=1, seq_len=512)
    z3 = memory_estimate(t, h100, Plan(dp=64, sharding="zero3"), dgx)
    hy = memory_estimate(t, h100, Plan(dp=64, sharding="fsdp-hybrid"), dgx)
    one_node = memory_estimate(t, h100, Plan(dp=8, sharding="zero3"), dgx)
    assert hy.total_bytes == pytest.approx(one_node.total_bytes, rel=1e-9)  # shards over the 8 GPUs of a node
    assert hy.total_bytes > z3.total_bytes
    e_hy = estimate(t, h100, Plan(dp=64, sharding="fsdp-hybrid"), system=dgx)
    e_z3 = estimate(t, h100, Plan(dp=64, sharding="zero3"), system=dgx)
    assert e_hy.comm_total_s < e_z3.comm_total_s  # gathers over NVLink, only gradient shards cross nodes
    assert "HYBRID_SHARD" in e_hy.assumptions["data_parallel"]


def test_predict_serves_prefill_then_decode_at_the_prompt_length() -> None:
    spec = WorkloadSpec("llama-2-7b", task="infer", batch_size=2, seq_len=256, precision="bf16")
    pre, dec = serving_specs(spec)
    assert (pre.phase, pre.seq_len) == ("prefill", 256) and (dec.phase, dec.context, dec.seq_len) == ("decode", 256, None)
    h100 = CAT.get("h100-sxm5-80gb")
    r = predict(spec, h100, Plan(engine="vllm"), default_system(h100), get_trace, serving=True)
    assert r.serving and r.prefill is not None and r.prefill_trace is not None and r.memory is not None
    assert r.trace.phase == "decode" and r.prefill_trace.phase == "prefill"
    assert r.prefill.step_s > r.est.step_s  # the prompt costs more than one token
