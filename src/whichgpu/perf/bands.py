"""How sure a prediction is: error bands from the validation residuals of its class of workload,
and whether its configuration lies inside the ground the validation covers.

The bands are data (perf/bands.toml), written by scripts/error_bands.py from a `whichgpu validate`
run over the dev corpus: for each class of rows (engine, kind of step, model family, GPU
architecture) with enough rows, the 10th and 90th percentiles of e = ln(predicted / measured)
in speed terms. A prediction takes the band of the most specific class that has one:

    (engine, kind, family, architecture) -> (engine, kind, family) -> (engine, kind, architecture)
    -> (engine, kind) -> (kind, family) -> (kind) -> every row

and the likely range of a throughput x is [x exp(-p90), x exp(-p10)] (a time t: [t exp(p10),
t exp(p90)]): the spread the model showed on measured rows of that class.

A configuration is outside the validated ground when its GPU architecture, engine, precision
(for its task) or model family has no validation rows: its band is then a guess from other
classes, and reports say so.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whichgpu.hardware.catalog import read_toml
from whichgpu.workload.shape import ModelShape

BANDS_FILE = Path(__file__).with_name("bands.toml")
ANY = "*"
MIN_ROWS = 8  # a class needs this many scored rows for a band of its own
# Class keys from most to least specific: which of (engine, kind, family, architecture) count.
LEVELS: tuple[tuple[bool, bool, bool, bool], ...] = (
    (True, True, True, True), (True, True, True, False), (True, True, False, True), (True, True, False, False),
    (False, True, True, False), (False, True, False, False), (False, False, False, False),
)
KINDS = ("train", "infer", "prefill", "decode", "serve", "memory")
# Precisions whose kernels run alike (same tensor-core rate, same bytes): FP16 and BF16 are one
# class, with and without autocast; the weight-only 4-bit formats another.
PRECISION_CLASSES = {"amp-fp16": "amp-16bit", "amp-bf16": "amp-16bit", "fp16": "16bit", "bf16": "16bit",
                     "int4": "int4", "int4-g32": "int4"}


def precision_class(precision: str) -> str:
    return PRECISION_CLASSES.get(precision, precision)


@dataclass(frozen=True)
class Band:
    """The p10-p90 of e = ln(predicted / measured) over `rows` validation rows of one class."""

    p10: float
    p90: float
    rows: int
    engine: str
    kind: str
    family: str
    architecture: str

    def throughput_range(self, value: float) -> tuple[float, float]:
        """Likely range of a throughput (or any quantity that grows with speed)."""
        return value * math.exp(-self.p90), value * math.exp(-self.p10)

    def time_range(self, seconds: float) -> tuple[float, float]:
        """Likely range of a time (or a size: memory predictions are scored as such)."""
        return seconds * math.exp(self.p10), seconds * math.exp(self.p90)

    def scope(self) -> str:
        """The class in words, e.g. 'torch-compile cnn infer on ada'."""
        parts = [p for p in (self.engine, self.family, self.kind) if p != ANY]
        where = f" on {self.architecture}" if self.architecture != ANY else ""
        return (" ".join(parts) or "all rows") + where

    def describe(self) -> str:
        return f"p10-p90 of {self.rows} scored errors for {self.scope()}"

    def to_dict(self) -> dict[str, Any]:
        return {"p10_log_error": self.p10, "p90_log_error": self.p90, "rows": self.rows, "scope": self.scope(),
                "engine": self.engine, "kind": self.kind, "family": self.family, "architecture": self.architecture}


@dataclass(frozen=True)
class Ground:
    """What the validation covers: the values each key takes on scored rows."""

    architectures: frozenset[str]
    engines: frozenset[str]
    precisions: frozenset[str]  # "precision class/task", e.g. "fp8/infer", "amp-16bit/train"
    families: frozenset[str]


@dataclass(frozen=True)
class Bands:
    bands: dict[tuple[str, str, str, str], Band]
    ground: Ground
    source: str

    def lookup(self, engine: str, kind: str, family: str, architecture: str) -> Band:
        key = (engine, kind, family, architecture)
        for level in LEVELS:
            k = tuple(v if use else ANY for v, use in zip(key, level))
            b = self.bands.get(k)  # type: ignore[arg-type]
            if b is not None:
                return b
        return Band(-math.log(2.0), math.log(2.0), 0, ANY, ANY, ANY, ANY)

    def outside(self, engine: str, precision: str, task: str, family: str, architecture: str) -> tuple[str, ...]:
        """Reasons the configuration lies outside the validated ground (empty: inside)."""
        g = self.ground
        out = []
        if architecture not in g.architectures:
            out.append(f"no validation rows on {architecture} GPUs")
        if engine not in g.engines:
            out.append(f"no validation rows for the {engine} engine")
        if f"{precision_class(precision)}/{task}" not in g.precisions:
            out.append(f"no validation rows for {precision} {'training' if task == 'train' else 'inference'}")
        if family not in g.families:
            out.append(f"no validation rows for {family} models")
        return tuple(out)


@functools.lru_cache(maxsize=4)
def load_bands(path: Path | None = None) -> Bands:
    p = path or BANDS_FILE
    if not p.is_file():  # before scripts/error_bands.py first ran: no bands, no verdict
        return Bands({}, Ground(frozenset(), frozenset(), frozenset(), frozenset()), "")
    raw = read_toml(p)
    bands: dict[tuple[str, str, str, str], Band] = {}
    for b in raw.get("band", []):
        band = Band(float(b["p10"]), float(b["p90"]), int(b["rows"]), str(b["engine"]), str(b["kind"]),
                    str(b["family"]), str(b["architecture"]))
        bands[(band.engine, band.kind, band.family, band.architecture)] = band
    v = raw.get("validated", {})
    ground = Ground(frozenset(v.get("architectures", [])), frozenset(v.get("engines", [])),
                    frozenset(v.get("precisions", [])), frozenset(v.get("families", [])))
    return Bands(bands, ground, str(raw.get("meta", {}).get("source", "")))


def workload_family(shape: ModelShape) -> str:
    """The model family of a trace, as the bands classify rows: decoder LLMs as 'decoder', zoo
    families otherwise (cnn, detection, encoder, seq2seq, vit, diffusion), 'other' if unknown."""
    if shape.arch == "decoder":
        return "decoder"
    fam = shape.family
    return fam if fam in ("cnn", "detection", "encoder", "seq2seq", "vit", "diffusion", "decoder") else "other"


def step_kind(task: str, phase: str) -> str:
    if task == "train":
        return "train"
    return phase if phase in ("prefill", "decode") else "infer"


def band_summary(value: float, band: Band, unit: str = "", is_time: bool = False) -> str:
    lo, hi = band.time_range(value) if is_time else band.throughput_range(value)
    return f"likely {lo:,.3g}-{hi:,.3g}{unit} ({band.describe()})"
