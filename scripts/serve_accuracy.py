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
from pathlib import Path

from whichgpu.measure.serving_validate import accuracy_groups, serving_rows
from whichgpu.serving.accuracy import ACCURACY_FILE, ANY, MIN_ROWS


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="tests/serving_data")
    args = ap.parse_args()
    path = Path(args.data)
    scores = serving_rows(path / "serving_dev.csv" if path.is_dir() else path)
    groups = accuracy_groups(scores)
    lines = ["# serve's accuracy on the serving dev rows: written by scripts/serve_accuracy.py (do not edit).",
             "# ttft, tpot: [p10, p50, p90] of measured / predicted mean latency per group of scored rows.", "",
             "[meta]", f'source = "scripts/serve_accuracy.py on {args.data}, {datetime.date.today().isoformat()}"',
             f"rows = {groups[(ANY, ANY)][0]}", f"min_rows = {MIN_ROWS}", ""]
    for (gpu, engine), (n, ttft, tpot) in sorted(groups.items(), key=lambda kv: (kv[0][0] == ANY, kv[0])):
        lines += ["[[group]]", f'gpu = "{gpu}"', f'engine = "{engine}"', f"rows = {n}",
                  "ttft = [" + ", ".join(f"{x:.4f}" for x in ttft) + "]",
                  "tpot = [" + ", ".join(f"{x:.4f}" for x in tpot) + "]", ""]
    ACCURACY_FILE.write_text("\n".join(lines))
    print(f"wrote {ACCURACY_FILE} from {groups[(ANY, ANY)][0]} rows")


if __name__ == "__main__":
    main()
