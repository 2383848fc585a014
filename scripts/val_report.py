"""Signed error analysis of a validation run (development aid): median log2(pred/meas) by group."""

from __future__ import annotations

import math
import sys
from collections import defaultdict

from whichgpu.hardware.catalog import load_catalog
from whichgpu.measure.validate import read_rows, run


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "../shared/validation/throughput.csv"
    keys = sys.argv[2].split(",") if len(sys.argv) > 2 else ["model", "task"]
    v = run(read_rows(path), load_catalog())
    g: dict[tuple[str, ...], list[float]] = defaultdict(list)
    for r in v.rows:
        if r.status != "ok" or not r.measured:
            continue
        d = r.to_dict()
        g[tuple(str(d.get(k, "")) for k in keys)].append(math.log2((r.predicted or 1e-9) / r.measured))
    for k, xs in sorted(g.items()):
        xs.sort()
        med = xs[len(xs) // 2]
        print(f"{' | '.join(k):70s} n={len(xs):3d} median x{2 ** med:5.2f}  range x{2 ** xs[0]:.2f}..x{2 ** xs[-1]:.2f}")


if __name__ == "__main__":
    main()
