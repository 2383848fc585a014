"""Recommend on synthetic workloads and cards: ranking invariants, layouts, picks (torch-free, fast)."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whichgpu.errors import InputError
from whichgpu.hardware.catalog import Catalog, load_catalog
from whichgpu.hardware.spec import GpuSpec, Price
from whichgpu.memory import memory_estimate
from whichgpu.parallel.plan import Plan
from whichgpu.recommend import Job, Recommendation, Request, Workload, recommend
from whichgpu.recommend.cost import CostModel
from whichgpu.recommend.prices import UserPrice
from whichgpu.recommend.search import Tracer
from whichgpu.workload.spec import WorkloadSpec
from whichgpu.workload.trace import MemEvent, Op, Trace

CAT = load_catalog()
TODAY = dt.date(2026, 11, 22)
GB = 1e9


def toy_trace(spec: WorkloadSpec, params: float = 1e9, act_per_sample: float = 1e9) -> Trace:
    """One matmul forward (and its backward and an optimizer step when training); activations of
    `act_per_sample` bytes per sample; 16-bit parameters and gradients."""
    b = spec.batch_size or 1
    prec = spec.precision
    dtype = "fp16" if "fp16" in prec else ("fp32" if prec == "fp32" else "bf16")
    m = 4096 * b
    mm = Op("aten.mm", "matmul", "forward", "", dtype, 2.0 * m * 4096 * 4096, 2.0 * (m * 4096 + 4096 * 4096),
            2.0 * m * 4096, mm=(1, m, 4096, 4096))
    ops = [mm]
    ev = [MemEvent(0, int(act_per_sample * b), 1, "activation")]
    train = spec.task == "train"
    if train:
        ops.append(replace(mm, phase="backward", flops=2 * mm.flops))
        ops.append(Op("adamw", "optimizer", "optimizer", "", "fp32", 10 * params, 16 * params, 16 * params))
        ev += [MemEvent(1, int(2 * params), 2, "grad"), MemEvent(1, -int(act_per_sample * b), 1, "activation")]
    else:
        ev.append(MemEvent(0, -int(act_per_sample * b), 1, "activation"))
    return Trace(model="toy", task=spec.task, phase="full", batch_size=b, seq_len=None, image_size=None,
                 context=None, precision=prec, optimizer="adamw" if train else "none", sparsity="none", samples=b,
                 tokens=0, params=int(params), trainable_params=int(params) if train else 0,
                 param_bytes=int(2 * params), buffer_bytes=0, input_bytes=0, ops=ops, mem_events=ev)


def toy_workload(task: str = "infer", batch: int = 8, precision: str = "auto") -> Workload:
    return Workload(f"toy {task}", WorkloadSpec("toy", task=task, batch_size=batch, precision=precision),
                    unit="samples/s")


def card(base: str, gid: str, speed: float = 1.0, memory_gb: float | None = None, street: float | None = None,
         cloud: float | None = None, tdp: float | None = None) -> GpuSpec:
    g = CAT.get(base)
    return replace(g, id=gid, name=f"Card {gid}", aliases=(), memory_bandwidth_gbps=g.memory_bandwidth_gbps * speed,
                   peak_tflops={k: v * speed for k, v in g.peak_tflops.items()}, measured=(),
                   memory_gb=memory_gb or g.memory_gb, tdp_w=tdp or g.tdp_w,
                   price=Price(street_usd=street, street_date="2026-10" if street else "",
                               cloud_usd_per_hour=cloud, cloud_date="2026-10" if cloud else ""))


def run(cards: list[GpuSpec], workloads: tuple[Workload, ...] | None = None, **kw: Any) -> Recommendation:
    fake: dict[str, Any] = dict(kw.pop("trace_kw", {}))
    req = Request(workloads=workloads or (toy_workload(),), title="toy", today=TODAY, **kw)
    return recommend(req, Catalog(cards), lambda spec: toy_trace(spec, **fake))


def rank_of(rec: Recommendation, gid: str) -> int:
    return next(i for i, c in enumerate(rec.rows) if c.gpu.id == gid)


# ---- ranking invariants -------------------------------------------------------------------------

@pytest.mark.parametrize("objective", ["value", "time", "cost-per-job"])
@pytest.mark.parametrize("mode", ["buy", "rent"])
def test_strictly_faster_and_cheaper_ranks_above(objective: str, mode: str) -> None:
    cards = [card("rtx-4090", "slow", 1.0, street=2000, cloud=1.0), card("rtx-4090", "fast", 2.0, street=1000, cloud=0.5)]
    job = Job(epochs=1, dataset_size=1e6)
    rec = run(cards, objective=objective, cost=CostModel(mode), job=job, max_gpus=1)
    assert rank_of(rec, "fast") < rank_of(rec, "slow")
    assert rec.picks[0].config is not None and rec.picks[0].config.gpu.id == "fast"


@settings(max_examples=15, deadline=None)
@given(speed=st.floats(1.05, 4.0), cheaper=st.floats(0.2, 0.95), objective=st.sampled_from(["value", "time"]))
def test_ranking_invariant_property(speed: float, cheaper: float, objective: str) -> None:
    cards = [card("l40s", "a", 1.0, street=5000), card("l40s", "b", speed, street=5000 * cheaper)]
    rec = run(cards, objective=objective, max_gpus=1)
    assert rank_of(rec, "b") < rank_of(rec, "a")


def test_card_whose_memory_is_too_small_is_never_recommended() -> None:
    # 8 GB of weights: not even batch 1 fits in 6 GB, and inference replicas do not share them
    cards = [card("rtx-4090", "big", street=1500), card("rtx-4090", "tiny", 3.0, memory_gb=6, street=100)]
    rec = run(cards, max_gpus=4, trace_kw={"params": 4e9})
    ids = {c.gpu.id for c in rec.configs} | {p.config.gpu.id for p in rec.picks if p.config}
    assert "tiny" not in ids
    tiny = next(r for r in rec.rejected if r.result.gpu.id == "tiny")
    assert tiny.blocker.kind == "memory"
    assert tiny.blocker.text.startswith("does not fit: needs ") and "has 6.3 GB" in tiny.blocker.text


def test_no_price_is_ranked_by_time_and_listed_as_no_price_for_value() -> None:
    cards = [card("h100-sxm5-80gb", "unpriced"), card("rtx-4090", "priced", street=1500)]
    rec = run(cards)
    assert rec.rows[0].gpu.id == "priced" and rec.rows[1].value is None
    assert "no purchase price" in rec.rows[1].reasons
    fast = run(cards, objective="time")
    assert fast.rows[0].gpu.id == "unpriced"


# ---- layouts ------------------------------------------------------------------------------------

def test_micro_batches_keep_the_global_batch() -> None:
    # training, 1B parameters (2 + 2 + 4 + 4 + 8 = 20 GB of states) + 1 GB of activations per sample
    rec = run([card("a100-sxm4-40gb", "a40g", street=5000)], (toy_workload("train", batch=32),), max_gpus=1)
    run0 = rec.rows[0].runs[0]
    assert run0.layout.micro_batch * run0.layout.grad_accum == 32 and run0.layout.micro_batch < 32
    assert run0.layout.micro_batch >= 8  # the largest divisor of 32 that fits (~20 GB + 1.1 GB a sample)
    assert f"micro-batch {run0.layout.micro_batch} x {run0.layout.grad_accum} accumulation steps (batch 32 does not fit)" \
        in rec.rows[0].reasons[0]


def test_sharding_when_one_card_cannot_hold_the_states() -> None:
    # 4B parameters: 80 GB of model states; a 48 GB card needs several, sharded
    rec = run([card("l40s", "l", street=7000)], (toy_workload("train", batch=1),), max_gpus=8,
              trace_kw={"params": 4e9, "act_per_sample": 1e8})
    c = rec.rows[0]
    assert c.min_count > 1 and c.runs[0].layout.sharding in ("zero2", "zero3")
    assert f"needs {c.min_count} GPUs: ZeRO-" in "; ".join(c.reasons)
    assert all(x.gpus >= c.min_count for x in rec.configs)


def test_cached_memory_matches_memory_estimate() -> None:
    tracer = Tracer(lambda spec: toy_trace(spec))
    t = tracer.trace(WorkloadSpec("toy", task="train", batch_size=2, precision="bf16"))
    plan = Plan(dp=4, sharding="zero3")
    for gid in ("h100-sxm5-80gb", "b200", "rtx-4090", "a100-sxm4-40gb", "t4"):
        g = CAT.get(gid)
        assert tracer.memory(t, g, plan).to_dict() == memory_estimate(t, g, plan).to_dict()


# ---- cost, budget, power, jobs --------------------------------------------------------------------

def test_cost_per_job_and_time_follow_the_job() -> None:
    rec = run([card("rtx-4090", "x", street=1600, cloud=0.8, tdp=450)], objective="cost-per-job",
              cost=CostModel("rent"), job=Job(epochs=2, dataset_size=1e6), max_gpus=1)
    c = rec.rows[0]
    assert c.job_h == pytest.approx(2e6 / c.runs[0].samples_per_s / 3600)
    assert c.job_usd == pytest.approx(c.job_h * 0.8)
    assert c.job_kwh == pytest.approx(0.45 * c.job_h)
    # break-even: 1600 / (0.80 - 0.45 kW x 0.20 $/kWh) = 2253.5 h
    assert c.break_even_h == pytest.approx(1600 / (0.8 - 0.09))


def test_budget_marks_and_picks() -> None:
    cards = [card("h100-pcie-80gb", "dear", 3.0, street=30000), card("rtx-4090", "cheap", street=1500)]
    rec = run(cards, objective="time", budget_usd=4000, max_gpus=2)
    within = next(p for p in rec.picks if p.kind == "best-within-budget")
    assert within.config is not None and within.config.gpu.id == "cheap" and within.config.gpus == 2
    assert rec.picks[0].config is not None and rec.picks[0].config.gpu.id == "dear"
    assert any("over budget" in c.reasons for c in rec.configs if c.gpu.id == "dear")


def test_buying_picks_leave_out_server_modules_but_renting_does_not() -> None:
    cards = [card("h100-sxm5-80gb", "module", 3.0, street=20000), card("rtx-4090", "card", street=1500)]
    bought = run(cards, objective="time")
    assert bought.picks[0].config is not None and bought.picks[0].config.gpu.id == "card"
    assert "SXM/OAM modules left out" in bought.picks[0].text
    assert any(c.gpu.id == "module" for c in bought.configs)  # still listed, with the reason
    assert any("needs a matching server" in r for c in bought.configs if c.gpu.id == "module" for r in c.reasons)


def test_power_budget_limits_the_count_and_the_power_limit_slows() -> None:
    cards = [card("rtx-4090", "x", street=1500, tdp=450)]
    rec = run(cards, max_gpus=8, max_power_w=1000)
    assert {c.gpus for c in rec.configs} == {1, 2}
    capped = run(cards, max_gpus=1, power_limit_w=150)
    stock = run(cards, max_gpus=1)
    assert capped.rows[0].speed < stock.rows[0].speed
    assert capped.rows[0].watts == 150 and any("power-capped at 150 W" in r for r in capped.rows[0].reasons)
    assert "Dettmers" in capped.assumptions["power"]


def test_user_price_overrides_the_catalog_and_stale_prices_are_flagged() -> None:
    old = replace(card("rtx-4090", "old"), price=Price(street_usd=900, street_date="2023-10"))
    rec = run([old])
    assert rec.rows[0].prices.buy.stale and any("over a year old" in r for r in rec.rows[0].reasons)
    assert rec.notes and "over a year old" in rec.notes[0]
    mine = run([old], prices={"old": UserPrice(buy_usd=500, date="2026-11")})
    assert mine.rows[0].prices.buy.usd == 500 and not mine.rows[0].prices.buy.stale


def test_explicit_precision_a_card_lacks_is_listed_apart() -> None:
    rec = run([card("rtx-3090", "ampere", street=700), card("rtx-4090", "ada", street=1600)],
              (toy_workload(precision="fp8"),))
    apart = {r.result.gpu.id: r.blocker.text for r in rec.rejected}
    assert apart == {"ampere": "no FP8 on this card"}


def test_mix_speed_is_relative_and_every_workload_must_fit() -> None:
    w = (toy_workload(batch=4), replace(toy_workload(batch=8), label="toy 2", weight=2.0))
    rec = run([card("h100-sxm5-80gb", "h", 1.0, street=20000), card("rtx-4090", "r", street=1500)], w)
    assert rec.unit == "x best" and max(c.speed for c in rec.configs) <= 1.0 + 1e-9
    assert all(len(c.runs) == 2 for c in rec.configs)


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"budget_usd": -1.0}, "budget_usd", "budget must be a positive number of US dollars"),
    ({"objective": "speed"}, "objective", "objective must be one of"),
    ({"objective": "cost-per-job"}, "job.tokens", "needs the job's size"),
    ({"max_gpus": 0}, "max_gpus", "largest GPU count must be a whole number >= 1, got 0"),
    ({"max_power_w": -5.0}, "max_power_w", "power budget must be > 0 W"),
    ({"power_limit_w": 0.0}, "power_limit_w", "power limit must be > 0 W"),
    ({"job": Job(tokens=1e9)}, "job.tokens", "a job in tokens needs a workload counted in tokens"),
    ({"job": Job(tokens=-1.0)}, "job.tokens", "token count must be > 0"),
    ({"job": Job(epochs=1)}, "job.dataset_size", "a job in epochs needs the dataset size"),
    ({"job": Job(dataset_size=1e6)}, "job.epochs", "a dataset size needs the number of epochs"),
    ({"job": Job(tokens=1e9, epochs=1, dataset_size=1e6)}, "job.tokens", "not both"),
    ({"cost": CostModel(hours_per_month=800)}, "cost.hours_per_month", "hours of use a month must be in"),
    ({"cost": CostModel(years=0)}, "cost.years", "must be > 0, got 0"),
    ({"cost": CostModel(usd_per_kwh=-0.1)}, "cost.usd_per_kwh", "electricity price must be >= 0"),
    ({"min_memory_gb": 1000.0}, "min_memory_gb", "no GPU has 1000 GB of memory; the largest"),
    ({"max_power_w": 50.0}, "max_power_w", "no GPU draws 50 W or less"),
    ({"gpu_ids": ()}, "gpu_ids", "no GPU to evaluate"),
])
def test_impossible_requests_are_one_line_errors(changes: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as e:
        run([card("rtx-4090", "x", street=1500)], **changes)
    assert "\n" not in str(e.value)
    # the library's terms: the field at fault, and no command-line flag (the CLI adds that)
    assert e.value.field == field and "--" not in str(e.value)



def test_no_budget_advice_checks_the_free_t4_even_when_left_out() -> None:
    cards = [card("rtx-4090", "r", street=1500), CAT.get("t4")]
    rec = run(cards, max_gpus=1, min_memory_gb=24.0, memory_rule="a rule of thumb")
    free = next(p for p in rec.picks if p.kind == "no-budget")
    assert free.config is not None and free.config.gpu.id == "t4" and free.config.speed > 0
    assert "fits on one T4" in free.text and "two T4s (Kaggle)" in free.text
    assert "t4" not in {c.gpu.id for c in rec.configs}  # still left out of the ranking, with why
    assert any(r.result.gpu.id == "t4" and "rule of thumb" in r.blocker.text for r in rec.rejected)
    big = run(cards, max_gpus=1, trace_kw={"params": 8e9})  # 16 GB of weights: no T4
    free = next(p for p in big.picks if p.kind == "no-budget")
    assert "free notebooks (T4, 16 GB) cannot run it: does not fit" in free.text and "smallest card" in free.text
