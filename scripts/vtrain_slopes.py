"""What one transformer layer costs per micro-batch in vTrain's measurements, next to the planner's.

vTrain's jobs repeat each layout at 12, 16, 20 and 24 layers and at several global batches, so a
layer's cost can be read off the measurements without a model. Per layout (hidden size, TP, DP,
micro-batch; pipeline depth 1, so every layer runs on every GPU) and global batch, the iteration
time is fitted as a line in the layer count; its slope is then fitted as a line in the number of
micro-batches per step. That second slope is one layer's forward, recomputation and backward for
one micro-batch (the "per layer-mb" column). Its intercept is what a layer adds once per step: its
gradient all-reduce and optimizer update. The planner's times for the same rows go through the same
two fits.

Prints one line per (hidden, TP, micro-batch), with the per-layer-mb costs of every DP degree,
measured and predicted. Where a larger micro-batch costs less per micro-batch than a smaller one at
the same hidden size and TP, the table says so: no cost that grows with the work can show that.

    python scripts/vtrain_slopes.py [--data tests/planner_data/planner_dev/vtrain.csv]
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

from whichgpu.measure import planner_validate as pv


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through the points."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return slope, my - slope * mx


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(Path(__file__).resolve().parent.parent / "tests/planner_data/planner_dev/vtrain.csv"))
    args = ap.parse_args()
    rows, _ = pv.vtrain_rows(Path(args.data))
    # (h, tp, dp, mb) -> micro-batches per step -> layers -> (measured, predicted) ms
    by: dict[tuple[int, ...], dict[int, dict[int, tuple[float, float]]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        _, dims, _, gb = r.name.split(" ")[0].split(":")
        hidden, _, layers, _ = dims.split("_")
        tp, dp, pp, mb = (int(x[2:]) for x in (r.layout or "").split())
        if pp != 1:
            continue
        assert r.measured is not None and r.predicted is not None
        nmb = int(gb[2:]) // (mb * dp)
        by[(int(hidden[1:]), tp, dp, mb)][nmb][int(layers[1:])] = (r.measured, r.predicted)
    cost: dict[tuple[int, int, int], list[tuple[int, float, float]]] = defaultdict(list)
    for (h, tp, dp, mb), per_nmb in sorted(by.items()):
        pts = []
        for nmb, per_layer in per_nmb.items():
            if len(per_layer) < 3:
                continue
            ls = sorted(per_layer)
            sm = _line([float(x) for x in ls], [per_layer[x][0] for x in ls])[0]
            sp = _line([float(x) for x in ls], [per_layer[x][1] for x in ls])[0]
            pts.append((nmb, sm, sp))
        if len(pts) >= 2:  # the slope's growth with the micro-batches per step: one layer-mb
            nm = [float(p[0]) for p in pts]
            cost[(h, tp, mb)].append((dp, _line(nm, [p[1] for p in pts])[0], _line(nm, [p[2] for p in pts])[0]))
        elif dp == 1 and pts:  # no data-parallel update: the slope over micro-batches is the layer-mb
            nmb, sm, sp = pts[0]
            cost[(h, tp, mb)].append((dp, sm / nmb, sp / nmb))
    print("one layer's forward + recomputation + backward per micro-batch, ms: measured / planner (by DP degree)")
    for (h, tp, mb), v in sorted(cost.items()):
        meas = statistics.median(x[1] for x in v)
        cells = "  ".join(f"dp{dp} {m:5.2f} / {p:5.2f}" for dp, m, p in sorted(v))
        note = ""
        smaller = [statistics.median(x[1] for x in w) for (h2, tp2, mb2), w in cost.items()
                   if h2 == h and tp2 == tp and mb2 < mb]
        if smaller and meas < max(smaller):
            note = f"  <- less than a smaller micro-batch's {max(smaller):.2f}"
        print(f"h{h} tp{tp} mb{mb}: {cells}{note}")


if __name__ == "__main__":
    main()
