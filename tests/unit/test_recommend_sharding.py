"""ZeRO / FSDP communication (parallel/sharding.py), torch-free, on hand-built traces."""

from __future__ import annotations

from dataclasses import replace

import pytest

from whichgpu.errors import WhichGPUError
from whichgpu.hardware.catalog import load_catalog
from whichgpu.parallel.plan import Plan
from whichgpu.parallel.sharding import gathered_param_bytes, traffic_bytes
from whichgpu.perf import estimate
from whichgpu.perf.params import load_params
from whichgpu.workload.trace import Op, Trace

CAT = load_catalog()
A100 = CAT.get("A100 SXM4 80GB")


def matmul(m: int, n: int, k: int, phase: str = "forward") -> Op:
    return Op("aten.mm", "matmul", phase, "", "bf16", 2.0 * m * n * k, 2.0 * (m * k + k * n), 2.0 * m * n,
              mm=(1, m, n, k))


def train_trace(params: int, precision: str = "bf16", trainable: int | None = None, finetune: str = "full") -> Trace:
    ops = [matmul(4096, 4096, 4096), matmul(4096, 4096, 8192, "backward")]
    return Trace(model="t", task="train", phase="full", batch_size=1, seq_len=None, image_size=None, context=None,
                 precision=precision, optimizer="adamw", sparsity="none", samples=1, tokens=0, params=params,
                 trainable_params=params if trainable is None else trainable, param_bytes=2 * params,
                 buffer_bytes=0, input_bytes=0, ops=ops, finetune=finetune)


def test_traffic_golden_numbers() -> None:
    # 4 GPUs, P = G = 1 GB: DDP all-reduce 2 * 3/4 * 1 GB = 1.5 GB; ZeRO-3 3/4 * (2 + 1) GB = 2.25 GB
    assert traffic_bytes("ddp", 4, 1e9, 1e9) == pytest.approx(1.5e9)
    assert traffic_bytes("zero2", 4, 1e9, 1e9) == pytest.approx(1.5e9)
    assert traffic_bytes("fsdp-grad-op", 4, 1e9, 1e9) == pytest.approx(1.5e9)
    assert traffic_bytes("zero3", 4, 1e9, 1e9) == pytest.approx(2.25e9)
    assert traffic_bytes("fsdp-full", 4, 1e9, 1e9) / traffic_bytes("ddp", 4, 1e9, 1e9) == pytest.approx(1.5)
    assert traffic_bytes("zero3", 1, 1e9, 1e9) == 0.0


def test_lora_under_zero3_gathers_the_frozen_base() -> None:
    # 8B parameters, 20M trainable: the gathers of the 16 GB base dominate the 40 MB of gradients
    t = train_trace(8_000_000_000, trainable=20_000_000, finetune="lora")
    p = gathered_param_bytes(t)
    assert p == pytest.approx(16e9)
    assert traffic_bytes("zero3", 8, p, 20e6 * 2) > 100 * traffic_bytes("ddp", 8, p, 20e6 * 2)


def test_zero3_estimate_is_one_and_a_half_times_ddp_traffic() -> None:
    t = train_trace(2_000_000_000)  # pure bf16: P = G = 4 GB
    ddp = estimate(t, A100, Plan(dp=8))
    z3 = estimate(t, A100, Plan(dp=8, sharding="zero3"))
    z2 = estimate(t, A100, Plan(dp=8, sharding="zero2"))
    # latency terms are a few ms against ~60 ms of transfer: within 2%
    assert z3.comm_total_s / ddp.comm_total_s == pytest.approx(1.5, rel=0.02)
    assert z2.comm_total_s == pytest.approx(ddp.comm_total_s, rel=1e-9)
    bus = A100.scaleup_gbps_per_direction * load_params().nccl_efficiency * 1e9
    assert z3.comm_total_s >= 3 * 7 / 8 * 4e9 / bus
    assert any("ZeRO-3" in n for n in z3.notes) and not any("ZeRO" in n for n in ddp.notes)
    assert z3.step_s >= ddp.step_s


def test_sharding_on_one_gpu_costs_nothing() -> None:
    t = train_trace(1_000_000_000)
    assert estimate(t, A100, Plan(dp=1, sharding="zero3")).comm_total_s == 0.0


def test_zero3_communicates_every_micro_batch_ddp_once_per_step() -> None:
    t = train_trace(1_000_000_000)
    z3 = [estimate(t, A100, Plan(dp=4, sharding="zero3", grad_accum=a)).comm_total_s for a in (1, 4)]
    ddp = [estimate(t, A100, Plan(dp=4, grad_accum=a)).comm_total_s for a in (1, 4)]
    assert z3[1] == pytest.approx(z3[0])  # per micro-batch: the gathers repeat
    assert ddp[1] == pytest.approx(ddp[0] / 4)  # all-reduce once per optimizer step


def test_unknown_sharding_is_a_one_line_error() -> None:
    with pytest.raises(WhichGPUError, match="unknown sharding 'zero4'"):
        replace(Plan(), sharding="zero4").validate()  # type: ignore[arg-type]
