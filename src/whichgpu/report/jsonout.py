"""Stable JSON documents: every one has a "schema" key naming its kind and version."""

from __future__ import annotations

import json
import math
from typing import Any


def _clean(x: Any) -> Any:
    if isinstance(x, float):
        if math.isnan(x) or math.isinf(x):
            return None
        return x
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def document(schema: str, body: dict[str, Any]) -> str:
    """One JSON document: {"schema": ..., **body}. NaN/inf become null (valid JSON)."""
    doc = {"schema": schema, **body}
    return json.dumps(_clean(doc), indent=2, allow_nan=False)
