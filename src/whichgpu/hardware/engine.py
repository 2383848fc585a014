"""Execution engines as data: how a program's kernels are launched, fused and chosen.

One TOML file per engine in ``hardware/engines/`` (PyTorch eager, torch.compile, CUDA-graph
replay, gpt-fast, TensorRT-LLM, llama.cpp, vLLM, XLA). An engine says:

* launch: whether kernels replay from a CUDA graph, and the host (CPU) time to issue one op,
  one metadata-only op and one step;
* kernels: which ops fuse (none; chains of elementwise/reduction ops; those chains also into
  the epilogue of the GEMM or convolution before them), whether convolutions run channels-last
  whatever the model's layout, how attention runs, whether FP16 GEMMs accumulate in FP16, and
  how fast its weight-only dequantising GEMMs stream weights relative to 16-bit ones;
* serving (optional): host time per running request per step, the GEMMs' weight-read and the
  grouped expert GEMMs' efficiencies, and the fixed GPU time of an MoE layer's routing and
  expert dispatch per step (`serving/step.py`);
* sources for every figure (numbers without a citation are fitted by scripts/fit_params.py
  on the dev validation corpus, and say so).

Users add or override engines with files in ``--engines DIR`` / ``$WHICHGPU_ENGINES`` (an
override names the engine with ``id`` and holds only what changes), as with the GPU catalog. An
engine that differs from another in a few fields says ``based_on = "ID"`` and holds only those
(and its own id, name and aliases): it follows the other's values, a refit included.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whichgpu.errors import CatalogError, UnknownNameError
from whichgpu.hardware.catalog import merge_raw
from whichgpu.hardware.datafiles import (
    Field,
    Raw,
    check_shared,
    flag,
    number,
    one_of,
    read_toml,
    text,
    unknown_field,
    user_files,
)
from whichgpu.hardware.names import NamedEntries

ENGINES_DIR = Path(__file__).parent / "engines"
SCHEMA = "whichgpu.engine/1"
ENV_VAR = "WHICHGPU_ENGINES"
FUSIONS = ("none", "pointwise", "epilogue")
CONV_LAYOUTS = ("as-traced", "nhwc")
ATTENTIONS = ("as-traced", "eager", "fused")
CROSS_ENTROPIES = ("fused", "vocab-parallel")
"""The training loss's kernels (parallel planner): one fused kernel each way over the logits, or
Megatron's unfused vocab-parallel cross-entropy (an FP32 copy of the logits, then max, subtract,
exp, sum and divide passes; a multiply and the cast back in backward)."""
DEFAULT_ENGINE = "pytorch"
NAME = text(name=True)  # the id, name and aliases users type (--engine)

# Every field of both sections is required but the serving engines' eleven (step_host_us_per_seq,
# moe_efficiency, moe_layer_us, weight_stream_efficiency, moe_compute_efficiency, request_overhead_ms,
# nvls, multimem_max_mb, multimem_min_gpus, eager_kernel_host_us, prefill_graph_tokens; defaults 0,
# 1, 0, 1, 1, 0, true, 0, 0, 0 and 0) and the
# training planner's microbatch_host_ms and cross_entropy (defaults 0 and "fused"). Plausible ranges
# (packaged: 0-35 us per op or MoE layer, 0-15 ms per step, 0.8-1.0 x bandwidth) are wide, and
# catch a typo (1e300, a unit off by 10^6).
_FIELDS: dict[str, dict[str, Field]] = {
    "launch": {
        "graphs": flag(required=True),
        "host_op_us": number("nonneg", required=True, hi=100_000, unit="us"),
        "host_view_us": number("nonneg", required=True, hi=100_000, unit="us"),
        "step_host_ms_train": number("nonneg", required=True, hi=100_000, unit="ms"),
        "step_host_ms_infer": number("nonneg", required=True, hi=100_000, unit="ms"),
        "step_host_us_per_seq": number("nonneg", hi=100_000, unit="us"),
        "microbatch_host_ms": number("nonneg", hi=100_000, unit="ms"),
        "request_overhead_ms": number("nonneg", hi=100_000, unit="ms"),
        "eager_kernel_host_us": number("nonneg", hi=100_000, unit="us"),
        "prefill_graph_tokens": number("nonneg", hi=1_000_000, unit="tokens"),
    },
    "kernels": {
        "fusion": one_of(FUSIONS, required=True),
        "conv_layout": one_of(CONV_LAYOUTS, required=True),
        "attention": one_of(ATTENTIONS, required=True),
        "fp16_accumulate": flag(required=True),
        "quantized_bandwidth": number(required=True, lo=0.01, hi=100, unit="x the 16-bit GEMMs' bandwidth"),
        "grouped_kv": flag(required=True),
        "cross_entropy": one_of(CROSS_ENTROPIES),
        "moe_efficiency": number(lo=0.01, hi=1.0, unit="x the GEMM roofline"),
        "moe_compute_efficiency": number(lo=0.01, hi=1.0, unit="x the dense GEMMs' math rate"),
        "moe_layer_us": number("nonneg", hi=100_000, unit="us"),
        "weight_stream_efficiency": number(lo=0.01, hi=1.0, unit="x the memory roofline"),
        "nvls": flag(),
        "multimem_max_mb": number("nonneg", hi=1_000_000, unit="MiB"),
        "multimem_min_gpus": number("nonneg", hi=1024, unit="GPUs"),
    },
}


@dataclass(frozen=True)
class Engine:
    """How kernels are issued and which ones run (see the module docstring)."""

    id: str
    name: str
    description: str
    graphs: bool
    host_op_us: float
    host_view_us: float
    step_host_ms_train: float
    step_host_ms_infer: float
    fusion: str
    conv_layout: str
    attention: str
    fp16_accumulate: bool
    quantized_bandwidth: float
    grouped_kv: bool = True  # decode attention reads each K/V head once for its query group (GQA)
    step_host_us_per_seq: float = 0.0  # serving: host time per running sequence per engine step
    microbatch_host_ms: float = 0.0  # training planner: host work per micro-batch that the GPU waits for
    cross_entropy: str = "fused"  # training planner: the loss's kernels (CROSS_ENTROPIES)
    moe_efficiency: float = 1.0  # serving: the grouped-expert GEMMs' fraction of the GEMM roofline
    moe_layer_us: float = 0.0  # serving: fixed GPU time of an MoE layer's routing and expert dispatch per step
    moe_compute_efficiency: float = 1.0  # serving: grouped-expert GEMMs' math rate, fraction of a dense GEMM's
    request_overhead_ms: float = 0.0  # serving: per request, from its send until the scheduler sees it
    eager_kernel_host_us: float = 0.0  # serving: host time per kernel a step launches outside CUDA graphs
    prefill_graph_tokens: float = 0.0  # serving: largest step with prefill tokens a graph replays (0: none)
    weight_stream_efficiency: float = 1.0  # serving: the GEMMs' weight reads, fraction of the memory roofline
    nvls: bool = True  # serving: its NCCL all-reduces may use NVLink SHARP (the engine leaves NCCL's NVLS on)
    multimem_max_mb: float = 0.0  # serving: all-reduces up to this size run the engine's multicast kernel
    multimem_min_gpus: float = 0.0  # ... over groups of at least this many GPUs (0: no such kernel)
    aliases: tuple[str, ...] = ()
    vendors: tuple[str, ...] = ()  # the accelerator vendors it runs on (empty: any)
    sources: dict[str, str] = field(default_factory=dict)
    path: str = ""

    def nvls_for(self, group: int, nbytes: float) -> bool:
        """Whether an all-reduce of `nbytes` over `group` GPUs may reduce in the NVLink switch: NCCL's
        NVLS where the engine leaves it on, else the engine's own multicast kernel within its limits
        (vLLM's symmetric-memory all-reduce: multimem over 6-8 GPUs up to 64 MiB)."""
        return self.nvls or (0 < self.multimem_min_gpus <= group and nbytes <= self.multimem_max_mb * 2**20)

    def unsupported_on(self, gpu_name: str, gpu_vendor: str) -> str | None:
        """Why this engine does not run on that accelerator (None when it does or may)."""
        if not self.vendors or gpu_vendor in self.vendors:
            return None
        return f"{self.name} runs on {' and '.join(self.vendors)} GPUs only, and {gpu_name} is {gpu_vendor}'s"

    @property
    def fuses(self) -> bool:
        return self.fusion != "none"

    @property
    def attention_option(self) -> str | None:
        """The workload's attention option under this engine: "eager" (matmul + softmax, as
        llama.cpp without -fa), "sdpa" (the engine's fused kernel), None (as the program says)."""
        return {"eager": "eager", "fused": "sdpa"}.get(self.attention)

    def step_host_s(self, task: str, override_ms: float | None = None) -> float:
        """Host time per step outside kernel issue, seconds: `override_ms` (a user's own loop,
        Plan.step_host_ms) or this engine's figure for training or inference."""
        if override_ms is not None:
            return override_ms * 1e-3
        return (self.step_host_ms_train if task == "train" else self.step_host_ms_infer) * 1e-3

    def step_host_text(self, task: str, override_ms: float | None = None) -> str:
        """`step_host_s` in words, with where the figure comes from."""
        ms = self.step_host_s(task, override_ms) * 1e3
        if override_ms is not None:
            return f"{ms:g} ms of host work per step outside kernel issue (--step-host-ms)"
        loop = "training loop's own work (data loading, logging, reading the loss)" if task == "train" else \
            "inference loop's own work (input preparation, reading the results)"
        return (f"{ms:g} ms of host work per step outside kernel issue: engine {self.id}'s figure for a {loop}; "
                "--step-host-ms sets your own loop's")

    def summary(self) -> str:
        launch = "CUDA graphs" if self.graphs else f"{self.host_op_us:g} us host time per op"
        fusion = {"none": "no fusion", "pointwise": "elementwise chains fused",
                  "epilogue": "elementwise chains fused, also into GEMM/conv epilogues"}[self.fusion]
        extra = []
        if self.conv_layout == "nhwc":
            extra.append("channels-last convolutions")
        if self.attention != "as-traced":
            extra.append(f"{self.attention} attention")
        if self.fp16_accumulate:
            extra.append("FP16-accumulate GEMMs")
        return f"{self.name}: {launch}, {fusion}" + ("".join(f", {e}" for e in extra))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "description": self.description, "graphs": self.graphs,
                "host_op_us": self.host_op_us, "host_view_us": self.host_view_us,
                "step_host_ms_train": self.step_host_ms_train, "step_host_ms_infer": self.step_host_ms_infer,
                "microbatch_host_ms": self.microbatch_host_ms, "cross_entropy": self.cross_entropy,
                "fusion": self.fusion, "conv_layout": self.conv_layout, "attention": self.attention,
                "fp16_accumulate": self.fp16_accumulate, "quantized_bandwidth": self.quantized_bandwidth,
                "grouped_kv": self.grouped_kv, "step_host_us_per_seq": self.step_host_us_per_seq,
                "moe_efficiency": self.moe_efficiency, "moe_layer_us": self.moe_layer_us,
                "moe_compute_efficiency": self.moe_compute_efficiency, "request_overhead_ms": self.request_overhead_ms,
                "weight_stream_efficiency": self.weight_stream_efficiency, "nvls": self.nvls,
                "multimem_max_mb": self.multimem_max_mb, "multimem_min_gpus": self.multimem_min_gpus,
                "eager_kernel_host_us": self.eager_kernel_host_us, "prefill_graph_tokens": self.prefill_graph_tokens,
                "vendors": list(self.vendors),
                "sources": dict(self.sources)}


def _check(path: str, name: str, value: Any, f: Field) -> None:
    if isinstance(value, bool) and bool not in f.types:
        raise CatalogError(path, name, f"must be a number, got {value!r}")
    if not isinstance(value, f.types):
        want = "true or false" if f.check == "bool" else "a number" if f.check in ("pos", "nonneg") else "a string"
        raise CatalogError(path, name, f"must be {want}, got {value!r}")
    if f.check in ("pos", "nonneg"):
        x = float(value) if isinstance(value, (int, float)) else math.nan
        if not math.isfinite(x):
            raise CatalogError(path, name, f"must be a finite number, got {value!r}")
        if f.check == "pos" and not x > 0:
            raise CatalogError(path, name, f"must be > 0, got {value!r}")
        if f.check == "nonneg" and not x >= 0:
            raise CatalogError(path, name, f"must be >= 0, got {value!r}")
    if f.check == "choice" and value not in f.choices:
        raise CatalogError(path, name, f"must be one of {', '.join(f.choices)}, got {value!r}")
    check_shared(path, name, value, f)


def _from_raw(path: str, raw: dict[str, Any]) -> Engine:
    if raw.get("schema") != SCHEMA:
        raise CatalogError(path, "schema", f"must be {SCHEMA!r}")
    for key in ("id", "name"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise CatalogError(path, key, "must be a non-empty string")
        check_shared(path, key, raw[key], NAME)
    vals: dict[str, Any] = {}
    for section, fields in _FIELDS.items():
        sec = raw.get(section)
        if not isinstance(sec, dict):
            raise CatalogError(path, section, "missing section [" + section + "]")
        for key in sec:
            if key not in fields:
                raise unknown_field(path, f"{section}.{key}", fields)
        for key, f in fields.items():
            if key not in sec:
                if not f.required:
                    continue
                raise CatalogError(path, f"{section}.{key}", "missing")
            _check(path, f"{section}.{key}", sec[key], f)
            vals[key] = float(sec[key]) if f.check in ("pos", "nonneg") else sec[key]
    aliases = raw.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise CatalogError(path, "aliases", "must be a list of strings")
    check_shared(path, "aliases", aliases, NAME)
    vendors = raw.get("vendors", [])
    if not isinstance(vendors, list) or not all(isinstance(v, str) and v for v in vendors):
        raise CatalogError(path, "vendors", "must be a list of vendor names (empty or absent: any)")
    sources = raw.get("sources", {})
    if not isinstance(sources, dict):
        raise CatalogError(path, "sources", "must be a table of field = source")
    return Engine(id=raw["id"], name=raw["name"], description=str(raw.get("description", "")),
                  aliases=tuple(aliases), vendors=tuple(vendors), sources={str(k): str(v) for k, v in sources.items()},
                  path=path, **vals)


class Engines(NamedEntries[Engine]):
    """The engine profiles, resolvable by id, name or alias."""

    kind = "engine"
    hint = "whichgpu engines"


def user_engine_dirs(explicit: str | None) -> tuple[str, ...]:
    raw = explicit if explicit is not None else os.environ.get(ENV_VAR, "")
    return tuple(d for d in raw.split(os.pathsep) if d)


@functools.lru_cache(maxsize=8)
def load_engines(user_dirs: tuple[str, ...] = ()) -> Engines:
    raws: dict[str, tuple[str, Raw]] = {}
    for p in sorted(ENGINES_DIR.glob("*.toml")):
        raw = read_toml(p)
        raws[str(raw.get("id", p.stem))] = (str(p), raw)
    for path, raw in user_files(user_dirs, "engine directory does not exist"):
        eid = str(raw.get("id", ""))
        raws[eid] = (path, merge_raw(raws[eid][1], raw)) if eid in raws else (path, raw)
    return Engines([_from_raw(path, _resolve_base(path, raw, raws)) for path, raw in raws.values()])


def _resolve_base(path: str, raw: Raw, raws: dict[str, tuple[str, Raw]], seen: tuple[str, ...] = ()) -> Raw:
    """`raw` over the engine it is ``based_on`` (that one's own base first); without one, `raw`."""
    base = raw.get("based_on")
    if base is None:
        return raw
    chain = (*seen, str(raw.get("id", "")))
    if not isinstance(base, str) or base not in raws or base in chain:
        raise CatalogError(path, "based_on", f"must name another engine, not one based on this one "
                                             f"({', '.join(sorted(raws))}), got {base!r}")
    own = {k: v for k, v in raw.items() if k != "based_on"}
    return merge_raw(_resolve_base(raws[base][0], raws[base][1], raws, chain), own)


def get_engine(name: str = DEFAULT_ENGINE, engines_dir: str | None = None) -> Engine:
    """The engine profile `name` (an id, name or alias)."""
    try:
        return load_engines(user_engine_dirs(engines_dir)).get(name)
    except UnknownNameError:
        raise
