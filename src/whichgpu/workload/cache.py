"""On-disk trace cache, keyed by everything that determines a trace. Torch-free."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from whichgpu.workload.trace import Trace

ENV = "WHICHGPU_CACHE_DIR"


def cache_dir() -> Path:
    d = os.environ.get(ENV)
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "whichgpu" / "traces"


def load(key: str) -> Trace | None:
    p = cache_dir() / f"{key}.json"
    try:
        text = p.read_text()
    except OSError:
        return None
    try:
        return Trace.from_json(text)
    except (ValueError, KeyError, TypeError, IndexError):
        return None  # stale or corrupt entry: recapture


def store(key: str, trace: Trace) -> None:
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(trace.to_json())
        os.replace(tmp, d / f"{key}.json")
    except OSError:
        pass  # a read-only cache never breaks a run
