"""From a WorkloadSpec to a recommend Workload: sizes resolved, the unit it is counted in, whether
it is LLM serving, its zoo family. Torch-free (the zoo's metadata and resolve() import no torch)."""

from __future__ import annotations

from dataclasses import replace

from whichgpu.perf.auto import probe_precision
from whichgpu.recommend.request import Workload
from whichgpu.workload.api import resolve
from whichgpu.workload.spec import WorkloadSpec, is_serving, model_facts


def describe(spec: WorkloadSpec, title: str, serving: bool) -> str:
    size = f"seq {spec.seq_len}" if spec.seq_len else (f"{spec.image_size}px" if spec.image_size else "")
    if serving:
        what = f"serving, batch {spec.batch_size}, prompt+context {spec.seq_len}"
    elif spec.task == "train":
        ft = {"lora": f"LoRA r{spec.lora_rank}", "qlora": f"QLoRA r{spec.lora_rank}"}.get(spec.finetune, "training")
        what = f"{ft}, batch {spec.batch_size}" + (f", {size}" if size else "")
        if spec.checkpointing != "none":
            what += f", {spec.checkpointing} checkpointing"
    else:
        what = f"inference, batch {spec.batch_size}" + (f", {size}" if size else "")
    return f"{title} {what}"


def make_workload(spec: WorkloadSpec, label: str = "", unit: str | None = None, unit_scale: float = 1.0,
                  weight: float = 1.0) -> Workload:
    """Resolve `spec` (sizes, optimizer; precision 'auto' kept for choosing per card)."""
    precision = spec.precision
    probe = replace(spec, precision=probe_precision(spec.task)) if precision == "auto" else spec
    resolved, src = resolve(probe)
    facts = model_facts(src)
    serving = is_serving(spec, src)
    family, zoo_unit = facts.family, facts.unit
    resolved = replace(resolved, precision=precision)
    if unit is None:
        unit = "tokens/s" if serving else zoo_unit
    return Workload(label or describe(resolved, src.title, serving), resolved, serving, unit, unit_scale, weight,
                    family)
