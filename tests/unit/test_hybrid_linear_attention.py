"""Hybrid linear-attention models (Qwen3.5-397B-A17B: Gated DeltaNet layers with a full-attention
layer every fourth): the config's facts, the KV cache only on the attention layers with a fixed state
per request (vLLM's blocks, SGLang's own pool), the step's costs, and the parts that do not model
them refusing with one line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from whichgpu.errors import InputError
from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.system import load_systems, resolve_system
from whichgpu.parallel.models import planner_model
from whichgpu.serving.batch import StepBatch
from whichgpu.serving.kv import BlockGroups, kv_cache_capacity, kv_layout
from whichgpu.serving.model import Setup, build
from whichgpu.serving.scheduler import SchedulerConfig, _Blocks, simulate
from whichgpu.serving.step import linear_state_bytes
from whichgpu.serving.workload import ClosedLoop, Workload, fixed_lengths
from whichgpu.units import GiB
from whichgpu.workload.zoo.llm.args import args_from_config


@pytest.fixture(scope="module")
def qwen35():  # type: ignore[no-untyped-def]
    return planner_model("Qwen/Qwen3.5-397B-A17B")[1]


def test_the_config_lays_out_one_full_attention_layer_in_four(qwen35) -> None:  # type: ignore[no-untyped-def]
    a = qwen35
    assert a.layers == 60 and a.attention_layers() == 15 and a.hybrid
    assert [i for i in range(60) if not a.is_linear(i)] == list(range(3, 60, 4))
    # Gated DeltaNet layer: q,k (16 heads x 128) and v, z (64 x 128) projections, beta and decay per
    # value head, the convolution over q, k, v (12288 channels x 4), A and dt bias, the norm, out_proj
    h = 4096
    assert a.lin_conv_dim == 2 * 16 * 128 + 64 * 128 == 12288
    assert a.linear_params() == h * (12288 + 8192) + h * 128 + 12288 * 4 + 128 + 128 + 8192 * h
    total, active = a.params()
    assert total == 396_346_350_336  # transformers' Qwen3_5MoeForCausalLM on the meta device
    assert active == pytest.approx(17.35e9, rel=0.001)  # the "A17B"
    # the layer_types form and the vision-language wrapper read the same
    with open(__import__("whichgpu.parallel.models", fromlist=["CONFIGS"]).CONFIGS / "qwen3.5-397b-a17b.json") as fh:
        cfg = {k: v for k, v in json.load(fh).items() if not k.startswith("_")}
    types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(60)]
    listed = args_from_config({**cfg, "layer_types": types})
    wrapped = args_from_config({"model_type": "qwen3_5_moe", "text_config": {**cfg, "model_type": "qwen3_5_moe_text"}})
    assert listed == a == wrapped


def test_bad_layer_types_are_refused() -> None:
    from whichgpu.errors import CaptureError

    cfg = {"model_type": "qwen3_5_moe", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 64, "num_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128, "vocab_size": 1000,
           "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 32,
           "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "layer_types": ["linear_attention"] * 3}
    with pytest.raises(CaptureError, match="layer_types"):
        args_from_config(cfg)
    with pytest.raises(CaptureError, match="shared_expert_intermediate_size"):
        args_from_config({**cfg, "layer_types": None, "shared_expert_intermediate_size": 100})


def test_vllm_unifies_the_page_and_holds_a_state_block_per_group() -> None:
    # TP 8: one K/V head of 256 (replicated) in 16 bits = 1,024 bytes per token and layer; a state
    # is 8 value heads x 128 x 128 x 2 bytes + 1,536 conv channels x 3 positions x 2 bytes =
    # 271,360 bytes, so the attention block grows to 16 x ceil(271,360 / (16 x 1,024)) = 272 tokens
    # (a page of 278,528 bytes); 15 attention and 45 linear layers form groups of 15: 1 attention
    # group and 3 state groups, a request of L tokens holding ceil(L / 272) + 3 blocks of 15 pages.
    a = planner_model("qwen3.5-397b-a17b")[1]
    state = linear_state_bytes(a, 8, 2.0)
    assert state == 8 * 128 * 128 * 2 + 1536 * 3 * 2 == 271_360
    layout = kv_layout(layers=15, kv_heads=2, head_dim=256, kv_dtype_bytes=2, tp=8, state_layers=45,
                       state_bytes_layer=state)
    cap = kv_cache_capacity(total_memory_bytes=int(140 * GiB), weight_bytes=int(50 * GiB), activation_peak_bytes=0,
                            layout=layout, max_seq_len=8192, gpu_memory_utilization=0.9, non_torch_bytes=0,
                            tp=8)
    assert cap.block_size == 272
    assert cap.groups == BlockGroups(272, 1, state_groups=3)
    assert cap.bytes_per_block == 272 * 1024 * 15
    assert cap.num_blocks == int(0.9 * 140 * GiB - 50 * GiB) // (272 * 1024) // 15
    assert cap.blocks_per_request == math.ceil(8192 / 272) + 3 == 34
    assert any("linear-attention group" in n for n in cap.notes)


def test_sglang_gives_the_states_their_own_pool() -> None:
    layout = kv_layout(layers=15, kv_heads=2, head_dim=256, kv_dtype_bytes=2, tp=8, state_layers=45,
                       state_bytes_layer=1_000_000)
    share = 0.9 / 1.9
    cap = kv_cache_capacity(total_memory_bytes=int(140 * GiB), weight_bytes=int(50 * GiB), activation_peak_bytes=0,
                            layout=layout, max_seq_len=8192, gpu_memory_utilization=0.9, non_torch_bytes=0, tp=8,
                            state_pool_share=share)
    kv = int(0.9 * 140 * GiB - 50 * GiB)
    assert cap.state_slots == int(kv * share) // (45 * 1_000_000)
    assert cap.state_pool_bytes == int(kv * share) and cap.state_bytes_per_request == 45 * 1_000_000
    assert cap.max_concurrency <= cap.state_slots  # a request runs only with a state
    assert cap.block_size == 16 and cap.groups.state_groups == 0
    assert cap.num_blocks == int(kv * (1 - share)) // (16 * 1024) // 15
    # the scheduler never runs more requests than the pool has states for
    m = build(Setup("qwen3.5-397b-a17b", load_catalog().get("h200-sxm-141gb"),
                    load_systems().get("dgx-h200"), tp=8, precision="fp8", engine="sglang"))
    real = m.capacity(max_seq_len=2048)
    assert real.state_slots is not None and real.state_slots > 0
    assert m.scheduler_config(real, max_num_seqs=10**6).max_num_seqs == real.state_slots
    assert m.scheduler_config(real, max_num_seqs=8).max_num_seqs == 8


def test_blocks_with_state_groups_count_every_request_once_per_group() -> None:
    cfg = SchedulerConfig(num_blocks=10_000, block_size=16, groups=BlockGroups(16, 1, state_groups=3))
    b = _Blocks(cfg)
    assert b.one(1) == 1 + 3 and b.one(16) == 1 + 3 and b.one(17) == 2 + 3
    ctx = np.array([1, 5, 16, 17, 40, 100])
    assert list(b.many(ctx)) == [b.one(int(n)) for n in ctx]
    held = int(b.many(ctx).sum())
    steps = np.array([0, 1, 2, 15, 16, 17, 40])
    want = [int(b.many(ctx + s - 1).sum()) - held if s else 0 for s in steps]
    assert list(b.added_by_steps_each(ctx, held, steps)) == want
    added = b.added_by_steps(ctx, held)
    assert added is not None and [added(int(s)) for s in steps[1:]] == want[1:]


def test_a_run_with_state_blocks_is_the_same_stepwise_and_in_decode_runs() -> None:
    m = build(Setup("qwen3.5-397b-a17b", load_catalog().get("h200-sxm-141gb"), load_systems().get("dgx-h200"),
                    tp=8, precision="fp8", engine="vllm"))
    cap = m.capacity(max_seq_len=3000)
    assert cap.groups.state_groups == 3
    cfg = m.scheduler_config(cap, max_num_seqs=64, max_num_batched_tokens=4096)
    wl = Workload(fixed_lengths(2000, 300, 64), ClosedLoop(16))
    fast = simulate(wl, m.step_time, cfg)
    slow = simulate(wl, m.step_time, cfg, decode_runs=False)
    assert fast.ttft.mean == pytest.approx(slow.ttft.mean, rel=1e-9)
    assert fast.tpot.mean == pytest.approx(slow.tpot.mean, rel=1e-9)


def test_the_step_reads_kv_on_attention_layers_only_and_each_state_once() -> None:
    g = load_catalog().get("b200")
    m = build(Setup("qwen3.5-397b-a17b", g, resolve_system(g, None, load_systems()), tp=8, precision="fp8",
                    engine="sglang"))
    st = m.step_time
    assert st._attn_layers == 15
    per_pos, _ = st._decode_rates()
    mem, comp, _ = st._attention_parts()
    assert per_pos == pytest.approx(15 * max(mem, comp))
    # each decoding request reads and writes its 45 layers' float32 states (SGLang)
    state = linear_state_bytes(st.args, 8, 4.0)
    dev = st.device
    assert st._state_s == pytest.approx(45 * 2 * state / (dev.bw * dev.mem_ceiling))

    def decode(n: int, ctx: int) -> float:
        return st(StepBatch(np.array([], dtype=np.int64), np.array([], dtype=np.int64), np.full(n, ctx)))
    # longer contexts cost only the 15 attention layers' reads
    assert decode(8, 9000) - decode(8, 1000) == pytest.approx(per_pos * 8 * 8000, rel=1e-9)
    # the KV cache holds the attention layers only: 15 x 2 x 1 head x 256 x 2 bytes per token
    assert m.kv.bytes_per_token == 15 * 1024 and m.kv.state_layers == 45
    assert "Gated DeltaNet" in m.assumptions["linear_attention"]


def test_tensor_parallelism_must_divide_the_linear_heads() -> None:
    from dataclasses import replace

    from whichgpu.serving import model as sm

    a = planner_model("qwen3.5-397b-a17b")[1]
    odd = replace(a, lin_k_heads=12)
    real = sm.planner_model
    sm.planner_model = lambda name: ("odd", odd, None)  # type: ignore[assignment]
    try:
        with pytest.raises(InputError, match="linear-attention layers"):
            build(Setup("x", load_catalog().get("h200-sxm-141gb"), load_systems().get("dgx-h200"), tp=8,
                        precision="fp8", engine="vllm"))
    finally:
        sm.planner_model = real


def test_the_planner_and_the_pytorch_zoo_refuse_in_one_line() -> None:
    from typer.testing import CliRunner

    from whichgpu.cli import app

    r = CliRunner().invoke(app, ["plan", "qwen3.5-397b-a17b", "--gpu", "H100", "--gpus", "64"])
    assert r.exit_code == 2 and "linear-attention" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["fit", "qwen3.5-397b-a17b", "--gpu", "H100"])
    assert r.exit_code == 2 and "linear-attention" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["serve", "qwen3.5-397b-a17b", "--gpu", "H200", "--tp", "8", "--concurrency", "8",
                                 "--input-len", "1000", "--output-len", "100", "--requests", "40", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["kv_cache_tokens"] > 0 and doc["ttft_ms"]["mean"] > 0
    assert doc["memory"]["linear_state_mb_per_request"] == pytest.approx(45 * 271_360 / 1e6)
    assert doc["memory"]["state_slots"] is None  # vLLM: states in the blocks, no pool
