"""A published measurement -> what to predict: workload, GPU, plan, engine, metric.

Mapping choices (documented, generic; the README of each data directory states the sources'
setups, which these follow):

* Models resolve through the zoo's names and aliases. Names that carry the weight format
  (llama.cpp's "LLaMA 3 8B Q4_K_M") drop it: the precision column says it.
  TensorRT-LLM's performance pages name "LLaMA 7B/70B"; their methodology names Llama 2
  (row notes), so those resolve to Llama-2.
* GPUs resolve through the catalog. Two sources need a fact the name leaves out: gpt-fast's
  "A100-80GB" ran on NVLink-connected A100-SXM4-80GB (its README: 8xA100-80GB in a hybrid cube
  mesh, power-limited to 330 W: the cap is in the row's settings); TensorRT-LLM's "A100" is not
  stated (row notes): A100-SXM4-80GB is assumed (its 70B and Falcon-180B batches need 80 GB).
* Precision: "AMP" / "AMP fp16 (autocast)" / "fp16 mixed precision" -> autocast FP16 with FP32
  weights (for training the zoo entry's reference recipe); TF32 rows and "FP32 (TF32 likely
  active)" -> tf32; "FP16"/"F16"/"bf16" at inference -> 16-bit weights; "FP8" at inference -> FP8
  weights and GEMMs (TensorRT-LLM); "int8 weight-only", "int4 weight-only (group size 32)",
  "Q4_K_M" -> weight-only quantised formats.
* Engine: the row's ``engine`` setting (llama.cpp, tensorrt-llm, gpt-fast) or ``compile=1``
  (torch.compile), else eager PyTorch; TensorFlow 1 with XLA -> the xla profile, other
  TensorFlow rows as eager.
* Throughput-format rows keep the reference harness facts of ``measure/validate.py``'s
  original mapping (NHWC with AMP for NVIDIA's ConvNets, NCCL P2P off in Lambda's harness,
  gradient accumulation of the reference recipe). Nodes and networks are the GPU's default
  system (hardware/systems/: DGX-1 for V100 SXM2, DGX-2 for SXM3, DGX A100, ...), or the system
  ``validate --system`` names for the rows on its GPU.
* timm rows of torch 1.x ran attention as matmul + softmax (no fused SDPA before torch 2.0).
* Throughput per GPU: a unit ending in "/GPU", and TensorRT-LLM's peak-throughput tables, whose
  headers read "Throughput (out tok/s/GPU)" for every GPU of the v0.6.1 page
  (NVIDIA/TensorRT-LLM docs/source/performance.md), though the CSV's A100 unit drops "/GPU".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from whichgpu import limits
from whichgpu.errors import InputError, WhichGPUError
from whichgpu.hardware.catalog import Catalog
from whichgpu.hardware.engine import get_engine
from whichgpu.hardware.spec import GpuSpec
from whichgpu.hardware.system import System
from whichgpu.measure.corpus import Measurement
from whichgpu.parallel.plan import Plan
from whichgpu.workload.spec import WorkloadSpec

# metric -> (kind of prediction, direction): "+" higher is faster/better, "-" lower is faster.
METRICS: dict[str, tuple[str, str]] = {
    "throughput": ("step", "+"),
    "infer_samples_per_s": ("step", "+"),
    "train_samples_per_s": ("step", "+"),
    "decode_tokens_per_s": ("decode", "+"),
    "prefill_tokens_per_s": ("prefill", "+"),
    "ttft_ms": ("ttft", "-"),
    "output_tokens_per_s": ("serve", "+"),
    "gpu_memory_used": ("memory", "+"),
    "fits": ("fits", ""),
    "weights_size": ("weights", "+"),
}
THROUGHPUT_UNITS = ("images/s", "sequences/s", "tokens/s", "samples/s")

_SOURCE_MODELS: dict[str, dict[str, str]] = {
    "tensorrt-llm": {"llama 7b": "llama-2-7b", "llama 70b": "llama-2-70b"},
}
_SOURCE_GPUS: dict[str, dict[str, str]] = {
    "gpt-fast": {"a100-80gb (330w cap)": "a100-sxm4-80gb"},
    "tensorrt-llm": {"a100": "a100-sxm4-80gb"},
}
_QUANT_SUFFIX = re.compile(r"\s+(F16|F32|BF16|Q\d_[A-Z0-9_]+)$", re.IGNORECASE)
_TORCH_VERSION = re.compile(r"torch (\d+)\.(\d+)")
# "includes ~1343 MB the doc measures for CUDA kernels/context": the source's own measurement of
# the CUDA context of its stack (CUDA before lazy module loading loads every kernel at start).
_CONTEXT = re.compile(r"includes ~(\d+) MB[^;]*?context", re.IGNORECASE)


@dataclass(frozen=True)
class Job:
    """One row, ready to predict."""

    m: Measurement
    kind: str  # step | decode | prefill | ttft | serve | memory | fits | weights
    spec: WorkloadSpec  # the workload (for LLM rows: batch, precision; phases derive from it)
    gpu: GpuSpec
    plan: Plan
    engine: str
    unit: str
    measured: float | None  # numeric value, or 1.0 / 0.0 for fits / OOM
    prompt: int = 0  # LLM rows: prompt tokens
    gen: int = 0  # LLM rows: generated tokens
    layer_split: int = 1  # llama.cpp: layers split over this many GPUs (run one after another)
    per_gpu: int = 1  # the measurement is per GPU of a group this large (divide the group's figure)
    replicas: int = 1  # GPUs each training alone (no gradient all-reduce): the figure is theirs summed
    cuda_context_bytes: float | None = None  # the CUDA context the source measured, when it says
    system: System | None = None  # None: the GPU's default system (hardware/systems/)

    @property
    def direction(self) -> str:
        return METRICS[self.m.metric][1]


def _power(text: str) -> float:
    """settings power_limit_w=W: a finite number of watts in range (limits.POWER_W)."""
    try:
        return float(limits.POWER_W.parse(text))
    except ValueError:
        raise InputError(f"settings power_limit_w must be {limits.POWER_W.describe()} W, got {text!r}") from None


def _source_key(m: Measurement) -> str:
    return m.source.lower().split(" (")[0].strip()


def _int(m: Measurement, field_name: str, value: str, default: int | None = None) -> int | None:
    v = value.strip()
    if not v:
        return default
    try:
        n = int(v)
    except ValueError:
        raise InputError(f"{field_name} must be a whole number, got {value!r}") from None
    if n <= 0:
        raise InputError(f"{field_name} must be > 0, got {n}")
    return n


def resolve_model(m: Measurement) -> str:
    from whichgpu.workload.zoo import get_entry

    name = _QUANT_SUFFIX.sub("", m.model.strip())
    mapped = _SOURCE_MODELS.get(_source_key(m), {}).get(name.lower())
    return get_entry(mapped or name).id


def resolve_gpu(m: Measurement, catalog: Catalog) -> GpuSpec:
    mapped = _SOURCE_GPUS.get(_source_key(m), {}).get(m.gpu.strip().lower())
    return catalog.get(mapped or m.gpu)


def map_precision(p: str, task: str) -> str:
    """The row's precision label -> a whichgpu precision policy."""
    k = p.strip().lower()
    if k in ("amp", "amp/fp16", "mixed", "amp fp16 (autocast)", "fp16 mixed precision"):
        return "amp-fp16"
    if k in ("fp16", "f16"):
        return "amp-fp16" if task == "train" else "fp16"
    if k in ("tf32", "fp32 (tf32 likely active)"):
        return "tf32"
    if k == "fp32":
        return "fp32"
    if k in ("bf16", "amp-bf16", "amp/bf16"):
        return "amp-bf16" if task == "train" else "bf16"
    if k == "fp8":
        return "fp8"
    if k in ("int8 weight-only", "int8"):
        return "int8"
    if k.startswith("int4 weight-only"):
        return "int4-g32" if "32" in k else "int4"
    if k == "q4_k_m":
        return "q4_k_m"
    raise InputError(f"unknown precision {p!r}; expected AMP, AMP/FP16, FP16, F16, BF16, TF32, FP32, FP8, "
                     "int8 weight-only, int4 weight-only, Q4_K_M")


def engine_of(m: Measurement) -> str:
    e = m.setting("engine").lower()
    if e == "tensorrt-llm" and re.search(r"\[v0\.[56]", m.table):
        return "tensorrt-llm-0.6"  # the releases before the XQA generation kernel
    if e in ("llama.cpp", "tensorrt-llm", "gpt-fast"):
        return e
    if m.setting("compile") == "1":
        return "torch-compile"
    if "xla" in m.framework.lower():
        return "xla"
    return "pytorch"


def row_job(m: Measurement, catalog: Catalog, system: System | None = None) -> Job:
    """Turn one measurement into a prediction job; raise WhichGPUError when it cannot be modelled.
    `system` applies to the rows whose GPU it can hold (its GPU, or any for a generic chassis)."""
    if m.metric not in METRICS:
        raise InputError(f"unknown metric {m.metric!r}; known: {', '.join(METRICS)}")
    kind = METRICS[m.metric][0]
    job = _throughput_job(m, catalog) if m.metric == "throughput" else _external_job(m, catalog, kind)
    if system is not None and system.gpu in (None, job.gpu.id):
        job = replace(job, system=system)
    return job


def _measured(m: Measurement, kind: str) -> float | None:
    v = m.value.strip()
    if not v:
        return None
    if kind == "fits":
        low = v.lower()
        if low in ("fits", "yes", "ok"):
            return 1.0
        if low in ("oom", "no"):
            return 0.0
        raise InputError(f"fits value must be 'fits' or 'OOM', got {v!r}")
    try:
        x = float(v.replace(",", ""))
    except ValueError:
        raise InputError(f"value {v!r} is not a number") from None
    if not x > 0 or x == float("inf"):
        raise InputError(f"value must be a positive finite number, got {v!r}")
    return x


def _throughput_job(m: Measurement, catalog: Catalog) -> Job:
    from whichgpu.workload.zoo import get_entry

    entry = get_entry(m.model)
    task = m.task.lower()
    if task not in ("train", "infer"):
        raise InputError(f"task must be train or infer, got {m.task!r}")
    if task == "infer" and entry.infer_benchmark:
        raise WhichGPUError(f"{entry.title} inference is measured as {entry.infer_benchmark}; the zoo traces "
                            "one forward pass, so autoregressive generation is not modelled")
    gpu = catalog.get(m.gpu)
    prec = map_precision(m.precision, task)
    if prec == "amp-fp16" and task == "train":
        prec = entry.reference_mixed_precision
    n = _int(m, "gpu_count", m.gpu_count, 1) or 1
    b = _int(m, "batch_size_per_gpu", m.batch)
    harness = entry.harness_of(m.source) if task == "train" else {}
    size = _int(m, "seq_len_or_image_size", m.size) or harness.get("seq_len")
    seq = size if entry.input_kind == "tokens" else None
    img = size if entry.input_kind == "image" else None
    if m.unit not in THROUGHPUT_UNITS:
        raise InputError(f"metric_unit must be one of {', '.join(THROUGHPUT_UNITS)}, got {m.unit!r}")
    # Lambda's harness (lambdal/deeplearning-benchmark pytorch/scripts/benchmark_pytorch.sh and
    # config_v1/*.sh) runs NVIDIA's scripts without --memory-format and with NCCL_P2P_DISABLE=1.
    lambda_harness = m.source == "Lambda"
    options: tuple[tuple[str, object], ...] = ()
    if (entry.input_kind == "image" and prec in entry.channels_last_precisions and task in entry.channels_last_tasks
            and not lambda_harness):
        options = (("memory_format", "channels_last"),)
    options += tuple(harness.get("options", ()))
    spec = WorkloadSpec(model=entry.id, task=task, batch_size=b, seq_len=seq, image_size=img, precision=prec,
                        optimizer=harness.get("optimizer"), options=options)
    accum = entry.grad_accum(b or entry.default_batch(prec), size) if task == "train" else 1
    engine = engine_of(m)
    alone = harness.get("independent_ranks", False)
    plan = Plan(dp=1 if alone else n, engine=engine, grad_accum=accum, p2p=not lambda_harness)
    return Job(m, "step", spec, gpu, plan, engine, m.unit, _measured(m, "step"), replicas=n if alone else 1)


def _external_job(m: Measurement, catalog: Catalog, kind: str) -> Job:
    from whichgpu.workload.zoo import get_entry

    entry = get_entry(resolve_model(m))
    task = m.task.lower()
    if task not in ("train", "infer"):
        raise InputError(f"task must be train or infer, got {m.task!r}")
    if kind == "weights" and not m.gpu:
        gpu = catalog.get("h100-sxm5-80gb")  # weight bytes do not depend on the GPU; any entry serves
    else:
        gpu = resolve_gpu(m, catalog)
    prec = map_precision(m.precision, task)
    if prec == "amp-fp16" and task == "train" and m.source != "timm" and not m.source.startswith("HF"):
        prec = entry.reference_mixed_precision
    engine = engine_of(m)
    count = _int(m, "gpu_count", m.gpu_count, 1) or 1
    tp = _int(m, "tp", m.tp, 1) or 1
    parallel = m.setting("parallel")
    layer_split = 1
    options: list[tuple[str, object]] = []
    if tp > 1 or parallel == "tensor":
        if not entry.causal_lm:
            raise WhichGPUError(f"tensor parallelism of {entry.title} is not modelled (built for decoder LLMs)")
        tp = max(tp, count)
        # gpt-fast's tp.py splits the blocks only (the output layer stays whole on every GPU);
        # TensorRT-LLM splits the LM head over the vocabulary.
        options += [("tp", tp), ("tp_head", "replicated" if engine == "gpt-fast" else "sharded")]
    elif parallel == "layer-split":
        layer_split = count
    elif count > 1:
        raise WhichGPUError(f"{count} GPUs without a stated layout (settings parallel=...) are not modelled")
    b = _int(m, "batch", m.batch, 1) or 1
    layout = m.setting("layout").lower()
    if layout == "nhwc":
        options.append(("memory_format", "channels_last"))
    tv = _TORCH_VERSION.search(m.notes)
    attention = get_engine(engine).attention_option
    if tv and int(tv.group(1)) < 2 and entry.family in ("vit", "decoder", "encoder"):
        attention = "eager"  # no fused SDPA before torch 2.0
    if attention and entry.family in ("vit", "decoder", "encoder"):
        options.append(("attention", attention))
    kv = m.setting("kv_dtype") or ("fp8" if engine.startswith("tensorrt-llm") and prec == "fp8" else "")
    if kv and entry.causal_lm:
        # TensorRT-LLM's FP8 builds also store the KV cache in FP8 (--fp8_kv_cache; row notes).
        options.append(("kv_dtype", kv))
    power = m.setting("power_limit_w")
    accum = _int(m, "settings grad_accum", m.setting("grad_accum"), 1) or 1
    plan = Plan(engine=engine, grad_accum=accum, power_limit_w=_power(power) if power else None)
    measured = _measured(m, kind)
    if kind in ("decode", "prefill", "ttft", "serve") or (kind == "fits" and entry.causal_lm):
        if not entry.causal_lm:
            raise InputError(f"{m.metric} applies to causal LMs; {entry.title} is not one")
        prompt = _int(m, "seq_len", m.seq_len, 0) or 0
        gen = _int(m, "gen_tokens", m.gen_tokens, 0) or 0
        if kind in ("prefill", "ttft") and prompt <= 0:
            raise InputError(f"{m.metric} needs the prompt length (seq_len)")
        if kind in ("decode", "serve") and gen <= 0:
            raise InputError(f"{m.metric} needs the number of generated tokens (gen_tokens)")
        spec = WorkloadSpec(model=entry.id, task="infer", batch_size=b, precision=prec, options=tuple(options))
        per_gpu = tp if kind == "serve" and (m.unit.lower().endswith("/gpu") or _source_key(m) == "tensorrt-llm") else 1
        return Job(m, kind, spec, gpu, plan, engine, m.unit, measured, prompt=prompt, gen=gen,
                   layer_split=layer_split, per_gpu=per_gpu)
    if kind == "weights":
        spec = WorkloadSpec(model=entry.id, task="infer", batch_size=1, precision=prec, phase="decode", context=1)
        return Job(m, kind, spec, gpu, plan, engine, m.unit, measured)
    seq = _int(m, "seq_len", m.seq_len)
    img = _int(m, "image_size", m.image_size)
    if entry.input_kind == "image":
        seq = None
    else:
        img = None
    optimizer = m.setting("optimizer") or None
    ckpt = m.setting("checkpointing") or "none"
    spec = WorkloadSpec(model=entry.id, task=task, batch_size=b, seq_len=seq, image_size=img, precision=prec,
                        optimizer=_optimizer(optimizer), checkpointing=ckpt if task == "train" else "none",
                        options=tuple(options))
    ctx = _CONTEXT.search(m.notes)
    return Job(m, kind, spec, gpu, plan, engine, m.unit, measured,
               cuda_context_bytes=float(ctx.group(1)) * 1024**2 if ctx and kind == "memory" else None)


def _optimizer(name: str | None) -> str | None:
    if name is None:
        return None
    return {"adamw-8bit": "adamw-8bit", "adafactor": "adafactor", "adamw": "adamw", "sgd": "sgd"}.get(name, name)
