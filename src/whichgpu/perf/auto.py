"""Choices made per GPU when the user asks for "auto" (torch-free)."""

from __future__ import annotations

from whichgpu.hardware.spec import GpuSpec


def _estimated(spec: GpuSpec, dtype: str) -> str:
    """", peak estimated (...)" when the card's peak for `dtype` is the catalog's estimate."""
    caveat = spec.peak_caveat(dtype)
    return f"; {caveat}" if caveat else ""


def auto_precision(spec: GpuSpec, task: str) -> tuple[str, str]:
    """(precision, reason): what the card does well, as Dettmers' guide advises.

    BF16 where the tensor cores have it (Ampere and newer; AMD CDNA, TPUs, Gaudi), FP16
    mixed precision on Volta/Turing, FP32 where there are no tensor cores. Inference uses pure
    16-bit weights; training uses autocast with FP32 master weights. FP8 only when asked. A peak
    the catalog estimated (no source gives it) counts as known, and the reason says so.
    """
    train = task == "train"
    if spec.supports("bf16") and ("bf16" in spec.tensor_core_dtypes or not spec.tensor_core_dtypes):
        return ("amp-bf16" if train else "bf16"), "BF16 tensor cores" + _estimated(spec, "bf16")
    if spec.supports("fp16") and ("fp16" in spec.tensor_core_dtypes or not spec.tensor_core_dtypes):
        return ("amp-fp16" if train else "fp16"), "FP16 tensor cores (no BF16 on this card)" + _estimated(spec, "fp16")
    return "fp32", "no 16-bit tensor cores"


def probe_precision(task: str) -> str:
    """The precision a workload is resolved with before a GPU is chosen ("auto" is decided per card;
    sizes and names do not depend on it)."""
    return "amp-bf16" if task == "train" else "bf16"


def resolve_precision(spec: GpuSpec, task: str, requested: str) -> tuple[str | None, str]:
    """(precision, reason) for `requested` on this card: "auto" picks what the card does well
    (auto_precision); an explicit precision is kept ("as requested", with the caveat when its
    peak is estimated), or None with the reason when the card has no such math or tensor cores."""
    if requested == "auto":
        return auto_precision(spec, task)
    from whichgpu.workload.precision import get_precision

    d = get_precision(requested, task).matmul_dtype
    if spec.supports(d) is False:
        return None, f"no {d.upper()} on this card"
    if d != "fp32" and spec.tensor_core_dtypes and d not in spec.tensor_core_dtypes and d in ("tf32", "bf16", "fp8", "fp4"):
        return None, f"no {d.upper()} tensor cores on this card"
    return requested, "as requested" + _estimated(spec, d)
