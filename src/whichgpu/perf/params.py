"""The performance model's fitted parameters (see params.toml)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PARAMS_FILE = Path(__file__).with_name("params.toml")


@dataclass(frozen=True)
class PerfParams:
    """Generic physical parameters (see params.toml for what each one is)."""

    mm_ceiling: float = 0.80
    fp32_ceiling: float = 0.80
    tf32_factor: float = 0.80
    conv_factor: float = 0.80
    direct_conv_factor: float = 0.30
    direct_conv_bwd_factor: float = 0.30
    attention_factor: float = 0.60
    k_half: float = 48.0
    mem_ceiling_hbm: float = 0.85
    mem_ceiling_gddr: float = 0.85
    mem_ramp_us: float = 2.0
    l2_speedup: float = 2.5
    kernel_latency_us: float = 3.0
    graph_kernel_us: float = 1.5
    nchw_transpose_passes: float = 2.0
    nchw_bwd_passes: float = 2.0
    winograd_speedup: float = 1.5
    consumer_clock: float = 1.0
    w_per_tflops_volta: float = 0.0
    w_per_tflops_turing: float = 0.0
    w_per_tflops_ga100: float = 0.0
    w_per_tflops_ga10x: float = 0.0
    w_per_tflops_ada: float = 0.0
    w_per_tflops_hopper: float = 0.0
    ddp_overlap: float = 0.8
    dp_jitter: float = 0.03
    nccl_efficiency: float = 0.80
    tp_collective_us: float = 15.0
    sparse_speedup: float = 1.5

    def with_values(self, **kw: float) -> PerfParams:
        return replace(self, **kw)

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_CACHE: dict[str, tuple[PerfParams, dict[str, Any]]] = {}


def load_params(path: Path | None = None) -> PerfParams:
    return load_params_with_meta(path)[0]


def load_params_with_meta(path: Path | None = None) -> tuple[PerfParams, dict[str, Any]]:
    p = path or PARAMS_FILE
    key = str(p)
    if key not in _CACHE:
        with open(p, "rb") as fh:
            raw = tomllib.load(fh)
        vals = {k: float(v) for k, v in raw.get("params", {}).items() if k in {f.name for f in fields(PerfParams)}}
        _CACHE[key] = (PerfParams(**vals), dict(raw.get("fit", {})))
    return _CACHE[key]
