"""Re-derive the Megatron engine's host times (hardware/engines/megatron.toml: ``launch.host_op_us``,
the host's time per kernel of the planner's layer list, and ``launch.microbatch_host_ms``, the
training loop's synchronising host work per micro-batch) from vTrain's measured iteration times.

vTrain's small models (h 1024-2048, micro-batch 1-2) are bound by the host issuing kernels, not by
the GPU: the time per layer per micro-batch sets how long eager Megatron-DeepSpeed takes per kernel
(launch, views, autograd, activation-checkpointing bookkeeping), and the part of a micro-batch's
time that does not grow with the layer count sets the per-micro-batch host work (fetching and
broadcasting the batch, building the attention mask, averaging the loss). This sweeps the two
generic parameters and prints, per pair, the median / p90 / signed error on all 1,440 rows and per
hidden size, and the jobs whose pick is within 5 % of the measured best. It writes nothing: copy
the chosen values into the engine file with their provenance.

    python scripts/fit_planner.py [--data tests/planner_data/planner_dev/vtrain.csv]
                                  [--values 55,60,65,70] [--microbatch-ms 0,1,2,3]
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
    ap.add_argument("--values", default="55,60,65,70", help="host_op_us values (us per kernel)")
    ap.add_argument("--microbatch-ms", default="0,1,2,3", help="microbatch_host_ms values (ms per micro-batch)")
    args = ap.parse_args()
    real = engine_module.get_engine
    for value in (float(v) for v in args.values.split(",")):
        for mb_ms in (float(v) for v in args.microbatch_ms.split(",")):
            def patched(name: str = "pytorch", engines_dir: str | None = None, _v: float = value,
                        _m: float = mb_ms) -> engine_module.Engine:
                e = real(name, engines_dir)
                return dataclasses.replace(e, host_op_us=_v, host_view_us=0.0, microbatch_host_ms=_m) \
                    if e.id == "megatron" else e

            engine_module.get_engine = patched  # type: ignore[assignment]
            rows, picks = pv.vtrain_rows(Path(args.data))
            s = pv.summary(rows)
            by_h = {}
            for h in ("h1024", "h2048"):
                errs = [r.error for r in rows if r.group.startswith(h) and r.error is not None]
                by_h[h] = f"{statistics.median(errs):+.1%}"
            within = sum(p["miss"] <= 0.05 for p in picks)
            print(f"host_op_us {value:5.1f} microbatch_host_ms {mb_ms:4.1f}: median {s['median']:.1%} "
                  f"p90 {s['p90']:.1%} signed {s['signed']:+.1%} signed by size {by_h} "
                  f"picks within 5% {within}/{len(picks)}")
    engine_module.get_engine = real


if __name__ == "__main__":
    main()
