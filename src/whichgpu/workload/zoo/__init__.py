"""The model zoo: every model of the validation set plus today's common models.

Entries are torch-free metadata (see `base.ZooEntry`); builders are imported lazily.
Entry lists live in `entries_*.py`, one per family of definitions.
"""

from __future__ import annotations

from functools import lru_cache

from whichgpu.hardware.names import NameIndex
from whichgpu.workload.zoo.base import BuildRequest, Built, ZooEntry

__all__ = ["BuildRequest", "Built", "ZooEntry", "all_entries", "get_entry", "is_zoo_name"]


@lru_cache(maxsize=1)
def all_entries() -> dict[str, ZooEntry]:
    from whichgpu.workload.zoo import entries_llm, entries_seq, entries_vision

    out: dict[str, ZooEntry] = {}
    for mod in (entries_vision, entries_seq, entries_llm):
        for e in mod.ENTRIES:
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
