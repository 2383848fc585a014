"""The silicon process of a GPU die (hardware/process.toml): the performance model's power
budget costs tensor work per process node, not per card."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from whichgpu.hardware.catalog import read_toml

PROCESS_FILE = Path(__file__).with_name("process.toml")


@dataclass(frozen=True)
class Process:
    prefix: str
    family: str  # the die family the power model has a figure for: volta, turing, ga100, ga10x, ada, hopper, blackwell
    process: str  # the foundry process
    source: str


@functools.lru_cache(maxsize=1)
def _table() -> tuple[Process, ...]:
    raw = read_toml(PROCESS_FILE)
    return tuple(Process(str(c["prefix"]), str(c["family"]), str(c["process"]), str(c["source"]))
                 for c in raw.get("chip", []))


def process_of(chip: str) -> Process | None:
    """The process of a catalog `chip` field ("AD102" -> TSMC 4N), None when not listed."""
    c = chip.strip().upper()
    return next((p for p in _table() if c.startswith(p.prefix.upper())), None)
