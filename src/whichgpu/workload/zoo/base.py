"""Zoo entries: torch-free metadata plus a lazily imported builder.

A builder is a function ``build(req: BuildRequest) -> Built`` living in a module that may import
torch. It must construct the model on the ``meta`` device (no weights, no memory) and return
example inputs on ``meta`` too. The capture engine runs it under its dispatch mode.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from whichgpu.workload.shape import ModelShape


@dataclass(frozen=True)
class BuildRequest:
    """What to build. Precision is applied by the capture engine, not the builder."""

    task: str  # "train" | "infer"
    batch_size: int
    seq_len: int | None = None  # tokens per sample (text models)
    image_size: int | None = None  # pixels per side (vision models)
    phase: str = "full"  # causal LMs at inference: "prefill" | "decode"; otherwise "full"
    context: int | None = None  # decode: tokens already in the KV cache
    truncate_layers: bool = True  # build at most 2 copies of each repeated block (see Built.repeats)
    options: tuple[tuple[str, Any], ...] = ()  # builder-specific knobs (e.g. ("attention", "eager"))

    def option(self, key: str, default: Any = None) -> Any:
        return dict(self.options).get(key, default)


@dataclass
class Built:
    """A model ready to trace.

    ``inputs`` are passed as ``model(**inputs)`` when a dict, ``model(*inputs)`` otherwise.
    ``loss_fn(output, inputs) -> scalar tensor`` defines the training loss; None means the
    model's output is the loss or has a ``.loss`` attribute.
    ``repeats`` maps the module path of a *template* block to how many extra times it occurs in
    the full model (e.g. a 32-layer LLM built with 2 layers: {"model.layers.1": 30}). Every op
    recorded under that path (forward and backward) is counted 1 + extra times.
    ``samples``/``tokens`` are what one step processes (for throughput units).
    """

    model: Any
    inputs: Any
    loss_fn: Callable[[Any, Any], Any] | None = None
    repeats: dict[str, int] = field(default_factory=dict)
    samples: int = 0
    tokens: int = 0
    full_params: int | None = None  # parameter count of the full (untruncated) model, if known
    notes: list[str] = field(default_factory=list)
    # Model facts for the memory model when the builder knows them better than the config
    # (e.g. one tensor-parallel rank's heads); None: from the config.
    shape: ModelShape | None = None
    # The entry of `inputs` holding the KV cache tensors, and the bytes a cached value is stored
    # in when not the activations' dtype (an FP8 KV cache: 1).
    kv_key: str = ""
    kv_bytes: float | None = None


@dataclass(frozen=True)
class ZooEntry:
    """A model of the zoo (a ``[[model]]`` of `entries/*.toml`). Torch-free: the builder is
    imported only when a capture runs."""

    id: str
    title: str
    family: str  # "cnn" | "detection" | "encoder" | "decoder" | "seq2seq" | "vit" | "diffusion" | "rnn"
    input_kind: str  # "image" | "tokens"
    builder: str  # "package.module:function"
    definition: str  # where the architecture definition comes from
    default_batch_size: int
    default_seq_len: int | None = None
    default_image_size: int | None = None
    default_optimizer: str = "adamw"
    # Per-precision default batch where the reference scripts use different batches
    # (e.g. (("amp", 256), ("tf32", 256), ("fp32", 112))); used when a batch is not given.
    batch_by_precision: tuple[tuple[str, int], ...] = ()
    # Reference training setup with gradient accumulation: (seq_len or image size, samples per GPU
    # per optimizer step). The number of micro-batches per step is that divided by the batch.
    accumulated_batch: tuple[tuple[int, int], ...] = ()
    # Precisions for which the reference training scripts use channels-last (NHWC) activations
    # (NVIDIA's ConvNets: `--memory-format nhwc` with AMP).
    channels_last_precisions: tuple[str, ...] = ()
    # The tasks those scripts run channels-last (SSD's benchmark-inference loop passes NCHW images).
    channels_last_tasks: tuple[str, ...] = ("train", "infer")
    # What "mixed precision" means in the reference training scripts: "amp-fp16" (autocast,
    # torch.cuda.amp / apex O1) or "fp16" (an FP16 model with FP32 master weights: apex O2,
    # fairseq --fp16, GNMT --math fp16).
    reference_mixed_precision: str = "amp-fp16"
    validation_names: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    causal_lm: bool = False
    params_reference: int | None = None  # published/real parameter count, for tests
    throughput_unit: str = "samples/s"  # what the field reports: images/s, sequences/s, tokens/s
    notes: str = ""
    config: str = ""  # packaged config JSON name, for HF-config based entries
    # How a benchmark harness runs the model differently from its reference scripts, by source
    # (the validation rows' `source`): build options, a sequence length and optimizer it passes,
    # and `independent_ranks` (each GPU trains its own replica: no gradient all-reduce). E.g.
    # {Lambda = {options = {adaptive = false}, independent_ranks = true}}.
    harness: tuple[tuple[str, Any], ...] = ()
    # What "inference" means in the field's benchmarks when it is not one forward pass
    # (e.g. "beam-search generation"): such inference rows are reported as not modelled.
    infer_benchmark: str = ""

    def default_batch(self, precision: str = "") -> int:
        fam = precision.split("-")[0] if precision else ""
        table = dict(self.batch_by_precision)
        for key in (precision, fam):
            if key in table:
                return table[key]
        return self.default_batch_size

    def harness_of(self, source: str) -> dict[str, Any]:
        """The `harness` facts of one source (empty when it runs the reference setup)."""
        return dict(dict(self.harness).get(source, ()))

    def grad_accum(self, batch: int, size: int | None) -> int:
        """Micro-batches per optimizer step in the reference training setup (1 if none)."""
        table = dict(self.accumulated_batch)
        total = table.get(size or 0) if size in table else None
        if not total or batch <= 0:
            return 1
        return max(1, total // batch)

    def load_builder(self) -> Callable[[BuildRequest], Built]:
        """The builder; for config-based entries, bound to the packaged config name."""
        mod, _, fn = self.builder.partition(":")
        func = getattr(importlib.import_module(mod), fn)
        if self.config:
            config = self.config
            return lambda req: func(req, config)
        return func  # type: ignore[no-any-return]
