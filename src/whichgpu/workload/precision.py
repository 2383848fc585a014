"""Precision policies: how a step's ops are typed, recorded per op in the trace.

Torch-free description; `autocast.py` applies a policy during capture.

| policy   | parameters     | matmul / conv         | softmax, norms, losses | notes                               |
|----------|----------------|-----------------------|------------------------|-------------------------------------|
| fp32     | FP32           | FP32 (CUDA cores)     | FP32                   |                                     |
| tf32     | FP32           | TF32 tensor cores     | FP32                   | PyTorch allow_tf32 / NGC default    |
| amp-fp16 | FP32 master    | FP16 (autocast)       | FP32 (autocast list)   | dynamic loss scaling                |
| amp-bf16 | FP32 master    | BF16 (autocast)       | FP32 (autocast list)   |                                     |
| fp16     | FP16           | FP16                  | FP16                   | training: apex-O2 style, FP32 master weights, loss scaling |
| bf16     | BF16           | BF16                  | BF16                   | pure bf16                           |
| fp8      | FP32 master    | FP8 (Transformer Engine style: inputs cast to FP8 per GEMM) | BF16 |          |
| int8     | INT8 weights   | FP16 math, weights read as 1 byte (weight-only, inference)     | FP16 |        |
| int4     | INT4 weights   | FP16 math, weights read as 0.5 byte (weight-only, inference)   | FP16 |        |
"""

from __future__ import annotations

from dataclasses import dataclass

from whichgpu.errors import InputError, UnknownNameError


@dataclass(frozen=True)
class Precision:
    name: str
    param_dtype: str  # storage dtype of parameters: float32 | float16 | bfloat16
    autocast: str | None  # low-precision dtype under (emulated) autocast, or None
    matmul_dtype: str  # compute dtype recorded for matmul/conv/attention ops
    loss_scaling: bool = False
    weight_bits: int | None = None  # weight-only quantization (inference)
    fp8: bool = False
    inference_only: bool = False
    description: str = ""


POLICIES: dict[str, Precision] = {
    "fp32": Precision("fp32", "float32", None, "fp32", description="FP32 everywhere, no tensor cores"),
    "tf32": Precision("tf32", "float32", None, "tf32", description="FP32 storage, TF32 tensor-core matmuls/convs"),
    "amp-fp16": Precision("amp-fp16", "float32", "float16", "fp16", loss_scaling=True,
                          description="autocast FP16 matmuls, FP32 master weights, dynamic loss scaling"),
    "amp-bf16": Precision("amp-bf16", "float32", "bfloat16", "bf16",
                          description="autocast BF16 matmuls, FP32 master weights"),
    "fp16": Precision("fp16", "float16", None, "fp16", loss_scaling=True,
                      description="FP16 parameters and math (training: FP32 master weights and loss scaling, as apex O2)"),
    "bf16": Precision("bf16", "bfloat16", None, "bf16", description="pure BF16 parameters and math"),
    "fp8": Precision("fp8", "float32", "bfloat16", "fp8", fp8=True,
                     description="FP8 GEMMs (Transformer Engine style), BF16 elsewhere, FP32 master weights"),
    "int8": Precision("int8", "float16", None, "fp16", weight_bits=8, inference_only=True,
                      description="weight-only INT8 (weights read as 1 byte, FP16 math)"),
    "int4": Precision("int4", "float16", None, "fp16", weight_bits=4, inference_only=True,
                      description="weight-only INT4 (weights read as 0.5 byte, FP16 math)"),
}

ALIASES: dict[str, str] = {
    "amp": "amp-fp16", "amp/fp16": "amp-fp16", "mixed": "amp-fp16", "amp_fp16": "amp-fp16",
    "amp-bfloat16": "amp-bf16", "amp_bf16": "amp-bf16", "float32": "fp32", "float16": "fp16",
    "half": "fp16", "bfloat16": "bf16", "fp32 (tf32 likely active)": "tf32",
}


def get_precision(name: str, task: str = "train") -> Precision:
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in POLICIES:
        raise UnknownNameError("precision", name, POLICIES)
    p = POLICIES[key]
    if p.inference_only and task == "train":
        raise InputError(f"precision {p.name!r} is weight-only quantization for inference; "
                         "for training use one of fp32, tf32, amp-fp16, amp-bf16, fp16, bf16, fp8 "
                         "(or QLoRA fine-tuning in 'whichgpu fit --finetune qlora')")
    return p


DTYPE_BYTES: dict[str, float] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "complex64": 8,
}

SHORT: dict[str, str] = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
                         "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "int64": "int64", "int32": "int32",
                         "int8": "int8", "uint8": "uint8", "bool": "bool"}
