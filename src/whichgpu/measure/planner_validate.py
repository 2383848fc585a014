"""Scoring the parallel planner on published multi-GPU training measurements.

Three corpora (shared/validation; copies in tests/planner_data):

* ``llm_training.csv``: large-scale runs (Megatron-LM paper Table 1, Megatron-LM examples, NeMo
  Megatron-Bridge performance tables). Each dense row whose layout is published is predicted with
  that layout; the score is model TFLOP/s per GPU, compared as throughput (the source's own FLOP
  formula applied to the predicted tokens/s, so the definitions cancel). A published layout lacks
  the micro-batch and virtual stages in Megatron's paper: those are searched (the best that fits),
  as the authors tuned them. Rows without a layout and precisions not modelled are listed with
  the reason. Its MoE rows (Megatron-Bridge, force-balanced dropless routing) are scored apart
  (``moe_training_rows``, validate-plan's ``moe`` corpus) with the published layout, expert
  parallelism included: the planner is optimistic for them (README, Accuracy), so they are a
  reported figure and the source of the MoE caveat `plan` prints (parallel/moe_accuracy.toml), not
  part of the dense bounds.
* ``planner_dev/vtrain.csv``: 1,440 single-node Megatron-DeepSpeed layouts (A100): iteration time
  with the published layout; within each job (group) the planner's pick against the measured best.
* ``planner_dev/llm_foundry.csv``: MPT with FSDP FULL_SHARD on A100 (40 and 80 GB): MFU.

Every prediction states its assumptions per source (precision, attention kernels, recomputation,
system) in ``SOURCE_ASSUMPTIONS``; nothing is fitted per row.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whichgpu.errors import InputError
from whichgpu.parallel.plan import Plan
from whichgpu.parallel.planner import Context, Job, check_layout, evaluate
from whichgpu.workload.zoo.llm.args import DecoderArgs, args_from_config

SOURCE_ASSUMPTIONS = {
    "megatron-2021": "Megatron-LM 2021 (Narayanan et al.): FP16 with FP32 main gradients, unfused attention (fused "
                     "softmax; FlashAttention came in 2022), full recomputation, distributed optimizer not yet "
                     "(DDP all-reduce), micro-batch and virtual stages searched (not published), DGX A100 SuperPOD",
    "nemo": "NeMo / Megatron-Bridge (2025): FP8 GEMMs (all FP8 recipes: delayed/current scaling, MXFP8) or BF16, "
            "BF16 gradient reduction (the performance recipes' grad_reduce_in_fp32=False), FP8 weights with FP8 "
            "(fp8_param_gather=True), "
            "flash attention (Transformer Engine), fused cross-entropy (the nemo engine), no recomputation, "
            "distributed optimizer, sequence parallel "
            "with tp > 1, TP communication overlap, DGX systems",
    "nemo-moe": "NeMo / Megatron-Bridge MoE recipes (2025): as nemo, with the published expert parallelism "
                "(all-to-all dispatch and combine over the EP group, experts' weights replicated over the rest "
                "of data parallelism), force-balanced dropless routing as the rows state, grouped expert GEMMs "
                "timed per expert by the kernel model; DeepSeek-V3's multi-token-prediction layer not built",
    "vtrain": "vTrain (Megatron-DeepSpeed, A100 80GB, one DGX A100 node): FP16 with FP16 gradient all-reduce "
              "(DeepSpeed's fp16 engine), unfused attention, full activation checkpointing, 1F1B, DDP without "
              "gradient bucketing (all-reduce after backward), vocab 50257",
    "foundry": "llm-foundry MPT (Composer, FSDP FULL_SHARD over all GPUs): first-generation flash attention "
               "(the yamls' attn_impl: triton, the 2022 Triton FlashAttention kernel: --attention flash1), BF16 autocast "
               "(amp_bf16; 'bf16' PURE rows as 16-bit weights), the row's micro-batch, accumulation and "
               "activation checkpointing, eager PyTorch's host costs (the pytorch engine: Composer, not Megatron), "
               "DGX A100 (80 GB) / DGX A100 320GB (40 GB) with 1600 Gbps RoCE",
}


@dataclass
class Scored:
    source: str
    name: str
    group: str
    predicted: float | None
    measured: float | None
    unit: str
    reason: str = ""
    layout: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    gpu: str = ""  # catalog id of the row's GPU ("" when not resolved)

    @property
    def error(self) -> float | None:
        if self.predicted is None or self.measured is None or not self.measured:
            return None
        return self.predicted / self.measured - 1.0

    def to_dict(self) -> dict[str, Any]:
        e = self.error
        return {"source": self.source, "name": self.name, "group": self.group, "predicted": self.predicted,
                "measured": self.measured, "unit": self.unit, "error": e, "reason": self.reason,
                "layout": self.layout, "gpu": self.gpu, **self.extra}


def summary(rows: Iterable[Scored]) -> dict[str, Any]:
    errs = [r.error for r in rows if r.error is not None]
    if not errs:
        return {"rows": 0, "median": None, "p90": None, "signed": None}
    ab = sorted(abs(e) for e in errs)
    p90 = ab[min(len(ab) - 1, math.ceil(0.9 * len(ab)) - 1)]
    return {"rows": len(errs), "median": statistics.median(ab), "p90": p90, "signed": statistics.median(errs)}


# ---------------------------------------------------------------------------------------------
# shared builders
# ---------------------------------------------------------------------------------------------

def gpt_args(hidden: int, layers: int, heads: int, vocab: int, positions: int, ffn: int | None = None) -> DecoderArgs:
    """A GPT-2-style decoder (LayerNorm, GELU MLP, learned positions) of the given dims."""
    return args_from_config({"model_type": "gpt2", "n_embd": hidden, "n_head": heads, "n_layer": layers,
                             "n_positions": positions, "vocab_size": vocab, "n_inner": ffn,
                             "activation_function": "gelu_new"})


def _hw(gpu: str, system: str) -> tuple[Any, Any]:
    from whichgpu.hardware.catalog import load_catalog
    from whichgpu.hardware.system import load_systems

    return load_catalog().get(gpu), load_systems().get(system)


# ---------------------------------------------------------------------------------------------
# llm_training.csv
# ---------------------------------------------------------------------------------------------

_GPUS = (("GB200", "gb200", "gb200-nvl72"), ("B200", "b200", "hgx-b200"), ("H100", "h100-sxm5-80gb", "dgx-h100"),
         ("A100", "a100-sxm4-80gb", "dgx-a100"))
_LLAMA = {"LLAMA3_8B": "llama-3-8b", "LLAMA3-8B": "llama-3-8b", "LLAMA3_70B": "llama-3-70b",
          "LLAMA3-70B": "llama-3-70b", "LLAMA3.1_405B": "llama-3-405b", "LLAMA3-405B": "llama-3-405b"}
_MOE = ("deepseek", "gpt oss", "qwen3")


def _note(notes: str, key: str) -> str | None:
    m = re.search(rf"\b{re.escape(key)}=([^;\s]+)", notes)
    return m.group(1) if m else None


def _precision_text(notes: str) -> str:
    """The row's training precision as its notes write it (FP8, FP8-MX, MXFP8, BF16, NVFP4, ...)."""
    m = re.search(r"precision ([A-Za-z0-9-]+)", notes)
    return (m.group(1) if m else ("FP8" if "FP8" in notes else "BF16")).upper()


def _hardware_ids(gpu: str) -> tuple[str, str]:
    """(catalog GPU id, system id) of the row's GPU column; ("", "") when not in the catalog."""
    return next(((g, s) for k, g, s in _GPUS if k in gpu), ("", ""))


def _int(x: str | None, default: int) -> int:
    try:
        return int(str(x).strip()) if x not in (None, "", "n/a") else default
    except ValueError:
        return default


def narayanan_flops_per_token(h: int, layers: int, vocab: int, seq: int) -> float:
    """Megatron-LM's FLOPs per token with full recomputation (Narayanan et al. 2021, eq. 3 / B s)."""
    return 96.0 * seq * layers * h * h * (1 + seq / (6.0 * h) + vocab / (16.0 * layers * h)) / seq


def llm_training_rows(path: Path, search_own: bool = False) -> list[Scored]:
    out: list[Scored] = []
    for r in csv.DictReader(path.open()):
        out.append(_llm_row(r, search_own))
    return out


def _llm_row(r: dict[str, str], search_own: bool) -> Scored:
    from whichgpu.parallel.models import planner_model

    src, model, notes = r["source"], r["model"], r["notes"]
    short = "megatron-2021" if src.startswith("Narayanan") else ("nemo" if "Megatron-Bridge" in src or "examples" in src
                                                                  else "megatron-readme")
    name = f"{model} / {r['gpu'].split(' (')[0]} x {r['gpu_count'] or '?'}"
    base = Scored(short, name, short, None, None, "TFLOP/s/GPU")
    measured_tflops = float(r["achieved_tflops_per_gpu"]) if r["achieved_tflops_per_gpu"] else None
    if not (r["tp"] and r["pp"] and r["gpu_count"]):
        base.reason = "layout (TP/PP/GPU count) not published"
        return base
    if any(k in model.lower() for k in _MOE):
        base.reason = "MoE: scored apart (validate-plan --only moe), outside the dense bounds"
        return base
    prec_text = _precision_text(notes)
    if "FP4" in prec_text:
        base.reason = f"precision {prec_text} (4-bit training) is not modelled"
        return base
    gpu_id, system_id = _hardware_ids(r["gpu"])
    if not gpu_id:
        base.reason = f"GPU {r['gpu']!r} not in the catalog"
        return base
    gpus, tp, pp = int(r["gpu_count"]), int(r["tp"]), int(r["pp"])
    gb, seq = int(r["global_batch"]), int(r["seq_len"])
    cp = _int(_note(notes, "CP"), 1)
    vp_note = _note(notes, "VP")
    fsdp = _int(_note(notes, "FSDP"), 0)
    if short == "megatron-2021":
        m = re.search(r"h=(\d+), L=(\d+), heads=(\d+)", model)
        if m is None:
            base.reason = "model dims not parsed"
            return base
        h, layers, heads = (int(x) for x in m.groups())
        args = gpt_args(h, layers, heads, 51200, seq)
        model_id, precision, attention = f"GPT h{h} L{layers}", "fp16", "unfused"
        measured_tps = measured_tflops * 1e12 / narayanan_flops_per_token(h, layers, 51200, seq) \
            if measured_tflops else None
    else:
        key = model.replace(" ", "")
        zoo = _LLAMA.get(key)
        if zoo is None:
            base.reason = f"model {model!r} has no zoo config"
            return base
        model_id, args, _ = planner_model(zoo)
        precision = "fp8" if "FP8" in prec_text else "bf16"
        attention = "flash"
        measured_tps = float(_note(notes, "tokens/s/GPU") or 0) or None
    dp = gpus // (tp * pp * cp)
    base.gpu = gpu_id
    gpu, system = _hw(gpu_id, system_id)
    # NeMo's performance recipes reduce gradients in BF16 (Megatron-Bridge scripts/performance/configs/
    # llama/llama3*_llm_pretrain.py: grad_reduce_in_fp32 = False); Megatron-LM 2021 kept FP32 main grads
    grad_dtype = "fp32" if short == "megatron-2021" else "bf16"
    # and their FP8 recipes keep FP8 weights (Megatron-Bridge mixed_precision.py: fp8_param_gather=True)
    job = Job(model_id, args, gpu, system, gpus, gb, seq, precision, attention, grad_dtype,
              fp8_params=precision == "fp8" and short != "megatron-2021")
    ctx = Context.make(job)
    sharding = "fsdp-full" if fsdp else ("ddp" if short == "megatron-2021" or dp == 1 else "zero1")
    recompute = "full" if short == "megatron-2021" else "none"
    engine = "megatron" if short == "megatron-2021" else "nemo"  # NeMo's recipes fuse the loss
    mbs = [int(r["micro_batch"])] if r["micro_batch"] else [1, 2, 4, 8]
    vps = [int(vp_note)] if vp_note and vp_note.isdigit() else ([1] if pp == 1 else [1, *range(2, 9)])
    best = None
    for mb in mbs:
        if gb % (mb * dp):
            continue
        for vp in vps:
            sched = "interleaved-1f1b" if vp > 1 else "1f1b"
            if vp > 1 and pp == 1:
                continue
            plan = Plan(tp=tp, pp=pp, vp=vp, cp=cp, dp=dp, micro_batch=mb, grad_accum=gb // (mb * dp),
                        sharding=sharding, recompute=recompute, schedule=sched,  # type: ignore[arg-type]
                        sequence_parallel=tp > 1 and short != "megatron-2021",
                        tp_comm_overlap=tp > 1 and short != "megatron-2021", engine=engine,
                        comm_overlap=short != "megatron-2021")
            try:
                check_layout(job, plan)
            except InputError:
                continue
            res = evaluate(ctx, plan)
            if not res.fits and best is not None and best.fits:
                continue
            if best is None or (res.fits and not best.fits) or res.step_s < best.step_s:
                best = res
    if best is None:
        base.reason = "the published layout cannot be expressed (divisibility)"
        return base
    per_gpu = best.tokens_per_s / gpus
    ratio = per_gpu / measured_tps if measured_tps else None
    base.predicted = measured_tflops * ratio if (measured_tflops and ratio) else None
    base.measured = measured_tflops
    p = best.plan
    base.layout = f"tp{p.tp} pp{p.pp} vp{p.vp} cp{p.cp} dp{p.dp} mb{p.micro_batch} {p.sharding} {p.recompute}"
    base.extra = {"predicted_tokens_per_s_per_gpu": per_gpu, "measured_tokens_per_s_per_gpu": measured_tps,
                  "fits": best.fits, "peak_memory_gb": best.peak_memory_bytes / 1e9, "precision": precision,
                  "attention": attention}
    if search_own:
        from whichgpu.parallel.search import Fixed, search

        own = search(job, Fixed(sequence_parallel=None), Plan(engine=engine), top=1, ctx=ctx)
        if own.best:
            o = own.best[0]
            base.extra["own_best_tokens_per_s_per_gpu"] = o.tokens_per_s / gpus
            base.extra["own_best_layout"] = (f"tp{o.plan.tp} pp{o.plan.pp} vp{o.plan.vp} cp{o.plan.cp} dp{o.plan.dp} "
                                             f"mb{o.plan.micro_batch} {o.plan.sharding} {o.plan.recompute} "
                                             f"{o.plan.schedule}")
    return base


# MoE rows of llm_training.csv (Megatron-Bridge performance tables) and the zoo configs they run
_MOE_ZOO = {"DeepSeekV3": "deepseek-v3", "GPTOSS120B": "gpt-oss-120b", "Qwen3_30B_a3B": "qwen3-30b-a3b",
            "Qwen3_235B_a22B": "qwen3-235b-a22b"}


def moe_training_rows(path: Path) -> list[Scored]:
    """The MoE rows of ``llm_training.csv``, each predicted with its published layout (TP, PP, VP, CP,
    EP, micro-batch; gradient accumulation from the global batch), scored as tokens/s per GPU
    (reported as model TFLOP/s per GPU, the source's own FLOP count applied to the predicted rate)."""
    from whichgpu.parallel.models import planner_model

    out: list[Scored] = []
    for r in csv.DictReader(path.open()):
        model, notes = r["model"], r["notes"]
        key = model.split(" (")[0].replace(" ", "")
        if key not in _MOE_ZOO:
            continue
        gpu_id, system_id = _hardware_ids(r["gpu"])
        gpus, tp, pp = int(r["gpu_count"]), int(r["tp"]), int(r["pp"])
        name = f"{model} / {r['gpu'].split(' (')[0]} x {gpus}"
        measured_tflops = float(r["achieved_tflops_per_gpu"])
        sc = Scored("nemo-moe", name, key, None, measured_tflops, "TFLOP/s/GPU", gpu=gpu_id)
        prec_text = _precision_text(notes)
        precision = "fp8" if "FP8" in prec_text else "bf16"
        gb, seq, mb = int(r["global_batch"]), int(r["seq_len"]), int(r["micro_batch"] or 1)
        cp, ep = _int(_note(notes, "CP"), 1), _int(_note(notes, "EP"), 1)
        vp = _int(_note(notes, "VP"), 1)
        dp = gpus // (tp * pp * cp)
        model_id, args, _ = planner_model(_MOE_ZOO[key])
        gpu, system = _hw(gpu_id, system_id)
        job = Job(model_id, args, gpu, system, gpus, gb, seq, precision, "flash", "bf16",
                  fp8_params=precision == "fp8")
        # the recipes keep experts whole (Megatron-Bridge scripts/performance/configs/qwen3 and deepseek:
        # expert_tensor_parallel_size=1), folding EP over the tensor-parallel ranks where tp > 1
        plan = Plan(tp=tp, pp=pp, vp=vp, cp=cp, ep=ep, etp=1 if tp > 1 else None, dp=dp, micro_batch=mb,
                    grad_accum=gb // (mb * dp), sharding="zero1" if dp > 1 else "ddp", recompute="none",
                    schedule="interleaved-1f1b" if vp > 1 else "1f1b", sequence_parallel=tp > 1,
                    tp_comm_overlap=tp > 1, engine="nemo", comm_overlap=True)
        sc.layout = f"tp{tp} pp{pp} vp{vp} cp{cp} ep{ep}{' etp1' if tp > 1 else ''} dp{dp} mb{mb} {prec_text}"
        try:
            check_layout(job, plan)
        except InputError as e:
            sc.reason = f"not expressible: {e}"
            out.append(sc)
            continue
        res = evaluate(Context.make(job), plan)
        measured_tps = float(_note(notes, "tokens/s/GPU") or 0)
        per_gpu = res.tokens_per_s / gpus
        sc.predicted = measured_tflops * per_gpu / measured_tps
        sc.extra = {"predicted_tokens_per_s_per_gpu": per_gpu, "measured_tokens_per_s_per_gpu": measured_tps,
                    "fits": res.fits, "peak_memory_gb": res.peak_memory_bytes / 1e9, "precision": precision}
        out.append(sc)
    return out


def moe_accuracy(rows: Iterable[Scored]) -> dict[str, Any]:
    """What parallel/moe_accuracy.toml records: rows scored, the p10 / median / p90 of measured over
    predicted throughput, and the median per GPU (catalog id)."""
    from whichgpu.measure.validate import percentile

    pairs = [(r.gpu, r.measured / r.predicted) for r in rows if r.predicted and r.measured]
    ratios = sorted(x for _, x in pairs)
    by_gpu: dict[str, list[float]] = defaultdict(list)
    for gpu, x in pairs:
        by_gpu[gpu].append(x)
    return {"rows": len(ratios), "p10": round(percentile(ratios, 0.1) or 0.0, 2),
            "p50": round(percentile(ratios, 0.5) or 0.0, 2), "p90": round(percentile(ratios, 0.9) or 0.0, 2),
            "by_gpu": {g: round(percentile(sorted(v), 0.5) or 0.0, 2) for g, v in sorted(by_gpu.items())}}


# ---------------------------------------------------------------------------------------------
# vTrain
# ---------------------------------------------------------------------------------------------

def vtrain_rows(path: Path) -> tuple[list[Scored], list[dict[str, Any]]]:
    """(per-row iteration-time scores, per-group pick checks)."""
    gpu, system = _hw("a100-sxm4-80gb", "dgx-a100")
    ctxs: dict[tuple[int, ...], tuple[Job, Context]] = {}
    out: list[Scored] = []
    groups: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for r in csv.DictReader(path.open()):
        h, layers, heads, g, gb, mb, tp, dp, pp = (int(r[k]) for k in (
            "hidden_size", "num_layers", "attention_heads", "num_gpus", "global_batch", "micro_batch", "tp", "dp", "pp"))
        key = (h, layers, heads, g, gb)
        if key not in ctxs:
            # Megatron-DeepSpeed in fp16: DeepSpeed's fp16 engine reduces FP16 gradients
            job = Job(f"GPT h{h} L{layers}", gpt_args(h, layers, heads, 50257, 1024), gpu, system, g, gb, 1024,
                      "fp16", "unfused", "fp16")
            ctxs[key] = (job, Context.make(job))
        job, ctx = ctxs[key]
        plan = Plan(tp=tp, pp=pp, dp=dp, micro_batch=mb, grad_accum=gb // (mb * dp), recompute="full",
                    sharding="ddp", comm_overlap=False, engine="megatron")
        check_layout(job, plan)
        res = evaluate(ctx, plan)
        measured = float(r["iteration_time_ms"])
        layout = f"tp{tp} dp{dp} pp{pp} mb{mb}"
        out.append(Scored("vtrain", r["group"] + " " + layout, r["group"].split(":")[1], res.step_s * 1e3, measured,
                          "ms", layout=layout, gpu=gpu.id))
        groups[r["group"]].append((res.step_s * 1e3, measured, layout))
    picks = []
    for grp, v in sorted(groups.items()):
        pick = min(v)
        best = min(v, key=lambda t: t[1])
        picks.append({"group": grp, "layouts": len(v), "pick": pick[2], "pick_measured_ms": pick[1],
                      "best": best[2], "best_measured_ms": best[1], "miss": pick[1] / best[1] - 1.0})
    return out, picks


# ---------------------------------------------------------------------------------------------
# llm-foundry
# ---------------------------------------------------------------------------------------------

def foundry_rows(path: Path) -> list[Scored]:
    out: list[Scored] = []
    hw = {"a100_80gb": _hw("a100-sxm4-80gb", "dgx-a100"), "a100_40gb": _hw("a100-sxm4-40gb", "dgx-a100-320gb")}
    for r in csv.DictReader(path.open()):
        gpu, system = hw[r["gpu"]]
        d, heads, layers = int(r["arch_d_model"]), int(r["arch_n_heads"]), int(r["arch_n_layers"])
        ffn = d * int(float(r["arch_expansion_ratio"]))
        seq, g = int(r["seq_len"]), int(r["num_gpus"])
        mb, ga, gb = int(r["micro_batch_size"]), int(r["grad_accum"]), int(r["global_batch_size"])
        precision = "amp-bf16" if r["precision"] == "amp_bf16" else "bf16"
        args = gpt_args(d, layers, heads, int(r["arch_vocab_size"]), max(seq, 2048), ffn)
        job = Job(f"mpt-{r['model']}", args, gpu, system, g, gb, seq, precision, "flash1")
        name = f"mpt-{r['model']} {r['gpu']} x{g} seq{seq} mb{mb}x{ga}"
        sc = Scored("foundry", name, f"{r['gpu']}", None, float(r["mfu_pct"]) / 100.0, "MFU", gpu=gpu.id)
        if gb != mb * ga * g:
            sc.reason = f"global batch {gb} != micro-batch {mb} x accumulation {ga} x {g} GPUs"
            out.append(sc)
            continue
        plan = Plan(dp=g, micro_batch=mb, grad_accum=ga, sharding="fsdp-full" if g > 1 else "ddp",
                    recompute="full" if r["activation_checkpointing"] == "True" else "none", engine="pytorch")
        ctx = Context.make(job)
        res = evaluate(ctx, plan)
        measured_tps = float(r["throughput_tokens_per_s_per_gpu"])
        # MFU as the source defines it, from the predicted throughput: the ratio of throughputs.
        sc.predicted = sc.measured * (res.tokens_per_s / g) / measured_tps if sc.measured else None
        sc.layout = f"fsdp x{g} mb{mb} acc{ga} ckpt {r['activation_checkpointing']}"
        sc.extra = {"fits": res.fits, "peak_memory_gb": res.peak_memory_bytes / 1e9}
        out.append(sc)
    return out


# ---------------------------------------------------------------------------------------------
# Zero Bubble (Qi et al. 2024) Table 5: bubble rates from the profiled pass times (Table 9)
# ---------------------------------------------------------------------------------------------

def zero_bubble_rows(folder: Path) -> list[Scored]:
    """The schedule simulator's bubble rate against the paper's, per setting and schedule. Cost is
    the longest stage span (the paper's definition); interleaved uses v = (layers + 2) / p chunks
    and the paper's shortcut for the hop between chunks (``paper_compat``)."""
    from whichgpu.parallel.schedule import simulate

    want: dict[tuple[str, int], dict[str, float]] = {}
    with (folder / "zero_bubble_tables.csv").open() as fh:
        for r in csv.DictReader(fh):
            if r["table"] == "5" and r["metric"] == "bubble_rate":
                want.setdefault((r["model"], int(r["microbatches_m"])), {})[r["schedule"]] = float(r["value"])
    out: list[Scored] = []
    with (folder / "zero_bubble_profiled_times.csv").open() as fh:
        for r in csv.DictReader(fh):
            p, m = int(r["stages_p"]), int(r["microbatches_m"])
            f, b, w, c = (float(r[k]) for k in ("T_F", "T_B", "T_W", "T_comm"))
            v = (int(r["layers"]) + 2) // p
            got = {
                "1F1B": simulate("1f1b", p, m, f, b + w, comm=c),
                "ZB-H1": simulate("zb-h1", p, m, f, b, w, comm=c),
                "ZB-H2": simulate("zb-h2", p, m, f, b, w, comm=c),
                "1F1B-I": simulate("interleaved-1f1b", p, m, f / v, (b + w) / v, comm=c, chunks=v, paper_compat=True),
            }
            for name, tl in got.items():
                truth = want.get((r["model"], m), {}).get(name)
                out.append(Scored("zero-bubble", f"{r['model']} p{p} m{m} {name}", name, tl.paper_bubble_rate, truth,
                                  "bubble rate"))
    return out


def abs_diff(rows: Iterable[Scored]) -> float:
    """Largest absolute difference (bubble rates are compared in absolute terms)."""
    return max((abs(r.predicted - r.measured) for r in rows if r.predicted is not None and r.measured is not None),
               default=0.0)
