"""The web API's parameters: one table per endpoint, each entry naming the keyword of the command's
run function it sets, its type, its valid range (the CLI flag's, from limits.py) and the flag,
so that a bad value gets the CLI's one-line message ("--batch-size: 0 is out of range; ...").

Only names and numbers cross this boundary: no parameter takes a path (the web app never reads
a file the browser names, nor runs a factory); a model is a zoo name or an uploaded config.json
(web/uploads.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from whichgpu import limits
from whichgpu.commands import serve as serve_cmd
from whichgpu.commands.common import MOE_CAPACITY, MOE_SKEW
from whichgpu.errors import InputError, UnknownNameError
from whichgpu.limits import Bound

MAX_TEXT = 300
"""Longest text value (names, comma-separated GPU lists) accepted."""


@dataclass(frozen=True)
class Param:
    """One query parameter: `kind` is int, float, str or bool; `to` the run function's keyword
    (default: the parameter's name); `choices` the valid words of a str, when fixed here."""

    kind: str
    flag: str
    bound: Bound | None = None
    to: str = ""
    choices: tuple[str, ...] = ()


def _i(flag: str, bound: Bound, to: str = "") -> Param:
    return Param("int", flag, bound, to)


def _f(flag: str, bound: Bound, to: str = "") -> Param:
    return Param("float", flag, bound, to)


def _s(flag: str, to: str = "", choices: tuple[str, ...] = ()) -> Param:
    return Param("str", flag, None, to, choices)


def _b(flag: str, to: str = "") -> Param:
    return Param("bool", flag, None, to)


# Shared by the workload commands (recommend, estimate, fit).
_WORKLOAD: dict[str, Param] = {
    "model": _s("MODEL"),
    "task": _s("--task"),
    "batch_size": _i("--batch-size", limits.BATCH),
    "seq_len": _i("--seq-len", limits.SEQ_LEN),
    "image_size": _i("--image-size", limits.IMAGE_SIZE),
    "precision": _s("--precision"),
    "optimizer": _s("--optimizer"),
    "finetune": _s("--finetune"),
    "lora_rank": _i("--lora-rank", limits.LORA_RANK),
    "checkpointing": _s("--checkpointing"),
    "moe_capacity": _f("--moe-capacity", MOE_CAPACITY),
    "moe_skew": _f("--moe-skew", MOE_SKEW),
    "system": _s("--system"),
}

RECOMMEND: dict[str, Param] = {
    **_WORKLOAD,
    "use_case": _s("--use-case"),
    "budget": _f("--budget", limits.BUDGET_USD),
    "mode": _s("--buy/--rent", to="buy", choices=("buy", "rent")),
    "hours_per_month": _f("--hours-per-month", limits.HOURS_PER_MONTH),
    "years": _f("--years", limits.YEARS),
    "electricity": _f("--electricity-usd-per-kwh", limits.USD_PER_KWH),
    "max_gpus": _i("--max-gpus", limits.MAX_GPUS),
    "max_power_w": _f("--max-power-w", limits.POWER_BUDGET_W),
    "min_memory_gb": _f("--min-memory-gb", limits.MEMORY_GB),
    "objective": _s("--objective"),
    "job_tokens": _f("--job-tokens", limits.JOB_TOKENS),
    "job_epochs": _f("--job-epochs", limits.JOB_EPOCHS),
    "dataset_size": _f("--dataset-size", limits.DATASET_SIZE),
    "power_limit_w": _f("--power-limit-w", limits.POWER_W),
    "step_host_ms": _f("--step-host-ms", limits.STEP_HOST_MS),
    "gpu": _s("--gpu"),
    "engine": _s("--engine"),
}

COMPARE: dict[str, Param] = {
    **_WORKLOAD,
    "gpu": _s("--gpu"),
    "gpus": _i("--gpus", limits.GPUS),
    "sharding": _s("--sharding"),
    "tp": _i("--tp", limits.TP),
    "phase": _s("--phase"),
    "context": _i("--context", limits.CONTEXT),
    "engine": _s("--engine"),
    "grad_accum": _i("--grad-accum", limits.GRAD_ACCUM),
    "power_limit_w": _f("--power-limit-w", limits.POWER_W),
    "step_host_ms": _f("--step-host-ms", limits.STEP_HOST_MS),
    "top": _i("--top", limits.Bound(1, 50)),
}

FIT: dict[str, Param] = {
    **_WORKLOAD,
    "gpu": _s("--gpu"),
    "gpus": _i("--gpus", limits.GPUS),
    "sharding": _s("--sharding"),
    "offload_optimizer": _b("--offload-optimizer"),
    "phase": _s("--phase"),
    "context": _i("--context", limits.CONTEXT),
    "grad_accum": _i("--grad-accum", limits.GRAD_ACCUM),
    "no_master_weights": _b("--no-master-weights"),
}

PLAN: dict[str, Param] = {
    "model": _s("MODEL"),
    "gpu": _s("--gpu"),
    "gpus": _i("--gpus", limits.GPUS),
    "system": _s("--system"),
    "global_batch": _i("--global-batch", limits.BATCH),
    "seq_len": _i("--seq-len", limits.SEQ_LEN),
    "precision": _s("--precision"),
    **{k: _i(f"--{k}", limits.GPUS) for k in ("tp", "pp", "vp", "cp", "ep", "etp")},
    "micro_batch": _i("--micro-batch", limits.BATCH),
    "sharding": _s("--sharding"),
    "recompute": _s("--recompute"),
    "schedule": _s("--schedule"),
    "attention": _s("--attention"),
    "grad_dtype": _s("--grad-dtype"),
    "fp8_params": _b("--fp8-params"),
    "objective": _s("--objective"),
    "step_host_ms": _f("--step-host-ms", limits.STEP_HOST_MS),
    "top": _i("--top", limits.Bound(1, 100)),
}

SERVE: dict[str, Param] = {
    "model": _s("MODEL"),
    "gpu": _s("--gpu"),
    "system": _s("--system"),
    "tp": _i("--tp", limits.TP),
    "ep": _i("--ep", limits.TP),
    "pp": _i("--pp", limits.TP),
    "attention_dp": _i("--attention-dp", limits.TP),
    "spec_draft_len": _i("--spec-draft-len", serve_cmd.SPEC_DRAFT),
    "spec_acceptance": _f("--spec-acceptance", serve_cmd.ACCEPTANCE),
    "spec_draft_model": _s("--spec-draft-model"),
    "replicas": _i("--replicas", serve_cmd.REPLICAS),
    "engine": _s("--engine"),
    "adp_balance": _s("--adp-balance"),
    "concurrency": _i("--concurrency", serve_cmd.CONCURRENCY),
    "rate": _f("--rate", serve_cmd.RATE),
    "input_len": _i("--input-len", limits.SEQ_LEN),
    "output_len": _i("--output-len", limits.SEQ_LEN),
    "requests": _i("--requests", Bound(1, 20_000)),  # a web request's simulation stays under seconds
    "precision": _s("--precision"),
    "kv_dtype": _s("--kv-dtype"),
    "gpu_memory_utilization": _f("--gpu-memory-utilization", serve_cmd.UTILIZATION),
    "max_num_seqs": _i("--max-num-seqs", serve_cmd.CONCURRENCY),
    "max_batched_tokens": _i("--max-batched-tokens", limits.SEQ_LEN),
    "prefix_cache_hit_rate": _f("--prefix-cache-hit-rate", serve_cmd.HIT_RATE),
    "slo_ttft_ms": _f("--slo-ttft-ms", serve_cmd.SLO_MS),
    "slo_tpot_ms": _f("--slo-tpot-ms", serve_cmd.SLO_MS),
    "slo_percentile": _i("--slo-percentile", Bound(50, 99)),
    "seed": _i("--seed", serve_cmd.SEED),
}

# `recommend --rate R --slo-...` (recommend_serving_run): no --prices (a path) nor --price.
RECOMMEND_SERVING: dict[str, Param] = {
    "model": _s("MODEL"),
    "use_case": _s("--use-case"),
    "rate": _f("--rate", serve_cmd.RATE),
    "slo_ttft_ms": _f("--slo-ttft-ms", serve_cmd.SLO_MS),
    "slo_tpot_ms": _f("--slo-tpot-ms", serve_cmd.SLO_MS),
    "slo_percentile": _i("--slo-percentile", Bound(50, 99)),
    "input_len": _i("--input-len", limits.SEQ_LEN),
    "output_len": _i("--output-len", limits.SEQ_LEN),
    "precision": _s("--precision"),
    "engine": _s("--engine"),
    "gpu": _s("--gpu"),
    "max_gpus": _i("--max-gpus", limits.MAX_GPUS),
    "min_memory_gb": _f("--min-memory-gb", limits.MEMORY_GB),
    "mode": _s("--buy/--rent", to="buy", choices=("buy", "rent")),
    "hours_per_month": _f("--hours-per-month", limits.HOURS_PER_MONTH),
    "years": _f("--years", limits.YEARS),
    "electricity": _f("--electricity-usd-per-kwh", limits.USD_PER_KWH),
    "top": _i("--top", limits.ROWS),
}

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse(raw: Mapping[str, object], table: Mapping[str, Param]) -> dict[str, Any]:
    """The run function's keywords from the request's parameters: each checked as its flag is.
    An empty value is a parameter not given; an unknown name is an error with the valid ones."""
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if not table:
            raise InputError(f"unknown parameter {name!r}: this endpoint takes none")
        if name not in table:
            raise UnknownNameError("parameter", name, table)
        p = table[name]
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        out[p.to or name] = _value(p, value)
    return out


def _value(p: Param, value: object) -> Any:
    if p.kind in ("int", "float"):
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise InputError(f"{p.flag}: {value!r} is not a number")
        assert p.bound is not None
        try:
            return p.bound.parse(value.strip() if isinstance(value, str) else value, p.kind == "int")
        except ValueError as e:
            raise InputError(f"{p.flag}: {e}") from None
    if p.kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise InputError(f"{p.flag}: {value!r} is not true or false")
    if not isinstance(value, str):
        raise InputError(f"{p.flag}: {value!r} is not text")
    text = value.strip()
    if len(text) > MAX_TEXT or any(ord(c) < 32 for c in text):
        raise InputError(f"{p.flag}: not a name (at most {MAX_TEXT} printable characters)")
    if p.choices:
        if text not in p.choices:
            raise InputError(f"{p.flag}: {text!r} is not one of {', '.join(p.choices)}")
        if p.to == "buy":
            return text == "buy"
    return text
