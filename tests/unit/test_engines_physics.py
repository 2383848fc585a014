"""Engine profiles, the power budget, tensor-parallel collectives and the inference physics of
issue 10 (weights stored in their inference dtype, CUDA-graph decode near the bandwidth
roofline, compiled CNNs launching fewer kernels and moving fewer bytes)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tests.conftest import needs_torch

from whichgpu.errors import CatalogError, UnknownNameError
from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.engine import get_engine, load_engines
from whichgpu.hardware.system import default_system
from whichgpu.parallel.comm import collective_time
from whichgpu.parallel.plan import Plan
from whichgpu.perf import estimate
from whichgpu.perf.device import Device
from whichgpu.perf.estimate import _prepared
from whichgpu.perf.params import load_params

CAT = load_catalog()


# ---- engine profiles ----------------------------------------------------------------------------

def test_every_packaged_engine_loads_with_sources() -> None:
    engines = {e.id: e for e in load_engines()}
    assert {"pytorch", "torch-compile", "torch-compile-graphs", "gpt-fast", "tensorrt-llm", "llama.cpp", "vllm",
            "xla"} <= set(engines)
    for e in engines.values():
        assert e.sources, e.id
        assert e.summary().startswith(e.name)
    assert engines["torch-compile-graphs"].graphs and not engines["pytorch"].graphs
    assert engines["tensorrt-llm"].fusion == "epilogue" and engines["pytorch"].fusion == "none"


def test_engine_names_resolve_and_unknown_names_say_what_is_valid() -> None:
    assert get_engine("eager").id == "pytorch"
    assert get_engine("trt-llm").id == "tensorrt-llm"
    assert get_engine("reduce-overhead").id == "torch-compile-graphs"
    with pytest.raises(UnknownNameError, match="engine"):
        get_engine("onnxruntime-gpu")


def test_a_user_override_changes_one_field(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text('id = "llama.cpp"\n[launch]\nhost_op_us = 9.5\n')
    e = load_engines((str(tmp_path),)).get("llama.cpp")
    assert e.host_op_us == 9.5 and e.fp16_accumulate  # the rest as packaged
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "mine.toml").write_text('id = "llama.cpp"\n[kernels]\nfusion = "everything"\n')
    with pytest.raises(CatalogError, match="fusion"):
        load_engines((str(bad),))


def test_an_engine_based_on_another_follows_its_values_and_a_bad_base_is_named(tmp_path: Path) -> None:
    nemo, megatron = get_engine("nemo"), get_engine("megatron")
    assert nemo.cross_entropy == "fused" and megatron.cross_entropy == "vocab-parallel"
    assert (nemo.host_op_us, nemo.microbatch_host_ms, nemo.fusion) == (megatron.host_op_us, megatron.microbatch_host_ms,
                                                                       megatron.fusion)
    (tmp_path / "m.toml").write_text('id = "megatron"\n[launch]\nhost_op_us = 70\n')  # a refit of the base
    assert load_engines((str(tmp_path),)).get("nemo").host_op_us == 70
    def entry(eid: str, base: str) -> str:
        return f'schema = "whichgpu.engine/1"\nid = "{eid}"\nname = "{eid}"\nbased_on = "{base}"\n[launch]\n[kernels]\n'

    for i, files in enumerate(({"a": "no-such-engine"}, {"a": "b", "b": "a"})):  # unknown; a loop
        d = tmp_path / f"bad{i}"
        d.mkdir()
        for eid, base in files.items():
            (d / f"{eid}.toml").write_text(entry(eid, base))
        with pytest.raises(CatalogError, match="based_on"):
            load_engines((str(d),))


# ---- the power budget ---------------------------------------------------------------------------

def test_a_power_starved_card_runs_below_its_rated_clock_and_a_limit_slows_it_further() -> None:
    p = load_params()
    t4 = Device(CAT.get("t4"), p)
    # T4: 65 dense FP16 TFLOP/s from 70 W, far more tensor throughput per watt than 12 nm allows
    assert t4.power_need_w > CAT.get("t4").tdp_w and t4.clock_scale < 1.0
    capped = Device(CAT.get("t4"), p, power_limit_w=50)
    assert capped.clock_scale < t4.clock_scale
    # a flagship GeForce card has the power to run above its rated boost clock
    assert Device(CAT.get("rtx 4090"), p).clock_scale >= 1.0


def test_a_power_limit_never_speeds_a_step_up() -> None:
    from tests.unit.test_perf import matmul, trace_of

    t = trace_of(matmul(8192, 8192, 8192))
    for gid in ("a100-sxm4-80gb", "rtx-4090", "h100-pcie-80gb"):
        g = CAT.get(gid)
        assert estimate(t, g, Plan(power_limit_w=0.6 * (g.tdp_w or 300))).step_s >= estimate(t, g).step_s


# ---- tensor-parallel collectives ----------------------------------------------------------------

def test_small_all_reduce_is_latency_bound_and_large_is_bandwidth_bound() -> None:
    p = load_params()
    a100 = default_system(CAT.get("a100-sxm4-80gb"))  # DGX A100: NVLink 3 through NVSwitch
    small = collective_time("all_reduce", 16_384, 8, a100, p)
    assert small == pytest.approx(3 * p.tp_collective_us * 1e-6, rel=0.01)  # log2(8) rounds of latency
    # the latency grows with the group: one round for 2 GPUs, two for 4
    assert collective_time("all_reduce", 16, 2, a100, p) == pytest.approx(p.tp_collective_us * 1e-6, rel=0.01)
    assert collective_time("all_reduce", 16, 4, a100, p) == pytest.approx(2 * p.tp_collective_us * 1e-6, rel=0.01)
    # 1 GB over 8 GPUs: ring moves 2 x 7/8 of it over NVLink at 300 GB/s x NCCL efficiency
    big = collective_time("all_reduce", 1e9, 8, a100, p)
    assert big == pytest.approx(3 * p.tp_collective_us * 1e-6 + 1.75e9 / (300e9 * p.nccl_efficiency), rel=1e-6)
    assert collective_time("all_reduce", 1e9, 1, a100, p) == 0.0


@needs_torch
def test_tensor_parallel_decode_splits_the_weights_and_adds_two_all_reduces_per_layer() -> None:
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.spec import WorkloadSpec

    base = WorkloadSpec(model="llama-2-7b", task="infer", batch_size=1, precision="bf16", phase="decode", context=64)
    one = get_trace(base)
    four = get_trace(replace(base, options=(("tp", 4),)))
    comm = [o for o in four.ops if o.category == "comm"]
    # 32 layers x (attention output + MLP output) all-reduces, and one all-gather of the logits
    assert sum(o.count for o in comm if "all_reduce" in o.tags) == 64
    assert sum(o.count for o in comm if "all_gather" in o.tags) == 1
    # Each rank holds a quarter of the block weights; embeddings stay whole, the head is split.
    assert 0.25 * one.param_bytes < four.param_bytes < 0.30 * one.param_bytes
    a100 = CAT.get("a100-sxm4-80gb")
    graphs = Plan(engine="torch-compile-graphs")  # eager decode is host-bound on every rank alike
    e1, e4 = estimate(one, a100, graphs), estimate(four, a100, graphs)
    assert e4.comm_s > 0 and e4.step_s < e1.step_s
    assert "tensor_parallel" in e4.assumptions


# ---- inference physics --------------------------------------------------------------------------

@needs_torch
def test_batch1_bf16_decode_with_cuda_graphs_is_weight_bytes_over_achievable_bandwidth() -> None:
    """Llama-2-7B, batch 1, BF16, CUDA graphs on an A100-SXM4-80GB. Each token reads every
    weight once: 6.74e9 parameters x 2 B = 13.48 GB (+ the KV cache of 65 positions, 34 MB).
    At the achievable bandwidth (2,039 GB/s x the HBM ceiling), the step is that / bandwidth;
    kernel gaps and the small kernels' ramp add a little: within 15%."""
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.spec import WorkloadSpec

    t = get_trace(WorkloadSpec(model="llama-2-7b", task="infer", batch_size=1, precision="bf16", phase="decode",
                               context=64))
    g = CAT.get("a100-sxm4-80gb")
    dev = Device(g, load_params())
    floor = t.param_bytes / (g.memory_bandwidth_gbps * 1e9 * dev.mem_ceiling)
    e = estimate(t, g, Plan(engine="torch-compile-graphs"))
    assert floor <= e.step_s <= 1.15 * floor, (e.step_s, floor)
    assert e.bound == "memory"


@needs_torch
def test_fp8_inference_stores_fp8_weights_and_casts_no_weights() -> None:
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.spec import WorkloadSpec

    spec = WorkloadSpec(model="llama-2-7b", task="infer", batch_size=1, context=256, precision="fp8",
                        phase="decode")
    t = get_trace(spec)
    bf16 = get_trace(replace(spec, precision="bf16"))
    casts = [o for o in t.ops if o.name in ("te.cast_to_fp8", "aten._to_copy")]
    cast_bytes = sum(o.bytes_read * o.count for o in casts)
    # Decoding one token: only that token's activations are quantised per GEMM, a few MB; a cast
    # of the weights would read all 13 GB of them again.
    assert cast_bytes < 0.01 * t.param_bytes
    gemms = [o for o in t.ops if o.category == "matmul" and o.mm and o.mm[2] >= 4096]
    assert gemms and all(o.dtype == "fp8" for o in gemms if o.module != "lm_head")
    assert all(o.dtype == "bf16" for o in gemms if o.module == "lm_head")  # the head stays 16-bit
    # linear weights as stored: 1 byte each (embeddings and the 16-bit head stay 2 bytes)
    assert 0.5 * bf16.param_bytes < t.param_bytes < 0.56 * bf16.param_bytes


@needs_torch
def test_compiled_cnn_inference_launches_fewer_kernels_and_moves_fewer_bytes() -> None:
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.spec import WorkloadSpec

    t = get_trace(WorkloadSpec(model="resnet50-v1.5", task="infer", batch_size=64, image_size=224,
                               precision="amp-fp16"))
    eager_ops = _prepared(t, "none")[0]
    fused_ops = _prepared(t, "pointwise")[0]
    kernels = [sum(o.kernels * o.count for o in ops) for ops in (eager_ops, fused_ops)]
    traffic = [sum(o.bytes * o.count for o in ops) for ops in (eager_ops, fused_ops)]
    # batch norm + ReLU (+ residual add) collapse into one pass after each convolution
    assert kernels[1] < 0.7 * kernels[0]
    assert traffic[1] < 0.8 * traffic[0]
    g = CAT.get("rtx 4090")
    assert estimate(t, g, Plan(engine="torch-compile")).step_s < estimate(t, g).step_s


@needs_torch
def test_fp8_kv_cache_halves_the_cache_traffic_of_decode() -> None:
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.spec import WorkloadSpec

    spec = WorkloadSpec(model="gpt-j-6b", task="infer", batch_size=16, precision="fp16", phase="decode", context=2048)
    full = get_trace(spec)
    fp8 = get_trace(replace(spec, options=(("kv_dtype", "fp8"),)))
    att = [sum(o.bytes_read * o.count for o in t.ops if o.category == "attention") for t in (full, fp8)]
    assert att[1] == pytest.approx(att[0] / 2, rel=0.02)
    from whichgpu.memory import memory_estimate

    g = CAT.get("h100-sxm5-80gb")
    assert memory_estimate(fp8, g).kv_cache.bytes == pytest.approx(memory_estimate(full, g).kv_cache.bytes / 2)


@needs_torch
def test_decode_attention_without_grouped_kv_reads_the_cache_once_per_query_head() -> None:
    """Llama-2-70B: 64 query heads share 8 K/V heads (groups of 8). TensorRT-LLM 0.6 ran decode
    attention per query head, so its cache traffic is 8x that of a grouped (XQA) kernel."""
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.spec import WorkloadSpec

    t = get_trace(WorkloadSpec(model="llama-2-70b", task="infer", batch_size=64, precision="fp16", phase="decode",
                               context=2048))
    h100 = CAT.get("h100-sxm5-80gb")

    def attention_s(engine: str) -> float:
        e = estimate(t, h100, Plan(engine=engine), top=100)
        return sum(o.seconds for o in e.top_ops if o.category == "attention")

    grouped, per_head = attention_s("tensorrt-llm"), attention_s("tensorrt-llm-0.6")
    assert 6.0 < per_head / grouped < 8.5
