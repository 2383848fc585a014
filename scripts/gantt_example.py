"""Regenerate docs/img/plan-gantt-zb-h1.svg, the README's Gantt chart: Llama-3-70B on 32 H100s
(DGX H100), TP8 PP4, ZB-H1, 16 micro-batches of one 4096-token sequence, BF16.

    python scripts/gantt_example.py
"""

from __future__ import annotations

from pathlib import Path

from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.system import load_systems
from whichgpu.parallel.models import planner_model
from whichgpu.parallel.plan import Plan
from whichgpu.parallel.planner import Context, Job, evaluate
from whichgpu.report.gantt import gantt_svg

OUT = Path(__file__).resolve().parents[1] / "docs" / "img" / "plan-gantt-zb-h1.svg"


def main() -> None:
    mid, a, _ = planner_model("llama-3-70b")
    job = Job(mid, a, load_catalog().get("h100-sxm5-80gb"), load_systems().get("dgx-h100"), 32, 16, 4096, "bf16")
    plan = Plan(tp=8, pp=4, dp=1, micro_batch=1, grad_accum=16, sharding="ddp", recompute="none", schedule="zb-h1",
                sequence_parallel=True, tp_comm_overlap=True, engine="megatron")
    res = evaluate(Context.make(job), plan, timeline=True)
    assert res.timeline is not None
    title = f"llama-3-70b, 32 x H100, TP8 PP4, zb-h1, 16 micro-batches: bubble {res.bubble_fraction:.1%}"
    OUT.write_text(gantt_svg(res.timeline, title))
    print(f"wrote {OUT}: step {res.step_s:.2f} s, bubble {res.bubble_fraction:.1%}")


if __name__ == "__main__":
    main()
