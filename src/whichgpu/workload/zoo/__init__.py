"""The model zoo: every model of the validation set plus today's common models.

Entries are torch-free metadata (see `base.ZooEntry`); builders are imported lazily.
Entries are data: `entries/*.toml`, one file per family of definitions, each a list of
``[[model]]`` tables (the `ZooEntry` fields) over the file's ``[defaults]``. A string of the
defaults may name a key that is not a field in braces (``{transformers_class}``); each model
fills it (or takes the default's value of that key).
"""

from __future__ import annotations

import string
from dataclasses import fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from whichgpu.hardware.catalog import read_toml
from whichgpu.hardware.names import NameIndex
from whichgpu.workload.zoo.base import BuildRequest, Built, ZooEntry

__all__ = ["BuildRequest", "Built", "ZooEntry", "all_entries", "get_entry", "is_zoo_name", "load_entries"]

ENTRIES_DIR = Path(__file__).with_name("entries")
ENTRY_FILES = ("vision", "seq", "decoders", "modern", "transformers", "encdec")  # the order `whichgpu models` lists
_FIELDS = frozenset(f.name for f in fields(ZooEntry))


def _frozen(value: Any) -> Any:
    """TOML arrays and tables as the tuples ZooEntry holds ({amp = 256} -> (("amp", 256),))."""
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _placeholders(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def _entry(path: Path, defaults: dict[str, Any], model: dict[str, Any]) -> ZooEntry:
    values = {**defaults, **model}
    fill = {k: values.pop(k) for k in set(values) - _FIELDS}
    templates = {k: v for k, v in defaults.items()
                 if k in _FIELDS and k not in model and isinstance(v, str) and _placeholders(v)}
    where = f"{path.name}: model {model.get('id', '?')!r}"
    unknown = set(model) - _FIELDS - {n for v in templates.values() for n in _placeholders(v)}
    if unknown:
        raise RuntimeError(f"{where}: unknown fields {sorted(unknown)}")
    values.update({k: v.format_map(fill) for k, v in templates.items()})
    try:
        return ZooEntry(**{k: _frozen(v) for k, v in values.items()})
    except TypeError as e:
        raise RuntimeError(f"{where}: {e}") from None


def load_entries(name: str) -> tuple[ZooEntry, ...]:
    """The entries of `entries/<name>.toml`, in file order."""
    path = ENTRIES_DIR / f"{name}.toml"
    data = read_toml(path)
    return tuple(_entry(path, data.get("defaults", {}), m) for m in data.get("model", []))


@lru_cache(maxsize=1)
def all_entries() -> dict[str, ZooEntry]:
    out: dict[str, ZooEntry] = {}
    for name in ENTRY_FILES:
        for e in load_entries(name):
            if e.id in out:
                raise RuntimeError(f"duplicate zoo id {e.id}")
            out[e.id] = e
    return out


@lru_cache(maxsize=1)
def _index() -> NameIndex:
    return NameIndex((e.id, (e.title, *e.aliases, *e.validation_names)) for e in all_entries().values())


def get_entry(name: str) -> ZooEntry:
    """Resolve a zoo name (id, title, alias or validation-data spelling) or raise."""
    return all_entries()[_index().resolve(name, kind="model", hint="'whichgpu models'")]


def is_zoo_name(name: str) -> bool:
    try:
        get_entry(name)
        return True
    except Exception:
        return False
