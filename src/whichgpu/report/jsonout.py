"""Stable JSON documents: every one has a "schema" key naming its kind and version."""

from __future__ import annotations

import json
import math
import numbers
import os
from typing import Any


def _clean(x: Any) -> Any:
    """`x` as plain JSON values: a non-finite number (NaN, +-inf, of any float type) is None,
    numpy scalars and arrays are Python numbers and lists, a path is its text."""
    if x is None or isinstance(x, (str, bool)):
        return x
    if isinstance(x, numbers.Integral):  # int, numpy integers (bool is handled above)
        return int(x)
    if isinstance(x, numbers.Real):  # float, numpy floats, fractions
        f = float(x)
        return f if math.isfinite(f) else None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        items = sorted(x, key=str) if isinstance(x, (set, frozenset)) else x
        return [_clean(v) for v in items]
    if hasattr(x, "tolist") and callable(x.tolist):  # numpy arrays and scalars of other kinds
        return _clean(x.tolist())
    if isinstance(x, os.PathLike):
        return os.fspath(x)
    return x


def document(schema: str, body: dict[str, Any]) -> str:
    """One JSON document: {"schema": ..., **body}. NaN/inf become null (valid JSON)."""
    doc = {"schema": schema, **body}
    return json.dumps(_clean(doc), indent=2, allow_nan=False)
