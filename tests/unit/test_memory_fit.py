"""The largest batch that fits (search) and the suggestions when a configuration does not fit."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from whichgpu.errors import WhichGPUError
from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.spec import GpuSpec
from whichgpu.memory import memory_estimate
from whichgpu.memory.allowances import CUDA_CONTEXT_BYTES, cublas_workspace_bytes
from whichgpu.memory.estimate import capacity_bytes
from whichgpu.memory.fit import fit, max_batch
from whichgpu.parallel.plan import Plan
from whichgpu.report.flags import flags
from whichgpu.workload.spec import WorkloadSpec
from whichgpu.workload.trace import MemEvent, Op, Trace

pytestmark = pytest.mark.usefixtures("isolated_cache")  # the module's own trace cache (tests/conftest.py)


@pytest.fixture(scope="module")
def cat() -> Any:
    return load_catalog(None)


def synthetic(batch: int, per_sample: int = 100_000_000, weights: int = 2_000_000_000) -> Trace:
    """An inference step of `weights` bytes of FP16 parameters and one activation of
    `per_sample` bytes per sample."""
    ops = [Op("aten.mm", "matmul", "forward", "", "fp16", 0.0, 0.0, 0.0)]
    ev = [MemEvent(0, per_sample * batch, 1, "activation"), MemEvent(0, -per_sample * batch, 1, "activation")]
    return Trace(model="toy", task="infer", phase="full", batch_size=batch, seq_len=None, image_size=None,
                 context=None, precision="fp16", optimizer="none", sparsity="none", samples=batch, tokens=0,
                 params=weights // 2, trainable_params=0, param_bytes=weights, buffer_bytes=0, input_bytes=0,
                 ops=ops, mem_events=ev)


@pytest.mark.parametrize("gpu", ["rtx-4090", "h100-sxm5-80gb", "t4", "mi300x"])
def test_max_batch_search_is_exact_and_cheap(gpu: str, cat: Any) -> None:
    g: GpuSpec = cat.get(gpu)
    calls: list[int] = []

    def trace_for(batch_size: int) -> Trace:
        calls.append(batch_size)
        return synthetic(batch_size)

    plan = Plan()
    res = max_batch(trace_for, g, plan)
    # total(b) = weights + b x 100 MB x (1 + 10% fragmentation) + cuBLAS workspace + CUDA context
    fixed = 2e9 + cublas_workspace_bytes(g) + CUDA_CONTEXT_BYTES
    expected = int((capacity_bytes(g) - fixed) // (1e8 * 1.1))
    assert res.max_batch == expected
    assert res.estimate is not None and res.estimate.fits
    assert not memory_estimate(synthetic(expected + 1), g, plan).fits
    assert len(set(calls)) <= 5  # memory is affine in the batch: the line lands on it


def test_max_batch_zero_when_nothing_fits(cat: Any) -> None:
    res = max_batch(lambda batch_size: synthetic(batch_size, weights=10**12), cat.get("rtx-4090"), Plan())
    assert res.max_batch == 0 and res.estimate is None


def _spec_traces(spec: WorkloadSpec) -> Any:
    pytest.importorskip("torch")
    from whichgpu.workload.api import get_trace

    def trace_for(**changes: Any) -> Trace:
        return get_trace(replace(spec, **changes))

    return trace_for


def test_fit_report_for_a_model_that_fits(cat: Any) -> None:
    spec = WorkloadSpec("gpt2", batch_size=8, seq_len=1024)
    tf = _spec_traces(spec)
    r = fit(tf(), cat.get("rtx-4090"), Plan(), tf)
    assert r.estimate.fits and not r.suggestions and not r.never_fits
    assert r.batch is not None and r.batch.max_batch > 8
    over = memory_estimate(tf(batch_size=r.batch.max_batch + 1), cat.get("rtx-4090"), Plan())
    assert not over.fits


def test_suggestions_when_llama_7b_does_not_fit_a_24gb_card(cat: Any) -> None:
    spec = WorkloadSpec("llama-2-7b", batch_size=1, seq_len=512)
    tf = _spec_traces(spec)
    g = cat.get("rtx-4090")
    r = fit(tf(), g, Plan(), tf)
    assert not r.estimate.fits and r.never_fits
    by = {flags(s.changes): s for s in r.suggestions}
    # each suggestion reports what it saves against the configuration as given
    for s in r.suggestions:
        assert s.saves_bytes == pytest.approx(r.estimate.total_bytes - s.total_bytes)
        assert s.fits == (s.total_bytes <= r.estimate.capacity_bytes)
    assert by["--finetune qlora"].fits  # 7B in 4-bit with LoRA adapters fits in 24 GB
    assert not by["--optimizer adamw-8bit"].fits
    zero3 = next(s for s in r.suggestions if flags(s.changes).startswith("--sharding zero3"))
    assert zero3.fits and zero3.gpus > 1
    # one GPU fewer does not fit
    fewer = memory_estimate(tf(), g, Plan(dp=zero3.gpus - 1, sharding="zero3"))
    assert zero3.gpus == 2 or not fewer.fits
    assert r.suggestions[0].fits  # fitting changes come first


def test_checkpointing_and_sequence_suggestions(cat: Any) -> None:
    spec = WorkloadSpec("gpt2", batch_size=24, seq_len=1024)
    tf = _spec_traces(spec)
    r = fit(tf(), cat.get("rtx-4090"), Plan(), tf)
    assert not r.estimate.fits
    hows = {flags(s.changes): s for s in r.suggestions}
    assert hows["--checkpointing full"].fits
    assert hows["--checkpointing full"].saves_bytes > hows["--checkpointing selective"].saves_bytes > 0
    seq = next(s for s in r.suggestions if flags(s.changes).startswith("--seq-len"))
    n = int(flags(seq.changes).split()[-1])
    assert seq.fits and n < 1024 and n % 64 == 0
    assert not memory_estimate(tf(seq_len=n + 64), cat.get("rtx-4090"), Plan()).fits
    bs = next(s for s in r.suggestions if flags(s.changes).startswith("--batch-size"))
    assert r.batch is not None and flags(bs.changes) == f"--batch-size {r.batch.max_batch}" and "accumulation" in bs.note


def test_plan_validation() -> None:
    t = synthetic(1)
    g = load_catalog(None).get("h100")
    for plan in (Plan(dp=0), Plan(sharding="zero4"), Plan(recompute="everything"),  # type: ignore[arg-type]
                 Plan(sharding="zero3"), Plan(optimizer_state_bits=4)):
        with pytest.raises(WhichGPUError):
            memory_estimate(t, g, plan)
