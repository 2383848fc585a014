"""Proxy scores on the planner and serving dev corpora, until their own scorers exist.

The planner (multi-GPU layouts) and the serving simulator are later issues; until they land,
`whichgpu validate` does not read `planner_dev/` or `serving_dev.csv`. A change to the
performance model still moves what those rows would predict, so this script scores the rows the
single-GPU `estimate` can already express, to show that a change which helps one corpus does not
cost another:

* vTrain (`planner_dev/vtrain.csv`): the pure data-parallel rows (tp = pp = 1), GPT models built
  from a GPT-2 config of the row's dims (vocab 50257, the vTrain default), full activation
  checkpointing, FP16 AMP (Megatron-DeepSpeed; the source does not state it), A100 SXM4 80GB.
  Scored: iteration time = global batch / predicted samples per second.
* llm-foundry (`planner_dev/llm_foundry.csv`): every row (FSDP FULL_SHARD), the MPT dims as a
  GPT-2 config (learned positions stand in for ALiBi: the same FLOPs to 0.1 %), BF16 AMP, the
  row's micro-batch, accumulation and checkpointing. Scored: tokens/s per GPU.
* serving (`serving_dev.csv`): aggregated, tp = pp = 1, dense Llama rows at BF16 or FP8 (FP4 is
  not modelled). Scored: TPOT as one decode step at the row's batch at the mean context
  (isl + osl/2). This leaves out the prefill chunks a continuous batcher interleaves, so it is
  expected to read too fast; it is a proxy for comparing model versions, not the serving model.

Run with the whichgpu to be scored importable (``PYTHONPATH=OLD/src`` scores an older checkout;
``--legacy`` for versions before engine profiles, which had ``--compile`` only)::

    python scripts/proxy_scores.py [--legacy] [--validation ../shared/validation]

It prints, per corpus and per group, rows, median and p90 absolute error and the signed median
(+ = predicted faster than measured).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from whichgpu.cli import app

RUNNER = CliRunner()


def gpt2_config(tmp: Path, hidden: int, heads: int, layers: int, positions: int, vocab: int) -> str:
    path = tmp / f"gpt_h{hidden}_a{heads}_L{layers}_p{positions}_v{vocab}.json"
    if not path.exists():
        path.write_text(json.dumps({
            "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": hidden, "n_head": heads,
            "n_layer": layers, "n_positions": positions, "vocab_size": vocab, "n_inner": None,
            "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
        }))
    return str(path)


def estimate(args: list[str]) -> dict[str, Any] | None:
    r = RUNNER.invoke(app, ["estimate", *args, "--json"])
    if r.exit_code != 0:
        return None
    result: dict[str, Any] = json.loads(r.stdout)["results"][0]
    return result


Scored = tuple[float, float]  # (absolute % error of the metric, signed % error of speed: + = too fast)


def score(predicted: float, measured: float, time: bool) -> Scored:
    """Errors as `whichgpu validate` counts them: APE of the metric itself, signed by speed."""
    ape = 100.0 * abs(predicted / measured - 1.0)
    speed_ratio = measured / predicted if time else predicted / measured
    return ape, 100.0 * (speed_ratio - 1.0)


def vtrain_rows(root: Path, tmp: Path) -> Iterator[tuple[str, Scored | None]]:
    with open(root / "planner_dev" / "vtrain.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["tp"] != "1" or row["pp"] != "1":
                continue
            gpus, gb, mb = int(row["num_gpus"]), int(row["global_batch"]), int(row["micro_batch"])
            cfg = gpt2_config(tmp, int(row["hidden_size"]), int(row["attention_heads"]), int(row["num_layers"]),
                              int(row["seq_len"]), 50257)
            r = estimate([cfg, "--gpu", "a100-sxm4-80gb", "--gpus", str(gpus), "-b", str(mb),
                          "--seq-len", row["seq_len"], "--grad-accum", str(gb // (mb * gpus)),
                          "--checkpointing", "full", "--precision", "amp-fp16"])
            group = f"vtrain n{gpus} h{row['hidden_size']}"
            if r is None:
                yield group, None
                continue
            predicted_ms = gb / r["samples_per_s"] * 1e3
            yield group, score(predicted_ms, float(row["iteration_time_ms"]), time=True)


def foundry_rows(root: Path, tmp: Path) -> Iterator[tuple[str, Scored | None]]:
    gpu_of = {"a100_80gb": "a100-sxm4-80gb", "a100_40gb": "a100-sxm4-40gb"}
    with open(root / "planner_dev" / "llm_foundry.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            gpus, seq = int(row["num_gpus"]), int(row["seq_len"])
            cfg = gpt2_config(tmp, int(row["arch_d_model"]), int(row["arch_n_heads"]), int(row["arch_n_layers"]),
                              seq, int(row["arch_vocab_size"]))
            args = [cfg, "--gpu", gpu_of[row["gpu"]], "--gpus", str(gpus), "--sharding", "fsdp-full",
                    "-b", row["micro_batch_size"], "--seq-len", str(seq), "--grad-accum", row["grad_accum"],
                    "--precision", "amp-bf16"]
            if row["activation_checkpointing"] == "True":
                args += ["--checkpointing", "full"]
            r = estimate(args)
            group = f"foundry {row['gpu']} {row['model']}"
            if r is None:
                yield group, None
                continue
            yield group, score(r["tokens_per_s"] / gpus, float(row["throughput_tokens_per_s_per_gpu"]), time=False)


def serving_rows(root: Path, legacy: bool) -> Iterator[tuple[str, Scored | None]]:
    models = {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
              "meta-llama/Llama-3.1-70B": "llama-3.1-70b"}
    gpus = {"H100-SXM5-80GB": "h100-sxm5-80gb", "H200-SXM-141GB": "h200-sxm-141gb", "B200": "b200"}
    engines = {"vllm": "vllm", "sglang": "vllm", "trtllm": "tensorrt-llm"}
    seen: set[str] = set()
    with open(root / "serving_dev.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            if (row["mode"] != "agg" or row["tp"] != "1" or row["pp"] not in ("1", "")
                    or row["hf_model_id"] not in models or row["precision"] not in ("", "bf16", "fp8")
                    or row["measurement_group"] in seen):
                continue
            seen.add(row["measurement_group"])
            batch = row["batch_size"] or row["concurrency"]
            context = int(row["isl"]) + int(row["osl"]) // 2
            args = [models[row["hf_model_id"]], "--gpu", gpus[row["gpu"]], "--task", "infer", "--phase", "decode",
                    "-b", batch, "--context", str(context), "--precision", row["precision"] or "bf16"]
            args += ["--compile"] if legacy else ["--engine", engines[row["engine"]]]
            r = estimate(args)
            group = f"serving {row['engine']} {row['gpu']} {row['model_family']} {row['precision'] or 'bf16'}"
            if r is None:
                yield group, None
                continue
            yield group, score(r["step_s"] * 1e3, float(row["tpot_ms"]), time=True)


def summary(errors: list[Scored]) -> str:
    if not errors:
        return "no scored rows"
    ape = sorted(e[0] for e in errors)
    # Linear interpolation, as validate's percentile (this script also runs against older checkouts).
    p90 = statistics.quantiles(ape, n=10, method="inclusive")[8] if len(ape) > 1 else ape[0]
    return (f"{len(errors):4d} rows  median {statistics.median(ape):5.1f} %  p90 {p90:5.1f} %  "
            f"signed {statistics.median(e[1] for e in errors):+6.1f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--validation", default=str(Path(__file__).resolve().parents[2] / "shared" / "validation"))
    ap.add_argument("--legacy", action="store_true", help="--compile instead of --engine (before engine profiles)")
    a = ap.parse_args()
    root = Path(a.validation)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        corpora = {"vtrain (pure DP)": vtrain_rows(root, tmp), "llm-foundry (FSDP)": foundry_rows(root, tmp),
                   "serving TPOT proxy": serving_rows(root, a.legacy)}
        for name, rows in corpora.items():
            by_group: dict[str, list[Scored]] = {}
            failed = 0
            for group, err in rows:
                if err is None:
                    failed += 1
                else:
                    by_group.setdefault(group, []).append(err)
            everything = [e for errs in by_group.values() for e in errs]
            print(f"{name}: {summary(everything)}" + (f"  ({failed} rows not modelled)" if failed else ""))
            for group in sorted(by_group):
                print(f"    {group:55s} {summary(by_group[group])}")


if __name__ == "__main__":
    main()
