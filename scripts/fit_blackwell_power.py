"""Re-derive Blackwell's power figure (perf/params.toml ``w_per_tflops_blackwell``: the board power a
Blackwell die needs per dense FP16 TFLOP/s to hold its rated tensor clock) from the Blackwell rows
of ``llm_training.csv`` (NeMo / Megatron-Bridge on B200 and GB200), scored by the planner.

The figure was first derived from Hopper's fitted value and the two rated design points (no
Blackwell row existed). Each value swept here sets the sustained tensor clock of every Blackwell
card (B200, GB200, B300: clock ~ (TDP / need)^0.325, perf/device.py); the script prints, per value,
the clock it gives B200, the median |error| and signed median error of model TFLOP/s per GPU over
the Blackwell rows, and the same over all rows. With ``--serving`` it also prints the B200 groups
of ``serving_dev.csv`` (mean TTFT and TPOT, signed median), a check on data the fit does not use
(about 90 s a value). It writes nothing: copy the chosen value into params.toml with its provenance.

    python scripts/fit_blackwell_power.py [--data tests/planner_data/llm_training.csv]
                                          [--values 1.0049,1.1,1.18,1.25] [--serving]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

from whichgpu.perf import params as params_module

ROOT = Path(__file__).resolve().parent.parent
BLACKWELL_ROWS = ("b200", "gb200")


def _set(value: float) -> None:
    """Make every later load_params() return the fitted parameters with this Blackwell figure."""
    params_module._CACHE.clear()
    p, meta = params_module.load_params_with_meta()
    params_module._CACHE[str(params_module.PARAMS_FILE)] = (dataclasses.replace(p, w_per_tflops_blackwell=value), meta)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT / "tests/planner_data/llm_training.csv"))
    ap.add_argument("--values", default="1.0049,1.1,1.15,1.18,1.21,1.25,1.3",
                    help="w_per_tflops_blackwell values (W per dense FP16 TFLOP/s)")
    ap.add_argument("--serving", action="store_true", help="also score serving_dev.csv's B200 groups (slow)")
    args = ap.parse_args()
    from whichgpu.hardware.catalog import load_catalog
    from whichgpu.measure import planner_validate as pv
    from whichgpu.perf.device import Device

    b200 = load_catalog().get("b200")
    try:
        for value in (float(v) for v in args.values.split(",")):
            _set(value)
            clock = Device(b200, params_module.load_params()).clock_scale
            rows = [r for r in pv.llm_training_rows(Path(args.data)) if r.error is not None]
            bw = [r.error for r in rows if r.gpu in BLACKWELL_ROWS and r.error is not None]
            every = [r.error for r in rows if r.error is not None]
            line = (f"w_per_tflops_blackwell {value:6.4f} (B200 clock {clock:.3f}): Blackwell rows {len(bw)} "
                    f"median |err| {statistics.median(abs(e) for e in bw):.1%} signed {statistics.median(bw):+.1%}; "
                    f"all {len(every)} rows median |err| {statistics.median(abs(e) for e in every):.1%} "
                    f"signed {statistics.median(every):+.1%}")
            if args.serving:
                from whichgpu.measure import serving_validate as sv

                scores = sv.serving_rows(ROOT / "tests/serving_data/serving_dev.csv", match=" B200 ")
                groups = sv.summary(scores)["groups"]
                line += "; serving " + ", ".join(
                    f"{g} TTFT {b['ttft_signed']:+.1%} TPOT {b['tpot_signed']:+.1%}"
                    for g, b in groups.items() if b["rows"])
            print(line, flush=True)
    finally:
        params_module._CACHE.clear()


if __name__ == "__main__":
    main()
