"""Re-derive the Megatron engine's host time per kernel (hardware/engines/megatron.toml,
``launch.host_op_us``) from vTrain's measured iteration times.

vTrain's small models (h 1024, micro-batch 1-2) are bound by the host issuing kernels, not by the
GPU: their iteration time sets how long eager Megatron-DeepSpeed takes per kernel of the planner's
layer list (launch, views, autograd, activation-checkpointing bookkeeping). This sweeps that one
generic parameter and prints, per value, the median / p90 / signed error on all 1,440 rows and per
hidden size, and the jobs whose pick is within 5 % of the measured best. It writes nothing: copy
the chosen value into the engine file with its provenance.

    python scripts/fit_planner.py [--data tests/planner_data/planner_dev/vtrain.csv] [--values 40,50,60,70]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

import whichgpu.hardware.engine as engine_module
from whichgpu.measure import planner_validate as pv


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(Path(__file__).resolve().parent.parent / "tests/planner_data/planner_dev/vtrain.csv"))
    ap.add_argument("--values", default="27.3,40,50,60,70")
    args = ap.parse_args()
    real = engine_module.get_engine
    for value in (float(v) for v in args.values.split(",")):
        def patched(name: str = "pytorch", engines_dir: str | None = None, _v: float = value) -> engine_module.Engine:
            e = real(name, engines_dir)
            return dataclasses.replace(e, host_op_us=_v, host_view_us=0.0) if e.id == "megatron" else e

        engine_module.get_engine = patched  # type: ignore[assignment]
        rows, picks = pv.vtrain_rows(Path(args.data))
        s = pv.summary(rows)
        by_h = {}
        for h in ("h1024", "h2048"):
            errs = [r.error for r in rows if r.group.startswith(h) and r.error is not None]
            by_h[h] = f"{statistics.median(errs):+.1%}"
        within = sum(p["miss"] <= 0.05 for p in picks)
        print(f"host_op_us {value:5.1f}: median {s['median']:.1%} p90 {s['p90']:.1%} signed {s['signed']:+.1%} "
              f"signed by size {by_h} picks within 5% {within}/{len(picks)}")
    engine_module.get_engine = real


if __name__ == "__main__":
    main()
