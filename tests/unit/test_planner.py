"""The parallel planner: layer kernels, layout checks, evaluation, search."""

from __future__ import annotations

import math

import pytest

from whichgpu.errors import InputError
from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.system import load_systems
from whichgpu.parallel.layer import Shard, layer_ops
from whichgpu.parallel.models import planner_model
from whichgpu.parallel.plan import Plan
from whichgpu.parallel.planner import Context, Job, check_layout, evaluate, split_layers
from whichgpu.parallel.search import Fixed, search


def _job(model: str = "llama-3-70b", gpus: int = 64, gb: int = 128, seq: int = 4096, gpu: str = "h100-sxm5-80gb",
         system: str = "dgx-h100", precision: str = "bf16") -> Job:
    mid, a, _ = planner_model(model)
    return Job(mid, a, load_catalog().get(gpu), load_systems().get(system), gpus, gb, seq, precision)


def _plan(**kw: object) -> Plan:
    base: dict[str, object] = {"engine": "megatron", "sharding": "zero1", "recompute": "none"}
    base.update(kw)
    return Plan(**base)  # type: ignore[arg-type]


def test_first_generation_flash_attention_runs_at_half_the_rate() -> None:
    from whichgpu.parallel.layer import layer_cost
    from whichgpu.perf.device import Device
    from whichgpu.perf.params import load_params

    _, a, _ = planner_model("llama-3-8b")
    dev = Device(load_catalog().get("a100-sxm4-80gb"), load_params())
    costs = {att: layer_cost(a, 0, Shard(micro_batch=1, seq=16384, attention=att), dev, 0.0)
             for att in ("flash", "flash1")}
    fa2, fa1 = costs["flash"], costs["flash1"]
    assert fa1.attention_fwd_s == pytest.approx(2 * fa2.attention_fwd_s, rel=0.02)
    # only the attention kernels change: the rest of the forward pass is the same
    assert fa1.forward_s - fa1.attention_fwd_s == pytest.approx(fa2.forward_s - fa2.attention_fwd_s, rel=1e-6)
    assert fa1.weight_grad_s == pytest.approx(fa2.weight_grad_s)


def test_bf16_gradients_and_fp8_weights_shrink_memory_and_traffic() -> None:
    from dataclasses import replace

    base = _job("llama-3-70b", gpus=64, gb=128, seq=4096, precision="fp8")
    plan = _plan(tp=4, pp=4, dp=4, micro_batch=1, grad_accum=32, schedule="1f1b", sequence_parallel=True)
    r32 = evaluate(Context.make(base), plan)
    r16 = evaluate(Context.make(replace(base, grad_dtype="bf16")), plan)
    r8 = evaluate(Context.make(replace(base, grad_dtype="bf16", fp8_params=True)), plan)
    assert r16.memory["gradients"] == pytest.approx(r32.memory["gradients"] / 2)
    assert r16.memory["weights"] == pytest.approx(r32.memory["weights"])
    assert r8.memory["weights"] == pytest.approx(r32.memory["weights"] / 2)
    assert r8.memory["optimizer"] == pytest.approx(r32.memory["optimizer"])  # FP32 main weights, m and v
    assert r16.comm_total["dp"] < r32.comm_total["dp"] and r8.comm_total["dp"] < r16.comm_total["dp"]
    assert "BF16 gradients" in r16.assumptions["gradients"] and "FP8 weights" in r8.assumptions["gradients"]


def test_fp16_gradients_halve_the_data_parallel_traffic_and_say_so() -> None:
    from dataclasses import replace

    from whichgpu.measure.planner_validate import gpt_args

    base = Job("GPT", gpt_args(2048, 24, 16, 50257, 1024), load_catalog().get("a100-sxm4-80gb"),
               load_systems().get("dgx-a100"), 8, 16, 1024, "fp16", "unfused")
    plan = _plan(dp=8, micro_batch=1, grad_accum=2, sharding="ddp", recompute="full", comm_overlap=False)
    r32 = evaluate(Context.make(base), plan)
    r16 = evaluate(Context.make(replace(base, grad_dtype="fp16")), plan)
    assert r16.comm_total["dp"] == pytest.approx(r32.comm_total["dp"] / 2, rel=0.05)
    assert r16.memory["gradients"] == pytest.approx(r32.memory["gradients"] / 2)
    assert "FP16 gradients" in r16.assumptions["gradients"]


def test_gpt_style_mlps_have_two_matrices_and_llama_three() -> None:
    from whichgpu.measure.planner_validate import gpt_args

    g = gpt_args(2048, 24, 16, 50257, 1024)
    assert g.mlp_params(0) == 2 * 2048 * 8192  # up and down, no gate
    _, llama, _ = planner_model("llama-3-8b")
    assert llama.mlp_params(0) == 3 * llama.hidden * llama.intermediate
    # the layer's weight-gradient GEMMs hold exactly the counted matrices
    wgrad = layer_ops(g, 0, Shard(micro_batch=1, seq=1024, dtype="fp16", attention="unfused"))[2]
    assert sum(o.flops for o in wgrad) == pytest.approx(2.0 * 1024 * (g.layer_params(0) - 4 * 2048 - 2 * 2048), rel=0.01)


def test_megatron_falls_back_to_unfused_softmax_when_the_kernel_cannot_take_the_shape() -> None:
    from whichgpu.parallel.layer import fused_softmax_available

    assert fused_softmax_available(1, 4, 1024) and fused_softmax_available(2, 2, 1024)
    assert not fused_softmax_available(1, 2, 1024)  # 2 attention batches: not a multiple of 4
    assert not fused_softmax_available(4, 4, 8192)  # past the kernel's 4096 keys
    _, a, _ = planner_model("llama-3-8b")
    fused = layer_ops(a, 0, Shard(micro_batch=1, seq=1024, tp=8, attention="unfused"))  # 32 heads / 8 = 4
    from whichgpu.measure.planner_validate import gpt_args

    g = gpt_args(2048, 24, 16, 50257, 1024)  # 16 heads / 8 = 2 per rank at micro-batch 1
    fallback = layer_ops(g, 0, Shard(micro_batch=1, seq=1024, tp=8, dtype="fp16", attention="unfused"))
    ok = layer_ops(g, 0, Shard(micro_batch=2, seq=1024, tp=8, dtype="fp16", attention="unfused"))
    names = [o.name for o in fallback[0]]
    assert "softmax.cast" in names and "softmax.mask" in names
    assert len(fallback[0]) == len(ok[0]) + 4 and len(fallback[1]) == len(ok[1]) + 4
    assert "softmax.cast" not in [o.name for o in fused[0]]


def test_the_engines_host_work_per_micro_batch_adds_once_per_micro_batch() -> None:
    from dataclasses import replace

    import whichgpu.hardware.engine as engine_module

    real = engine_module.get_engine
    extra = {}
    for m in (8, 16):  # tp 8, dp 1: m micro-batches of one sequence
        job = _job("llama-3-8b", gpus=8, gb=m, seq=2048)
        plan = _plan(tp=8, micro_batch=1, grad_accum=m)
        check_layout(job, plan)
        steps = []
        for ms in (0.0, 5.0):
            engine_module.get_engine = lambda name, *a, _ms=ms: replace(real(name, *a), microbatch_host_ms=_ms)  # type: ignore[misc]
            try:
                steps.append(evaluate(Context.make(job), plan).step_s)
            finally:
                engine_module.get_engine = real
        extra[m] = steps[1] - steps[0]
    assert extra[8] == pytest.approx(8 * 5e-3, rel=0.01)
    assert extra[16] == pytest.approx(16 * 5e-3, rel=0.01)


def test_step_host_ms_replaces_the_engines_per_step_host_time_in_the_planner() -> None:
    """One GPU group (dp x pp = 1: no jitter term): the step moves by exactly the difference, and the
    host assumption says whose figure it is."""
    from whichgpu.hardware.engine import get_engine

    job = _job("llama-3-8b", gpus=8, gb=8, seq=2048)
    ctx = Context.make(job)
    default = evaluate(ctx, _plan(tp=8, micro_batch=1, grad_accum=8))
    mine = evaluate(ctx, _plan(tp=8, micro_batch=1, grad_accum=8, step_host_ms=20.0))
    fitted = get_engine("megatron").step_host_ms_train
    assert mine.step_s - default.step_s == pytest.approx((20.0 - fitted) * 1e-3, abs=1e-9)
    assert mine.split["overhead"] - default.split["overhead"] == pytest.approx((20.0 - fitted) * 1e-3, abs=1e-9)
    assert "20 ms per step (--step-host-ms)" in mine.assumptions["host"]
    assert f"{fitted:g} ms per step" in default.assumptions["host"] and "--step-host-ms" not in default.assumptions["host"]


def test_split_layers_even_remainder_and_accounting_for_embedding_and_loss() -> None:
    assert split_layers(80, 8) == [10] * 8
    s = split_layers(30, 4)  # remainder to the middle stages
    assert sum(s) == 30 and s[0] == s[-1] == 7 and sorted(s[1:3]) == [8, 8]
    s = split_layers(126, 128)  # Llama-3.1 405B over pp 16 x vp 8: embedding and loss count as layers
    assert sum(s) == 126 and s[0] == s[-1] == 0 and set(s[1:-1]) == {1}


def test_forward_gemm_flops_are_two_per_matmul_weight_per_token() -> None:
    _, a, _ = planner_model("llama-3-8b")
    for tp in (1, 2, 4):
        sh = Shard(micro_batch=2, seq=2048, tp=tp)
        fwd, dgrad, wgrad, _ = layer_ops(a, 0, sh)
        gemm = sum(o.flops for o in fwd if o.category == "matmul")
        per_layer = a.matmul_params() / a.layers / tp
        assert gemm == pytest.approx(2.0 * sh.tokens * per_layer, rel=1e-9)
        assert sum(o.flops for o in wgrad) == pytest.approx(gemm, rel=1e-9)
        assert sum(o.flops for o in dgrad if o.category == "matmul") == pytest.approx(gemm, rel=1e-9)


@pytest.mark.parametrize(("plan", "field", "text"), [
    ({"tp": 3, "dp": 1, "pp": 1}, "gpus", "multiply to the GPU count"),
    ({"tp": 3, "pp": 1, "dp": 32, "micro_batch": 1, "grad_accum": 4, "gpus": 96}, "tp", "64 attention heads"),
    ({"tp": 8, "pp": 1, "dp": 8, "micro_batch": 3, "grad_accum": 5}, "global_batch", "not divisible"),
    ({"tp": 8, "pp": 1, "dp": 8, "micro_batch": 1, "grad_accum": 4}, "grad_accum", "does not match"),
    ({"tp": 8, "pp": 1, "dp": 4, "cp": 2, "ep": 2, "micro_batch": 1, "grad_accum": 32}, "ep", "dense"),
])
def test_check_layout_names_the_field(plan: dict[str, int], field: str, text: str) -> None:
    gpus = plan.pop("gpus", 64)
    with pytest.raises(InputError, match=text) as e:
        check_layout(_job(gpus=gpus), _plan(**plan))
    assert e.value.field == field


def test_evaluate_physics() -> None:
    job = _job()
    ctx = Context.make(job)
    base = {"dp": 2, "micro_batch": 1, "grad_accum": 64, "sequence_parallel": True}
    one = evaluate(ctx, _plan(tp=4, pp=8, schedule="1f1b", **base))
    inter = evaluate(ctx, _plan(tp=4, pp=8, vp=5, schedule="interleaved-1f1b", **base))
    full = evaluate(ctx, _plan(tp=4, pp=8, schedule="1f1b", **{**base, "recompute": "full"}))
    assert 0 < inter.bubble_fraction < one.bubble_fraction < 0.2
    assert full.memory["activations"] < one.memory["activations"]
    assert full.step_s > one.step_s and full.hfu > full.mfu
    wider = evaluate(ctx, _plan(tp=8, pp=8, schedule="1f1b", **{**base, "dp": 1, "grad_accum": 128}))
    assert wider.memory["weights"] < one.memory["weights"]
    for r in (one, inter, full, wider):
        assert r.fits == (r.peak_memory_bytes <= job.gpu.usable_memory_bytes)
        assert r.split["tp"] > 0 and r.split["compute"] > 0
        assert all(math.isfinite(v) for v in r.to_dict()["time_split_s"].values())
        assert r.tokens_per_s == pytest.approx(job.tokens / r.step_s)


def test_zero1_shards_the_optimizer_and_fsdp_everything() -> None:
    job = _job("llama-3-8b", gpus=8, gb=64, seq=2048)
    ctx = Context.make(job)
    kw = {"dp": 8, "micro_batch": 1, "grad_accum": 8}
    ddp = evaluate(ctx, _plan(sharding="ddp", **kw))
    z1 = evaluate(ctx, _plan(sharding="zero1", **kw))
    fsdp = evaluate(ctx, _plan(sharding="fsdp-full", **kw))
    assert z1.memory["optimizer"] == pytest.approx(ddp.memory["optimizer"] / 8)
    assert z1.memory["weights"] == ddp.memory["weights"]
    assert fsdp.memory["weights"] < ddp.memory["weights"] / 4 and fsdp.memory["gradients"] < ddp.memory["gradients"]


def test_search_keeps_fixed_degrees_and_orders_by_step_time() -> None:
    job = _job("llama-3-8b", gpus=16, gb=64, seq=4096)
    res = search(job, Fixed(tp=2), Plan(engine="megatron"), top=5)
    assert res.best and all(r.plan.tp == 2 for r in res.best)
    steps = [r.step_s for r in res.best]
    assert steps == sorted(steps)
    assert all(r.fits for r in res.best)
    for r in res.best:
        p = r.plan
        assert p.tp * p.pp * p.cp * p.dp == 16 and p.micro_batch * p.dp * p.grad_accum == 64


def test_nothing_fits_reports_the_closest() -> None:
    job = _job("llama-3-405b", gpus=8, gb=8, seq=4096, gpu="a100-sxm4-40gb", system="dgx-a100-320gb")
    res = search(job, Fixed(), Plan(engine="megatron"), top=3)
    assert not res.best
    assert res.skipped.get("memory", 0) > 0 or res.not_fitting


def test_where_every_layout_is_skipped_for_memory_the_answer_gives_the_least_and_a_gpu_count() -> None:
    # 405B on 8 x 40 GB: the model states alone exceed one GPU in every split, so nothing is
    # evaluated; the answer names the least of them per GPU and how many GPUs hold them at all
    job = _job("llama-3-405b", gpus=8, gb=8, seq=4096, gpu="a100-sxm4-40gb", system="dgx-a100-320gb")
    res = search(job, Fixed(), Plan(engine="megatron"), top=3)
    floor = res.states_floor
    assert res.evaluated == 0 and floor is not None
    ctx = Context.make(job)
    whole = job.args.params()[0] * (ctx.param_bytes + ctx.grad_bytes + ctx.optimizer_bytes)
    assert floor.total_bytes == pytest.approx(whole)
    assert floor.per_gpu_bytes == pytest.approx(whole / 8)  # fully sharded or split over all eight
    assert floor.capacity_bytes == job.gpu.usable_memory_bytes
    fewest = math.ceil(whole / job.gpu.usable_memory_bytes)
    why = res.why_none()
    assert why.startswith("the model states alone") and f"at least {fewest:,} of these GPUs" in why
    assert f"{whole / 8 / 1e9:,.1f} GB per GPU" in why
    # where some layout was evaluated (70B fully sharded over 64 x 40 GB without recomputation),
    # the closest layout's own reason is the answer: its activations, not the states
    near = search(_job("llama-3-70b", gpus=64, gb=64, seq=4096, gpu="a100-sxm4-40gb", system="dgx-a100-320gb"),
                  Fixed(tp=1, pp=1, recompute="none"), Plan(engine="megatron"), top=3)
    assert not near.best and near.not_fitting and near.evaluated > 0
    assert near.why_none() == near.not_fitting[0].reason and "activations" in near.why_none()


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-v"])
def test_stage_peaks_are_the_simulated_ones(schedule: str) -> None:
    from whichgpu.parallel.planner import stage_peaks
    from whichgpu.parallel.schedule import SPLIT_BACKWARD, simulate

    cases = [(2, 2), (4, 4), (4, 8), (4, 16), (8, 8), (8, 24), (5, 7), (8, 13), (16, 64)]
    if schedule == "zb-v":  # its rule from m = p on (steady_peaks), over the stage counts a search tries
        cases += [(p, m) for p in (1, 3, 6, 7, 12, 24, 32) for m in (p - 1, p, p + 1, 3 * p + 2) if m > 0]
    for p, m in cases:
        if schedule == "interleaved-1f1b" and m % p:
            continue
        v = {"interleaved-1f1b": 3, "zb-v": 2}.get(schedule, 1)
        split = schedule in SPLIT_BACKWARD
        tl = simulate(schedule, p, m, 1.3, 1.1 if split else 2.4, 0.9 if split else 0.0, 0.05, v)
        act, pending = stage_peaks(schedule, p, m, v)
        assert act == tl.peak_activations, (p, m)
        assert pending == tl.peak_pending_w, (p, m)


def test_megatrons_unfused_cross_entropy_moves_three_times_the_logit_bytes_of_a_fused_loss() -> None:
    from whichgpu.hardware.engine import get_engine
    from whichgpu.parallel.layer import edge_costs
    from whichgpu.perf.device import Device
    from whichgpu.perf.params import load_params

    assert get_engine("megatron").cross_entropy == "vocab-parallel"  # Megatron-LM's default, Megatron-DeepSpeed
    assert get_engine("nemo").cross_entropy == "fused"  # NeMo / Megatron-Bridge: cross_entropy_loss_fusion=True
    assert get_engine("megatron-deepspeed").id == "megatron" and get_engine("megatron-bridge").id == "nemo"
    _, a, _ = planner_model("llama-3-8b")  # 128,256-token vocabulary: the loss is memory-bound
    dev = Device(load_catalog().get("h100-sxm5-80gb"), load_params())
    sh = Shard(micro_batch=1, seq=4096, tp=1)
    _, fused = edge_costs(a, sh, dev, 0.0, "fused")
    _, unfused = edge_costs(a, sh, dev, 0.0, "vocab-parallel")
    logits = 4096 * a.vocab
    # forward: 2 + 4 (cast) + 4 (max) + 8 (subtract) + 8 (exp) + 4 (sum) + 8 (divide) = 38 bytes per
    # logit instead of 10; backward 8 (multiply) + 6 (cast back) = 14 instead of 6: the head's GEMMs
    # are the same, so the difference is those bytes at the memory roofline (or slower)
    extra_bytes = logits * ((38 - 10) + (14 - 6))
    extra_s = (unfused.forward_s + unfused.input_grad_s) - (fused.forward_s + fused.input_grad_s)
    roofline_s = extra_bytes / (dev.spec.memory_bandwidth_gbps * 1e9)
    assert 0.95 * roofline_s <= extra_s <= 2 * roofline_s
    assert unfused.weight_grad_s == fused.weight_grad_s
    # and a plan on the megatron engine is slower than the same plan on nemo by about that, per micro-batch
    job = _job("llama-3-8b", gpus=8, gb=8, seq=4096)
    on = {eng: evaluate(Context.make(job), _plan(tp=8, micro_batch=1, grad_accum=8, engine=eng))
          for eng in ("megatron", "nemo")}
    assert on["megatron"].step_s > on["nemo"].step_s
    assert "unfused vocab-parallel" in on["megatron"].assumptions["loss"]
    assert on["nemo"].assumptions["loss"].startswith("cross-entropy as one fused kernel")


def test_collectives_run_in_the_slack_of_a_host_bound_pass() -> None:
    """NCCL collectives are asynchronous to the host: while eager Python issuing kernels is the
    bottleneck the GPU runs them in the gaps, so a pass costs the longer of kernels + collectives
    and the host's issue time, and only what goes past the host's time is exposed communication."""
    from whichgpu.measure.planner_validate import gpt_args
    from whichgpu.parallel.planner import _pass_time

    t, ex = _pass_time(1.0e-3, 3.0e-3, {"tp": 0.5e-3, "cp": 0.0, "ep": 0.0})
    assert t == pytest.approx(3.0e-3) and ex["tp"] == 0.0  # hidden in the host's slack
    t, ex = _pass_time(2.8e-3, 3.0e-3, {"tp": 0.3e-3, "cp": 0.1e-3, "ep": 0.0})
    assert t == pytest.approx(3.2e-3)
    assert ex["tp"] == pytest.approx(0.15e-3) and ex["cp"] == pytest.approx(0.05e-3)  # shared by time
    t, ex = _pass_time(4.0e-3, 3.0e-3, {"tp": 0.5e-3, "cp": 0.0, "ep": 0.0})
    assert t == pytest.approx(4.5e-3) and ex["tp"] == pytest.approx(0.5e-3)  # GPU-bound: all exposed

    # vTrain's GPT h1024 on a DGX A100 under eager Megatron: at micro-batch 1 per tp-2 rank the host
    # issuing kernels bounds every pass and the all-reduces cost nothing; at micro-batch 16 the GPU
    # does, and they show
    gpu, system = load_catalog().get("a100-sxm4-80gb"), load_systems().get("dgx-a100")
    job = Job("GPT h1024", gpt_args(1024, 12, 16, 50257, 1024), gpu, system, 2, 16, 1024, "fp16", "unfused", "fp16")
    ctx = Context.make(job)
    small = Plan(tp=2, dp=1, micro_batch=1, grad_accum=16, recompute="full", sharding="ddp", engine="megatron")
    large = Plan(tp=2, dp=1, micro_batch=16, grad_accum=1, recompute="full", sharding="ddp", engine="megatron")
    for p in (small, large):
        check_layout(job, p)
    assert evaluate(ctx, small).split["tp"] == 0.0
    assert evaluate(ctx, large).split["tp"] > 0.0


def test_moe_layouts_carry_the_measured_caveat_and_dense_ones_do_not() -> None:
    """The planner is optimistic for MoE (validate-plan --only moe): every MoE layout says so, with
    the measured range from parallel/moe_accuracy.toml; a dense layout carries no such entry."""
    from whichgpu.parallel.planner import moe_accuracy

    job = _job("qwen3-30b-a3b", gpus=8, gb=64, gpu="b200", system="hgx-b200")
    res = evaluate(Context.make(job), _plan(dp=8, ep=8, micro_batch=1, grad_accum=8))
    text = res.assumptions["moe"]
    q = moe_accuracy()
    assert "128 experts, top-8" in text and "over 8 GPUs" in text and "not calibrated for MoE" in text
    assert f"{q['p10']:.2f}-{q['p90']:.2f}x" in text and f"b200 {q['by_gpu']['b200']:.2f}x" in text
    assert 0 < q["p10"] <= q["p50"] <= q["p90"]
    dense = evaluate(Context.make(_job()), _plan(tp=8, pp=8, dp=1, micro_batch=1, grad_accum=128,
                                                 schedule="1f1b", sequence_parallel=True))
    assert "moe" not in dense.assumptions


def test_each_local_expert_is_a_gemm_kernel_the_host_issues() -> None:
    """Transformer Engine's GroupedLinear runs one GEMM per local expert: each grouped expert op is
    experts / ep kernels, so an eager host issues 16 per op at EP 8 of Qwen3-30B-A3B's 128 experts and
    2 at EP 64, and the GPU launches as many; the FLOPs and bytes do not depend on the split."""
    from whichgpu.parallel.layer import layer_cost
    from whichgpu.perf.device import Device
    from whichgpu.perf.params import load_params

    _, a, _ = planner_model("qwen3-30b-a3b")
    moe = next(i for i in range(a.layers) if a.is_moe(i))
    names = {"experts.up", "experts.up.dgrad", "experts.up.wgrad", "experts.down", "experts.down.dgrad",
             "experts.down.wgrad"}
    for ep in (1, 8, 64):
        ops = [o for part in layer_ops(a, moe, Shard(1, 4096, 1, 1, ep, False))[:3] for o in part]
        experts = [o for o in ops if o.name in names]
        assert len(experts) == 6 and all(o.kernels == a.experts // ep for o in experts)
        assert all(o.kernels == 1 for o in ops if o.name not in names and o.category == "matmul")
    dev = Device(load_catalog().get("b200"), load_params())
    host_s = 65e-6
    ep8, ep64 = (layer_cost(a, moe, Shard(1, 4096, 1, 1, ep, False), dev, host_s) for ep in (8, 64))
    # forward and input gradient: the up and down GEMMs, 16 kernels each at EP 8, 2 at EP 64
    assert ep8.forward_host_s - ep64.forward_host_s == pytest.approx(2 * (16 - 2) * host_s)
    assert ep8.input_grad_host_s - ep64.input_grad_host_s == pytest.approx(2 * (16 - 2) * host_s)
    assert ep8.flops_fwd == pytest.approx(ep64.flops_fwd)


def test_expert_tensor_parallelism_folds_expert_parallelism_over_tensor_parallel_ranks() -> None:
    """Megatron's MoE parallel folding: with etp 1 each expert stays whole and the expert-parallel group
    spans tensor- and data-parallel ranks (ep x etp divides tp x cp x dp). Each rank then runs
    T x top-k / tp rows at the full expert width where etp = tp runs T x top-k rows at 1/tp of it: the
    same FLOPs and expert weights per rank, a tp-th of the all-to-all bytes."""
    job = _job("qwen3-30b-a3b", gpus=16, gb=64, gpu="h100-sxm5-80gb", system="dgx-h100")
    a = job.args
    common = {"tp": 2, "dp": 8, "micro_batch": 1, "grad_accum": 8, "sequence_parallel": True}
    folded = _plan(ep=16, etp=1, **common)
    check_layout(job, folded)
    with pytest.raises(InputError, match="must divide tp x cp x dp") as e:
        check_layout(job, _plan(ep=16, **common))  # etp = tp: 16 x 2 over 16 ranks
    assert e.value.field == "ep"
    split = _plan(ep=8, **common)
    sh_fold = Shard(1, 4096, 2, 1, 16, True, etp=1)
    sh_split = Shard(1, 4096, 2, 1, 8, True)
    moe = next(i for i in range(a.layers) if a.is_moe(i))
    up_fold = next(o for o in layer_ops(a, moe, sh_fold)[0] if o.name == "experts.up")
    up_split = next(o for o in layer_ops(a, moe, sh_split)[0] if o.name == "experts.up")
    assert up_fold.flops == pytest.approx(up_split.flops)
    assert up_fold.mm is not None and up_split.mm is not None
    assert up_fold.mm[2] == 2 * up_split.mm[2]  # whole experts: twice the width ...
    assert up_fold.mm[0] * up_fold.mm[1] * 2 == pytest.approx(up_split.mm[0] * up_split.mm[1], rel=0.01)  # ... half the rows
    ctx = Context.make(job)
    r_fold, r_split = evaluate(ctx, folded), evaluate(ctx, split)
    assert r_fold.memory["weights"] == pytest.approx(r_split.memory["weights"], rel=1e-6)
    assert r_fold.comm_total["ep"] < r_split.comm_total["ep"]
    assert r_fold.to_dict()["etp"] == 1 and r_split.to_dict()["etp"] == 2


@pytest.mark.parametrize(("model", "plan", "text"), [
    ("llama-3-70b", {"tp": 8, "dp": 8, "etp": 1, "sequence_parallel": True}, "dense"),
    ("qwen3-30b-a3b", {"tp": 4, "dp": 16, "ep": 8, "etp": 3, "sequence_parallel": True}, "must divide tensor"),
    ("qwen3-30b-a3b", {"tp": 4, "dp": 16, "ep": 8, "etp": 1}, "needs sequence parallelism"),
])
def test_expert_tensor_parallelism_errors_name_the_field(model: str, plan: dict[str, object], text: str) -> None:
    with pytest.raises(InputError, match=text) as e:
        check_layout(_job(model), _plan(micro_batch=1, grad_accum=2, **plan))
    assert e.value.field == "etp"


def test_search_keeps_experts_whole_with_tensor_parallelism_unless_told() -> None:
    """With tp > 1 the search runs MoE experts whole (etp 1), as Megatron-Bridge's MoE recipes do;
    --etp fixes another split (tp's, Megatron's default, is etp None)."""
    from whichgpu.parallel.search import candidates

    job = _job("qwen3-30b-a3b", gpus=16, gb=64)
    moe = {(p.tp, p.etp) for p in candidates(job, Fixed(), _plan())}
    assert (2, 1) in moe and (1, None) in moe and (2, None) not in moe and (1, 1) not in moe
    eps = {p.ep for p in candidates(job, Fixed(tp=2), _plan()) if p.dp == 8}
    assert 16 in eps  # folded over the tensor-parallel ranks: more than dp x cp = 8
    told = {(p.tp, p.etp) for p in candidates(job, Fixed(tp=4, etp=4), _plan())}
    assert told == {(4, None)}
    dense = {p.etp for p in candidates(_job("llama-3-8b", gpus=16, gb=64), Fixed(), _plan())}
    assert dense == {None}
    with pytest.raises(InputError) as e:
        _plan(etp=0).validate()
    assert e.value.field == "etp"


def test_closest_layouts_that_do_not_fit_drop_variants_needing_the_same_memory() -> None:
    """Selective recomputation under flash attention keeps no score matrix to drop: a layout that does
    not fit with it needs what it needs without, only slower. The closest non-fitting list keeps the
    faster of such twins, and layouts whose memory differs."""
    from whichgpu.parallel.search import _closest

    job = _job("llama-3-70b", gpus=8, gb=64, seq=8192)
    ctx = Context.make(job)
    none, selective, full = (evaluate(ctx, _plan(tp=8, dp=1, micro_batch=1, grad_accum=64, recompute=r))
                             for r in ("none", "selective", "full"))
    assert not none.fits and not selective.fits
    assert selective.peak_memory_bytes == none.peak_memory_bytes and selective.step_s > none.step_s
    assert full.peak_memory_bytes < none.peak_memory_bytes
    kept = _closest([selective, none, full], top=5)
    assert [r.plan.recompute for r in kept] == [full.plan.recompute, "none"]
    assert len(_closest([selective, none, full], top=1)) == 1


def _every_layout(job: Job, fixed: Fixed) -> list:
    """Every layout `search` considers, each evaluated in full (no bound)."""
    from whichgpu.parallel.search import _states_floor, candidates

    ctx = Context.make(job)
    total = float(job.args.params()[0])
    out = []
    for plan in candidates(job, fixed, Plan(engine="megatron")):
        try:
            check_layout(job, plan)
        except InputError:
            continue
        if _states_floor(ctx, plan, total) <= job.gpu.usable_memory_bytes:
            out.append(evaluate(ctx, plan))
    return out


@pytest.mark.parametrize(("model", "gpus", "gb", "seq", "gpu", "system", "top"), [
    ("llama-3-8b", 16, 128, 8192, "a100-sxm4-40gb", "dgx-a100", 10),  # fits and no-fits, pp up to 16
    ("llama-3-70b", 32, 256, 4096, "h100-sxm5-80gb", "dgx-h100", 3),
    ("mixtral-8x7b", 16, 64, 4096, "h100-sxm5-80gb", "dgx-h100", 5),  # expert parallelism
])
def test_the_bounded_search_ranks_exactly_as_evaluating_every_layout(model: str, gpus: int, gb: int, seq: int,
                                                                     gpu: str, system: str, top: int) -> None:
    """The search times in full only the layouts whose lower bound may still reach its top; its
    answer (the fastest that fit, ties in search order, and the closest that do not) is the one
    evaluating every layout gives, and the bound never exceeds the step time."""
    from whichgpu.parallel.planner import score
    from whichgpu.parallel.search import _closest

    job = _job(model, gpus=gpus, gb=gb, seq=seq, gpu=gpu, system=system)
    res = search(job, Fixed(), Plan(engine="megatron"), top=top)
    every = _every_layout(job, Fixed())
    fits = sorted((r for r in every if r.fits), key=lambda r: r.step_s)[:top]
    closest = _closest([r for r in every if not r.fits], top)
    assert [(r.plan, r.step_s) for r in res.best] == [(r.plan, r.step_s) for r in fits]
    assert [(r.plan, r.step_s) for r in res.not_fitting] == [(r.plan, r.step_s) for r in closest]
    assert res.evaluated == len(every)
    assert 0 < res.simulated < res.evaluated / 4  # most layouts are bounded out
    ctx = Context.make(job)
    for r in every[::7]:
        assert score(ctx, r.plan).lower_s <= r.step_s * (1 + 1e-12), r.plan


def test_the_bounded_search_keeps_the_fastest_of_each_split_when_asked() -> None:
    # quick_best's first pass: the fastest layout of each (tp, pp, cp, ep) split, fastest first, as
    # ranking every layout that fits and keeping the first of each split gives
    from whichgpu.parallel.fallback import EVERY

    def split(p: Plan) -> tuple[int, int, int, int]:
        return (p.tp, p.pp, p.cp, p.ep)

    job = _job("llama-3-70b", gpus=32, gb=256, seq=4096)
    every = search(job, Fixed(schedule="1f1b"), Plan(engine="megatron"), top=EVERY)
    firsts: list[tuple[Plan, float]] = []
    seen: set[tuple[int, int, int, int]] = set()
    for r in every.best:
        if split(r.plan) not in seen:
            seen.add(split(r.plan))
            firsts.append((r.plan, r.step_s))
    for top in (1, 3, 5):
        got = search(job, Fixed(schedule="1f1b"), Plan(engine="megatron"), top=top, distinct=split)
        assert [(r.plan, r.step_s) for r in got.best] == firsts[:top]
        assert got.simulated < every.simulated


def test_the_bounded_search_keeps_a_split_whose_later_layout_is_faster() -> None:
    # a layout of split "a" with a low bound but a slow step, then one with a higher bound and the
    # fastest step: "a" must be ranked by the second (the best keys rebuilt), "c" bounded out
    from types import SimpleNamespace

    from whichgpu.parallel.planner import Scored
    from whichgpu.parallel.search import _fastest

    def scored(key: str, lower: float, step: float) -> Scored:
        result = SimpleNamespace(plan=key, step_s=step)
        return Scored(key, True, 0.0, lower, lambda _t, r=result: r)  # type: ignore[arg-type,misc]

    fits = [scored("a", 1.0, 5.0), scored("b", 2.0, 3.0), scored("a", 2.5, 2.0), scored("c", 4.0, 4.5)]
    best, timed = _fastest(fits, 2, distinct=lambda p: p)
    assert [(r.plan, r.step_s) for r in best] == [("a", 2.0), ("b", 3.0)]
    assert timed == 3  # "c"'s bound (4.0) is over the second step found (3.0)
    best, _ = _fastest(fits, 3, distinct=lambda p: p)
    assert [(r.plan, r.step_s) for r in best] == [("a", 2.0), ("b", 3.0), ("c", 4.5)]
    best, _ = _fastest(fits, 3)  # every layout its own key
    assert [(r.plan, r.step_s) for r in best] == [("a", 2.0), ("b", 3.0), ("c", 4.5)]
