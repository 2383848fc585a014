"""The parallel planner where one GPU's memory is not enough. Torch-free.

`whichgpu fit` (a training job that does not fit as given) and `whichgpu recommend` (a GPU count
where the data-parallel / ZeRO / FSDP layouts do not fit) ask the planner (parallel/search.py)
for the best tensor, pipeline, context and expert-parallel layouts of the same job.

The planner lays out full training (pretraining or full fine-tuning) of decoder-only LLMs with
AdamW, Megatron-style (parallel/planner.py); it searches the sharding, the recomputation, the
micro-batch and the pipeline schedule itself. LoRA/QLoRA, inference, other optimizers and other
models are not laid out: `why_not` and `decoder` say so in words.

The global batch (sequences per optimizer step) is the job's. Spread over more GPUs it may not
split over the data-parallel degree a layout needs (global batch % (micro-batch x dp) != 0):
then the smallest multiple of it with which some layout fits is used, and the note says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from whichgpu.errors import WhichGPUError
from whichgpu.hardware.spec import GpuSpec
from whichgpu.parallel.plan import Plan
from whichgpu.parallel.planner import Context, Job, Result, default_attention
from whichgpu.parallel.search import Fixed, SearchResult, label, search
from whichgpu.workload.zoo.llm.args import DecoderArgs

COUNTS: tuple[int, ...] = tuple(2**k for k in range(1, 10))  # 2, 4, ..., 512 GPUs
EVERY = 1 << 30  # "top" that keeps every layout that fits
ADAM = ("adam", "adamw")


def why_not(task: str, finetune: str, optimizer: str, phase: str = "full") -> str:
    """'' when the planner lays out this job, else why not, in words."""
    if task != "train" or phase != "full":
        return "the parallel planner lays out training, not inference"
    kind = (finetune or "full").split()[0]
    if kind != "full":
        return f"the parallel planner lays out full training, not {kind} fine-tuning"
    name = (optimizer or "").split("/")[0]
    if name not in ADAM:
        return f"the parallel planner models AdamW, not {name or 'no optimizer'}"
    return ""


@lru_cache(maxsize=64)
def decoder(model: str) -> tuple[str, DecoderArgs] | str:
    """(model id, decoder facts) of a model the planner can lay out (a zoo LLM, a config.json or
    its directory), else why not."""
    from whichgpu.parallel.models import planner_model

    path = Path(model)
    if path.is_dir() and (path / "config.json").is_file():
        model = str(path / "config.json")
    try:
        model_id, args, _ = planner_model(model)
    except WhichGPUError:
        return f"the parallel planner lays out decoder-only LLMs (a zoo LLM or a config.json); {model} is not one"
    if args.serving_only:
        return f"the parallel planner does not model the {args.serving_only} of {model_id} yet"
    return model_id, args


def attention_of(options: tuple[tuple[str, Any], ...], gpu: GpuSpec) -> str:
    """The planner's attention kernels for a workload's --attention on `gpu` (eager: score GEMMs +
    softmax; otherwise flash where it runs, parallel/planner.py `default_attention`)."""
    return "unfused" if dict(options).get("attention") == "eager" else default_attention(gpu)


def context(job: Job, power_limit_w: float | None = None) -> Context:
    """The planner's shared state for `job`, its device under the power limit when one is set."""
    ctx = Context.make(job)
    if power_limit_w is None:
        return ctx
    from whichgpu.perf.device import Device

    return replace(ctx, device=Device(job.gpu, ctx.params, power_limit_w=power_limit_w))


def at_count(job: Job, base: Plan, top: int = 3, power_limit_w: float | None = None) -> tuple[Job, SearchResult]:
    """The best layouts of `job`. When none fits and the global batch does not split over every
    data-parallel degree of the GPU count, the smallest multiple of it with which one fits (the
    job returned carries the batch searched)."""
    res = search(job, Fixed(), base, top=top, ctx=context(job, power_limit_w))
    if res.best or job.global_batch % job.gpus == 0:
        return job, res
    wide = replace(job, global_batch=math.lcm(job.global_batch, job.gpus))
    every = search(wide, Fixed(), base, top=EVERY, ctx=context(wide, power_limit_w))
    if not every.best:
        return job, res
    least = min(math.lcm(job.global_batch, r.plan.dp) for r in every.best)  # micro-batch 1 splits it
    if least < wide.global_batch:
        small = replace(job, global_batch=least)
        got = search(small, Fixed(), base, top=top, ctx=context(small, power_limit_w))
        if got.best:
            return small, got
    return wide, SearchResult(every.best[:top], every.not_fitting[:top], every.evaluated, every.skipped,
                              every.rules)


def quick_best(job: Job, base: Plan, power_limit_w: float | None = None, keep: int = 3) -> Result | None:
    """The fastest layout that fits, in two passes (recommend asks this of every GPU kind and
    count): every split of the degrees (tp, pp, cp, ep) under the 1F1B schedule; then the `keep`
    fastest splits that fit searched in full (schedule, virtual stages, micro-batch, sharding,
    recomputation). About a third of the layouts of the full search; on the catalog's GPUs at 2
    to 32 GPUs it found the full search's step time or within 2% for all but one job (of 278,
    Llama-3 8B and 70B; that one 10% slower)."""
    ctx = context(job, power_limit_w)
    coarse = search(job, Fixed(schedule="1f1b"), base, top=keep, ctx=ctx, distinct=_degrees)
    degrees = [_degrees(r.plan) for r in coarse.best]  # fastest first, one layout per split
    found = [r for tp, pp, cp, ep in degrees
             for r in search(job, Fixed(tp=tp, pp=pp, cp=cp, ep=ep), base, top=1, ctx=ctx).best]
    return min(found, key=lambda r: r.step_s, default=None)


def _degrees(p: Plan) -> tuple[int, int, int, int]:
    return (p.tp, p.pp, p.cp, p.ep)


@dataclass(frozen=True)
class Layouts:
    """The planner's answer for a job that does not fit as given: the best layouts that fit
    (fastest first) on `job.gpus` GPUs, what was searched, and how to see more."""

    job: Job | None  # the job searched last (None: nothing searched)
    best: tuple[Result, ...]
    note: str  # what was searched, or why nothing was, in words
    asked_batch: int = 0  # the global batch asked for (job.global_batch may be a multiple of it)
    command: str = ""  # the `whichgpu plan` command line that shows more

    def to_list(self) -> list[dict[str, Any]]:
        """One object per layout (the JSON of fit's parallel_layouts)."""
        gpus = self.job.gpus if self.job is not None else 0
        out = []
        for r in self.best:
            p = r.plan
            out.append({"layout": label(p), "gpus": gpus, "tp": p.tp, "pp": p.pp, "vp": p.vp, "cp": p.cp,
                        "ep": p.ep, "dp": p.dp, "sequence_parallel": p.sequence_parallel,
                        "micro_batch": p.micro_batch, "grad_accum": p.grad_accum, "sharding": p.sharding,
                        "recompute": p.recompute or "none", "schedule": p.schedule, "step_s": r.step_s,
                        "tokens_per_s": r.tokens_per_s, "mfu": r.mfu, "peak_memory_gb": r.peak_memory_bytes / 1e9,
                        "fits": r.fits, "global_batch": self.job.global_batch if self.job else None})
        return out


def plan_command(model: str, job: Job, extra: tuple[str, ...] = ()) -> str:
    """`whichgpu plan` with the job's arguments (`extra`: flags such as --system the user gave)."""
    args = ["whichgpu", "plan", _quote(model), "--gpu", job.gpu.id, "--gpus", str(job.gpus), "--global-batch",
            str(job.global_batch), "--seq-len", str(job.seq_len), "--precision", job.precision]
    if job.attention != "flash":
        args += ["--attention", job.attention]
    return " ".join(args + [_quote(x) for x in extra])


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def fewest(make_job: Callable[[int], Job], counts: tuple[int, ...], base: Plan, top: int = 3) -> Layouts:
    """The fewest GPUs among `counts` (ascending) on which some layout fits, and its best layouts.
    A count past one node of a system without a scale-out network ends the search."""
    last: tuple[Job, SearchResult] | None = None
    for n in counts:
        job = make_job(n)
        sys_ = job.system
        if n > sys_.gpus_per_node and sys_.scaleout is None:
            return Layouts(last[0] if last else None, (), _none_text(last, counts[0], n // 2) + f"; {sys_.name} has "
                           f"{sys_.gpus_per_node} GPUs and no scale-out network (pick a --system with one)",
                           job.global_batch)
        got, res = at_count(job, base, top)
        last = (got, res)
        if res.best:
            return Layouts(got, tuple(res.best), found_text(got, job.global_batch, counts), job.global_batch)
    return Layouts(last[0] if last else None, (), _none_text(last, counts[0], counts[-1]),
                   last[0].global_batch if last else 0)


def found_text(job: Job, asked: int, counts: tuple[int, ...]) -> str:
    """What was searched, when some layout fits."""
    where = (f"{job.gpus} GPUs, the fewest of {', '.join(map(str, counts[:3]))}, ... on which a layout fits"
             if len(counts) > 1 else f"{job.gpus} GPUs")
    text = (f"parallel planner: {where}; global batch {job.global_batch} x {job.seq_len} tokens, {job.precision}, "
            "sharding, recomputation, micro-batch and pipeline schedule searched")
    if job.global_batch != asked:
        text += (f"; the global batch {asked} does not split over the data-parallel ranks of a layout that fits, "
                 f"so the smallest multiple that does, {job.global_batch}, is used")
    return text


def _none_text(last: tuple[Job, SearchResult] | None, first: int, upto: int) -> str:
    span = f"{first} to {upto}" if upto > first else f"{upto}"
    if last is None:
        return f"no GPU count searched ({span})"
    job, res = last
    return f"no layout fits on {span} x {job.gpu.name} (at {job.gpus}: {res.why_none()})"


def for_fit(trace: Any, model: str, gpu: Any, system: Any, gpus: int, grad_accum: int, attention: str | None = None,
            extra: tuple[str, ...] = (), top: int = 3) -> Layouts:
    """`whichgpu fit`'s question: the planner's layouts of a training step (`trace`) that does not
    fit as given, on `gpus` GPUs, or with one GPU on the fewest of 2, 4, ..., 512. The global
    batch is the step's: batch size x GPUs x gradient accumulation."""
    why = why_not(trace.task, trace.finetune or "full", trace.optimizer, trace.phase)
    dec = decoder(model) if trace.task == "train" else why  # (a model it cannot express first: the plainer reason)
    if isinstance(dec, str) or why:
        return Layouts(None, (), dec if isinstance(dec, str) else why)
    if not trace.seq_len:
        return Layouts(None, (), "the parallel planner needs a sequence length")
    model_id, args = dec
    batch = trace.batch_size * gpus * grad_accum
    kernels = attention_of((("attention", attention),), gpu)

    def make_job(n: int) -> Job:
        return Job(model_id, args, gpu, system, n, batch, trace.seq_len, trace.precision, kernels)

    try:
        found = fewest(make_job, (gpus,) if gpus > 1 else COUNTS, Plan(engine="megatron"), top)
    except WhichGPUError as e:
        return Layouts(None, (), f"parallel planner: {e}")
    cmd = plan_command(model, found.job, extra) if found.job is not None else ""
    return replace(found, command=cmd)
