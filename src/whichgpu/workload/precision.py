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
| int4     | INT4 weights   | FP16 math, 4.25 bits a weight (group 128 scales; weight-only)  | FP16 |        |
| int4-g32 | INT4 weights   | FP16 math, 5 bits a weight (group 32 scales; gpt-fast)         | FP16 |        |
| q4_k_m   | GGUF Q4_K_M    | FP16 math, 4.89 bits a weight (llama.cpp k-quant mix)          | FP16 |        |

Inference with fp8 stores the weights in FP8 (quantised once, as TensorRT-LLM and vLLM do): no
per-forward weight casts; training with fp8 keeps FP32 master weights and casts per GEMM.

``weight_bits`` is the effective storage of a quantised block matmul weight, scales included:
* int8: a per-output-channel FP16 scale: 8 + 16 / in_features bits, 8 to within 0.4% for
  in_features >= 4096 (LLM.int8() / SmoothQuant / gpt-fast int8);
* int4: GPTQ / AWQ group size 128 with an FP16 scale and zero point per group: 4 + 32/128 = 4.25;
* int4-g32: gpt-fast's int4 with group size 32 and a BF16 scale and zero per group: 4 + 32/32 = 5;
* q4_k_m: llama.cpp's Q4_K_M mix (Q4_K blocks of 4.5 bits, Q6_K for part of the attention V and
  FFN down weights): 4.89 bits a weight on Llama-3-8B (llama.cpp README quantization table);
* fp8: FP8 E4M3 weights with a per-tensor scale: 8.
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
    weight_bits: float | None = None  # weight-only quantization (inference): stored bits a weight
    fp8: bool = False
    inference_only: bool = False
    description: str = ""
    quantize_head: bool = False  # the output head's weight is stored quantised too
    quantize_embedding: bool = False  # the embedding table is stored quantised too

    @property
    def param_bytes(self) -> float:
        """Bytes of one stored (unquantised) parameter, and of its gradient: 4 (FP32) or 2 (16-bit)."""
        return 4.0 if self.param_dtype == "float32" else 2.0

    @property
    def gathered_param_bytes(self) -> float:
        """Bytes of one parameter as ZeRO-3 / FSDP gathers it for compute: the autocast dtype
        (FSDP mixed precision gathers low-precision parameters), else as stored."""
        return 2.0 if self.autocast is not None else self.param_bytes


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
    "int8": Precision("int8", "float16", None, "fp16", weight_bits=8.0, inference_only=True,
                      description="weight-only INT8 (per-channel scales; 1 byte a weight, FP16 math)"),
    "int4": Precision("int4", "float16", None, "fp16", weight_bits=4.25, inference_only=True,
                      description="weight-only INT4, group size 128 (GPTQ/AWQ; 4.25 bits a weight, FP16 math)"),
    "int4-g32": Precision("int4-g32", "float16", None, "fp16", weight_bits=5.0, inference_only=True,
                          description="weight-only INT4, group size 32 (gpt-fast; 5 bits a weight, FP16 math)",
                          quantize_head=True),
    "q4_k_m": Precision("q4_k_m", "float16", None, "fp16", weight_bits=4.89, inference_only=True,
                        description="llama.cpp GGUF Q4_K_M (4.89 bits a weight, FP16 math)",
                        quantize_head=True, quantize_embedding=True),
}

# Inference in FP8 (TensorRT-LLM, vLLM, TransformerEngine inference): weights quantised to FP8
# once and stored so; 16-bit activations quantised per GEMM; BF16 elsewhere.
FP8_INFERENCE = Precision("fp8", "bfloat16", None, "fp8", weight_bits=8.0, fp8=True,
                          description="FP8 weights (stored FP8) and GEMMs, BF16 elsewhere")

ALIASES: dict[str, str] = {
    "amp": "amp-fp16", "amp/fp16": "amp-fp16", "mixed": "amp-fp16", "amp_fp16": "amp-fp16",
    "amp-bfloat16": "amp-bf16", "amp_bf16": "amp-bf16", "float32": "fp32", "float16": "fp16",
    "half": "fp16", "bfloat16": "bf16", "fp32 (tf32 likely active)": "tf32", "q4-k-m": "q4_k_m",
    "q4km": "q4_k_m", "int4_g32": "int4-g32",
}


def get_precision(name: str, task: str = "train") -> Precision:
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in POLICIES:
        raise UnknownNameError("precision", name, POLICIES)
    p = POLICIES[key]
    if p.fp8 and task == "infer":
        return FP8_INFERENCE
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
