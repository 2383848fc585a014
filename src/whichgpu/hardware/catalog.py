"""Load and validate the GPU catalog: packaged spec files plus user override directories.

A user directory (``--catalog DIR`` or ``WHICHGPU_CATALOG``, several joined with the OS path
separator) may hold files of two kinds:

* a new accelerator: a complete file, like the packaged ones;
* an override: a file whose ``id`` (or ``override``) names a packaged entry, holding only the
  fields it changes (a negotiated price, a measured ceiling). Sections merge field by field;
  ``[[measured]]`` entries replace those of the same dtype.

Every problem is reported as ``CatalogError(file, field, what would be valid)``.
"""

from __future__ import annotations

import copy
import os
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from whichgpu.errors import CatalogError
from whichgpu.hardware.names import Memory, NameIndex
from whichgpu.hardware.spec import (
    ARCHITECTURES,
    COMPUTE_DTYPES,
    PEAK_FIELDS,
    SEGMENTS,
    VENDORS,
    GpuSpec,
    MeasuredCeiling,
    Price,
)

SPECS_DIR = Path(__file__).parent / "specs"
SCHEMA = "whichgpu.gpu/1"
ENV_VAR = "WHICHGPU_CATALOG"

# Architectures whose tensor units run FP8 (Ada/Hopper/Blackwell; CDNA3+; Gaudi 2+).
FP8_ARCHITECTURES = frozenset({"ada", "hopper", "blackwell", "cdna3", "cdna4", "gaudi"})
# Only Blackwell-class parts (and CDNA4) have FP4 tensor math.
FP4_ARCHITECTURES = frozenset({"blackwell", "cdna4"})
# No tensor cores before Volta.
NO_TENSOR_ARCHITECTURES = frozenset({"pascal"})

_NUM = (int, float)
_DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")

# field -> (types, required, kind). kind: "pos" (> 0), "nonneg", "str", "bool", "list", "peak".
_Field = tuple[tuple[type, ...], bool, str]
TOP_FIELDS: dict[str, _Field] = {
    "schema": ((str,), True, "str"),
    "id": ((str,), True, "str"),
    "override": ((str,), False, "str"),
    "name": ((str,), True, "str"),
    "vendor": ((str,), True, "str"),
    "architecture": ((str,), True, "str"),
    "chip": ((str,), True, "str"),
    "year": ((int,), True, "pos"),
    "form_factor": ((str,), True, "str"),
    "segment": ((str,), True, "str"),
    "aliases": ((list,), False, "list"),
    "notes": ((str,), False, "str"),
}
SECTIONS: dict[str, dict[str, _Field]] = {
    "memory": {
        "size_gb": (_NUM, True, "pos"),
        "type": ((str,), True, "str"),
        "bandwidth_gbps": (_NUM, True, "pos"),
        "l2_cache_mb": (_NUM, False, "pos"),
    },
    "compute": {
        "sm_count": ((int,), False, "pos"),
        "boost_clock_mhz": (_NUM, False, "pos"),
        "base_clock_mhz": (_NUM, False, "pos"),
        "shared_mem_per_sm_kb": (_NUM, False, "pos"),
        "l1_cache_per_sm_kb": (_NUM, False, "pos"),
        "sparsity_2to4": ((bool,), False, "bool"),
        "tensor_core_dtypes": ((list,), False, "list"),
    },
    "peak_dense": {
        **{f: ((*_NUM, str), False, "peak") for f in PEAK_FIELDS.values()},
        "fp16_acc16_tflops": ((*_NUM, str), False, "peak"),
    },
    "power": {"tdp_w": (_NUM, False, "pos")},
    "interconnect": {
        "scaleup": ((str,), False, "str"),
        "scaleup_gbps_per_direction": (_NUM, False, "pos"),
        "pcie_gen": ((int,), False, "pos"),
        "pcie_lanes": ((int,), False, "pos"),
        "scaleup_domain_gpus": ((int,), False, "pos"),
    },
    "price": {
        "launch_msrp_usd": (_NUM, False, "pos"),
        "launch_source": ((str,), False, "str"),
        "street_usd": (_NUM, False, "pos"),
        "street_date": ((str,), False, "date"),
        "street_source": ((str,), False, "str"),
        "cloud_usd_per_hour": (_NUM, False, "pos"),
        "cloud_provider": ((str,), False, "str"),
        "cloud_date": ((str,), False, "date"),
        "cloud_source": ((str,), False, "str"),
    },
}
MEASURED_FIELDS: dict[str, _Field] = {
    "dtype": ((str,), True, "str"),
    "matmul_tflops": (_NUM, True, "pos"),
    "source": ((str,), True, "str"),
    "shape": ((str,), False, "str"),
    "notes": ((str,), False, "str"),
}
ALL_TOP_KEYS = sorted([*TOP_FIELDS, *SECTIONS, "measured", "sources"])


def _check_value(path: str, key: str, value: Any, spec: _Field) -> None:
    types, _req, kind = spec
    if isinstance(value, bool) and kind != "bool":
        raise CatalogError(path, key, f"expected {'a number' if kind in ('pos', 'nonneg', 'peak') else kind}, got {value!r}")
    well_typed = isinstance(value, types)  # (a separate flag keeps mypy from narrowing value to object)
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


def validate_raw(path: str, raw: dict[str, Any], partial: bool = False) -> None:
    """Check one file's structure. `partial` files (overrides) may omit required fields."""
    for key, value in raw.items():
        if key in TOP_FIELDS:
            _check_value(path, key, value, TOP_FIELDS[key])
        elif key in SECTIONS:
            if not isinstance(value, dict):
                raise CatalogError(path, key, "expected a table [" + key + "]")
            fields = SECTIONS[key]
            for fkey, fval in value.items():
                if fkey not in fields:
                    raise CatalogError(path, f"{key}.{fkey}", "unknown field; valid: " + ", ".join(fields))
                _check_value(path, f"{key}.{fkey}", fval, fields[fkey])
        elif key == "measured":
            if not isinstance(value, list):
                raise CatalogError(path, key, "expected an array of tables [[measured]]")
            for i, m in enumerate(value):
                if not isinstance(m, dict):
                    raise CatalogError(path, f"measured[{i}]", "expected a table")
                for fkey, fval in m.items():
                    if fkey not in MEASURED_FIELDS:
                        raise CatalogError(path, f"measured[{i}].{fkey}", "unknown field; valid: " + ", ".join(MEASURED_FIELDS))
                    _check_value(path, f"measured[{i}].{fkey}", fval, MEASURED_FIELDS[fkey])
                for fkey, (_t, req, _k) in MEASURED_FIELDS.items():
                    if req and fkey not in m:
                        raise CatalogError(path, f"measured[{i}].{fkey}", "required field is missing")
                if m["dtype"] not in COMPUTE_DTYPES:
                    raise CatalogError(path, f"measured[{i}].dtype", f"unknown dtype {m['dtype']!r}; valid: " + ", ".join(COMPUTE_DTYPES))
        elif key == "sources":
            if not isinstance(value, dict) or not all(isinstance(v, str) and v for v in value.values()):
                raise CatalogError(path, key, "expected a table of non-empty strings (\"field\" = \"URL or document, date\")")
        else:
            raise CatalogError(path, key, "unknown field; valid: " + ", ".join(ALL_TOP_KEYS))
    if "schema" in raw and raw["schema"] != SCHEMA:
        raise CatalogError(path, "schema", f"expected {SCHEMA!r}, got {raw['schema']!r}")
    if partial:
        return
    for key, (_t, req, _k) in TOP_FIELDS.items():
        if req and key not in raw:
            raise CatalogError(path, key, "required field is missing")
    for sec in ("memory", "peak_dense"):
        if sec not in raw:
            raise CatalogError(path, sec, f"required table [{sec}] is missing")
    for sec, fields in SECTIONS.items():
        for fkey, (_t, req, _k) in fields.items():
            if req and fkey not in raw.get(sec, {}):
                raise CatalogError(path, f"{sec}.{fkey}", "required field is missing")
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


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
            return data
    except tomllib.TOMLDecodeError as e:
        raise CatalogError(str(path), "", f"not valid TOML: {e}") from None
    except UnicodeDecodeError:
        raise CatalogError(str(path), "", "not UTF-8 text") from None
    except OSError as e:
        raise CatalogError(str(path), "", f"cannot read: {e.strerror}") from None


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
class Catalog:
    """All accelerators, resolvable by id, name or alias."""

    specs: list[GpuSpec]
    user_dirs: tuple[str, ...] = ()
    _index: NameIndex = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._index = NameIndex(((s.id, (s.name, *s.aliases)) for s in self.specs),
                                memory={s.id: Memory(s.memory_gb, s.memory_type) for s in self.specs})
        self._by_id = {s.id: s for s in self.specs}

    def __iter__(self) -> Iterator[GpuSpec]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def get(self, name: str) -> GpuSpec:
        """Resolve a GPU name (id, product name, alias, nvidia-smi spelling) or raise."""
        return self._by_id[self._index.resolve(name, kind="GPU", hint="'whichgpu gpus'")]

    def get_many(self, names: str | Iterable[str]) -> list[GpuSpec]:
        """Resolve a comma-separated list (or iterable) of names; 'all' means the catalog."""
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",") if n.strip()]
        names = list(names)
        if names == ["all"]:
            return list(self.specs)
        return [self.get(n) for n in names]

    def ids(self) -> list[str]:
        return [s.id for s in self.specs]


def user_catalog_dirs(explicit: str | None = None) -> tuple[str, ...]:
    dirs: list[str] = []
    if explicit:
        dirs += [d for d in explicit.split(os.pathsep) if d]
    env = os.environ.get(ENV_VAR, "")
    dirs += [d for d in env.split(os.pathsep) if d]
    return tuple(dirs)


_PACKAGED: list[tuple[str, dict[str, Any]]] | None = None


def _packaged_raw() -> list[tuple[str, dict[str, Any]]]:
    global _PACKAGED
    if _PACKAGED is None:
        out = []
        for p in sorted(SPECS_DIR.glob("*.toml")):
            raw = read_toml(p)
            validate_raw(str(p), raw)
            out.append((str(p), raw))
        _PACKAGED = out
    return _PACKAGED


def load_catalog(catalog_dir: str | None = None, packaged: bool = True) -> Catalog:
    """Packaged specs, then user directories (``catalog_dir`` and ``$WHICHGPU_CATALOG``)."""
    entries: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {}
    if packaged:
        for path, raw in _packaged_raw():
            if raw["id"] in entries:
                raise CatalogError(path, "id", f"duplicate id {raw['id']!r} (also in {entries[raw['id']][0]})")
            entries[raw["id"]] = (path, raw, ())
    dirs = user_catalog_dirs(catalog_dir)
    for d in dirs:
        dp = Path(d)
        if not dp.is_dir():
            raise CatalogError(d, "", "catalog directory does not exist (from --catalog or $" + ENV_VAR + ")")
        for p in sorted(dp.glob("*.toml")):
            raw = read_toml(p)
            target = raw.get("override", raw.get("id"))
            if not isinstance(target, str):
                raise CatalogError(str(p), "id", "required field is missing (an override names the entry it changes with id = \"...\")")
            known = target if target in entries else None
            if known is None and "override" in raw:
                # An override may name the entry by any of its names.
                cat = Catalog([_spec_from_raw(pp, r) for pp, r, _ in entries.values()])
                try:
                    known = cat.get(target).id
                except Exception as e:
                    raise CatalogError(str(p), "override", str(e)) from None
            if known is not None:
                validate_raw(str(p), raw, partial=True)
                bpath, braw, prev = entries[known]
                merged = merge_raw(braw, raw)
                merged["id"] = known
                validate_raw(str(p), merged)
                entries[known] = (bpath, merged, (*prev, str(p)))
            else:
                validate_raw(str(p), raw)
                entries[raw["id"]] = (str(p), raw, ())
    specs = []
    for path, raw, over in entries.values():
        where = over[-1] if over else path
        spec = _spec_from_raw(where, raw, over)
        specs.append(replace(spec, path=path))
    specs.sort(key=lambda s: (s.vendor, -s.year, s.id))
    return Catalog(specs, dirs)
