"""The memory plan: how a workload is laid out over GPUs, and the switches of the memory model."""

from __future__ import annotations

from dataclasses import dataclass

from whichgpu.errors import InputError, UnknownNameError
from whichgpu.memory.allowances import CUDA_CONTEXT_BYTES, FRAGMENTATION_FRACTION
from whichgpu.memory.states import SHARDINGS

FINETUNES: tuple[str, ...] = ("full", "lora", "qlora")


@dataclass(frozen=True)
class MemoryPlan:
    """Switches of the memory model, each echoed in reports.

    gpus: GPUs the model states are sharded over (and data-parallel replicas).
    sharding: "ddp" (replicas), "zero1" (optimizer states sharded), "zero2" (+ gradients),
    "zero3" (+ parameters), "fsdp-full" (FSDP FULL_SHARD = ZeRO-3), "fsdp-grad-op"
    (FSDP SHARD_GRAD_OP = ZeRO-2).
    offload_optimizer: ZeRO-Offload / FSDP CPU offload: master weights, FP32 gradients and
    optimizer states live in CPU RAM (needs a ZeRO or FSDP sharding).
    finetune: "full", "lora" (only adapters trainable: the trace says which), "qlora" (LoRA on
    a base whose block matmul weights are stored 4-bit NF4).
    optimizer_state_bits: override the bytes of each optimizer state value (8, 16 or 32);
    None: from the trace's optimizer (8-bit Adam: 8; 16-bit training without master weights:
    the parameter dtype; otherwise FP32).
    master_weights: 16-bit parameters trained with an optimizer keep FP32 master weights, an FP32
    gradient copy and FP32 states (apex O2, DeepSpeed, Megatron). False: plain torch.optim on the
    16-bit parameters.
    set_to_none: ``optimizer.zero_grad(set_to_none=True)`` (PyTorch's default): gradients are
    freed after each step and reallocated during backward; False keeps them alive throughout.
    grad_accum: micro-batches per optimizer step; above 1 the gradients stay live through the
    later micro-batches' forward passes.
    ddp_bucket_view: DDP ``gradient_as_bucket_view=True`` (gradients are views of the all-reduce
    buckets); the default False keeps a bucket copy of every gradient.
    fragmentation: allocator fragmentation as a fraction of the memory that churns in a step.
    cuda_context_bytes: per-process CUDA context outside PyTorch's allocator.
    """

    gpus: int = 1
    sharding: str = "ddp"
    offload_optimizer: bool = False
    finetune: str = "full"
    optimizer_state_bits: int | None = None
    master_weights: bool = True
    set_to_none: bool = True
    grad_accum: int = 1
    ddp_bucket_view: bool = False
    fragmentation: float = FRAGMENTATION_FRACTION
    cuda_context_bytes: float = CUDA_CONTEXT_BYTES

    def validate(self, task: str = "train") -> None:
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise InputError(f"--gpus must be a whole number >= 1, got {self.gpus}")
        if self.sharding not in SHARDINGS:
            raise UnknownNameError("sharding", self.sharding, SHARDINGS)
        if self.finetune not in FINETUNES:
            raise UnknownNameError("fine-tuning mode", self.finetune, FINETUNES)
        if self.optimizer_state_bits not in (None, 8, 16, 32):
            raise InputError(f"optimizer state bits must be 8, 16 or 32, got {self.optimizer_state_bits}")
        if self.grad_accum < 1:
            raise InputError(f"gradient accumulation must be >= 1, got {self.grad_accum}")
        if not 0.0 <= self.fragmentation < 1.0:
            raise InputError(f"fragmentation must be in [0, 1), got {self.fragmentation}")
        if self.cuda_context_bytes < 0:
            raise InputError(f"CUDA context must be >= 0 bytes, got {self.cuda_context_bytes}")
        if self.offload_optimizer and self.sharding == "ddp":
            raise InputError("--offload-optimizer is ZeRO-Offload / FSDP CPU offload: use it with --sharding "
                             "zero1, zero2, zero3, fsdp-full or fsdp-grad-op (zero2 on a single GPU works)")
        if task != "train":
            if self.sharding != "ddp" or self.offload_optimizer:
                raise InputError("--sharding and --offload-optimizer apply to training; inference holds "
                                 "the whole model on each GPU")
            if self.finetune != "full":
                raise InputError("--finetune applies to training")
