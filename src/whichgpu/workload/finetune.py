"""Parameter-efficient fine-tuning applied to a built model before capture.

LoRA (Hu et al. 2021): every target ``nn.Linear`` keeps its weight frozen and gains a low-rank
update x A^T B^T * (alpha / r) with A (r x in) and B (out x r) trainable. Targets default to all
linear layers except the output head ("all-linear", as PEFT and the QLoRA paper use).
Frozen weights get no weight-gradient GEMMs in backward: only the activation-gradient ones.

QLoRA (Dettmers et al. 2023): the frozen base weights are stored in 4-bit NF4 with double
quantisation (0.5 byte per weight, an 8-bit absmax per 64 weights and an FP32 second-level
constant per 256 absmaxes: 4.127 bits per weight, paper section 3) and dequantised to BF16 for
every matmul, forward and backward (bitsandbytes MatMul4Bit re-dequantises in backward instead
of saving the BF16 weight).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from whichgpu.errors import InputError
from whichgpu.workload.costs import Cost, mm_flops, register
from whichgpu.workload.ops import meta_op

HEAD_NAMES = ("lm_head", "classifier", "score", "qa_outputs", "cls", "head", "fc", "decoder")
NF4_BLOCK = 64
NF4_BLOCK2 = 256  # absmaxes per second-level (double-quantisation) constant


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Module, rank: int, alpha: float | None = None) -> None:
        super().__init__()
        self.base = base
        out_f, in_f = int(base.out_features), int(base.in_features)  # type: ignore[arg-type]
        self.lora_A = nn.Linear(in_f, rank, bias=False)
        self.lora_B = nn.Linear(rank, out_f, bias=False)
        self.scaling = (alpha or 2 * rank) / rank

    def forward(self, x: Tensor) -> Tensor:
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scaling  # type: ignore[no-any-return]


class NF4Linear(nn.Module):
    """A frozen linear layer whose weight is stored as 4-bit NF4 (bitsandbytes Linear4bit)."""

    def __init__(self, lin: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = lin.in_features, lin.out_features
        n = lin.in_features * lin.out_features
        self.register_buffer("qweight", torch.empty(n // 2, dtype=torch.uint8, device="meta"))
        self.register_buffer("absmax", torch.empty(math.ceil(n / NF4_BLOCK), dtype=torch.uint8, device="meta"))
        self.register_buffer("absmax2", torch.empty(math.ceil(n / NF4_BLOCK / NF4_BLOCK2), dtype=torch.float32,
                                                    device="meta"))
        self.bias = None if lin.bias is None else nn.Parameter(lin.bias.detach(), requires_grad=False)

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = torch.ops.whichgpu.nf4_linear(x, self.qweight, self.absmax, self.out_features)
        return y if self.bias is None else y + self.bias


def _nf4_matmul(x: Tensor, qweight: Tensor, absmax: Tensor, features: int) -> Tensor:
    """x (..., K) times the dequantised weight, to (..., features): W^T forward, W backward."""
    return x.new_empty((*x.shape[:-1], features))


nf4_linear = meta_op("whichgpu::nf4_linear")(_nf4_matmul)
nf4_linear_backward = meta_op("whichgpu::nf4_linear_backward")(_nf4_matmul)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, qweight, absmax, _out = inputs
    ctx.save_for_backward(qweight, absmax)
    ctx.in_features = x.shape[-1]


def _backward(ctx: Any, grad: Tensor) -> tuple[Any, ...]:
    qweight, absmax = ctx.saved_tensors
    gx = torch.ops.whichgpu.nf4_linear_backward(grad, qweight, absmax, ctx.in_features)
    return gx, None, None, None


nf4_linear.register_autograd(_backward, setup_context=_setup)


def _nf4_cost(x: Any, n_weights: float, m: int, n: int, k: int) -> Cost:
    """x (M, K) times the dequantised (K, N) weight. dequantize_4bit: read 0.5 B/weight + the
    8-bit absmaxes (+ their FP32 constants), write the BF16 weight; the GEMM reads it back."""
    wbytes16 = 2.0 * n_weights
    deq_read = 0.5 * n_weights + n_weights / NF4_BLOCK + 4.0 * n_weights / (NF4_BLOCK * NF4_BLOCK2)
    return Cost(mm_flops(m, n, k) + 2.0 * n_weights, "matmul", mm=(1, m, n, k), kernels=2,
                bytes_read=deq_read + wbytes16 + x.numel() * x.element_size(),
                bytes_written=wbytes16 + m * n * x.element_size(), matmul_dtype_from=0,
                tags=("nf4-dequant",))


@register("whichgpu.nf4_linear", "whichgpu.nf4_linear_backward")
def _nf4_linear_cost(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Cost:
    # Forward: x (M, in) -> (M, out); backward: grad (M, out) -> (M, in). The same GEMM shape.
    x, q, _a, n = args[0], args[1], args[2], int(args[3])
    k = int(x.shape[-1])
    m = int(x.numel() // k)
    return _nf4_cost(x, 2.0 * q.numel(), m, n, k)


def _is_head(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last in HEAD_NAMES or name.startswith(("lm_head", "classifier", "qa_outputs", "cls."))


def apply_finetune(model: nn.Module, mode: str, rank: int, base_dtype: torch.dtype | None = None) -> int:
    """Freeze the model and add LoRA adapters (QLoRA: on NF4 base weights). Returns the number of
    adapted layers. 'full' leaves the model unchanged.

    base_dtype: the frozen base's storage dtype (the PEFT recipe loads it in BF16/FP16 under
    mixed precision: frozen weights need no FP32 master copy); adapters stay FP32.
    """
    if mode == "full":
        return 0
    if mode not in ("lora", "qlora"):
        raise InputError(f"finetune must be full, lora or qlora; got {mode!r}", field="finetune")
    if rank <= 0:
        raise InputError(f"LoRA rank must be > 0, got {rank}", field="lora_rank")
    for p in model.parameters():
        p.requires_grad_(False)
    if base_dtype is not None:
        model.to(base_dtype)
    targets = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear) and n and not _is_head(n)]
    if not targets:
        raise InputError("LoRA needs nn.Linear layers to adapt; this model has none besides its head",
                         field="finetune")
    for name, lin in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        base: nn.Module = NF4Linear(lin) if mode == "qlora" else lin
        with torch.device("meta"):
            adapted = LoRALinear(base, rank)
        setattr(parent, attr, adapted)
    return len(targets)
