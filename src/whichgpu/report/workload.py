"""What every report says of the traced model: its parameters (total, and active per token for a
mixture of experts), its attention and routing variants, and how much of its work has a cost
formula (`Trace.coverage`), with a warning when the times miss some of it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from whichgpu.units import fmt_count
from whichgpu.workload.trace import Trace

# Warn when the traced matmuls fall this far short of the work the model's shape implies.
FLOPS_WARN = 0.03
# Trace notes echoed with the assumptions: the routing and attention variants.
NOTE_KEYS = {"MoE:": "moe", "attention:": "attention"}


def active_params(t: Trace) -> int | None:
    """Parameters one token uses (the total for a dense model); None when not known."""
    return t.shape.active_params or None


def params_text(t: Trace) -> str:
    """The parameter count in words: "46.70B parameters, 12.88B active per token" (the active
    count only when known and below the total: a mixture of experts)."""
    text = f"{fmt_count(t.params)} parameters"
    active = t.shape.active_params
    if 0 < active < t.params:
        text += f", {fmt_count(active)} active per token"
    return text


def model_assumptions(t: Trace) -> dict[str, str]:
    """The attention variant (``shape.attention``) and the trace's notes on routing and attention,
    as named assumptions: {"attention": ..., "moe": ...}."""
    out: dict[str, list[str]] = {}
    if t.shape.attention:
        out["attention"] = [t.shape.attention]
    for note in t.notes:
        for prefix, key in NOTE_KEYS.items():
            if note.startswith(prefix):
                text = note.removeprefix(prefix).strip()
                if text and text not in out.get(key, []):
                    out.setdefault(key, []).append(text)
    return {k: "; ".join(v) for k, v in out.items()}


def merged_assumptions(assumptions: dict[str, Any], t: Trace) -> dict[str, Any]:
    """`assumptions` with the model's added (a key already there keeps its value; the model's
    then goes under ``model_`` + key)."""
    out = dict(assumptions)
    for k, v in model_assumptions(t).items():
        out[k if k not in out else f"model_{k}"] = v
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x >= 0.01 or x == 0 else f"{100 * x:.1f}%"


def coverage_warning(cov: dict[str, Any], memory: bool = False) -> str | None:
    """One line when some op has no cost formula or the traced matmuls fall short of the shape's
    work by more than FLOPS_WARN; None when the times miss nothing we can see. `memory`: for a
    memory report, which counts those ops' tensors in full (only times would be low)."""
    names: list[str] = list(cov["unmodelled_names"])
    flops = cov["flops_uncovered"]
    short = flops is not None and flops > FLOPS_WARN
    if not names and not short:
        return None
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    if not names:
        head = (f"the traced matmuls do {_pct(flops)} fewer FLOPs than the model's shape implies "
                "(2N per token, x3 training)")
    elif flops is None:  # no shape to compare with: the unmodelled ops' FLOPs are unknown
        head = f"{_pct(cov['bytes_uncovered'])} of bytes have no cost formula ({shown}): their FLOPs count as zero"
    else:
        head = f"{_pct(flops)} of FLOPs and {_pct(cov['bytes_uncovered'])} of bytes have no cost formula ({shown})"
    if memory:
        return head + "; memory counts their tensors in full, step times would miss their work"
    return head + (", so times may be low" if names and flops is None else ": times are low by up to that much")


def coverage_document(t: Trace, memory: bool = False) -> dict[str, Any]:
    """`Trace.coverage` for JSON (null for what is unknown) with its warning (null for none)."""
    cov = t.coverage()
    return {**cov, "unmodelled_ops": int(cov["unmodelled_ops"]), "warning": coverage_warning(cov, memory)}


def coverage_warnings(traces: Iterable[Trace], memory: bool = False) -> list[str]:
    """The distinct warnings of `traces` (each trace's coverage computed once), in order; a
    serving phase's (prefill, decode) named in front."""
    out: list[str] = []
    seen: set[int] = set()
    for t in traces:
        if id(t) in seen:
            continue
        seen.add(id(t))
        w = coverage_warning(t.coverage(), memory)
        if w is not None:
            w = w if t.phase == "full" else f"{t.phase}: {w}"
            if w not in out:
                out.append(w)
    return out
