"""`whichgpu analyze`: FLOPs, bytes and arithmetic intensity of one step, hardware-independent."""

from __future__ import annotations

import typer

from whichgpu import limits
from whichgpu.commands.common import (
    AttentionOpt,
    BatchOpt,
    ContextOpt,
    ImageOpt,
    JsonOpt,
    MoeCapacityOpt,
    MoeSkewOpt,
    NoCacheOpt,
    OptimImplOpt,
    OptimOpt,
    PhaseOpt,
    SeqOpt,
    SparsityOpt,
    TaskOpt,
    emit_json,
    int_option,
    moe_flags_note,
    workload_spec,
)
from whichgpu.errors import InputError


def analyze(
    model: str = typer.Argument(..., help="Zoo name, path to a Hugging Face config.json, or path/to/file.py:factory."),
    task: str = TaskOpt,
    batch_size: int = BatchOpt,
    seq_len: int = SeqOpt,
    image_size: int = ImageOpt,
    precision: str = typer.Option("amp-bf16", "--precision", help="fp32, tf32, amp-fp16, amp-bf16, fp16, bf16, fp8, int8, int4."),
    optimizer: str = OptimOpt,
    optimizer_impl: str = OptimImplOpt,
    phase: str = PhaseOpt,
    context: int = ContextOpt,
    sparsity: str = SparsityOpt,
    attention: str = AttentionOpt,
    moe_capacity: float = MoeCapacityOpt,
    moe_skew: float = MoeSkewOpt,
    by: str = typer.Option("category", "--by", help="Group rows by category, module, op or phase."),
    top: int = int_option(25, "--top", bound=limits.TOP, help="Rows to show when grouping by module or op."),
    no_cache: bool = NoCacheOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Parameters, FLOPs, bytes and arithmetic intensity by op category, per phase, with coverage."""
    if by not in ("category", "module", "op", "phase"):
        raise InputError(f"--by must be category, module, op or phase; got {by!r}")
    from whichgpu.workload.api import get_trace

    spec = workload_spec(model, task, batch_size, seq_len, image_size, precision, optimizer, optimizer_impl,
                         phase, context, sparsity, attention, moe_capacity, moe_skew)
    trace = get_trace(spec, use_cache=not no_cache)
    moe_flags_note(moe_capacity, moe_skew, model, [trace])
    from whichgpu.report.trace import trace_document

    if json_out:
        emit_json("whichgpu.trace/1", trace_document(trace, by))
        return
    from whichgpu.report.trace import print_trace

    print_trace(trace, by, top)


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
