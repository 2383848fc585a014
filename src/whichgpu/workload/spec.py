"""What to trace: the workload half of (workload, hardware, plan). Torch-free."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from whichgpu import __version__, limits
from whichgpu.errors import CaptureError, InputError
from whichgpu.workload.precision import get_precision
from whichgpu.workload.trace import SCHEMA

TASKS = ("train", "infer")
PHASES = ("full", "prefill", "decode")

# The sizes' valid ranges (whichgpu/limits.py, shared with the CLI's flags), checked before any
# capture: past them a meta tensor's element count overflows int64 or the number is a typo.
SIZE_BOUNDS: tuple[tuple[str, str, limits.Bound], ...] = (
    ("batch_size", "batch size", limits.BATCH),
    ("seq_len", "sequence length", limits.SEQ_LEN),
    ("image_size", "image size", limits.IMAGE_SIZE),
    ("context", "context", limits.CONTEXT),
    ("lora_rank", "the LoRA rank", limits.LORA_RANK),
)


class FixedBatchError(InputError):
    """A batch size the model cannot take: a ``file.py:factory`` without a ``batch_size``
    parameter builds one batch, the leading dimension of its inputs (``batch``)."""

    def __init__(self, message: str, batch: int) -> None:
        super().__init__(message, field="batch_size")
        self.batch = batch


@dataclass(frozen=True)
class WorkloadSpec:
    """A model and one step of work on it.

    model: a zoo name, a path to a Hugging Face config.json (or its directory), or
    ``path/to/file.py:factory``. Unset sizes take the model's defaults.
    """

    model: str
    task: str = "train"
    batch_size: int | None = None
    seq_len: int | None = None
    image_size: int | None = None
    precision: str = "amp-bf16"
    optimizer: str | None = None
    optimizer_impl: str = "foreach"
    phase: str = "full"
    context: int | None = None
    sparsity: str = "none"
    finetune: str = "full"  # full | lora | qlora
    lora_rank: int = 16
    checkpointing: str = "none"  # none | selective | full
    options: tuple[tuple[str, Any], ...] = ()

    def validate(self) -> None:
        if self.task not in TASKS:
            raise InputError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}", field="task")
        if self.phase not in PHASES:
            raise InputError(f"phase must be one of {', '.join(PHASES)}, got {self.phase!r}", field="phase")
        if self.phase != "full" and self.task != "infer":
            raise InputError(f"phase {self.phase} applies to inference of causal LMs", field="phase")
        for name, words, bound in SIZE_BOUNDS:
            v = getattr(self, name)
            if v is None and name != "lora_rank":
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not bound.ok(v):
                valid = bound.describe("an integer", integer=True)
                raise InputError(f"{words} must be {valid}, got {v!r}", field=name)
        if self.finetune not in ("full", "lora", "qlora"):
            raise InputError(f"finetune must be full, lora or qlora; got {self.finetune!r}", field="finetune")
        if self.finetune != "full" and self.task != "train":
            raise InputError(f"finetune {self.finetune} applies to training", field="finetune")
        if self.checkpointing not in ("none", "selective", "full"):
            raise InputError(f"checkpointing must be none, selective or full; got {self.checkpointing!r}", field="checkpointing")
        if self.checkpointing != "none" and self.task != "train":
            raise InputError("activation checkpointing applies to training", field="checkpointing")
        if self.sparsity not in ("none", "2:4"):
            raise InputError(f"sparsity must be 'none' or '2:4', got {self.sparsity!r}", field="sparsity")
        get_precision(self.precision, self.task)


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from, and a fingerprint of it for the cache."""

    kind: str  # "zoo" | "config" | "factory"
    ref: str  # zoo id | config path | "file.py:factory"
    fingerprint: str
    title: str


def classify(model: str) -> ModelSource:
    """Decide what the MODEL argument names, without importing torch."""
    m = model.strip()
    if not m:
        raise InputError("model name is empty; give a zoo name, a config.json path or file.py:factory")
    if ".py:" in m:
        path, _, fn = m.rpartition(":")
        p = Path(path)
        if not _is(p.is_file):
            raise CaptureError(f"factory file {path!r} {_why_not_a_file(p)} (expected path/to/file.py:function)")
        if not fn.isidentifier():
            raise CaptureError(f"factory name {fn!r} is not a Python identifier (expected path/to/file.py:function)")
        return ModelSource("factory", f"{p.resolve()}:{fn}", _digest(p) + _neighbours(p), f"{p.name}:{fn}")
    p = Path(m)
    if m.endswith(".json") or _is(p.is_dir) or (os.sep in m and _is(p.exists)):
        cfg = p / "config.json" if _is(p.is_dir) else p
        if not _is(cfg.is_file):
            raise CaptureError(f"config file {str(cfg)!r} {_why_not_a_file(cfg)}")
        return ModelSource("config", str(cfg.resolve()), _digest(cfg), cfg.parent.name or cfg.name)
    from whichgpu.workload.zoo import get_entry

    e = get_entry(m)
    return ModelSource("zoo", e.id, e.builder + "#" + e.config, e.title)


def _is(test: Callable[[], bool]) -> bool:
    """A path test (is_file, is_dir, exists) that is False, not an exception, for a name the file
    system refuses (too long: ENAMETOOLONG; a NUL byte: ValueError)."""
    try:
        return test()
    except (OSError, ValueError):
        return False


def _why_not_a_file(p: Path) -> str:
    """Why `p` is not a readable file, in words ("does not exist", "is a directory", ...)."""
    try:
        p.stat()
    except FileNotFoundError:
        return "does not exist"
    except OSError as e:  # ENAMETOOLONG, EACCES on a parent, ELOOP, ...
        return f"cannot be opened ({(e.strerror or type(e).__name__).lower()})"
    except ValueError:
        return "is not a valid path"
    return "is a directory" if _is(p.is_dir) else "is not a regular file"


def _neighbours(p: Path, most: int = 1000) -> str:
    """A fingerprint of the Python files beside a factory (names, sizes, modification times): the
    factory may import them (its directory is on sys.path), so editing one recaptures."""
    h = hashlib.sha256()
    try:
        with os.scandir(p.resolve().parent) as it:
            files = sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in it
                           if e.name.endswith(".py") and e.name != p.name and e.is_file())
    except OSError:
        return ""
    for name, size, mtime in files[:most]:
        h.update(f"{name}\0{size}\0{mtime}\0".encode())
    return "+" + h.hexdigest()[:16]


def _digest(p: Path) -> str:
    try:
        return hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    except OSError as e:
        raise CaptureError(f"{p}: cannot read ({(e.strerror or type(e).__name__).lower()})") from None


@dataclass(frozen=True)
class ModelFacts:
    """What the model's source says of it before any capture."""

    causal_lm: bool  # generates text: inference is served as prefill + decode
    family: str  # the zoo family (decoder, encoder, cnn, ...); "" when unknown
    unit: str  # what its throughput counts


def model_facts(src: ModelSource) -> ModelFacts:
    """Causal LM, family and throughput unit of a model source (zoo entry or config.json)."""
    if src.kind == "zoo":
        from whichgpu.workload.zoo import get_entry

        e = get_entry(src.ref)
        return ModelFacts(e.causal_lm, e.family, e.throughput_unit)
    if src.kind == "config":
        from whichgpu.workload.zoo.llm.args import SUPPORTED

        causal = read_config(src.ref).get("model_type") in SUPPORTED
        return ModelFacts(causal, "decoder" if causal else "", "tokens/s")
    return ModelFacts(False, "", "samples/s")


def is_serving(spec: WorkloadSpec, src: ModelSource) -> bool:
    """Inference of a whole causal-LM request: prefill then decode steps (predict.py)."""
    return spec.task == "infer" and spec.phase == "full" and model_facts(src).causal_lm


def read_config(path: str) -> dict[str, Any]:
    try:
        with open(path) as fh:
            cfg = json.load(fh)
    except json.JSONDecodeError as e:
        raise CaptureError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except OSError as e:
        raise CaptureError(f"{path}: cannot read ({e.strerror})") from None
    if not isinstance(cfg, dict):
        raise CaptureError(f"{path}: expected a JSON object (a Hugging Face config.json)")
    if "model_type" not in cfg:
        raise CaptureError(f"{path}: no 'model_type' field; a Hugging Face config.json names its model_type "
                           "(e.g. \"llama\", \"bert\", \"gpt2\")")
    return cfg


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of the capture code (workload/ and the zoo): a trace cached by older code is stale."""
    root = Path(__file__).parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")) + sorted(root.rglob("*.json")):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def cache_key(src: ModelSource, spec: WorkloadSpec) -> str:
    payload = {"v": __version__, "code": code_fingerprint(), "schema": SCHEMA, "src": [src.kind, src.ref, src.fingerprint],
               "spec": {k: v for k, v in asdict(replace(spec, model="")).items()}}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:24]
