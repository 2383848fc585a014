"""Accuracy bounds of the parallel planner on the published multi-GPU corpora (copies of
shared/validation in tests/planner_data). `whichgpu validate-plan --data tests/planner_data` prints the same
figures. Bounds are the issue's targets where met, else the current figures as regression guards
(named so)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from whichgpu.measure import planner_validate as pv

DATA = Path(__file__).resolve().parent.parent / "planner_data"  # copies of shared/validation


@pytest.fixture(scope="module")
def llm() -> list[pv.Scored]:
    return pv.llm_training_rows(DATA / "llm_training.csv")


def test_llm_training_dense_rows_within_the_targets(llm: list[pv.Scored]) -> None:
    s = pv.summary(llm)
    assert s["rows"] >= 20
    assert s["median"] <= 0.10 and s["p90"] <= 0.25
    assert abs(s["signed"]) <= 0.05


def test_llm_training_per_source_and_gpu(llm: list[pv.Scored]) -> None:
    by: dict[str, list[pv.Scored]] = defaultdict(list)
    for r in llm:
        by[r.source].append(r)
        gpu = r.name.split(" / ")[1].split(" x")[0].split("-")[0]
        by[gpu].append(r)
    assert pv.summary(by["megatron-2021"])["median"] <= 0.15
    assert pv.summary(by["nemo"])["median"] <= 0.10
    for gpu in ("A100", "H100", "B200", "GB200"):
        s = pv.summary(by[gpu])
        assert s["rows"] >= 2, gpu
        assert abs(s["signed"]) <= 0.12, (gpu, s)  # the widest today: A100 -6.0 % (H100 -1.9 %)


def test_blackwell_rows_hold_the_fitted_power_figure(llm: list[pv.Scored]) -> None:
    """perf/params.toml's w_per_tflops_blackwell is fitted on these rows (scripts/fit_blackwell_power.py):
    1.7 % median, +1.2 % signed today; at the value derived from Hopper's they ran 6.0 % fast."""
    errs = [r.error for r in llm if r.gpu in ("b200", "gb200") and r.error is not None]
    assert len(errs) >= 8
    s = sorted(abs(e) for e in errs)
    assert s[len(s) // 2] <= 0.04
    assert -0.03 <= sorted(errs)[len(errs) // 2] <= 0.03


def test_llm_training_lists_what_it_does_not_score(llm: list[pv.Scored]) -> None:
    reasons = [r.reason for r in llm if r.error is None]
    assert sum("MoE: scored apart" in x for x in reasons) >= 10
    assert all(reasons)


def test_moe_rows_scored_apart_with_their_published_layouts() -> None:
    """The MoE rows (Megatron-Bridge, force-balanced dropless routing) run with their published TP, PP,
    VP and EP, experts whole (etp 1) as the recipes keep them, so the H100 Qwen3-235B rows fold EP 32
    over TP 2 x DP 16. They are a reported figure, not a target: today median |error| 24.7 % (signed
    +5.6 %); GB200 NVL72 rows 6.2 % / +2.2 %, B200 8.5 % / +8.0 %. Before each local expert's GEMM was a
    kernel of its own (Transformer Engine's GroupedLinear) 36.0 % / +36.0 %, B200 +67 %, Qwen3-30B-A3B
    (16 local experts of 128, host-bound) +170 to +195 %. Guards at today's figures."""
    rows = pv.moe_training_rows(DATA / "llm_training.csv")
    scored = [r for r in rows if r.error is not None]
    assert len(scored) == len(rows) >= 19
    assert sum("etp1" in r.layout for r in scored) == 2
    s = pv.summary(scored)
    assert s["median"] <= 0.30 and abs(s["signed"]) <= 0.15 and s["p90"] <= 0.75
    gb200 = pv.summary([r for r in scored if r.gpu == "gb200"])
    assert gb200["rows"] >= 5 and gb200["median"] <= 0.10
    b200 = pv.summary([r for r in scored if r.gpu == "b200"])
    assert b200["rows"] >= 8 and b200["median"] <= 0.15
    # Qwen3-30B-A3B on one 8-GPU B200 node, EP 8: 16 local experts, each GEMM a kernel the host issues
    q30 = [r for r in scored if r.name.startswith("Qwen3_30B_a3B / B200")]
    assert len(q30) == 2 and all(abs(r.error or 1.0) <= 0.15 for r in q30)
    # EP 64 over 8 HGX B200 nodes: each GPU's 56/64 of a dispatch leaves through its own 400 Gb/s
    # rail, which the GPU-bound layer waits for (predicted +133 % when the all-to-all took the
    # node's 8 rails as a ring's bus does); EP 64 inside one GB200 NVL72 domain stays on NVLink
    oss = [r for r in scored if r.name.startswith("GPT OSS 120B / B200") and "ep64" in r.layout]
    assert len(oss) == 1 and abs(oss[0].error or 0.0) <= 0.10


def test_moe_accuracy_file_matches_the_rows() -> None:
    """parallel/moe_accuracy.toml (what `plan` prints with MoE layouts) is what the rows give today:
    `python scripts/plan_moe_accuracy.py` rewrites it."""
    from whichgpu.parallel.planner import moe_accuracy

    q = pv.moe_accuracy(pv.moe_training_rows(DATA / "llm_training.csv"))
    saved = moe_accuracy()
    assert {k: saved[k] for k in ("rows", "p10", "p50", "p90", "by_gpu")} == q


def test_vtrain_iteration_time() -> None:
    rows, picks = pv.vtrain_rows(DATA / "planner_dev" / "vtrain.csv")
    s = pv.summary(rows)
    assert s["rows"] == 1440
    assert s["median"] <= 0.12  # the target
    assert s["median"] <= 0.07 and s["p90"] <= 0.20 and abs(s["signed"]) <= 0.03  # guards: 6.3 / 18.6 / -1.5 %
    by: dict[str, list[pv.Scored]] = defaultdict(list)
    for r in rows:
        by[r.group].append(r)
    for g, v in by.items():
        assert pv.summary(v)["median"] <= 0.12, g
    # regression guard: 120 of 144 today (target: all; 92 while tensor-parallel all-reduces were
    # added after the host-bound passes instead of running in their slack, 110 while they took the
    # analytic link model's time instead of the DGX A100's measured one). The misses are h2048
    # layout families the kernel and collective model does not separate: at micro-batch 2, tp4 runs
    # 2.8 ms per layer and tp2 4.7-5.0 ms, where h1024 runs both at 3.3-3.7 ms (see the README's
    # planner accuracy section)
    assert sum(p["miss"] <= 0.05 for p in picks) >= 116
    assert sorted(p["miss"] for p in picks)[len(picks) // 2] <= 0.05


def test_llm_foundry_mfu() -> None:
    rows = pv.foundry_rows(DATA / "planner_dev" / "llm_foundry.csv")
    s = pv.summary(rows)
    assert s["rows"] == 139
    assert s["median"] <= 0.10 and s["p90"] <= 0.20  # the target (median); 4.9 % / 12.2 % today
    assert abs(s["signed"]) <= 0.05
    # per GPU and per sequence length: no band of the table is biased (the FlashAttention-1 kernel
    # of attn_impl: triton is what makes long sequences read right, not a fit)
    for key in ("a100-sxm4-40gb", "a100-sxm4-80gb"):
        g = pv.summary([r for r in rows if r.gpu == key])
        assert g["median"] <= 0.10 and abs(g["signed"]) <= 0.06, key
    long = pv.summary([r for r in rows if int(r.name.split("seq")[1].split()[0]) >= 16384])
    assert long["median"] <= 0.12 and abs(long["signed"]) <= 0.10


def test_zero_bubble_table5_reproduced() -> None:
    rows = pv.zero_bubble_rows(DATA / "planner_dev")
    assert len(rows) == 48 and all(r.measured is not None for r in rows)
    assert pv.abs_diff(rows) <= 1e-3
