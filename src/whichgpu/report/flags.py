"""Library field names (Plan, WorkloadSpec, Request) -> the command-line flags that set them.

The library speaks in its own terms (``dp``, ``recompute``, ``offload``); the CLI and the reports
meant for it show the flags. This is the one table between the two. A field of an object held by
a Request is named by its path (``job.tokens``, ``cost.years``). A field missing from the table
is set by ``--`` + its name with dashes (``max_gpus`` -> ``--max-gpus``); a field no flag sets
maps to "" (its errors are shown without a flag).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from whichgpu.errors import InputError

FLAGS: dict[str, str] = {
    "dp": "--gpus", "tp": "--tp", "pp": "--pp", "vp": "--vp", "cp": "--cp", "ep": "--ep",
    "micro_batch": "--batch-size", "batch_size": "--batch-size", "grad_accum": "--grad-accum",
    "sharding": "--sharding", "recompute": "--checkpointing", "checkpointing": "--checkpointing",
    "schedule": "--schedule", "engine": "--engine", "overlap": "--overlap", "offload": "--offload-optimizer",
    "power_limit_w": "--power-limit-w", "system": "--system", "bucket_mb": "--bucket-mb",
    "precision": "--precision", "optimizer": "--optimizer", "optimizer_impl": "--optimizer-impl",
    "finetune": "--finetune", "seq_len": "--seq-len", "context": "--context", "image_size": "--image-size",
    "task": "--task", "phase": "--phase", "lora_rank": "--lora-rank", "sparsity": "--sparsity",
    "optimizer_state_bits": "--optimizer", "master_weights": "--no-master-weights",
    # Request (recommend); max_gpus, max_power_w, min_memory_gb, objective follow the default rule
    "budget_usd": "--budget", "gpu_ids": "--gpu", "job.tokens": "--job-tokens", "job.epochs": "--job-epochs",
    "job.dataset_size": "--dataset-size", "cost.mode": "--buy/--rent", "cost.hours_per_month": "--hours-per-month",
    "cost.years": "--years", "cost.usd_per_kwh": "--electricity-usd-per-kwh",
    # set from measurement files, never by a flag
    "fragmentation": "", "cuda_context_bytes": "",
}


# Other spellings a command accepts for a flag of FLAGS (`plan` takes --recompute, the issue's
# and Megatron's word, beside --checkpointing): an error names the one the user typed.
ALIASES: dict[str, tuple[str, ...]] = {"--checkpointing": ("--recompute",)}


def flag_of(field: str, typed: Iterable[str] = ()) -> str:
    """The flag that sets a library field: FLAGS, else ``--`` + the field with dashes ("" for none);
    an alias of it (ALIASES) when the user `typed` that alias and not the flag itself."""
    flag = FLAGS.get(field, "--" + field.replace("_", "-")) if field else ""
    typed = set(typed)
    if flag and flag not in typed:
        flag = next((a for a in ALIASES.get(flag, ()) if a in typed), flag)
    return flag


def flag_message(e: Exception, typed: Iterable[str] = ()) -> str:
    """An error's message with the flag that sets the field at fault in front, when there is one
    (as the user spelled it: `typed` holds the options of their command line).

    Only an InputError's ``field`` is a library field; other errors' (a CatalogError's names a
    field of a file) are not flags and the message is shown as it is.
    """
    flag = flag_of(e.field, typed) if isinstance(e, InputError) else ""
    return f"{flag}: {e}" if flag and flag not in str(e) else str(e)


def flags(changes: Iterable[tuple[str, Any]]) -> str:
    """The command-line flags that make `changes` (library field, value)."""
    out = []
    for name, value in changes:
        if name == "offload":
            out.append("--offload-optimizer")
        elif name == "optimizer_state_bits" and value == 8:
            out.append("--optimizer adamw-8bit")
        else:
            out.append(f"{flag_of(name)} {value}")
    return " ".join(out)
