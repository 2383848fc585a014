"""Write serve's accuracy figures (src/whichgpu/serving/accuracy.toml) from the serving dev rows.

    python scripts/serve_accuracy.py [--data tests/serving_data]

Scores every row `whichgpu validate-serve` scores and records, per (GPU, engine) group with at
least serving.accuracy.MIN_ROWS rows, per engine over all GPUs and over all rows, the 10th, 50th
and 90th percentiles of measured / predicted mean TTFT and TPOT. Re-run after a refit of the
serving model (takes about 90 s).
"""

from __future__ import annotations

import argparse
import datetime
from collections import defaultdict
from pathlib import Path

from whichgpu.measure.serving_validate import ENGINES, GPUS, serving_rows
from whichgpu.measure.validate import percentile
from whichgpu.serving.accuracy import ACCURACY_FILE, ANY, MIN_ROWS


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="tests/serving_data")
    args = ap.parse_args()
    path = Path(args.data)
    rows = [s for s in serving_rows(path / "serving_dev.csv" if path.is_dir() else path)
            if s.predicted_ttft_ms is not None and s.predicted_tpot_ms is not None]
    groups: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for s in rows:
        d = s.to_dict()
        gpu, engine = GPUS[d["gpu"]][0], ENGINES[d["engine"]]
        ratio = (d["measured_ttft_ms"] / d["predicted_ttft_ms"], d["measured_tpot_ms"] / d["predicted_tpot_ms"])
        for key in ((gpu, engine), (ANY, engine), (ANY, ANY)):
            groups[key].append(ratio)
    lines = ["# serve's accuracy on the serving dev rows: written by scripts/serve_accuracy.py (do not edit).",
             "# ttft, tpot: [p10, p50, p90] of measured / predicted mean latency per group of scored rows.", "",
             "[meta]", f'source = "scripts/serve_accuracy.py on {args.data}, {datetime.date.today().isoformat()}"',
             f"rows = {len(rows)}", f"min_rows = {MIN_ROWS}", ""]
    for (gpu, engine), v in sorted(groups.items(), key=lambda kv: (kv[0][0] == ANY, kv[0])):
        if len(v) < MIN_ROWS:
            continue
        spreads = []
        for i in (0, 1):
            xs = sorted(x[i] for x in v)
            spreads.append("[" + ", ".join(f"{percentile(xs, q) or 0.0:.4f}" for q in (0.1, 0.5, 0.9)) + "]")
        lines += ["[[group]]", f'gpu = "{gpu}"', f'engine = "{engine}"', f"rows = {len(v)}",
                  f"ttft = {spreads[0]}", f"tpot = {spreads[1]}", ""]
    ACCURACY_FILE.write_text("\n".join(lines))
    print(f"wrote {ACCURACY_FILE} from {len(rows)} rows")


if __name__ == "__main__":
    main()
