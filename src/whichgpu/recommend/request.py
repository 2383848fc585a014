"""What the user asks for: the workloads, the constraints, the objective and how cards are paid."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

from whichgpu import limits
from whichgpu.errors import InputError
from whichgpu.hardware.spec import GpuSpec
from whichgpu.hardware.system import System, default_system, with_gpu
from whichgpu.recommend.cost import CostModel
from whichgpu.recommend.prices import UserPrice
from whichgpu.workload.spec import WorkloadSpec

OBJECTIVES: tuple[str, ...] = ("value", "time", "energy", "cost-per-job")
DEFAULT_MAX_GPUS = 8


@dataclass(frozen=True)
class Workload:
    """One workload, its sizes resolved. ``spec.precision`` may be "auto" (chosen per card); any
    other precision runs on every card, and cards without it are listed apart.

    serving: causal-LM inference measured as generation (a prefill trace and a decode trace,
    decode throughput in generated tokens/s); unit: what the throughput counts; unit_scale:
    units per traced sample for sample-counted workloads (image generation: 1 image per 2 x 50
    UNet samples); weight: share in a preset's mix (weighted geometric mean); family: the zoo
    family, which decides the memory-saving changes worth suggesting (LoRA for transformers).
    """

    label: str
    spec: WorkloadSpec
    serving: bool = False
    unit: str = "samples/s"
    unit_scale: float = 1.0
    weight: float = 1.0
    family: str = ""  # the zoo family (decoder, encoder, cnn, ...); "" for other models

    @property
    def tokens(self) -> bool:
        return self.unit == "tokens/s"


@dataclass(frozen=True)
class Job:
    """The amount of work for time/cost/energy per job: tokens, or epochs over a dataset."""

    tokens: float | None = None
    epochs: float | None = None
    dataset_size: float | None = None

    def validate(self) -> None:
        if self.tokens is not None and (self.epochs is not None or self.dataset_size is not None):
            raise InputError("give the job as tokens or as epochs over a dataset, not both", field="job.tokens")
        if self.tokens is not None and not (self.tokens > 0 and math.isfinite(self.tokens)):
            raise InputError(f"the job's token count must be > 0, got {self.tokens:g}", field="job.tokens")
        if self.epochs is not None and self.dataset_size is None:
            raise InputError("a job in epochs needs the dataset size (samples per epoch)", field="job.dataset_size")
        if self.dataset_size is not None and self.epochs is None:
            raise InputError("a dataset size needs the number of epochs over it", field="job.epochs")
        if self.epochs is not None and not (self.epochs > 0 and math.isfinite(self.epochs)):
            raise InputError(f"the job's epochs must be > 0, got {self.epochs:g}", field="job.epochs")
        if self.dataset_size is not None and not (self.dataset_size > 0 and math.isfinite(self.dataset_size)):
            raise InputError(f"the dataset size must be > 0 samples, got {self.dataset_size:g}",
                             field="job.dataset_size")

    @property
    def given(self) -> bool:
        return self.tokens is not None or self.epochs is not None

    def describe(self) -> str:
        if self.tokens is not None:
            return f"{self.tokens:,.0f} tokens"
        if self.epochs is not None and self.dataset_size is not None:
            return f"{self.epochs:g} epoch(s) of {self.dataset_size:,.0f} samples"
        return "none"


@dataclass(frozen=True)
class Request:
    """Everything `recommend` needs besides the catalog and the traces."""

    workloads: tuple[Workload, ...]
    title: str
    preset: str | None = None
    cost: CostModel = field(default_factory=CostModel)
    objective: str = "value"
    budget_usd: float | None = None
    max_gpus: int = DEFAULT_MAX_GPUS
    max_power_w: float | None = None
    min_memory_gb: float | None = None
    memory_rule: str = ""  # the preset's rule of thumb behind min_memory_gb, in words
    power_limit_w: float | None = None
    step_host_ms: float | None = None  # host time per step outside kernel issue (Plan.step_host_ms)
    job: Job = field(default_factory=Job)
    gpu_ids: tuple[str, ...] | None = None  # restrict to these catalog ids
    engine: str = "pytorch"  # execution engine profile (hardware/engines/*.toml)
    system: System | None = None  # the system for the GPUs it holds (None: each GPU's default)
    prices: dict[str, UserPrice] = field(default_factory=dict)
    today: dt.date = field(default_factory=dt.date.today)
    model_parallel: bool = True
    """LLM training: where no data-parallel/ZeRO/FSDP layout fits at a GPU count (2 or more), take
    the parallel planner's best tensor/pipeline (context, expert) parallel layout there."""

    def system_for(self, gpu: GpuSpec) -> System:
        """The requested system when it holds this GPU, else the GPU's default system."""
        if self.system is not None and self.system.gpu in (None, gpu.id):
            return with_gpu(self.system, gpu)
        return default_system(gpu)

    def validate(self) -> None:
        if not self.workloads:
            raise InputError("nothing to recommend for: the request has no workload")
        if self.objective not in OBJECTIVES:
            raise InputError(f"objective must be one of {', '.join(OBJECTIVES)}; got {self.objective!r}",
                             field="objective")
        self.cost.validate()
        self.job.validate()
        if self.budget_usd is not None and not (self.budget_usd > 0 and math.isfinite(self.budget_usd)):
            raise InputError(f"the budget must be a positive number of US dollars, got {self.budget_usd:g}",
                             field="budget_usd")
        if isinstance(self.max_gpus, bool) or self.max_gpus < 1:
            raise InputError(f"the largest GPU count must be a whole number >= 1, got {self.max_gpus}",
                             field="max_gpus")
        if self.max_power_w is not None and not (self.max_power_w > 0 and math.isfinite(self.max_power_w)):
            raise InputError(f"the power budget must be > 0 W, got {self.max_power_w:g}", field="max_power_w")
        if self.min_memory_gb is not None and not (self.min_memory_gb >= 0 and math.isfinite(self.min_memory_gb)):
            raise InputError(f"the minimum memory must be >= 0 GB, got {self.min_memory_gb:g}",
                             field="min_memory_gb")
        if self.power_limit_w is not None and not (self.power_limit_w > 0 and math.isfinite(self.power_limit_w)):
            raise InputError(f"the power limit must be > 0 W, got {self.power_limit_w:g}", field="power_limit_w")
        if self.step_host_ms is not None and not limits.STEP_HOST_MS.ok(self.step_host_ms):
            raise InputError(f"the host time per step must be {limits.STEP_HOST_MS.describe()} ms, got "
                             f"{self.step_host_ms:g}", field="step_host_ms")
        if self.objective == "cost-per-job" and not self.job.given:
            raise InputError("the cost-per-job objective needs the job's size: tokens, or epochs over a dataset",
                             field="job.tokens")
        if self.job.given and len(self.workloads) > 1:
            raise InputError(f"a job size applies to one workload; this preset mixes {len(self.workloads)} "
                             "(give a model instead)", field="job.tokens" if self.job.tokens is not None else "job.epochs")
        w = self.workloads[0]
        if self.job.tokens is not None and not w.tokens:
            raise InputError(f"a job in tokens needs a workload counted in tokens; {w.label} is counted in "
                             f"{w.unit.split('/')[0]}: give epochs over a dataset instead", field="job.tokens")
        if self.job.epochs is not None and w.serving:
            raise InputError("a job in epochs applies to training or batch inference; for serving give the "
                             "tokens to generate", field="job.epochs")

    def counts(self) -> tuple[int, ...]:
        """GPU counts to evaluate: 1, 2, 4, 8, ... up to max_gpus (and max_gpus itself)."""
        out = []
        n = 1
        while n <= self.max_gpus:
            out.append(n)
            n *= 2
        if out[-1] != self.max_gpus:
            out.append(self.max_gpus)
        return tuple(out)
