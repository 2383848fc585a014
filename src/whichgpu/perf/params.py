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

from whichgpu.errors import CatalogError

PARAMS_FILE = Path(__file__).with_name("params.toml")


@dataclass(frozen=True)
class PerfParams:
    """Generic physical parameters. Their values, what each one is and how it was fitted live in
    params.toml only (scripts/fit_params.py writes them)."""

    mm_ceiling: float
    fp32_ceiling: float
    tf32_factor: float
    conv_factor: float
    direct_conv_factor: float
    direct_conv_bwd_factor: float
    attention_factor: float
    k_half: float
    misaligned_flops_per_sm_clock: float
    mem_ceiling_hbm: float
    mem_ceiling_gddr: float
    mem_ramp_us: float
    l2_speedup: float
    kernel_latency_us: float
    graph_kernel_us: float
    nchw_transpose_passes: float
    nchw_bwd_passes: float
    winograd_speedup: float
    consumer_clock: float
    w_per_tflops_volta: float
    w_per_tflops_turing: float
    w_per_tflops_ga100: float
    w_per_tflops_ga10x: float
    w_per_tflops_ada: float
    w_per_tflops_hopper: float
    w_per_tflops_blackwell: float
    ddp_overlap: float
    dp_jitter: float
    planner_dp_jitter: float
    nccl_efficiency: float
    tp_collective_us: float
    sparse_speedup: float
    fp4_stream_efficiency: float

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
        names = [f.name for f in fields(PerfParams)]
        given = raw.get("params", {})
        missing = [n for n in names if n not in given]
        if missing:
            raise CatalogError(str(p), "params", "missing parameter(s): " + ", ".join(missing))
        vals = {k: float(given[k]) for k in names}
        _CACHE[key] = (PerfParams(**vals), dict(raw.get("fit", {})))
    return _CACHE[key]
