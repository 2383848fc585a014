"""Published measurements as one kind of record, whatever file format they came in.

Two CSV formats are read (the columns tell which):

* the throughput format of ``shared/validation/throughput.csv`` (``source_repo``, ``metric_unit``,
  ``batch_size_per_gpu``, ``seq_len_or_image_size``, ...): training/inference throughput;
* the external format of ``shared/validation/external_dev/*.csv`` (``row_id``, ``metric``,
  ``settings``, ...): samples/s, decode and prefill tokens/s, first-token latency, serving
  throughput, GPU memory, out-of-memory labels and weight file sizes.

A directory stands for every ``*.csv`` under it (recursively, sorted by path). A file that is not
UTF-8, a row with fewer or more cells than the header, and a value that is no measurement (not a
finite number >= 0) are errors naming the file, line and column. Values stay strings here: turning
a row into a prediction (``measure/jobs.py``) reports what else it cannot read, row by row.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whichgpu.errors import InputError

THROUGHPUT_COLUMNS = ("model", "task", "gpu", "gpu_count", "precision", "batch_size_per_gpu",
                      "seq_len_or_image_size", "metric_unit", "value")
EXTERNAL_COLUMNS = ("row_id", "source", "model", "task", "phase", "gpu", "gpu_count", "precision", "batch",
                    "metric", "unit", "value")
# Known source repositories of the throughput format -> a short source name.
_REPO_SOURCES = {"nvidia/deeplearningexamples": "DeepLearningExamples",
                 "lambdal/deeplearning-benchmark": "Lambda"}


@dataclass(frozen=True)
class Measurement:
    """One published measurement (or a configuration to predict when ``value`` is empty)."""

    file: str  # the file's name
    index: int  # 0-based data row within its file
    row_id: str  # the file's own row id, or "<file stem>:<index>"
    source: str  # who measured: DeepLearningExamples, Lambda, timm, gpt-fast, llama.cpp, ...
    model: str
    task: str
    phase: str  # full | prefill | decode | serve | weights
    gpu: str
    gpu_count: str
    tp: str
    precision: str
    batch: str
    seq_len: str
    image_size: str
    size: str  # throughput format: sequence length or image size, by the model's input kind
    context: str
    gen_tokens: str
    metric: str  # throughput (throughput format) or the external metric name
    unit: str
    value: str
    framework: str = ""
    settings: tuple[tuple[str, str], ...] = ()
    notes: str = ""
    source_ref: str = ""
    table: str = ""
    extra: tuple[tuple[str, str], ...] = field(default=())

    def setting(self, key: str, default: str = "") -> str:
        return dict(self.settings).get(key, default)


def parse_settings(text: str) -> tuple[tuple[str, str], ...]:
    """``key=value;key=value`` -> pairs (a bare word is a flag with value "1")."""
    out: list[tuple[str, str]] = []
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        k, sep, v = part.partition("=")
        out.append((k.strip().lower(), v.strip() if sep else "1"))
    return tuple(out)


def csv_files(path: str) -> list[Path]:
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*.csv") if f.is_file())
        if not files:
            raise InputError(f"{path}: directory holds no .csv files; give a measurements CSV or a directory of them")
        return files
    if not p.is_file():
        raise InputError(f"{path}: cannot read (no such file or directory); give a measurements CSV or a directory of them")
    return [p]


def read_file(path: Path) -> list[Measurement]:
    """The rows of one CSV file. A row with fewer or more cells than the header, or a value that
    is not a measurement (`_check_row`), is an error naming the file, the line and the column."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            cols = list(reader.fieldnames or [])
            make = _format(path, cols)
            out = []
            for i, r in enumerate(reader):
                _check_row(path, reader.line_num, cols, r)
                out.append(make(path, i, r))
            return out
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); "
                         "a measurements CSV must be UTF-8: save it as UTF-8") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None
    except csv.Error as e:
        raise InputError(f"{path}: malformed CSV ({e})") from None


def _format(path: Path, cols: list[str]) -> Callable[[Path, int, dict[str, str | None]], Measurement]:
    """The reader of a file with these columns, or an error naming the columns expected."""
    if all(c in cols for c in EXTERNAL_COLUMNS):
        return _external
    if all(c in cols for c in THROUGHPUT_COLUMNS):
        return _throughput
    missing = [c for c in THROUGHPUT_COLUMNS if c not in cols]
    raise InputError(f"{path}: missing column(s) {', '.join(missing)}; expected the columns of "
                     "shared/validation/throughput.csv (" + ", ".join(THROUGHPUT_COLUMNS) + ") or of "
                     "shared/validation/external_dev/*.csv (" + ", ".join(EXTERNAL_COLUMNS) + ")")


# The values of a ``fits`` row (external format): it fits, or it ran out of memory.
FITS_LABELS = ("fits", "yes", "ok", "oom", "no")


def _check_row(path: Path, line: int, cols: list[str], r: dict[Any, Any]) -> None:
    """A row has a cell per header column (empty cells are fine), and its value, when given, is a
    measurement: a finite number >= 0, or for a ``fits`` row one of FITS_LABELS."""
    if None in r:  # DictReader files the cells past the header under None
        n = len(cols) + len(r[None])
        raise InputError(f"{path}: line {line}: {n} cells but the header has {len(cols)} columns; "
                         "quote a cell that holds a comma, or remove the extra cells")
    short = [c for c in cols if r.get(c) is None]
    if short:
        raise InputError(f"{path}: line {line}: {len(cols) - len(short)} cells but the header has {len(cols)} "
                         f"columns (no cell for column {short[0]!r}); every row needs a cell per column, "
                         "empty ones included")
    value = r["value"].strip()
    if not value:
        return
    if (r.get("metric") or "").strip() == "fits":
        if value.lower() not in FITS_LABELS:
            raise InputError(f"{path}: line {line}, column 'value': a fits row's value is one of "
                             f"{', '.join(FITS_LABELS)} (or empty), got {value!r}")
        return
    try:
        x = float(value.replace(",", ""))
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and x >= 0):
        raise InputError(f"{path}: line {line}, column 'value': expected a measurement (a finite number >= 0, "
                         f"or empty for a configuration to predict), got {value!r}")


def read_measurements(paths: list[str]) -> list[Measurement]:
    """Every row of every file named (directories: their CSV files), in order."""
    if not paths:
        raise InputError("no measurements given: name measurement CSV files or directories of them", field="data")
    out: list[Measurement] = []
    seen: set[Path] = set()
    for p in paths:
        for f in csv_files(p):
            key = f.resolve()
            if key in seen:
                continue
            seen.add(key)
            out.extend(read_file(f))
    return out


def _g(r: dict[str, str | None], k: str) -> str:
    v = r.get(k)
    return v.strip() if isinstance(v, str) else ""


def _throughput(path: Path, i: int, r: dict[str, str | None]) -> Measurement:
    repo = _g(r, "source_repo")
    source = _REPO_SOURCES.get(repo.lower(), repo or path.stem)
    return Measurement(
        file=path.name, index=i, row_id=f"{path.stem}:{i}", source=source, model=_g(r, "model"),
        task=_g(r, "task"), phase="full", gpu=_g(r, "gpu"), gpu_count=_g(r, "gpu_count"), tp="",
        precision=_g(r, "precision"), batch=_g(r, "batch_size_per_gpu"), seq_len="", image_size="",
        size=_g(r, "seq_len_or_image_size"), context="", gen_tokens="", metric="throughput",
        unit=_g(r, "metric_unit"), value=_g(r, "value"), framework=_g(r, "framework"), notes=_g(r, "notes"),
        source_ref=_g(r, "source_path_or_url"), extra=(("source_repo", repo),))


def _external(path: Path, i: int, r: dict[str, str | None]) -> Measurement:
    return Measurement(
        file=path.name, index=i, row_id=_g(r, "row_id") or f"{path.stem}:{i}", source=_g(r, "source") or path.stem,
        model=_g(r, "model"), task=_g(r, "task"), phase=_g(r, "phase") or "full", gpu=_g(r, "gpu"),
        gpu_count=_g(r, "gpu_count"), tp=_g(r, "tp"), precision=_g(r, "precision"), batch=_g(r, "batch"),
        seq_len=_g(r, "seq_len"), image_size=_g(r, "image_size"), size="", context=_g(r, "context"),
        gen_tokens=_g(r, "gen_tokens"), metric=_g(r, "metric"), unit=_g(r, "unit"), value=_g(r, "value"),
        settings=parse_settings(_g(r, "settings")), notes=_g(r, "notes"), source_ref=_g(r, "source_ref"),
        table=_g(r, "table"))
