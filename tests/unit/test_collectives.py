"""All-reduce algorithms: ring, tree (across nodes) and NVLS (switched NVLink 4/5 domains), the
fastest of which NCCL runs; NVLS factors from the measured bus bandwidths in kernels.csv; and the
all-reduce times a system file carries where they were measured on that machine."""

from __future__ import annotations

import dataclasses

import pytest

from whichgpu.hardware.system import load_systems
from whichgpu.parallel.comm import (
    NVLS_SPEEDUP,
    RING_ALLREDUCE_GBPS,
    all_to_all_time,
    allreduce_time,
    collective_time,
    measured_allreduce_s,
    node_link,
    nvls_speedup,
    ring_allreduce_cap,
    ring_link,
)
from whichgpu.perf.params import load_params


@pytest.fixture(scope="module")
def systems():  # type: ignore[no-untyped-def]
    return load_systems()


def test_nvls_only_on_switched_nvlink4_and_5(systems) -> None:  # type: ignore[no-untyped-def]
    assert nvls_speedup(systems.get("dgx-h100"), 8) == pytest.approx(480.0 / 367.2)
    assert nvls_speedup(systems.get("hgx-b200"), 8) == pytest.approx(838.0 / 682.2)
    assert nvls_speedup(systems.get("dgx-a100"), 8) == 1.0  # NVLink 3: no NVLS
    assert nvls_speedup(systems.get("dgx-h100"), 16) == 1.0  # past the NVLink domain
    assert nvls_speedup(systems.get("dgx-h100"), 2) == 1.0


def test_allreduce_inside_a_node_takes_nvls_where_it_exists(systems) -> None:  # type: ignore[no-untyped-def]
    p = load_params()
    big = 4e9
    for sid, algo in (("dgx-h100", "NVLS"), ("dgx-a100", "ring")):
        # (the DGX A100 without its measured all-reduce tables: the analytic model's choice)
        s = dataclasses.replace(systems.get(sid), measured_allreduce=())
        link = ring_link(s, 8, p)
        t, got = allreduce_time(big, 8, link, 1e9, s)
        ring = 2 * 7 / 8 * big / link.bytes_per_s
        assert got == algo
        want = ring / NVLS_SPEEDUP["nvlink4"] if algo == "NVLS" else ring
        assert t == pytest.approx(want, rel=0.01)
    # tensor-parallel all-reduce over the same fabric: NVLS on H100, ring on A100
    h = systems.get("dgx-h100")
    base = 2 * 7 / 8 * 64e6 / node_link(h, 8, p).bytes_per_s
    assert collective_time("all_reduce", 64e6, 8, h, p) == pytest.approx(
        3 * p.tp_collective_us * 1e-6 + base / NVLS_SPEEDUP["nvlink4"])  # log2(8) latency rounds
    assert collective_time("all_gather", 64e6, 8, h, p) > collective_time("all_reduce", 32e6, 8, h, p)


def test_nccls_ring_on_blackwell_nvlink_runs_at_the_measured_ll128_rate(systems) -> None:  # type: ignore[no-untyped-def]
    # NCCL's AUTO tuning runs Ring/LL128 on B200 NVLink at 382-386 GB/s bus bandwidth (nccl PR 2343),
    # about half of NVLink 5's ring at 900 GB/s x nccl_efficiency: a ring all-reduce of 128 MiB over
    # 2, 4 or 8 B200 moves 2 (n-1)/n of it at 384 GB/s; NVLS (where the engine keeps it) is not capped
    p = load_params()
    b = systems.get("hgx-b200")
    assert RING_ALLREDUCE_GBPS == {"nvlink5": 384.0}
    assert ring_allreduce_cap(b, 8) == 384e9 < node_link(b, 8, p).bytes_per_s
    msg = 128 * 2**20
    for n in (2, 4, 8):
        lat = p.tp_collective_us * 1e-6 * {2: 1, 4: 2, 8: 3}[n]
        assert collective_time("all_reduce", msg, n, b, p, nvls=False) == pytest.approx(
            lat + 2 * (n - 1) / n * msg / 384e9)
    nvls = collective_time("all_reduce", msg, 8, b, p, nvls=True)
    assert nvls == pytest.approx(3 * p.tp_collective_us * 1e-6
                                 + 2 * 7 / 8 * msg / (node_link(b, 8, p).bytes_per_s * NVLS_SPEEDUP["nvlink5"]))
    assert nvls < collective_time("all_reduce", msg, 8, b, p, nvls=False) / 2
    # measured on Blackwell NVLink only: Hopper's ring and the all-gather are as before
    h = systems.get("dgx-h100")
    assert ring_allreduce_cap(h, 8) == float("inf") and ring_allreduce_cap(systems.get("dgx-a100"), 8) == float("inf")
    assert collective_time("all_gather", msg, 8, b, p, nvls=False) == pytest.approx(
        3 * p.tp_collective_us * 1e-6 + 7 * msg / node_link(b, 8, p).bytes_per_s)


def test_serving_engines_that_turn_nvls_off_all_reduce_over_the_ring(systems) -> None:  # type: ignore[no-untyped-def]
    # vLLM set NCCL_CUMEM_ENABLE=0 until September 2025 (NVLS needs cuMem) and SGLang sets it and
    # NCCL_NVLS_ENABLE=0; TensorRT-LLM keeps NCCL's default
    from whichgpu.hardware.catalog import load_catalog
    from whichgpu.hardware.engine import get_engine
    from whichgpu.perf.device import Device
    from whichgpu.serving.step import StepModel
    from whichgpu.workload.zoo.llm.args import DecoderArgs

    assert not get_engine("vllm").nvls and not get_engine("sglang").nvls and get_engine("tensorrt-llm").nvls
    p = load_params()
    h = systems.get("dgx-h100")
    ring = 3 * p.tp_collective_us * 1e-6 + 2 * 7 / 8 * 64e6 / node_link(h, 8, p).bytes_per_s
    assert collective_time("all_reduce", 64e6, 8, h, p, nvls=False) == pytest.approx(ring)
    # the serving step's all-reduce of 8,192 tokens x 8,192 hidden (16-bit, 128 MiB) follows the engine
    args = DecoderArgs("llama", hidden=8192, layers=2, heads=64, kv_heads=8, intermediate=28672, vocab=128256,
                       max_positions=8192)
    dev = Device(load_catalog().get("h100-sxm5-80gb"), p)
    msg = 8192 * 8192 * 2.0
    for eng, nvls in (("vllm", False), ("sglang", False), ("tensorrt-llm", True)):
        step = StepModel(args, dev, get_engine(eng), h, tp=8)
        assert step._all_reduce_s(8192) == pytest.approx(collective_time("all_reduce", msg, 8, h, p, nvls=nvls))
    assert StepModel(args, dev, get_engine("vllm"), h, tp=8)._all_reduce_s(8192) > \
        StepModel(args, dev, get_engine("tensorrt-llm"), h, tp=8)._all_reduce_s(8192) * 1.2
    # vLLM's own symmetric-memory all-reduce reduces in the switch (multimem) over 6-8 GPUs up to
    # 64 MiB: 2,048 tokens (32 MiB) at TP 8 get NVLS's pace, at TP 4 the ring's; SGLang's is opt-in
    vllm, sgl = get_engine("vllm"), get_engine("sglang")
    assert vllm.nvls_for(8, 32 * 2**20) and not vllm.nvls_for(8, 65 * 2**20) and not vllm.nvls_for(4, 32 * 2**20)
    assert not sgl.nvls_for(8, 32 * 2**20)
    assert StepModel(args, dev, vllm, h, tp=8)._all_reduce_s(2048) == pytest.approx(
        collective_time("all_reduce", 2048 * 8192 * 2.0, 8, h, p, nvls=True))


def test_tree_wins_at_scale_for_small_messages_and_ties_for_large(systems) -> None:  # type: ignore[no-untyped-def]
    s = systems.get("dgx-h100")
    p = load_params()
    n = 512  # 64 nodes, one GPU per node in the ring (tp 8 inside)
    link = ring_link(s, n, p, span=n * 8)
    t_small, algo = allreduce_time(1e6, n, link, 1e9, s, span=n * 8)
    ring_small = 2 * (n - 1) / n * 1e6 / link.bytes_per_s + 2 * (n - 1) * link.step_latency_s
    assert algo == "tree" and t_small < ring_small / 5
    t_big, _ = allreduce_time(8e9, n, link, 8e9, s, span=n * 8)
    assert t_big == pytest.approx(2 * (n - 1) / n * 8e9 / link.bytes_per_s, rel=0.02)
    assert allreduce_time(0.0, n, link, 1e9, s)[0] == 0.0


def test_all_to_all_across_nodes_leaves_through_each_gpus_own_rail(systems) -> None:  # type: ignore[no-untyped-def]
    p = load_params()
    b200, nvl72 = systems.get("hgx-b200"), systems.get("gb200-nvl72")
    msg = 400e6  # one dispatch: each rank's tokens x top-k x hidden, 16-bit
    # inside a node: (n-1)/n of it over the scale-up link, one latency step per peer
    link = node_link(b200, 8, p)
    assert all_to_all_time(msg, 8, b200, p) == pytest.approx(7 / 8 * msg / link.bytes_per_s + 7 * link.step_latency_s)
    # 64 ranks over 8 nodes: 56/64 of the message leaves through the GPU's 50 GB/s rail (the NVLink
    # share to its 7 node peers runs meanwhile), not over the node's 8 rails as a ring's bus
    so = b200.scaleout
    want = 56 / 64 * msg / (so.gbps_per_gpu * p.nccl_efficiency * 1e9) + 63 * so.latency_us * 1e-6
    t64 = all_to_all_time(msg, 64, b200, p)
    assert t64 == pytest.approx(want)
    assert t64 > 7 * 63 / 64 * msg / ring_link(b200, 64, p).bytes_per_s
    # the same 64 ranks inside one NVL72 NVLink domain stay on NVLink
    nv = node_link(nvl72, 64, p)
    assert all_to_all_time(msg, 64, nvl72, p) == pytest.approx(63 / 64 * msg / nv.bytes_per_s + 63 * nv.step_latency_s)
    # EP 8 spread over 16 GPUs (expert tensor parallelism 2): 4 ranks per node, 4 elsewhere
    t8 = all_to_all_time(msg, 8, b200, p, span=16)
    assert t8 == pytest.approx(4 / 8 * msg / (so.gbps_per_gpu * p.nccl_efficiency * 1e9) + 7 * so.latency_us * 1e-6)


def test_context_parallel_hops_across_nodes_take_one_gpus_rail(systems) -> None:  # type: ignore[no-untyped-def]
    from whichgpu.parallel.comm import neighbour_link

    p = load_params()
    h = systems.get("dgx-h100")
    rail = h.scaleout.gbps_per_gpu * p.nccl_efficiency * 1e9
    # tp 2 x cp 8 = 16 GPUs over 2 nodes: 4 cp ranks a node; the two hops between the nodes each
    # send a whole K/V chunk through one GPU's rail, where a ring collective stripes over 4 rails
    assert neighbour_link(h, 8, p, span=16).bytes_per_s == pytest.approx(rail)
    assert ring_link(h, 8, p, span=16).bytes_per_s == pytest.approx(4 * rail)
    # inside a node: the scale-up link, as a ring's
    assert neighbour_link(h, 4, p, span=8).bytes_per_s == node_link(h, 4, p).bytes_per_s


MIB = 2**20


def test_measured_all_reduce_times_stand_in_for_the_link_model_where_measured(systems) -> None:  # type: ignore[no-untyped-def]
    a100, h100, params = systems.get("dgx-a100"), systems.get("dgx-h100"), load_params()
    # at a measured size the measured time (dgx-a100.toml: vTrain's nccl-tests tables); between two, linear
    assert measured_allreduce_s(a100, 2, 8 * MIB) == pytest.approx(86.9e-6)
    assert measured_allreduce_s(a100, 8, 12 * MIB) == pytest.approx((134.3 + 232.4) / 2 * 1e-6)
    # below the smallest size the smallest's time; above the largest the last segment's rate
    assert measured_allreduce_s(a100, 4, 1000) == pytest.approx(51.4e-6)
    assert measured_allreduce_s(a100, 2, 512 * MIB) == pytest.approx((1455.8 + 256 * (1455.8 - 763.6) / 128) * 1e-6)
    # no table for the group size or the system: None, the analytic model stands
    assert measured_allreduce_s(a100, 3, 8 * MIB) is None and measured_allreduce_s(h100, 8, 8 * MIB) is None
    # the analytic model's time is a quarter to four fifths of the measured one at tensor-parallel sizes
    for n in (2, 4, 8):
        for size in (2, 8, 32):
            ratio = collective_time("all_reduce", size * MIB, n, a100, params) / measured_allreduce_s(a100, n, size * MIB)
            assert 0.25 < ratio < 0.85, (n, size, ratio)
    # data-parallel all-reduces inside one node take them per bucket; not with peer-to-peer off, nor across nodes
    link = node_link(a100, 8, params)
    t, algo = allreduce_time(64 * MIB, 8, link, 16 * MIB, a100)
    assert algo == "measured" and t == pytest.approx(4 * 232.4e-6)
    assert allreduce_time(64 * MIB, 8, link, 16 * MIB, a100, p2p=False)[1] != "measured"
    assert allreduce_time(64 * MIB, 8, ring_link(a100, 8, params, span=16), 16 * MIB, a100, span=16)[1] != "measured"


def test_planner_and_step_model_time_a100_all_reduces_from_the_measured_tables(systems) -> None:  # type: ignore[no-untyped-def]
    from whichgpu.hardware.catalog import load_catalog
    from whichgpu.measure.planner_validate import gpt_args
    from whichgpu.parallel.comm import allreduce
    from whichgpu.parallel.plan import Plan
    from whichgpu.parallel.planner import Context, Job, evaluate

    a100 = systems.get("dgx-a100")
    bare = dataclasses.replace(a100, measured_allreduce=())
    gpu = load_catalog().get("a100-sxm4-80gb")
    plan = Plan(tp=2, dp=4, micro_batch=2, grad_accum=2, recompute="full", sharding="ddp", comm_overlap=False,
                engine="megatron")
    out = {}
    for s in (a100, bare):
        job = Job("gpt", gpt_args(2048, 4, 16, 50257, 1024), gpu, s, 8, 16, 1024, "fp16", "unfused", "fp16")
        out[s is a100] = evaluate(Context.make(job), plan)
    # 4 layers x 3 passes (full recomputation) x 2 all-reduces x 2 micro-batches of 2 x 1024 x 2048 x 2 bytes = 8 MiB
    assert out[True].comm_total["tp"] == pytest.approx(4 * 3 * 2 * 2 * 86.9e-6)
    assert out[True].comm_total["tp"] > 1.7 * out[False].comm_total["tp"]
    assert "measured on dgx-a100" in out[True].assumptions["tensor_parallel"]
    assert "measured" not in out[False].assumptions["tensor_parallel"]
    # the single-GPU step model's data-parallel all-reduce too (its buckets)
    ddp = Plan(dp=8, bucket_mb=25.0)
    got = allreduce(400e6, a100, ddp, load_params(), 0.0)
    assert got.total_s == pytest.approx(16 * measured_allreduce_s(a100, 8, 25e6)) and "measured" in got.link
    assert allreduce(400e6, bare, ddp, load_params(), 0.0).total_s < got.total_s


def test_reduce_scatter_and_all_gather_take_half_the_measured_all_reduce(systems) -> None:  # type: ignore[no-untyped-def]
    from whichgpu.parallel.sharding import ring_collective

    a100, params = systems.get("dgx-a100"), load_params()
    link = node_link(a100, 8, params)
    # NCCL's ring all-reduce is a reduce-scatter then an all-gather of the buffer: each half its time
    assert ring_collective(64 * MIB, 8, link, 16 * MIB, a100) == pytest.approx(4 * 232.4e-6 / 2)
    analytic = ring_collective(64 * MIB, 8, link, 16 * MIB)
    assert analytic == ring_collective(64 * MIB, 8, link, 16 * MIB, a100, p2p=False)
    assert analytic == ring_collective(64 * MIB, 8, link, 16 * MIB, a100, span=16)  # across nodes: the link model
    assert analytic < ring_collective(64 * MIB, 8, link, 16 * MIB, a100)
