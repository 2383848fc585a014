"""Reading system files: ``hardware/systems/*.toml`` and the user's catalog directories.

The fields, their checks and the ``[sources]`` rule are described in hardware/system.py. Every
problem is a ``CatalogError(file, field, what would be valid)``.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from typing import Any

from whichgpu.errors import CatalogError, WhichGPUError
from whichgpu.hardware.catalog import (
    MISSING_DIR,
    Catalog,
    load_catalog,
    merge_raw,
    user_catalog_dirs,
)
from whichgpu.hardware.datafiles import (
    Entry,
    Field,
    FileSchema,
    Raw,
    flag,
    number,
    one_of,
    packaged_entries,
    strings,
    text,
    user_files,
    whole,
)
from whichgpu.hardware.spec import SCALEUP_TOPOLOGIES
from whichgpu.hardware.system import (
    KINDS,
    SCALEOUT_KINDS,
    SCALEUP_GENERATIONS,
    SCHEMA,
    SYSTEMS_DIR,
    MeasuredAllReduce,
    Pcie,
    ScaleOut,
    ScaleUp,
    System,
    Systems,
    is_packaged,
    is_pcie_card,
)

# Plausible ranges (`Field.lo`..`Field.hi`; packaged extremes: 1-72 GPUs per node, 150-900 GB/s
# scale-up, 1.5625-50 GB/s per GPU scale-out, 4-12 us per ring step): wide enough for any machine
# built or announced, narrow enough that a typo (1e-300, 1e300, a unit off by 10^6) is caught.
TOP_FIELDS: dict[str, Field] = {
    "schema": text(required=True),
    "id": text(required=True, name=True),
    "name": text(required=True, name=True),
    "kind": one_of(KINDS, required=True),
    "gpu": text(name=True),
    "gpus_per_node": whole(required=True, lo=1, hi=100_000, unit="GPUs"),
    "default_for": strings(name=True),
    "aliases": strings(name=True),
    "notes": text(),
}
SECTIONS: dict[str, dict[str, Field]] = {
    "scaleup": {
        "link": text(required=True),
        "generation": one_of(SCALEUP_GENERATIONS, required=True),
        "gbps_per_direction": number(required=True, lo=0.1, hi=100_000, unit="GB/s"),
        "domain_gpus": whole(required=True, lo=1, hi=100_000, unit="GPUs"),
        "latency_us": number("nonneg", required=True, hi=100_000, unit="us"),
        "topology": one_of(SCALEUP_TOPOLOGIES),  # default "switch"
    },
    "pcie": {
        "gen": one_of((3, 4, 5, 6), required=True),
        "lanes": one_of((1, 2, 4, 8, 16), required=True),
        "p2p": flag(required=True),
        "latency_us": number("nonneg", required=True, hi=100_000, unit="us"),
    },
    "scaleout": {
        "kind": one_of(SCALEOUT_KINDS, required=True),
        "gbps_per_gpu": number(required=True, lo=0.01, hi=100_000, unit="GB/s"),
        "rails": whole(required=True, lo=1, hi=100_000, unit="NICs"),
        "latency_us": number("nonneg", required=True, hi=100_000, unit="us"),
    },
}
OPTIONAL_SECTIONS = ("scaleup", "scaleout")  # absent or "none": no such link
FIGURES: tuple[str, ...] = ("gpus_per_node", *(f"{s}.{f}" for s, fs in SECTIONS.items() for f in fs))
_SOURCE_KEYS = frozenset({"default", *TOP_FIELDS, *SECTIONS, *FIGURES})
_ID = re.compile(r"[a-z0-9][a-z0-9.\-]*")


# --------------------------------------------------------------------------- checking files


def _want(f: Field) -> str:
    if f.check == "choice":
        return "one of " + ", ".join(f.choices)
    if f.check in ("pos", "nonneg"):
        return ("a whole number" if f.types == (int,) else "a number") + (" > 0" if f.check == "pos" else " >= 0")
    return {"bool": "true or false", "list": "a list of strings"}.get(f.check, "a non-empty string")


def _check(path: str, name: str, value: Any, f: Field) -> None:
    well_typed = isinstance(value, f.types) and not (isinstance(value, bool) and bool not in f.types)
    if not well_typed:
        bad = True
    elif f.check in ("pos", "nonneg"):
        bad = not math.isfinite(value) or value < 0 or (f.check == "pos" and value == 0)
    elif f.check == "choice":
        bad = str(value) not in f.choices
    elif f.check == "list":
        bad = not all(isinstance(v, str) and v for v in value)
    else:
        bad = f.check == "str" and not value.strip()
    if bad:
        raise CatalogError(path, name, f"expected {_want(f)}, got {value!r}")


def _check_sources(path: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise CatalogError(path, "sources", 'expected a table of "field" = "URL or document"')
    for skey, sval in value.items():
        if skey not in _SOURCE_KEYS:
            close = difflib.get_close_matches(skey, sorted(_SOURCE_KEYS), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "valid: default, a section or section.field"
            raise CatalogError(path, f"sources.{skey}", f"names no figure; {hint}")
        if not isinstance(sval, str) or not sval.strip():
            raise CatalogError(path, f"sources.{skey}", "expected a non-empty string (URL or document)")


MEASURED_ALLREDUCE_KEYS = ("gpus", "sizes_bytes", "times_us", "source")


def _check_measured_allreduce(path: str, value: Any) -> None:
    """``[[measured_allreduce]]``: per table a group size (2 or more GPUs, each size once), message
    sizes in bytes strictly increasing, as many times in microseconds, all finite and > 0, and a
    source."""
    if not isinstance(value, list):
        raise CatalogError(path, "measured_allreduce", "expected an array of tables [[measured_allreduce]]")
    seen: set[int] = set()
    for i, m in enumerate(value):
        name = f"measured_allreduce[{i}]"
        if not isinstance(m, dict):
            raise CatalogError(path, name, "expected a table with " + ", ".join(MEASURED_ALLREDUCE_KEYS))
        for key in m:
            if key not in MEASURED_ALLREDUCE_KEYS:
                raise CatalogError(path, f"{name}.{key}", "unknown field; valid: " + ", ".join(MEASURED_ALLREDUCE_KEYS))
        for key in MEASURED_ALLREDUCE_KEYS:
            if key not in m:
                raise CatalogError(path, f"{name}.{key}", "required field is missing")
        g = m["gpus"]
        if isinstance(g, bool) or not isinstance(g, int) or not 2 <= g <= 100_000 or g in seen:
            raise CatalogError(path, f"{name}.gpus", f"expected a whole number of GPUs from 2, once per group size, got {g!r}")
        seen.add(g)
        for key, unit in (("sizes_bytes", "bytes"), ("times_us", "us")):
            xs = m[key]
            if (not isinstance(xs, list) or len(xs) < 2
                    or not all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and 0 < x < 1e15
                               for x in xs)):
                raise CatalogError(path, f"{name}.{key}", f"expected a list of at least 2 numbers > 0 ({unit}), got {xs!r}")
        if len(m["times_us"]) != len(m["sizes_bytes"]):
            raise CatalogError(path, f"{name}.times_us", f"expected one time per size ({len(m['sizes_bytes'])}), "
                               f"got {len(m['times_us'])}")
        if any(b <= a for a, b in zip(m["sizes_bytes"], m["sizes_bytes"][1:], strict=False)):
            raise CatalogError(path, f"{name}.sizes_bytes", "expected sizes in increasing order, each once")
        if not isinstance(m["source"], str) or not m["source"].strip():
            raise CatalogError(path, f"{name}.source", "expected a non-empty string (the measurement: URL or document)")


SYSTEM_FILE = FileSchema(TOP_FIELDS, SECTIONS, _check, tables={"sources": _check_sources,
                                                                "measured_allreduce": _check_measured_allreduce},
                         required_sections=("pcie",), optional_sections=OPTIONAL_SECTIONS)


def _lookup(sources: dict[str, Any], figure: str) -> str:
    for k in (figure, figure.split(".", 1)[0], "default"):
        if isinstance(sources.get(k), str) and sources[k]:
            return str(sources[k])
    return ""


def _figure_paths(raw: dict[str, Any]) -> list[str]:
    out = ["gpus_per_node"] if "gpus_per_node" in raw else []
    for sec, fields in SECTIONS.items():
        if isinstance(raw.get(sec), dict):
            out += [f"{sec}.{f}" for f in fields if f in raw[sec]]
    return out


def validate_raw(path: str, raw: Raw, partial: bool = False) -> None:
    """Check one file's structure. A `partial` file (an override) may leave out required fields."""
    SYSTEM_FILE.check_fields(path, raw)
    if raw.get("schema") != SCHEMA:
        raise CatalogError(path, "schema", f"expected {SCHEMA!r}, got {raw.get('schema')!r}")
    if partial:
        return
    SYSTEM_FILE.check_complete(path, raw)
    if not _ID.fullmatch(raw["id"]):
        raise CatalogError(path, "id", f"expected lowercase letters, digits, '-' or '.', got {raw['id']!r}")
    for i, m in enumerate(raw.get("measured_allreduce", ())):
        if m["gpus"] > raw["gpus_per_node"]:
            raise CatalogError(path, f"measured_allreduce[{i}].gpus", f"expected at most the node's {raw['gpus_per_node']} "
                               f"GPUs (times measured inside one node), got {m['gpus']}")
    for fig in _figure_paths(raw):
        if not _lookup(raw.get("sources", {}), fig):
            raise CatalogError(path, f"sources.{fig}", f"no source for this figure; add \"{fig}\" = "
                               "\"URL or document\" (or a [sources] default)")


# --------------------------------------------------------------------------- loading


def _override(base: Raw, over: Raw, path: str) -> Raw:
    """A user override merged field by field; the figures it sets take its sources (its own
    field, section or default key), never the packaged ones, which cite other numbers."""
    over_src = over.get("sources", {})
    merged = merge_raw(base, {k: v for k, v in over.items() if k != "sources"})
    src = merged.setdefault("sources", {})
    for fig in _figure_paths(over):
        src[fig] = _lookup(over_src, fig) or f"user override {path} (it names no source)"
    src.update({k: v for k, v in over_src.items() if k not in ("default", *SECTIONS)})
    return merged


def _validate_new(path: str, raw: Raw, known: list[str]) -> None:
    """A new system's file is complete; a missing field in one whose id is close to a known
    one's was likely meant as an override of it."""
    try:
        validate_raw(path, raw)
    except CatalogError as e:
        close = difflib.get_close_matches(raw["id"], known, n=1)
        if e.field and "missing" in str(e) and close:
            raise CatalogError(path, e.field, f"required field is missing (a new system; to change "
                               f"a packaged one give its id, e.g. {close[0]!r})") from None
        raise


def _resolve_gpu(catalog: Catalog, path: str, key: str, name: str) -> str:
    try:
        return catalog.get(name).id
    except WhichGPUError as e:
        raise CatalogError(path, key, str(e)) from None


def _build(entry: Entry, catalog: Catalog) -> System:
    raw, where = entry.raw, entry.where
    gpu = _resolve_gpu(catalog, where, "gpu", raw["gpu"]) if "gpu" in raw else None
    default_for = tuple(_resolve_gpu(catalog, where, "default_for", n) for n in raw.get("default_for", ()))
    if gpu is None:
        for gid in default_for:
            if not is_pcie_card(catalog.get(gid)):
                raise CatalogError(where, "default_for", f"{gid} is not a PCIe card; a generic system "
                                   "(no gpu) takes PCIe cards only")

    def section(name: str) -> dict[str, Any] | None:
        sec = raw.get(name)
        return sec if isinstance(sec, dict) else None

    up, out, pcie = section("scaleup"), section("scaleout"), raw["pcie"]
    return System(
        id=raw["id"], name=raw["name"], kind=raw["kind"], gpu=gpu, gpus_per_node=raw["gpus_per_node"],
        scaleup=None if up is None else ScaleUp(
            link=up["link"], generation=up["generation"], gbps_per_direction=float(up["gbps_per_direction"]),
            domain_gpus=up["domain_gpus"], latency_us=float(up["latency_us"]),
            topology=up.get("topology", "switch")),
        pcie=Pcie(gen=pcie["gen"], lanes=pcie["lanes"], p2p=pcie["p2p"], latency_us=float(pcie["latency_us"])),
        scaleout=None if out is None else ScaleOut(
            kind=out["kind"], gbps_per_gpu=float(out["gbps_per_gpu"]), rails=out["rails"],
            latency_us=float(out["latency_us"])),
        sources={str(k): str(v) for k, v in raw.get("sources", {}).items()},
        notes=raw.get("notes", ""), default_for=default_for, aliases=tuple(raw.get("aliases", ())),
        path=entry.path, overridden_by=entry.overridden_by,
        measured_allreduce=tuple(
            MeasuredAllReduce(gpus=m["gpus"], sizes_bytes=tuple(float(x) for x in m["sizes_bytes"]),
                              times_us=tuple(float(x) for x in m["times_us"]), source=m["source"])
            for m in raw.get("measured_allreduce", ())),
    )


def read_systems(catalog_dir: str | None = None) -> Systems:
    """Packaged systems, then the system files of the user catalog directories (``catalog_dir``
    and ``$WHICHGPU_CATALOG``): a file whose id is known changes that system field by field; a
    new id adds one. GPU ids are checked against the GPU catalog of the same directories."""
    entries = packaged_entries(SYSTEMS_DIR, validate_raw)
    dirs = user_catalog_dirs(catalog_dir)
    for path, raw in user_files(dirs, MISSING_DIR):
        if raw.get("schema") != SCHEMA:
            continue  # a GPU file: the GPU catalog loads it
        sid = raw.get("id")
        if not isinstance(sid, str):
            raise CatalogError(path, "id", "required field is missing (an override names the system it changes)")
        if sid in entries:
            entries[sid] = entries[sid].overridden(path, raw, functools.partial(_override, path=path), validate_raw)
        else:
            _validate_new(path, raw, list(entries))
            entries[sid] = Entry(path, raw)
    catalog = load_catalog(catalog_dir)
    systems = [_build(entry, catalog) for entry in entries.values()]
    claimed: dict[str, str] = {}
    for s in systems:
        if is_packaged(s) and not s.overridden_by:
            for gid in s.default_for:
                if gid in claimed:
                    raise CatalogError(s.path, "default_for", f"{gid} is already the default of {claimed[gid]}")
                claimed[gid] = s.id
    return Systems(systems, dirs)
