"""Rewrite src/whichgpu/parallel/moe_accuracy.toml from the MoE rows of llm_training.csv.

    python scripts/plan_moe_accuracy.py [--data tests/planner_data]

Scores each MoE row with its published layout (measure.planner_validate.moe_training_rows) and
records the p10 / median / p90 of measured over predicted throughput and the median per GPU, which
`whichgpu plan` prints with every MoE layout. tests/unit/test_planner_accuracy.py checks the file
is fresh.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from whichgpu.measure import planner_validate as pv

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "whichgpu" / "parallel" / "moe_accuracy.toml"
HEAD = """\
# How the planner's MoE throughput compares with published runs: measured / predicted tokens/s per
# GPU on the MoE rows of shared/validation/llm_training.csv (NeMo / Megatron-Bridge performance
# tables, force-balanced dropless routing), each predicted with its published layout
# (`whichgpu validate-plan --only moe`). Written by scripts/plan_moe_accuracy.py; a test checks it
# matches the rows. `plan` prints it with every MoE layout.
models = "DeepSeek-V3, GPT-OSS-120B, Qwen3-30B-A3B, Qwen3-235B-A22B"
"""


def render(q: dict[str, Any]) -> str:
    lines = [f"rows = {q['rows']}", f"p10 = {q['p10']}", f"p50 = {q['p50']}", f"p90 = {q['p90']}", "",
             "[by_gpu]  # median per GPU"]
    lines += [f'"{g}" = {v}' for g, v in q["by_gpu"].items()]
    return HEAD + "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "tests" / "planner_data")
    args = ap.parse_args()
    q = pv.moe_accuracy(pv.moe_training_rows(args.data / "llm_training.csv"))
    OUT.write_text(render(q))
    print(f"{OUT.relative_to(ROOT)}: {q}")


if __name__ == "__main__":
    main()
