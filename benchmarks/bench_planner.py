"""Speed of the parallel planner (issue 12's goals: a full search for a 70B model on 1,024 GPUs in
at most 10 s on one core; one layout evaluated in at most 5 ms). Prints figures; asserts nothing.

    python benchmarks/bench_planner.py
"""

from __future__ import annotations

import statistics
import time

from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.system import load_systems
from whichgpu.parallel.models import planner_model
from whichgpu.parallel.plan import Plan
from whichgpu.parallel.planner import Context, Job, evaluate
from whichgpu.parallel.search import Fixed, search


def main() -> None:
    gpu = load_catalog().get("h100-sxm5-80gb")
    system = load_systems().get("dgx-h100")
    mid, args, _ = planner_model("llama-3-70b")
    job = Job(mid, args, gpu, system, 1024, 1024, 8192, "bf16")
    t0 = time.perf_counter()
    ctx = Context.make(job)
    res = search(job, Fixed(), Plan(engine="megatron"), top=5, ctx=ctx)
    full = time.perf_counter() - t0
    print(f"full search, llama-3-70b on 1024 x H100, global batch 1024 x 8192: {full:.2f} s, "
          f"{res.evaluated} layouts evaluated ({full / max(res.evaluated, 1) * 1e3:.2f} ms each incl. enumeration), "
          f"{res.simulated} of them timed in full (the others' lower bound could not reach the top 5)")
    best = res.best[0]
    p = best.plan
    print(f"  best: tp{p.tp} pp{p.pp} vp{p.vp} cp{p.cp} dp{p.dp} mb{p.micro_batch} {p.sharding} {p.recompute} "
          f"{p.schedule}: {best.step_s:.2f} s/step, MFU {best.mfu:.1%}")
    # one layout, warm caches (the search's case)
    plans = [r.plan for r in res.best] + [Plan(tp=8, pp=8, vp=5, dp=16, micro_batch=1, grad_accum=64,
                                                 schedule="interleaved-1f1b", sharding="zero1", recompute="selective",
                                                 sequence_parallel=True, engine="megatron")]
    # cold: the first evaluation of a schedule shape in a process builds its order and compiled plan
    for plan in (Plan(tp=8, pp=8, vp=5, dp=16, micro_batch=1, grad_accum=64, schedule="interleaved-1f1b",
                      sequence_parallel=True, engine="megatron"),
                 Plan(tp=4, pp=16, vp=2, dp=16, micro_batch=1, grad_accum=64, schedule="zb-v", engine="megatron"),
                 Plan(tp=8, pp=16, dp=8, micro_batch=1, grad_accum=128, schedule="zb-h1", engine="megatron")):
        t = time.perf_counter()
        evaluate(ctx, plan)
        print(f"  evaluate tp{plan.tp} pp{plan.pp} vp{plan.vp} {plan.schedule} m={plan.grad_accum}, cold: "
              f"{(time.perf_counter() - t) * 1e3:.2f} ms")
    for plan in plans:
        times = []
        for _ in range(20):
            t = time.perf_counter()
            evaluate(ctx, plan)
            times.append(time.perf_counter() - t)
        print(f"  evaluate tp{plan.tp} pp{plan.pp} vp{plan.vp} {plan.schedule} m={plan.grad_accum}: "
              f"median {statistics.median(times) * 1e3:.2f} ms, max {max(times) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
