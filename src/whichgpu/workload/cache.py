"""On-disk trace cache, keyed by everything that determines a trace. Torch-free.

An entry is written to a temporary file beside it and renamed into place (atomic on POSIX and
Windows), so concurrent runs storing the same key never leave a torn file: readers see the old
entry, the new one, or none. An entry that cannot be read back as a well-formed trace (garbage or
non-UTF-8 bytes, JSON of another shape, fields of the wrong type, non-finite numbers) is
discarded with a one-line warning on stderr and the trace is captured again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
import operator
import os
import sys
import tempfile
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from whichgpu.workload.trace import SCHEMA, Trace

ENV = "WHICHGPU_CACHE_DIR"


def cache_dir() -> Path:
    d = os.environ.get(ENV)
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "whichgpu" / "traces"


def warn(message: str) -> None:
    """One line on stderr (the library's only output: a cache problem the run recovers from)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(f"warning: {message}", file=sys.stderr, flush=True)


def load(key: str) -> Trace | None:
    """The cached trace of `key`, or None (absent, unreadable, stale or corrupt: recapture)."""
    p = cache_dir() / f"{key}.json"
    try:
        raw = p.read_bytes()
    except OSError:
        return None  # absent (or an unreadable cache: a run never fails on it)
    problem = ""
    trace = None
    try:
        trace = Trace.from_json(raw.decode("utf-8"))
    except UnicodeDecodeError:
        problem = "not UTF-8 text"
    except ValueError as e:  # JSONDecodeError, or a schema of another version
        if "schema" in str(e) and _schema_of(raw) not in (None, SCHEMA):
            return None  # written by another version: stale, not corrupt
        problem = f"not a trace ({_line(e)})"
    except (KeyError, TypeError, IndexError, AttributeError, RecursionError, OverflowError) as e:
        problem = f"not a trace ({type(e).__name__}: {_line(e)})"
    if trace is not None:
        bad = wrong_field(trace)
        if bad is None:
            return trace
        problem = f"field {bad!r} has the wrong type or a non-finite value"
    warn(f"discarding the unreadable trace cache entry {p} ({problem}); capturing the trace again")
    with contextlib.suppress(OSError):
        p.unlink()
    return None


def has(key: str) -> bool:
    """An entry exists for `key` (readable or not)."""
    try:
        return (cache_dir() / f"{key}.json").is_file()
    except (OSError, ValueError):
        return False


def store(key: str, trace: Trace) -> None:
    """Write the entry atomically: a temporary file in the cache directory renamed over the key."""
    d = cache_dir()
    tmp = None
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{key}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(trace.to_json())
        os.replace(tmp, d / f"{key}.json")
        tmp = None
    except OSError:
        pass  # a read-only or full cache never breaks a run
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0][:200] if s else type(e).__name__


def _schema_of(raw: bytes) -> str | None:
    import json

    try:
        d = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    s = d.get("schema") if isinstance(d, dict) else None
    return s if isinstance(s, str) else None


# ---- the shape of a well-formed trace ------------------------------------------------------------
# Trace.from_json builds its dataclasses without checking types: a string where a number belongs
# would load and fail later, in the middle of an estimate. Each field is checked against its
# annotation (bool, int, finite float, str, X | None, list/tuple/dict of those, nested dataclasses).

Check = Callable[[Any], bool]


def _finite(v: Any) -> bool:
    t = type(v)
    return t is int or (t is float and math.isfinite(v))


_SCALARS: dict[Any, Check] = {
    bool: lambda v: type(v) is bool,
    int: lambda v: type(v) is int,
    float: _finite,
    str: lambda v: type(v) is str,
    type(None): lambda v: v is None,
}


def _checker(hint: Any) -> Check:
    if hint in _SCALARS:
        return _SCALARS[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        alts = tuple(_checker(a) for a in args)
        return lambda v: any(c(v) for c in alts)
    if origin is list:
        if isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
            return _rows_checker(args[0])
        item = _checker(args[0])
        return lambda v: type(v) is list and all(map(item, v))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            each = _checker(args[0])
            return lambda v: type(v) is tuple and all(map(each, v))
        cs = tuple(_checker(a) for a in args)
        return lambda v: type(v) is tuple and len(v) == len(cs) and all(c(x) for c, x in zip(cs, v, strict=True))
    if origin is dict:
        k, val = _checker(args[0]), _checker(args[1])
        return lambda v: type(v) is dict and all(k(a) and val(b) for a, b in v.items())
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass_checker(hint)
    raise TypeError(f"no type check for {hint!r}")  # a new kind of field in trace.py: add it here


@functools.cache
def _dataclass_checker(cls: type) -> Check:
    hints = typing.get_type_hints(cls)
    pairs = tuple((f.name, _checker(hints[f.name])) for f in dataclasses.fields(cls))
    return lambda v: type(v) is cls and all(c(getattr(v, n)) for n, c in pairs)


def _column_checker(hint: Any) -> Callable[[list[Any]], bool]:
    """A check of one field over many rows, by column: the type set, then one sum for finiteness
    (a NaN or infinity makes the sum non-finite). A trace's ops are checked in a few milliseconds."""
    if hint in (bool, int, str):
        allowed = {hint}
        return lambda col: set(map(type, col)) <= allowed

    if hint is float:
        def floats(col: list[Any]) -> bool:
            if not set(map(type, col)) <= {int, float}:
                return False
            try:
                return math.isfinite(sum(col))
            except OverflowError:
                return False
        return floats
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple and len(args) == 2 and args[1] is Ellipsis:
        items = _column_checker(args[0])
        return lambda col: set(map(type, col)) <= {tuple} and items(list(itertools.chain.from_iterable(col)))
    each = _checker(hint)
    return lambda col: all(map(each, col))


@functools.cache
def _rows_checker(cls: type) -> Check:
    """list[cls] of a dataclass, checked column by column."""
    hints = typing.get_type_hints(cls)
    cols = tuple((operator.attrgetter(f.name), _column_checker(hints[f.name])) for f in dataclasses.fields(cls))

    def ok(v: Any) -> bool:
        if type(v) is not list or not set(map(type, v)) <= {cls}:
            return False
        return all(c(list(map(get, v))) for get, c in cols)
    return ok


@functools.cache
def _field_checks() -> tuple[tuple[str, Check], ...]:
    hints = typing.get_type_hints(Trace)
    return tuple((f.name, _checker(hints[f.name])) for f in dataclasses.fields(Trace))


def wrong_field(trace: Trace) -> str | None:
    """The first field of `trace` not of its annotated type (floats finite), else None."""
    for name, ok in _field_checks():
        if not ok(getattr(trace, name)):
            return name
    return None
