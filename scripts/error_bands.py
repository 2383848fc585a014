"""Write the error bands (src/whichgpu/perf/bands.toml) from the validation residuals.

    python scripts/error_bands.py [--data tests/data]

Runs the validation over the dev corpus and, for every class of scored rows (engine, kind of
step, model family, GPU architecture, and the coarser classes perf/bands.py falls back to) with
at least perf.bands.MIN_ROWS rows, records the 10th and 90th percentiles of
e = ln(predicted / measured) in speed terms. Also records the validated ground: the GPU
architectures, engines, precisions (per task) and model families of the scored rows. Rows
excluded from the bounds (measure/exclusions.toml) are left out. Re-run after a refit.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import math
from collections import defaultdict

from whichgpu.hardware.catalog import load_catalog
from whichgpu.measure.corpus import read_measurements
from whichgpu.measure.validate import percentile, run
from whichgpu.perf.bands import ANY, BANDS_FILE, KINDS, LEVELS, MIN_ROWS, precision_class


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", action="append", default=None)
    args = ap.parse_args()
    data = args.data or ["tests/data"]
    v = run(read_measurements(data), load_catalog())
    rows = [r for r in v.rows if r.bounded and r.signed_pct is not None and r.extra.get("band_kind") in KINDS]
    groups: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    ground: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        e = math.log(1.0 + (r.signed_pct or 0.0) / 100.0)
        key = (r.engine, str(r.extra["band_kind"]), str(r.extra["family"]), str(r.extra["architecture"]))
        for level in LEVELS:
            groups[tuple(k if use else ANY for k, use in zip(key, level))].append(e)  # type: ignore[index]
        if r.extra["band_kind"] != "memory":
            ground["architectures"].add(str(r.extra["architecture"]))
            ground["engines"].add(r.engine)
            ground["families"].add(str(r.extra["family"]))
            ground["precisions"].add(f"{precision_class(str(r.extra['policy']))}/{r.extra['policy_task']}")
    lines = ["# Error bands of the performance model: written by scripts/error_bands.py (do not edit).",
             "# p10/p90: percentiles of e = ln(predicted / measured), speed terms, per class of validation rows.",
             "", "[meta]",
             f'source = "scripts/error_bands.py on {", ".join(data)}, {datetime.date.today().isoformat()}"',
             f"rows = {len(rows)}", f"min_rows = {MIN_ROWS}", "", "[validated]"]
    for k in ("architectures", "engines", "precisions", "families"):
        lines.append(f"{k} = [" + ", ".join(f'"{x}"' for x in sorted(ground[k])) + "]")
    n = 0
    for key, es in sorted(groups.items(), key=lambda kv: tuple(itertools.chain(kv[0]))):
        if len(es) < MIN_ROWS:
            continue
        s = sorted(es)
        lines += ["", "[[band]]", f'engine = "{key[0]}"', f'kind = "{key[1]}"', f'family = "{key[2]}"',
                  f'architecture = "{key[3]}"', f"rows = {len(es)}", f"p10 = {percentile(s, 0.1):.4f}",
                  f"p90 = {percentile(s, 0.9):.4f}"]
        n += 1
    BANDS_FILE.write_text("\n".join(lines) + "\n")
    print(f"wrote {BANDS_FILE}: {n} bands from {len(rows)} rows")


if __name__ == "__main__":
    main()
