"""Options and helpers shared by commands."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import typer

from whichgpu import limits
from whichgpu.hardware.catalog import Catalog, load_catalog
from whichgpu.hardware.spec import GpuSpec
from whichgpu.hardware.system import System
from whichgpu.limits import Bound
from whichgpu.workload.spec import WorkloadSpec

CatalogOpt = typer.Option(
    None, "--catalog", metavar="DIR",
    help="Directory of extra/override GPU and system files (also $WHICHGPU_CATALOG).",
)
SystemOpt = typer.Option(
    None, "--system", metavar="ID",
    help="The system the GPUs sit in: nodes, NVLink/PCIe, network (whichgpu systems; default: the GPU's usual one).",
)
JsonOpt = typer.Option(False, "--json", help="Print one JSON document (stable schema) instead of tables.")
WideOpt = typer.Option(False, "--wide", help="Tables with every detail column (wider than 120 columns); the default fits 80-120.")


def bounded_parser(bound: Bound, integer: bool) -> Any:
    """A flag's parser: a finite number within `bound` (Bound.parse), else a one-line usage error."""
    return lambda text: bound.parse(text, integer)


def int_option(default: int | None, *decls: str, bound: Bound, help: str, **kw: Any) -> Any:
    """An integer flag whose valid range (limits.py) shows in --help and is enforced."""
    return typer.Option(default, *decls, help=f"{help} [{bound.lo:g}-{int(bound.hi)}]",
                        parser=bounded_parser(bound, True), metavar="INTEGER", **kw)


def float_option(default: float | None, *decls: str, bound: Bound, help: str, **kw: Any) -> Any:
    """A float flag: finite, within its range (limits.py), which shows in --help."""
    lo = f">{bound.lo:g}" if bound.lo_open else f">={bound.lo:g}"
    return typer.Option(default, *decls, help=f"{help} [{lo}, <={bound.hi:g}]",
                        parser=bounded_parser(bound, False), metavar="NUMBER", **kw)


def get_catalog(catalog_dir: str | None) -> Catalog:
    return load_catalog(catalog_dir)


def get_system(catalog_dir: str | None, name: str | None) -> System | None:
    """The system named by --system (packaged or from the catalog directory), or None."""
    if name is None:
        return None
    from whichgpu.hardware.system import load_systems

    return load_systems(catalog_dir).get(name)


def gpu_names(gpu: str | None, system: System | None) -> str:
    """--gpu, or the GPU the --system is built from."""
    if gpu is not None:
        return gpu
    if system is not None and system.gpu is not None:
        return system.gpu
    from whichgpu.errors import InputError

    raise InputError("name a GPU with --gpu (several separated by commas, or 'all'), or a --system built from one")


def system_for(gpu: GpuSpec, system: System | None, catalog_dir: str | None) -> System:
    """The system a GPU runs in: the one given (checked against the GPU), else its default."""
    from whichgpu.hardware.system import load_systems, resolve_system

    return resolve_system(gpu, system, load_systems(catalog_dir))


def write_report(path: Path, text: str, field: str = "html") -> None:
    """Write a report file (UTF-8); a path that cannot be written is a one-line InputError naming it."""
    from whichgpu.errors import InputError

    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror}", field=field) from e


def emit_json(schema: str, body: dict[str, object]) -> None:
    from whichgpu.report.jsonout import document

    typer.echo(document(schema, body))


# ---- workload options shared by analyze / estimate / fit / recommend -------------------------
TaskOpt = typer.Option("train", "--task", help="train (forward, backward, optimizer step) or infer.")
BatchOpt = int_option(None, "--batch-size", "-b", bound=limits.BATCH, help="Samples per GPU per step (default: the model's).")
SeqOpt = int_option(None, "--seq-len", bound=limits.SEQ_LEN, help="Tokens per sample (text models; default: the model's).")
ImageOpt = int_option(None, "--image-size", bound=limits.IMAGE_SIZE, help="Image side in pixels (vision models; default: the model's).")
OptimOpt = typer.Option(None, "--optimizer", help="sgd, adamw, adam, lamb, rmsprop, adafactor, adamw-8bit (default: the model's).")
OptimImplOpt = typer.Option("foreach", "--optimizer-impl", help="foreach (PyTorch default), fused, or forloop.")
PhaseOpt = typer.Option("full", "--phase", help="Causal-LM inference: prefill (time to first token) or decode (one token).")
ContextOpt = int_option(None, "--context", bound=limits.CONTEXT, help="Decode: tokens already in the KV cache (default: --seq-len).")
SparsityOpt = typer.Option("none", "--sparsity", help="'2:4' marks weight matmuls as 2:4 structured-sparse.")
AttentionOpt = typer.Option(None, "--attention", help="sdpa (fused kernel) or eager (matmul + softmax), for built-in decoders.")
NoCacheOpt = typer.Option(False, "--no-cache", help="Recapture instead of using the on-disk trace cache.")
EngineOpt = typer.Option(None, "--engine", help="Execution engine profile: pytorch (eager, default), torch-compile, "
                         "torch-compile-graphs, gpt-fast, tensorrt-llm, llama.cpp, vllm, xla (whichgpu engines).")
CompileOpt = typer.Option(False, "--compile", help="Shorthand for --engine torch-compile (Inductor fusion, channels-last convolutions).")

# Mixture-of-experts routing of the built-in decoders (read by workload/zoo/llm/build.py moe_options).
# The ranges are generous, as limits.py's: a capacity factor past the expert count or a skew past
# experts / top-k cannot change more than either does at that figure.
MOE_CAPACITY = Bound(0, 1000, lo_open=True)  # rows an expert computes over its mean routed rows
MOE_SKEW = Bound(1, 1000)  # the busiest expert's routed rows over the mean
MoeCapacityOpt = float_option(None, "--moe-capacity", bound=MOE_CAPACITY,
                              help="MoE models: expert capacity factor; every expert computes factor x its mean "
                                   "routed rows (padding included), rows past it are dropped (default: dropless).")
MoeSkewOpt = float_option(None, "--moe-skew", bound=MOE_SKEW,
                          help="MoE models: routed rows of the busiest expert over the mean (default 1: balanced).")


def engine_attention(engine: str, attention: str | None) -> str | None:
    """The --attention a workload runs with under `engine` when the user gave none: an engine
    that runs attention as matmul + softmax (llama.cpp without -fa) traces it so; one with its
    own fused kernel (TensorRT-LLM, vLLM) traces the fused call."""
    if attention is not None:
        return attention
    from whichgpu.hardware.engine import get_engine

    return get_engine(engine).attention_option


def resolve_engine(engine: str | None, compile_: bool, default: str = "pytorch") -> str:
    """The engine id from --engine / --compile (a one-line error for an unknown name or both)."""
    from whichgpu.errors import InputError
    from whichgpu.hardware.engine import get_engine

    if engine is not None and compile_:
        raise InputError("give --engine or --compile (= --engine torch-compile), not both")
    if compile_:
        return "torch-compile"
    return get_engine(engine if engine is not None else default).id


def engine_gpus(engine: str, specs: list[GpuSpec], every: bool) -> list[GpuSpec]:
    """The GPUs of ``specs`` that ``engine`` runs on (its profile's ``vendors``: TensorRT-LLM,
    NVIDIA's only): with ``every`` (all GPUs weighed) the others are left out, else one it does not
    run on is bad input, as is a list it runs on none of."""
    from whichgpu.errors import InputError
    from whichgpu.hardware.engine import get_engine

    eng = get_engine(engine)
    keep = [g for g in specs if eng.unsupported_on(g.name, g.vendor) is None]
    if not every or not keep:
        for g in specs:
            if (why := eng.unsupported_on(g.name, g.vendor)) is not None:
                raise InputError(f"--engine: {why}; give another engine or leave that GPU out", field="engine")
    return keep


def moe_workload_options(capacity: float | None, skew: float | None) -> tuple[tuple[str, object], ...]:
    """The workload options of --moe-capacity / --moe-skew: only those given and not the default
    (balanced) load, so that other runs keep their trace cache keys."""
    out: tuple[tuple[str, object], ...] = ()
    if capacity is not None:
        out += (("moe_capacity", float(capacity)),)
    if skew is not None and skew != 1:
        out += (("moe_skew", float(skew)),)
    return out


def moe_flags_note(capacity: float | None, skew: float | None, model: str, traces: Iterable[Any]) -> None:
    """A line on stderr when --moe-capacity / --moe-skew were given for a model whose `traces`
    have no routed experts: the flags change nothing (not an error)."""
    given = [f for f, v in (("--moe-capacity", capacity), ("--moe-skew", skew)) if v is not None]
    if given and not any(t.shape.experts for t in traces):
        typer.echo(f"note: {' and '.join(given)} {'do' if len(given) > 1 else 'does'} not apply: {model} has no "
                   "routed experts (the built-in mixture-of-experts decoders do)", err=True)


def workload_spec(model: str, task: str, batch_size: int | None, seq_len: int | None, image_size: int | None,
                  precision: str, optimizer: str | None, optimizer_impl: str, phase: str, context: int | None,
                  sparsity: str, attention: str | None, moe_capacity: float | None = None,
                  moe_skew: float | None = None) -> WorkloadSpec:
    from whichgpu.errors import InputError

    if context is not None and phase != "decode":
        raise InputError(f"--context (tokens already in the KV cache) applies to --phase decode, not {phase}; "
                         "for a whole request give the prompt as --seq-len")
    options: tuple[tuple[str, object], ...] = ()
    if attention is not None:
        if attention not in ("sdpa", "eager"):
            raise InputError(f"--attention must be 'sdpa' or 'eager', got {attention!r}")
        options = (("attention", attention),)
    options += moe_workload_options(moe_capacity, moe_skew)
    return WorkloadSpec(model=model, task=task, batch_size=batch_size, seq_len=seq_len, image_size=image_size,
                        precision=precision, optimizer=optimizer, optimizer_impl=optimizer_impl, phase=phase,
                        context=context, sparsity=sparsity, options=options)
