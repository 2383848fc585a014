"""Choices made per GPU when the user asks for "auto" (torch-free)."""

from __future__ import annotations

from whichgpu.hardware.spec import GpuSpec


def auto_precision(spec: GpuSpec, task: str) -> tuple[str, str]:
    """(precision, reason): what the card does well, as Dettmers' guide advises.

    BF16 where the tensor cores have it (Ampere and newer; AMD CDNA, TPUs, Gaudi), FP16
    mixed precision on Volta/Turing, FP32 where there are no tensor cores. Inference uses pure
    16-bit weights; training uses autocast with FP32 master weights. FP8 only when asked.
    """
    train = task == "train"
    if spec.supports("bf16") and ("bf16" in spec.tensor_core_dtypes or not spec.tensor_core_dtypes):
        return ("amp-bf16" if train else "bf16"), "BF16 tensor cores"
    if spec.supports("fp16") and ("fp16" in spec.tensor_core_dtypes or not spec.tensor_core_dtypes):
        return ("amp-fp16" if train else "fp16"), "FP16 tensor cores (no BF16 on this card)"
    return "fp32", "no 16-bit tensor cores"
