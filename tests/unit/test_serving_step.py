"""The serving step-time model: weights read once per step, decode attention linear in the
context, decode runs equal step-by-step calls, precision and tensor parallelism where expected."""

from __future__ import annotations

import numpy as np
import pytest

from whichgpu.errors import InputError
from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.system import load_systems
from whichgpu.serving.batch import StepBatch
from whichgpu.serving.model import Setup, build
from whichgpu.serving.step import StepModel


def _model(model: str = "llama-3.1-8b", gpu: str = "h100-sxm5-80gb", system: str = "dgx-h100", **kw: object):  # type: ignore[no-untyped-def]
    return build(Setup(model, load_catalog().get(gpu), load_systems().get(system), **kw))  # type: ignore[arg-type]


def test_small_decode_batches_are_bound_by_the_weights() -> None:
    m = _model()
    dev = m.step_time.device
    one = m.step_time(StepBatch.decode_only(np.array([128])))
    floor = m.weight_bytes / dev.bw  # every weight read once at the full datasheet bandwidth
    assert floor < one < 1.6 * floor / dev.mem_ceiling
    # eight requests cost little more than one; 256 clearly more (the GEMMs start to count)
    eight = m.step_time(StepBatch.decode_only(np.full(8, 128)))
    many = m.step_time(StepBatch.decode_only(np.full(256, 128)))
    assert eight < 1.15 * one and many > 1.3 * one


def test_decode_runs_equal_step_by_step_calls_and_grow_with_context() -> None:
    m = _model("llama-3.1-70b", "h200", "dgx-h200", tp=4, precision="fp8")
    ctx = np.array([100, 2000, 513, 7])
    run = m.step_time.decode_run(ctx, 50)
    each = [m.step_time(StepBatch.decode_only(ctx + j)) for j in range(50)]
    assert run == pytest.approx(each, rel=1e-12)
    assert np.all(np.diff(run) > 0)


def test_precision_and_tensor_parallelism_move_the_weight_bound() -> None:
    b = StepBatch.decode_only(np.array([512]))
    bf16 = _model("llama-3.1-70b", "h200", "dgx-h200", tp=4)
    fp8 = _model("llama-3.1-70b", "h200", "dgx-h200", tp=4, precision="fp8")
    tp8 = _model("llama-3.1-70b", "h200", "dgx-h200", tp=8)
    assert fp8.weight_bytes == pytest.approx(bf16.weight_bytes / 2, rel=0.05)
    assert fp8.step_time(b) < 0.7 * bf16.step_time(b)
    assert tp8.step_time(b) < 0.75 * bf16.step_time(b)


def test_moe_decode_reads_only_the_experts_its_tokens_reach() -> None:
    m = _model("deepseek-v3", "h200", "dgx-h200", tp=8, precision="fp8")
    one = m.step_time(StepBatch.decode_only(np.array([1024])))
    all_weights = m.weight_bytes / m.step_time.device.bw
    assert one < 0.5 * all_weights  # 8 of 256 experts per token: most expert weights stay unread
    wide = m.step_time(StepBatch.decode_only(np.full(128, 1024)))
    assert wide > 2 * one


def test_prefill_costs_grow_with_the_cached_context() -> None:
    m = _model()
    fresh = StepBatch(np.array([512]), np.array([512]), np.zeros(0, np.int64))
    late = StepBatch(np.array([512]), np.array([16384]), np.zeros(0, np.int64))
    assert m.step_time(late) > 1.1 * m.step_time(fresh)


@pytest.mark.parametrize(("kw", "field"), [
    ({"tp": 3}, "tp"), ({"precision": "fp6"}, "precision"), ({"engine": "tgi"}, "engine"),
    ({"kv_dtype": "int2"}, "kv_dtype"), ({"ep": 2}, "ep"), ({"tp": 16}, "tp"),
    ({"tp": 8, "attention_dp": 3}, "attention_dp"), ({"tp": 4, "attention_dp": 2, "pp": 2}, "attention_dp"),
])
def test_bad_setups_are_one_line_errors(kw: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as e:
        _model(**kw)
    assert e.value.field == field and "\n" not in str(e.value)


def test_fp4_needs_blackwell() -> None:
    with pytest.raises(InputError, match="FP4"):
        _model(precision="fp4")
    assert _model("llama-3.1-70b", "b200", "hgx-b200", tp=4, precision="fp4").weight_bytes > 0


def test_tensorrt_llm_gives_the_kv_cache_a_fraction_of_the_free_memory() -> None:
    from whichgpu.serving.kv import default_non_torch_bytes

    kw = {"tp": 4, "precision": "fp8"}
    v = _model("deepseek-v3", "b200", "hgx-b200", engine="vllm", **kw)
    t = _model("deepseek-v3", "b200", "hgx-b200", engine="tensorrt-llm", **kw)
    # 671B in FP8 over 4 GPUs: 168 GB of weights in 0.9 x 190 GB (180 GiB) leaves vLLM a sliver of KV;
    # TensorRT-LLM takes 0.9 of what is free after loading
    vcap = v.capacity(max_seq_len=2048)
    cap = t.capacity(max_seq_len=2048)
    total = t.setup.gpu.usable_memory_bytes
    free = total - t.weight_bytes - t.activation_peak_bytes(8192, 256) - default_non_torch_bytes(4)
    assert cap.kv_cache_bytes == pytest.approx(0.9 * free, rel=1e-6) and cap.engine_fraction == 0.9
    assert 0 < vcap.kv_cache_bytes < 0.2 * cap.kv_cache_bytes and vcap.engine_fraction is None


def test_engine_host_time_per_request_and_moe_layer_latency() -> None:
    from dataclasses import replace

    vllm = _model("qwen3-235b-a22b", "h200", "dgx-h200", tp=4, precision="fp8")
    trt = _model("qwen3-235b-a22b", "h200", "dgx-h200", tp=4, precision="fp8", engine="tensorrt-llm")
    eng = vllm.step_time.engine
    assert eng.step_host_us_per_seq > 0 and eng.moe_layer_us > 0  # vLLM's profile (SGLang's too)
    assert trt.step_time.engine.step_host_us_per_seq == 0 and trt.step_time.engine.moe_layer_us == 0
    ctx = np.full(64, 1500)
    # the same step without the two terms: the host time is 64 x the per-request cost on top ...
    def fresh(step, **kw):  # type: ignore[no-untyped-def]  # the same step model under another engine
        return replace(step, engine=replace(step.engine, **kw))  # (a copy starts with empty memo tables)

    plain = fresh(vllm.step_time, step_host_us_per_seq=0.0, moe_layer_us=0.0)
    no_host = fresh(vllm.step_time, step_host_us_per_seq=0.0)
    b = StepBatch.decode_only(ctx)
    assert vllm.step_time(b) - no_host(b) == pytest.approx(64 * eng.step_host_us_per_seq * 1e-6, rel=1e-9)
    assert vllm.step_time.decode_run(ctx, 3)[0] == pytest.approx(vllm.step_time(b), rel=1e-12)
    # ... and each of Qwen3-235B's 94 MoE layers adds the fixed routing latency, whatever the batch
    a = vllm.step_time.args
    moe_layers = sum(1 for i in range(a.layers) if a.is_moe(i))
    assert moe_layers == 94
    for batch in (b, StepBatch.decode_only(np.full(2, 300)), StepBatch(np.array([4096]), np.array([4096]), ctx[:0])):
        assert no_host(batch) - plain(batch) == pytest.approx(moe_layers * eng.moe_layer_us * 1e-6, rel=1e-9)
    # the moe_efficiency knob (1 in the packaged profiles): the expert GEMMs take 1 / it as long
    half = fresh(vllm.step_time, step_host_us_per_seq=0.0, moe_layer_us=0.0, moe_efficiency=0.5)
    assert 1.05 < half(b) / plain(b) < 2.0
    # the engine's weight streaming: a small dense decode step, bound by the weight reads, slows by
    # nearly 1 / weight_stream_efficiency; a long prefill (compute-bound) barely moves
    dense8 = _model()
    full = fresh(dense8.step_time, weight_stream_efficiency=1.0, step_host_us_per_seq=0.0)
    ours = fresh(dense8.step_time, step_host_us_per_seq=0.0)
    one = StepBatch.decode_only(np.array([256]))
    w = dense8.step_time.engine.weight_stream_efficiency
    assert w < 1 and 0.8 / w < ours(one) / full(one) <= 1 / w + 1e-9
    pre = StepBatch(np.array([8192]), np.array([0]), np.zeros(0, np.int64))
    assert ours(pre) / full(pre) < 1.05
    # a dense model's step changes with neither MoE term
    dense = _model("llama-3.1-70b", "h200", "dgx-h200", tp=4, precision="fp8")
    x = fresh(dense.step_time, step_host_us_per_seq=0.0)
    y = fresh(dense.step_time, step_host_us_per_seq=0.0, moe_efficiency=0.5, moe_layer_us=0.0)
    assert x(b) == pytest.approx(y(b), rel=1e-12)


def test_tensor_parallel_all_reduce_latency_grows_with_the_group() -> None:
    # 8 decode tokens: the all-reduces are latency-bound; going from TP2 to TP8 saves weight reads
    # but each of the 2 x 80 all-reduces costs log2(8) / log2(2) = 3x the latency
    from whichgpu.parallel.comm import collective_time
    from whichgpu.perf.params import load_params

    p, h = load_params(), load_systems().get("dgx-h200")
    small = 8 * 8192 * 2
    t2, t8 = (collective_time("all_reduce", small, n, h, p) for n in (2, 8))
    assert t8 - t2 == pytest.approx(2 * p.tp_collective_us * 1e-6, rel=0.05)


def test_fp8_weights_without_fp8_tensor_cores_are_weight_only() -> None:
    # A100 has no FP8 tensor cores: FP8 weights are read as 1 byte and multiplied in 16-bit math
    a100 = _model("llama-3.1-70b", "a100-sxm4-80gb", "dgx-a100", tp=4, precision="fp8")
    h100 = _model("llama-3.1-70b", "h100-sxm5-80gb", "dgx-h100", tp=4, precision="fp8")
    op_a = a100.step_time._gemm("mlp.up", 4096, 7168, 8192)
    op_h = h100.step_time._gemm("mlp.up", 4096, 7168, 8192)
    assert (op_a.dtype, op_a.tags) == ("bf16", ("wq",)) and (op_h.dtype, op_h.tags) == ("fp8", ())
    assert op_a.bytes_read == op_h.bytes_read  # the same 1-byte weights
    assert "no FP8 tensor cores" in a100.assumptions["weights"] and "tensor cores" not in h100.assumptions["weights"]


def test_the_kv_cache_line_points_at_the_fp8_cache_a_modelopt_checkpoint_declares() -> None:
    # serve keeps --kv-dtype auto at 16 bits and says which engines take the checkpoint's FP8 cache
    line = {(e, p): _model("llama-3.1-70b", "b200", "dgx-b200", tp=4, precision=p, engine=e).assumptions["kv_cache"]
            for e in ("vllm", "sglang", "tensorrt-llm") for p in ("fp8", "fp4")}
    assert all(x.startswith("16-bit KV cache") for x in line.values())
    assert "ModelOpt FP8 checkpoint declares an FP8 KV cache, which vLLM (since its PR #29980" in line["vllm", "fp8"]
    assert "FP4 checkpoint declares an FP8 KV cache, which SGLang takes" in line["sglang", "fp4"]
    # the model makers' FP8 checkpoints declare no KV scheme: only a ModelOpt export gives SGLang one
    assert "SGLang takes an FP8 KV cache from an FP8 checkpoint only where it declares one" in line["sglang", "fp8"]
    assert "which TensorRT-LLM takes by default" in line["tensorrt-llm", "fp8"]
    fp8 = _model("llama-3.1-70b", "b200", "dgx-b200", tp=4, precision="fp4", engine="sglang", kv_dtype="fp8")
    assert fp8.assumptions["kv_cache"].startswith("FP8 KV cache") and "declares" not in fp8.assumptions["kv_cache"]


def test_moe_expert_math_runs_below_a_dense_gemms_rate_in_prefill_not_in_small_decode() -> None:
    import dataclasses

    m = _model("qwen3-235b-a22b", "h200", "dgx-h200", tp=4, precision="fp8")
    st = m.step_time
    assert st.engine.moe_compute_efficiency < 1  # vllm's profile
    full = dataclasses.replace(st, engine=dataclasses.replace(st.engine, moe_compute_efficiency=1.0))
    prefill = StepBatch(np.array([4096]), np.array([4096]), np.zeros(0, np.int64))
    decode = StepBatch.decode_only(np.full(8, 1024))
    # a 4k-token prefill is bound by the experts' math: slower at the engine's grouped-GEMM rate
    assert st(prefill) > 1.25 * full(prefill)  # attention and the dense layers dilute it
    # eight decode tokens are bound by reading the experts' weights: the math rate hardly moves them
    assert st(decode) == pytest.approx(full(decode), rel=0.02)
    # a dense model has no expert GEMMs: the field does not apply
    d = _model("llama-3.1-70b", "h200", "dgx-h200", tp=4, precision="fp8").step_time
    dfull = dataclasses.replace(d, engine=dataclasses.replace(d.engine, moe_compute_efficiency=1.0))
    assert d(prefill) == pytest.approx(dfull(prefill), rel=1e-12)


def test_sglang_runs_vllms_kernel_profile_with_its_own_request_overhead() -> None:
    from whichgpu.hardware.engine import get_engine

    v, s = get_engine("vllm"), get_engine("sglang")
    # its own: the request overhead, and no multicast all-reduce of its own (torch symmetric memory
    # is opt-in in SGLang, on by default in vLLM)
    own = ("id", "name", "description", "sources", "request_overhead_ms", "multimem_min_gpus", "prefill_graph_tokens")
    assert {k: x for k, x in s.to_dict().items() if k not in own} == \
        {k: x for k, x in v.to_dict().items() if k not in own}
    assert s.request_overhead_ms > v.request_overhead_ms > 0
    assert s.multimem_min_gpus == 0 < v.multimem_min_gpus
    assert s.prefill_graph_tokens == 0 < v.prefill_graph_tokens  # SGLang never graphs a prefill step
    sg = _model("llama-3.1-8b", engine="sglang")
    vl = _model("llama-3.1-8b", engine="vllm")
    b = StepBatch(np.array([1024]), np.array([1024]), np.full(4, 500))
    assert sg.step_time(b) == pytest.approx(vl.step_time(b), rel=1e-12)  # the same GPU time per step
    assert sg.request_latency_s == pytest.approx(s.request_overhead_ms * 1e-3)
    cfg = sg.scheduler_config(sg.capacity())
    assert cfg.request_latency_s == sg.request_latency_s
    assert "ms per request before the scheduler" in sg.assumptions["engine"]


def test_dp_attention_runs_attention_per_group_and_the_mlp_on_every_groups_tokens() -> None:
    # Llama-3.1-70B on 8 H200 as 2 attention groups of 4 GPUs: each group's 8 KV heads split over 4
    # GPUs (twice TP8's KV bytes per token per GPU), attention weights over 4, the MLP over all 8
    tp = _model("llama-3.1-70b", "h200", "dgx-h200", tp=8, precision="fp8")
    dp = _model("llama-3.1-70b", "h200", "dgx-h200", tp=8, precision="fp8", attention_dp=2)
    assert dp.kv.bytes_per_token == 2 * tp.kv.bytes_per_token
    a = dp.args
    attn = a.layers * a.attention_params() * 1.0  # FP8: one byte per weight
    assert dp.weight_bytes - tp.weight_bytes == pytest.approx(attn / 4 - attn / 8, rel=1e-9)
    st, sd = tp.step_time, dp.step_time
    assert isinstance(st, StepModel) and isinstance(sd, StepModel)
    assert sd.attn_tp == 4 and st.attn_tp == 8
    # a group's 64 decode tokens: its GEMMs see 128 MLP rows (both groups') and its own 64 attention rows
    mlp = next(o for o in sd._layer_ops(0, 64) if o.name == "mlp.up")
    qkv = next(o for o in sd._layer_ops(0, 64) if o.name == "qkv")
    assert mlp.mm is not None and qkv.mm is not None and mlp.mm[1] == 128 and qkv.mm[1] == 64
    assert qkv.mm[2] == (a.heads // 4 + 2 * a.kv_heads // 4) * a.head_dim
    # the collectives: an all-reduce within the group, an all-gather and a reduce-scatter over all 8
    assert sd._layer_comm_s(64) > 0 and sd._layer_comm_s(64) != st._layer_comm_s(64)
    # with one group the model is exactly tensor parallelism's
    one = _model("llama-3.1-70b", "h200", "dgx-h200", tp=8, precision="fp8", attention_dp=1)
    b = StepBatch.decode_only(np.full(32, 700))
    assert one.step_time(b) == tp.step_time(b)


def test_dp_attention_multiplies_an_mla_models_kv_capacity_by_the_groups() -> None:
    # DeepSeek-V3's MLA latent is cached whole on every GPU of a group: under TP8 every GPU holds every
    # request's latent, under 8 attention groups each GPU only its own group's requests
    tp = _model("deepseek-v3", "b200", "hgx-b200", tp=8, ep=8, precision="fp8")
    dp = _model("deepseek-v3", "b200", "hgx-b200", tp=8, ep=8, precision="fp8", attention_dp=8)
    assert dp.kv.bytes_per_token == tp.kv.bytes_per_token
    ct, cd = tp.capacity(max_seq_len=2048), dp.capacity(max_seq_len=2048)
    assert cd.num_tokens < ct.num_tokens  # each GPU also holds every attention weight
    assert 8 * cd.max_concurrency > 5 * ct.max_concurrency  # 8 groups of its tokens each


def test_prefill_attention_is_memoised_by_its_chunk_shapes_only() -> None:
    # the memo (a closed loop of fixed lengths repeats the same chunks) returns what a fresh model
    # computes, and chunks that differ in context, count or length are priced apart
    m, fresh = _model().step_time, _model().step_time
    batches = [StepBatch(np.array([512]), np.array([512]), np.zeros(0, np.int64)),
               StepBatch(np.array([512]), np.array([4096]), np.zeros(0, np.int64)),
               StepBatch(np.array([256, 256]), np.array([256, 4096]), np.zeros(0, np.int64)),
               StepBatch(np.array([512]), np.array([512]), np.array([700]))]
    first = [m(b) for b in batches]
    again = [m(b) for b in reversed(batches)][::-1]
    assert again == first and [fresh(b) for b in batches] == first
    assert len(set(first[:3])) == 3 and first[3] > first[0]  # a decode joining adds its own cost


def test_steps_outside_cuda_graphs_wait_for_the_hosts_launches() -> None:
    m = _model("llama-3.1-70b", "b200", "hgx-b200", tp=8, precision="fp8").step_time
    # per layer: qkv, o, the MLP's up, down and activation, add + norm, rotary (7), attention, two
    # all-reduces = 10 kernels; 80 layers x 10 x vLLM's 60 us = 48 ms
    assert m.eager_launch_s == pytest.approx(80 * 10 * m.engine.eager_kernel_host_us * 1e-6)
    assert m.eager_launch_s == pytest.approx(0.048)
    long = StepBatch(np.array([1024]), np.array([1024]), np.full(3, 2000))  # 1,027 tokens > 512: no graph
    assert m._step_s(long) < m.eager_launch_s  # B200 runs the 1k prefill at TP 8 faster than the host launches it
    assert m(long) == pytest.approx(m.eager_launch_s)
    short = StepBatch(np.array([256]), np.array([256]), np.full(3, 2000))  # within vLLM's capture sizes
    assert m(short) == pytest.approx(m._step_s(short)) and m(short) < m.eager_launch_s
    decode = StepBatch.decode_only(np.full(500, 2000))  # decode steps within the capture sizes replay graphs
    assert m(decode) == pytest.approx(m._step_s(decode)) and m(decode) < m.eager_launch_s
    np.testing.assert_allclose(m.decode_run(np.full(500, 2000), 3),
                               [m(StepBatch.decode_only(np.full(500, 2000 + j))) for j in range(3)], rtol=1e-12)
    wide = StepBatch.decode_only(np.full(600, 2000))  # 600 > 512: launched eagerly, as the long prefill
    assert m._step_s(wide) < m.eager_launch_s and m(wide) == pytest.approx(m.eager_launch_s)
    np.testing.assert_allclose(m.decode_run(np.full(600, 2000), 3),
                               [m(StepBatch.decode_only(np.full(600, 2000 + j))) for j in range(3)], rtol=1e-12)
    # a long prefill keeps the GPU busier than the launches: unchanged
    big = StepBatch(np.array([8192]), np.array([8192]), np.zeros(0, np.int64))
    assert m(big) == pytest.approx(m._step_s(big)) and m(big) > m.eager_launch_s
    # SGLang and TensorRT-LLM's PyTorch backend launch every prefill step, however short, and
    # replay graphs for decode steps only (TensorRT-LLM's kernel latencies are its own: no graphs)
    for engine in ("sglang", "tensorrt-llm"):
        e = _model("llama-3.1-70b", "b200", "hgx-b200", tp=8, precision="fp8", engine=engine).step_time
        assert e.eager_launch_s == pytest.approx(0.048)
        assert e(short) == pytest.approx(e.eager_launch_s) and e.eager_launch_s > e._step_s(short)
        assert e(decode) == pytest.approx(e._step_s(decode)) and e(big) == pytest.approx(e._step_s(big))


def test_a_batchs_totals_count_each_chunk_and_decode_request() -> None:
    # two prefill chunks: 100 new tokens after 400 cached, and a fresh 30-token prompt; three decodes
    b = StepBatch(np.array([100, 30]), np.array([500, 30]), np.array([7, 70, 700]))
    assert b.num_prefill_tokens == 130 and b.num_decode == 3 and b.num_tokens == 133
    assert b.num_seqs == 5 and b.decode_context_sum == 777
    # each chunk attends to its cached tokens and causally to itself: 100 x 400 + 100 x 101 / 2 + 30 x 31 / 2
    assert b.prefill_attention_pairs == 100 * 400 + 5050 + 465
    assert b.prefill_context_max == 500 and b.prefill_context_sum == 530
    d = StepBatch.decode_only(np.array([5, 6]))
    assert (d.num_prefill_tokens, d.prefill_attention_pairs, d.prefill_context_max, d.num_tokens) == (0, 0, 0, 2)


def test_a_copy_of_a_step_model_starts_with_empty_memo_tables() -> None:
    from dataclasses import replace

    st = _model().step_time
    b = StepBatch(np.array([128]), np.array([128]), np.full(8, 300))  # within the CUDA-graph sizes: no eager floor
    before = st(b)
    assert st._fixed and st._layers and st._heads and st._prefill_attn  # filled by the call
    slower = replace(st, engine=replace(st.engine, weight_stream_efficiency=st.engine.weight_stream_efficiency / 2))
    assert not (slower._fixed or slower._layers or slower._heads or slower._prefill_attn)
    assert slower(b) > before  # timed afresh under its own engine, not read from the original's tables
    assert st(b) == before


def test_decode_steps_over_the_engines_graph_size_run_without_graphs() -> None:
    from dataclasses import replace

    from whichgpu.hardware.engine import get_engine
    from whichgpu.serving.model import decode_graph_tokens

    gpu = load_catalog().get("h100-sxm5-80gb")
    system = load_systems().get("dgx-h100")
    # vLLM's captures end at 512 tokens with its defaults; SGLang's cuda_graph_max_bs on one H100
    # (an 80 GiB band, TP 1) is 256 requests; TensorRT-LLM's graph sizes are not modelled
    assert decode_graph_tokens(Setup("llama-3.1-8b", gpu, system), get_engine("vllm")) == 512
    assert decode_graph_tokens(Setup("llama-3.1-8b", gpu, system, engine="sglang"), get_engine("sglang")) == 256
    assert decode_graph_tokens(Setup("llama-3.1-8b", gpu, system, tp=4, engine="sglang"), get_engine("sglang")) == 512
    assert decode_graph_tokens(Setup("llama-3.1-8b", gpu, system, engine="tensorrt-llm"),
                               get_engine("tensorrt-llm")) == float("inf")
    st = build(Setup("llama-3.1-8b", gpu, system)).step_time
    assert isinstance(st, StepModel) and st.decode_graph_tokens == 512
    ctx = np.full(16, 300)
    graphed = st.decode_run(ctx, 4)
    assert graphed.max() < st.eager_launch_s  # 16 requests: well under the launches of an eager step
    small = replace(st, decode_graph_tokens=8)  # a graph size under the batch: the step is launched eagerly
    eager = small.decode_run(ctx, 4)
    assert np.allclose(eager, st.eager_launch_s)
    assert small(StepBatch.decode_only(ctx)) == pytest.approx(eager[0])
    assert st(StepBatch.decode_only(ctx)) == pytest.approx(graphed[0])
    assert "decode steps over 512 tokens run outside CUDA graphs" in build(Setup("llama-3.1-8b", gpu, system)).assumptions["engine"]
