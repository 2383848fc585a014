"""Use-case presets for a newcomer with no model in hand, after Tim Dettmers' guide ("Which GPU(s)
to Get for Deep Learning"): each a representative workload mix from the zoo, a memory rule of
thumb from the guide turned into a check the user can see (cards below it are listed apart), a
GPU count and an objective. docs/presets.md shows the table `markdown_table()` makes (a test
keeps them equal).

Memory rules of thumb: at least 12 GB for image generation and 24 GB for work with transformers
(the guide's current edition); at least 8 GB for Kaggle-style work and 10 GB for computer vision
(its memory list: "Kaggle competitions >= 8 GB", "Applying computer vision >= 10 GB").
"""

from __future__ import annotations

from dataclasses import dataclass

from whichgpu.errors import UnknownNameError
from whichgpu.workload.spec import WorkloadSpec

GUIDE = "Tim Dettmers, 'Which GPU(s) to Get for Deep Learning'"


@dataclass(frozen=True)
class PresetWorkload:
    """One workload of a preset: the work, and how the recommendation counts it."""

    spec: WorkloadSpec
    """The model and its step; the request's precision replaces the spec's ('auto' by default)."""
    unit: str | None = None
    """What its throughput counts; None: the zoo's unit for the model."""
    unit_scale: float = 1.0
    """Units per traced sample (an image of image-generation's: 2 samples x 50 steps, 0.01)."""
    weight: float = 1.0
    """Its weight in the mix's speed, a weighted geometric mean (recommend/rank.py)."""
    note: str = ""

    def describe(self) -> str:
        w = self.spec
        size = (f"seq {w.seq_len}" if w.seq_len else "") or (f"{w.image_size} px" if w.image_size else "")
        kind = {"lora": "LoRA", "qlora": "QLoRA"}.get(w.finetune, "training") if w.task == "train" else "inference"
        parts = [f"`{w.model}` {kind}", f"batch {w.batch_size}"] + ([size] if size else [])
        if w.checkpointing != "none":
            parts.append(f"{w.checkpointing} checkpointing")
        text = ", ".join(parts)
        return text + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str
    workloads: tuple[PresetWorkload, ...]
    min_memory_gb: float
    rule: str  # the rule of thumb behind min_memory_gb, in words ("the guide" = GUIDE)
    max_gpus: int = 1
    objective: str = "value"
    job_tokens: float | None = None
    engine: str = "pytorch"  # the execution engine the use case runs on (hardware/engines/*.toml)


PRESETS: tuple[Preset, ...] = (
    Preset("learning", "learning deep learning: course-sized CNNs and a small transformer",
           (PresetWorkload(WorkloadSpec("resnet50-v1.5", batch_size=64, image_size=224)),
            PresetWorkload(WorkloadSpec("gpt2", batch_size=8, seq_len=512))),
           8, "the smallest memory the guide advises (Kaggle: at least 8 GB)"),
    Preset("kaggle", "Kaggle-style competitions: an EfficientNet and a BERT fine-tune",
           (PresetWorkload(WorkloadSpec("efficientnet-b0", batch_size=128, image_size=224)),
            PresetWorkload(WorkloadSpec("bert-base-squad", batch_size=32, seq_len=384))),
           8, "the guide: at least 8 GB for Kaggle competitions"),
    Preset("cv-research", "computer-vision research: ImageNet-scale CNN and ViT training",
           (PresetWorkload(WorkloadSpec("resnet50-v1.5", batch_size=256, image_size=224)),
            PresetWorkload(WorkloadSpec("vit-b16", batch_size=128, image_size=224))),
           10, "the guide: at least 10 GB for computer vision", max_gpus=4),
    Preset("nlp-research", "NLP research: BERT-large pretraining and GPT-2 medium training",
           (PresetWorkload(WorkloadSpec("bert-large-pretraining", batch_size=64, seq_len=128)),
            PresetWorkload(WorkloadSpec("gpt2-medium", batch_size=8, seq_len=1024))),
           24, "the guide: at least 24 GB for work with transformers", max_gpus=4),
    Preset("llm-finetune", "fine-tuning an 8B LLM with LoRA",
           (PresetWorkload(WorkloadSpec("llama-3-8b", batch_size=1, seq_len=2048, finetune="lora",
                                        checkpointing="full")),),
           24, "the guide: at least 24 GB for work with transformers", max_gpus=4),
    Preset("llm-pretrain", "pretraining (or continued pretraining of) an 8B LLM on 10B tokens",
           (PresetWorkload(WorkloadSpec("llama-3-8b", batch_size=1, seq_len=4096, checkpointing="full")),),
           24, "the guide: at least 24 GB for work with transformers", max_gpus=8, objective="cost-per-job",
           job_tokens=10e9),
    Preset("llm-serving", "serving an 8B LLM: 8 concurrent sequences, 2048-token context",
           (PresetWorkload(WorkloadSpec("llama-3-8b", task="infer", batch_size=8, seq_len=2048), unit="tokens/s",
                           note="prefill 2048, decode at 2048 context, on vLLM (fused kernels, CUDA graphs); "
                                "generated tokens/s"),),
           24, "the guide: at least 24 GB for work with transformers", engine="vllm"),
    Preset("image-generation", "Stable Diffusion image generation, 512x512, 50 steps",
           (PresetWorkload(WorkloadSpec("sd-unet", task="infer", batch_size=2, image_size=512), unit="images/s",
                           unit_scale=0.01, note="UNet, classifier-free guidance: 2 samples x 50 steps per image"),),
           12, "the guide: at least 12 GB for image generation"),
)
DEFAULT_PRESET = "llm-finetune"


def get_preset(name: str) -> Preset:
    for p in PRESETS:
        if p.name == name:
            return p
    raise UnknownNameError("use case", name, [p.name for p in PRESETS])


def markdown_table() -> str:
    """The presets as a Markdown table (docs/presets.md embeds it verbatim)."""
    lines = ["| preset | what it stands for | workloads (precision: auto) | memory check | GPUs | objective |",
             "|---|---|---|---|---|---|"]
    for p in PRESETS:
        work = "<br>".join(w.describe() for w in p.workloads)
        obj = p.objective + (f" ({p.job_tokens:,.0f} tokens)" if p.job_tokens else "")
        name = f"`{p.name}`" + (" (default)" if p.name == DEFAULT_PRESET else "")
        lines.append(f"| {name} | {p.summary} | {work} | >= {p.min_memory_gb:g} GB | up to {p.max_gpus} | {obj} |")
    return "\n".join(lines)
