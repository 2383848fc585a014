"""Load and validate the GPU catalog: packaged spec files plus user override directories.

A user directory (``--catalog DIR`` or ``WHICHGPU_CATALOG``, several joined with the OS path
separator) may hold files of two kinds:

* a new accelerator: a complete file, like the packaged ones;
* an override: a file whose ``id`` (or ``override``) names a packaged entry, holding only the
  fields it changes (a negotiated price, a measured ceiling). Sections merge field by field;
  ``[[measured]]`` entries replace those of the same dtype.

Every problem is reported as ``CatalogError(file, field, what would be valid)``.

A card that lists a tensor-core dtype whose peak no source gives gets an estimate from its SMs
and clock, marked as such (`spec.with_estimated_peaks`), not a silent fall back to FP32.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from whichgpu.errors import CatalogError
from whichgpu.hardware.datafiles import (
    Entry,
    Field,
    FileSchema,
    Raw,
    check_required,
    check_table,
    flag,
    number,
    one_of,
    packaged_entries,
    strings,
    text,
    user_files,
    whole,
)
from whichgpu.hardware.datafiles import (
    read_toml as read_toml,  # re-exported: the zoo, bands and corpus files are read with it
)
from whichgpu.hardware.names import Memory, NamedEntries, check_name
from whichgpu.hardware.spec import (
    ARCHITECTURES,
    COMPUTE_DTYPES,
    PEAK_FIELDS,
    SCALEUP_TOPOLOGIES,
    SEGMENTS,
    VENDORS,
    GpuSpec,
    MeasuredCeiling,
    Price,
    with_estimated_peaks,
)

SPECS_DIR = Path(__file__).parent / "specs"
SCHEMA = "whichgpu.gpu/1"
SYSTEM_SCHEMA = "whichgpu.system/1"  # system files (hardware/system.py) share the user directories
ENV_VAR = "WHICHGPU_CATALOG"
MISSING_DIR = "catalog directory does not exist (from --catalog or $" + ENV_VAR + ")"

# Architectures whose tensor units run FP8 (Ada/Hopper/Blackwell; CDNA3+; Gaudi 2+).
FP8_ARCHITECTURES = frozenset({"ada", "hopper", "blackwell", "cdna3", "cdna4", "gaudi"})
# Only Blackwell-class parts (and CDNA4) have FP4 tensor math.
FP4_ARCHITECTURES = frozenset({"blackwell", "cdna4"})
# No tensor cores before Volta.
NO_TENSOR_ARCHITECTURES = frozenset({"pascal"})

_NUM = (int, float)
_DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")

# Plausible ranges (`Field.lo`..`Field.hi`): wide enough for any accelerator made or announced
# (packaged extremes: 6-288 GB, 272-8000 GB/s, 6.45-13125 dense TFLOP/s, 70-1400 W, 24-304 SMs),
# narrow enough that a typo (1e-300, 1e300, a value in the wrong unit by 10^6) is caught.
# Checks of the GPU files' own: a peak is a positive number or "n/a" (no such hardware path);
# a date is YYYY-MM or YYYY-MM-DD.
PEAK = Field((*_NUM, str), "peak", lo=0.01, hi=100_000, unit='TFLOP/s (TOP/s for integers) or "n/a"')
DATE = Field((str,), "date")
TOP_FIELDS: dict[str, Field] = {
    "schema": text(required=True),
    "id": text(required=True, name=True),
    "override": text(name=True),
    "name": text(required=True, name=True),
    "vendor": text(required=True),
    "architecture": text(required=True),
    "chip": text(required=True),
    "year": whole(required=True, lo=1990, hi=2100),
    "form_factor": text(required=True),
    "segment": text(required=True),
    "aliases": strings(name=True),
    "notes": text(),
}
SECTIONS: dict[str, dict[str, Field]] = {
    "memory": {
        "size_gb": number(required=True, lo=0.5, hi=4096, unit="GB"),
        "type": text(required=True),
        "bandwidth_gbps": number(required=True, lo=10, hi=100_000, unit="GB/s"),
        "l2_cache_mb": number(lo=0.01, hi=4096, unit="MB"),
        "inline_ecc": flag(),
    },
    "compute": {
        "sm_count": whole(lo=1, hi=100_000, unit="SMs"),
        "boost_clock_mhz": number(lo=100, hi=10_000, unit="MHz"),
        "base_clock_mhz": number(lo=100, hi=10_000, unit="MHz"),
        "shared_mem_per_sm_kb": number(lo=1, hi=65_536, unit="KB"),
        "l1_cache_per_sm_kb": number(lo=1, hi=65_536, unit="KB"),
        "sparsity_2to4": flag(),
        "tensor_core_dtypes": strings(),
    },
    "peak_dense": {**{f: PEAK for f in PEAK_FIELDS.values()}, "fp16_acc16_tflops": PEAK},
    "power": {"tdp_w": number(lo=5, hi=5000, unit="W")},
    "interconnect": {
        "scaleup": text(),
        "scaleup_gbps_per_direction": number(lo=0.1, hi=100_000, unit="GB/s"),
        "pcie_gen": whole(lo=1, hi=8),
        "pcie_lanes": whole(lo=1, hi=32, unit="lanes"),
        "scaleup_domain_gpus": whole(lo=1, hi=100_000, unit="GPUs"),
        "scaleup_topology": one_of(SCALEUP_TOPOLOGIES),  # default "switch"
    },
    "price": {
        "launch_msrp_usd": number(lo=1, hi=10_000_000, unit="USD"),
        "launch_source": text(),
        "street_usd": number(lo=1, hi=10_000_000, unit="USD"),
        "street_date": DATE,
        "street_source": text(),
        "cloud_usd_per_hour": number(lo=0.001, hi=10_000, unit="USD per GPU-hour"),
        "cloud_provider": text(),
        "cloud_date": DATE,
        "cloud_source": text(),
    },
}
MEASURED_FIELDS: dict[str, Field] = {
    "dtype": text(required=True),
    "matmul_tflops": number(required=True, lo=0.01, hi=100_000, unit="TFLOP/s"),
    "source": text(required=True),
    "shape": text(),
    "notes": text(),
}


def _check_value(path: str, key: str, value: Any, f: Field) -> None:
    kind = f.check
    if isinstance(value, bool) and kind != "bool":
        raise CatalogError(path, key, f"expected {'a number' if kind in ('pos', 'nonneg', 'peak') else kind}, got {value!r}")
    well_typed = isinstance(value, f.types)  # (a separate flag keeps mypy from narrowing value to object)
    if not well_typed:
        want = {"pos": "a positive number", "nonneg": "a number >= 0", "str": "a string",
                "bool": "true or false", "list": "a list of strings",
                "peak": "a positive number or \"n/a\"", "date": "a date YYYY-MM-DD"}[kind]
        raise CatalogError(path, key, f"expected {want}, got {value!r}")
    if kind == "pos" and not value > 0:
        raise CatalogError(path, key, f"must be > 0, got {value!r}")
    if kind == "peak":
        if isinstance(value, str):
            if value != "n/a":
                raise CatalogError(path, key, f"expected a positive number or \"n/a\" (no such hardware path), got {value!r}")
        elif not value > 0:
            raise CatalogError(path, key, f"must be > 0 or \"n/a\", got {value!r}")
    if kind == "date" and not _DATE.match(value):
        raise CatalogError(path, key, f"expected a date YYYY-MM or YYYY-MM-DD, got {value!r}")
    if kind == "list" and not all(isinstance(v, str) for v in value):
        raise CatalogError(path, key, "expected a list of strings")


def _check_measured(path: str, value: Any) -> None:
    if not isinstance(value, list):
        raise CatalogError(path, "measured", "expected an array of tables [[measured]]")
    for i, m in enumerate(value):
        name = f"measured[{i}]"
        if not isinstance(m, dict):
            raise CatalogError(path, name, "expected a table")
        check_table(path, name, m, MEASURED_FIELDS, _check_value)
        check_required(path, name, m, MEASURED_FIELDS)
        if m["dtype"] not in COMPUTE_DTYPES:
            raise CatalogError(path, f"{name}.dtype", f"unknown dtype {m['dtype']!r}; valid: " + ", ".join(COMPUTE_DTYPES))


def _check_sources(path: str, value: Any) -> None:
    if not isinstance(value, dict) or not all(isinstance(v, str) and v for v in value.values()):
        raise CatalogError(path, "sources", "expected a table of non-empty strings (\"field\" = \"URL or document, date\")")


GPU_FILE = FileSchema(TOP_FIELDS, SECTIONS, _check_value, tables={"measured": _check_measured, "sources": _check_sources},
                      required_sections=("memory", "peak_dense"))


def validate_raw(path: str, raw: Raw, partial: bool = False) -> None:
    """Check one file's structure. `partial` files (overrides) may omit required fields."""
    GPU_FILE.check_fields(path, raw)
    if "schema" in raw and raw["schema"] != SCHEMA:
        raise CatalogError(path, "schema", f"expected {SCHEMA!r}, got {raw['schema']!r}")
    if partial:
        return
    GPU_FILE.check_complete(path, raw)
    if "default" not in raw.get("sources", {}):
        raise CatalogError(path, "sources.default", "every file needs a default source (URL or document, date) for its figures")


def _semantic_checks(path: str, raw: dict[str, Any]) -> None:
    if not re.fullmatch(r"[a-z0-9][a-z0-9.\-]*", raw["id"]):
        raise CatalogError(path, "id", f"expected lowercase letters, digits, '-' or '.', got {raw['id']!r}")
    if raw["vendor"] not in VENDORS:
        raise CatalogError(path, "vendor", f"unknown vendor {raw['vendor']!r}; valid: " + ", ".join(VENDORS))
    arch = raw["architecture"]
    if arch not in ARCHITECTURES:
        raise CatalogError(path, "architecture", f"unknown architecture {arch!r}; valid: " + ", ".join(ARCHITECTURES))
    if raw["segment"] not in SEGMENTS:
        raise CatalogError(path, "segment", f"unknown segment {raw['segment']!r}; valid: " + ", ".join(SEGMENTS))
    peaks = raw.get("peak_dense", {})
    if arch not in FP8_ARCHITECTURES and isinstance(peaks.get("fp8_tflops"), _NUM):
        raise CatalogError(path, "peak_dense.fp8_tflops", f"architecture {arch!r} has no FP8 tensor math; use \"n/a\" (FP8 exists on " + ", ".join(sorted(FP8_ARCHITECTURES)) + ")")
    if arch not in FP4_ARCHITECTURES and isinstance(peaks.get("fp4_tflops"), _NUM):
        raise CatalogError(path, "peak_dense.fp4_tflops", f"architecture {arch!r} has no FP4 tensor math; use \"n/a\"")
    tc = raw.get("compute", {}).get("tensor_core_dtypes", [])
    for d in tc:
        if d not in COMPUTE_DTYPES:
            raise CatalogError(path, "compute.tensor_core_dtypes", f"unknown dtype {d!r}; valid: " + ", ".join(COMPUTE_DTYPES))
    if arch in NO_TENSOR_ARCHITECTURES and tc:
        raise CatalogError(path, "compute.tensor_core_dtypes", f"architecture {arch!r} has no tensor cores; use []")


def _spec_from_raw(path: str, raw: dict[str, Any], overridden_by: tuple[str, ...] = ()) -> GpuSpec:
    _semantic_checks(path, raw)
    mem = raw["memory"]
    comp = raw.get("compute", {})
    pk = raw["peak_dense"]
    peaks: dict[str, float] = {}
    unsupported: set[str] = set()
    for dt, fname in PEAK_FIELDS.items():
        v = pk.get(fname)
        if v == "n/a":
            unsupported.add(dt)
        elif v is not None:
            peaks[dt] = float(v)
    acc16 = pk.get("fp16_acc16_tflops")
    pr = raw.get("price", {})
    ic = raw.get("interconnect", {})
    measured = tuple(
        MeasuredCeiling(m["dtype"], float(m["matmul_tflops"]), m["source"], m.get("shape", ""), m.get("notes", ""))
        for m in raw.get("measured", [])
    )
    def opt(d: dict[str, Any], k: str) -> float | None:
        v = d.get(k)
        return None if v is None else float(v)

    return GpuSpec(
        id=raw["id"],
        name=raw["name"],
        vendor=raw["vendor"],
        architecture=raw["architecture"],
        chip=raw["chip"],
        year=int(raw["year"]),
        form_factor=raw["form_factor"],
        segment=raw["segment"],
        memory_gb=float(mem["size_gb"]),
        inline_ecc=bool(mem.get("inline_ecc", False)),
        memory_type=mem["type"],
        memory_bandwidth_gbps=float(mem["bandwidth_gbps"]),
        peak_tflops=peaks,
        unsupported=frozenset(unsupported),
        aliases=tuple(raw.get("aliases", ())),
        l2_cache_mb=opt(mem, "l2_cache_mb"),
        sm_count=comp.get("sm_count"),
        boost_clock_mhz=opt(comp, "boost_clock_mhz"),
        base_clock_mhz=opt(comp, "base_clock_mhz"),
        shared_mem_per_sm_kb=opt(comp, "shared_mem_per_sm_kb"),
        l1_cache_per_sm_kb=opt(comp, "l1_cache_per_sm_kb"),
        fp16_acc16_tflops=float(acc16) if isinstance(acc16, _NUM) else None,
        sparsity_2to4=comp.get("sparsity_2to4"),
        tensor_core_dtypes=tuple(comp.get("tensor_core_dtypes", ())),
        tdp_w=opt(raw.get("power", {}), "tdp_w"),
        scaleup_link=ic.get("scaleup", ""),
        scaleup_gbps_per_direction=opt(ic, "scaleup_gbps_per_direction"),
        pcie_gen=ic.get("pcie_gen"),
        pcie_lanes=ic.get("pcie_lanes"),
        scaleup_domain_gpus=ic.get("scaleup_domain_gpus"),
        scaleup_topology=ic.get("scaleup_topology", "switch"),
        price=Price(
            launch_msrp_usd=opt(pr, "launch_msrp_usd"),
            launch_source=pr.get("launch_source", ""),
            street_usd=opt(pr, "street_usd"),
            street_date=pr.get("street_date", ""),
            street_source=pr.get("street_source", ""),
            cloud_usd_per_hour=opt(pr, "cloud_usd_per_hour"),
            cloud_provider=pr.get("cloud_provider", ""),
            cloud_date=pr.get("cloud_date", ""),
            cloud_source=pr.get("cloud_source", ""),
        ),
        measured=measured,
        sources=dict(raw.get("sources", {})),
        notes=raw.get("notes", ""),
        path=path,
        overridden_by=overridden_by,
    )


def merge_raw(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Field-by-field merge of an override into a packaged entry."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if key in ("override", "schema"):
            continue
        if key == "measured":
            kept = [m for m in out.get("measured", []) if m["dtype"] not in {n["dtype"] for n in value}]
            out["measured"] = kept + list(value)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key].update(value)
        else:
            out[key] = value
    return out


@dataclass
class Catalog(NamedEntries[GpuSpec]):
    """All accelerators, resolvable by id, name or alias (nvidia-smi and benchmark-table spellings
    too: the index knows each entry's memory)."""

    specs: list[GpuSpec]
    user_dirs: tuple[str, ...] = ()
    kind = "GPU"
    hint = "'whichgpu gpus'"

    def __post_init__(self) -> None:
        super().__init__(self.specs, memory={s.id: Memory(s.memory_gb, s.memory_type) for s in self.specs})

    def get_many(self, names: str | Iterable[str]) -> list[GpuSpec]:
        """Resolve a comma-separated list (or iterable) of names; 'all' means the catalog."""
        if isinstance(names, str):
            parts = [n for n in names.split(",") if n.strip()]
            for n in parts:  # before the spaces are stripped: a tab or newline is refused too
                check_name(self.kind, n)
            names = [n.strip() for n in parts]
        names = list(names)
        if names == ["all"]:
            return list(self.specs)
        return [self.get(n) for n in names]


def user_catalog_dirs(explicit: str | None = None) -> tuple[str, ...]:
    dirs: list[str] = []
    if explicit:
        dirs += [d for d in explicit.split(os.pathsep) if d]
    env = os.environ.get(ENV_VAR, "")
    dirs += [d for d in env.split(os.pathsep) if d]
    return tuple(dirs)


def _overridden(entries: dict[str, Entry], path: str, raw: Raw) -> str | None:
    """The id of the entry the user file changes, or None: a new accelerator."""
    target = raw.get("override", raw.get("id"))
    if not isinstance(target, str):
        raise CatalogError(path, "id", "required field is missing (an override names the entry it changes with id = \"...\")")
    if target in entries:
        return target
    if "override" not in raw:
        return None
    # An override may name the entry by any of its names.
    cat = Catalog([_spec_from_raw(e.path, e.raw) for e in entries.values()])
    try:
        return cat.get(target).id
    except Exception as e:
        raise CatalogError(path, "override", str(e)) from None


def load_catalog(catalog_dir: str | None = None, packaged: bool = True) -> Catalog:
    """Packaged specs, then user directories (``catalog_dir`` and ``$WHICHGPU_CATALOG``)."""
    entries = packaged_entries(SPECS_DIR, validate_raw) if packaged else {}
    dirs = user_catalog_dirs(catalog_dir)
    for path, raw in user_files(dirs, MISSING_DIR):
        if raw.get("schema") == SYSTEM_SCHEMA:
            continue  # a system file: hardware/system_files.py loads it
        known = _overridden(entries, path, raw)
        if known is None:
            validate_raw(path, raw)
            entries[raw["id"]] = Entry(path, raw)
        else:
            merged = entries[known].overridden(path, raw, merge_raw, validate_raw)
            entries[known] = replace(merged, raw={**merged.raw, "id": known})  # it may name it by an alias
    specs = [replace(_spec_from_raw(e.where, e.raw, e.overridden_by), path=e.path) for e in entries.values()]
    specs = with_estimated_peaks(specs)
    specs.sort(key=lambda s: (s.vendor, -s.year, s.id))
    return Catalog(specs, dirs)
