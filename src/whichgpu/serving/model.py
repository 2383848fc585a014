"""One serving setup (model, GPU, system, parallelism, precisions, engine) as what the simulation
needs: the step-time function, the weights and the profiling run's activation peak per GPU, the KV
layout, and the engine's CPU time per step. Torch-free.

Weights per GPU: the decoder layers' matmul weights in the serving precision, split over tensor
parallelism (experts over expert parallelism), norms and the embedding / LM head in 16 bits (the
vocabulary split over tensor parallelism, as vLLM's VocabParallelEmbedding does).

The profiling run (vLLM ``profile_run``): one forward pass of ``max_num_batched_tokens`` tokens;
its peak is the largest layer's live intermediates (QKV, the MLP or the routed experts' rows, the
residual and norm outputs, 16-bit) plus the sampler's logits for ``max_num_seqs`` sequences in FP32
(twice: logits and their softmax). An estimate: vLLM measures it; the KV cache gets what is left.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from whichgpu.errors import InputError
from whichgpu.hardware.engine import get_engine
from whichgpu.hardware.spec import GpuSpec
from whichgpu.hardware.system import System
from whichgpu.parallel.models import planner_model
from whichgpu.perf.device import Device
from whichgpu.perf.params import load_params
from whichgpu.serving.kv import (
    KvCapacity,
    KvLayout,
    default_non_torch_bytes,
    kv_cache_capacity,
    kv_layout,
)
from whichgpu.serving.step import ACT_BYTES, PRECISIONS, WEIGHT_BYTES, StepModel
from whichgpu.workload.zoo.llm.args import DecoderArgs

ENGINES = ("vllm", "sglang", "tensorrt-llm")
KV_DTYPES = ("auto", "fp8", "bf16", "fp16")


@dataclass(frozen=True)
class Setup:
    """What a serving question fixes."""

    model: str
    gpu: GpuSpec
    system: System
    tp: int = 1
    ep: int = 1
    precision: str = "bf16"
    kv_dtype: str = "auto"  # auto: the activations' 16 bits
    engine: str = "vllm"


@dataclass
class ServingModel:
    setup: Setup
    model_id: str
    args: DecoderArgs
    step_time: StepModel
    weight_bytes: float  # per GPU
    kv: KvLayout
    cpu_overhead_s: float  # the engine's host time per step, outside the GPU time
    assumptions: dict[str, str] = field(default_factory=dict)

    def activation_peak_bytes(self, max_num_batched_tokens: int, max_num_seqs: int) -> float:
        a, t = self.args, self.setup.tp
        T = max_num_batched_tokens
        heads = max(1, a.heads // t)
        qkv = (heads + 2 * max(1, a.kv_heads // t)) * a.qk_dim if not a.mla else heads * (a.qk_dim + a.v_dim)
        if a.experts:
            i = a.expert_intermediate if self.setup.ep > 1 else max(1, a.expert_intermediate // t)
            mlp = a.experts_per_token * 3 * i + a.experts
        else:
            mlp = 3 * max(1, a.intermediate // t)
        per_token = (4 * a.hidden + qkv + mlp) * ACT_BYTES
        logits = 2 * max_num_seqs * -(-a.vocab // t) * 4.0
        return T * per_token + logits

    def capacity(self, *, gpu_memory_utilization: float = 0.9, max_seq_len: int = 8192,
                 max_num_batched_tokens: int = 8192, max_num_seqs: int = 256) -> KvCapacity:
        """KV capacity of one GPU. vLLM and SGLang give the engine a fraction of the GPU's total
        memory, the KV cache getting what the weights and activations leave; TensorRT-LLM gives
        the KV cache a fraction of the memory free after loading (KvCacheConfig
        free_gpu_memory_fraction, default 0.9): `gpu_memory_utilization` is that fraction there."""
        total = int(self.setup.gpu.memory_gb * 1e9)
        act = int(self.activation_peak_bytes(max_num_batched_tokens, max_num_seqs))
        util = gpu_memory_utilization
        if self.setup.engine == "tensorrt-llm":
            other = self.weight_bytes + act + default_non_torch_bytes(self.setup.tp)
            free = total - other
            if free > 0:  # the same KV bytes as a fraction of the total (else: let it say no)
                util = min(1.0, (gpu_memory_utilization * free + other) / total)
        return kv_cache_capacity(total_memory_bytes=total, weight_bytes=int(self.weight_bytes),
                                 activation_peak_bytes=act, layout=self.kv, max_seq_len=max_seq_len,
                                 gpu_memory_utilization=util, tp=self.setup.tp)


def weight_bytes(a: DecoderArgs, precision: str, tp: int, ep: int) -> float:
    """Bytes of the weights one GPU holds (see the module docstring)."""
    w = WEIGHT_BYTES[precision]
    layers = 0.0
    for i in range(a.layers):
        lp = a.layer_params(i)
        if a.is_moe(i):
            ex = a.experts * a.expert_params()
            per_gpu_ex = ex / ep if ep > 1 else ex / tp
            layers += (lp - ex) / tp * w + per_gpu_ex * w
        else:
            layers += lp / tp * w
    head = 0 if a.tie_embeddings else a.vocab * a.hidden
    return layers + (a.vocab * a.hidden + head) / tp * ACT_BYTES


def build(setup: Setup) -> ServingModel:
    """The serving model of `setup`; a bad combination is a one-line InputError."""
    if setup.precision not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, got {setup.precision!r}",
                         field="precision")
    if setup.kv_dtype not in KV_DTYPES:
        raise InputError(f"kv dtype must be one of {', '.join(KV_DTYPES)}, got {setup.kv_dtype!r}", field="kv_dtype")
    if setup.engine not in ENGINES:
        raise InputError(f"engine must be one of {', '.join(ENGINES)}, got {setup.engine!r}", field="engine")
    model_id, a, _ = planner_model(setup.model)
    tp, ep = setup.tp, setup.ep
    if tp < 1 or a.heads % tp:
        raise InputError(f"tensor parallelism {tp} does not divide the {a.heads} attention heads of {model_id}",
                         field="tp")
    if ep > 1 and (not a.experts or a.experts % ep):
        raise InputError(f"expert parallelism {ep} needs an MoE model whose experts it divides "
                         f"({model_id}: {a.experts or 'no'} experts)", field="ep")
    if setup.precision == "fp4" and not setup.gpu.peak("fp4"):
        raise InputError(f"{setup.gpu.name} has no FP4 tensor cores (Blackwell and later)", field="precision")
    kv_bytes = 1.0 if setup.kv_dtype == "fp8" else 2.0
    kv = kv_layout(layers=a.layers, kv_heads=a.kv_heads, head_dim=a.head_dim, kv_dtype_bytes=kv_bytes, tp=tp,
                   kv_lora_rank=a.kv_lora_rank, qk_rope_head_dim=a.qk_rope_dim)
    engine_id = "vllm" if setup.engine == "sglang" else setup.engine  # SGLang: vLLM's kernel and launch profile
    eng = get_engine(engine_id)
    dev = Device(setup.gpu, load_params())
    step = StepModel(a, dev, eng, setup.system, tp, ep, setup.precision, kv_bytes)
    wb = weight_bytes(a, setup.precision, tp, ep)
    cpu = eng.step_host_ms_infer * 1e-3
    return ServingModel(setup, model_id, a, step, wb, kv, cpu, {
        "weights": f"{setup.precision} matmul weights ({WEIGHT_BYTES[setup.precision]:g} bytes each), 16-bit "
                   f"embedding and LM head, {wb / 1e9:.1f} GB per GPU",
        "parallelism": f"tensor parallel {tp}" + (f", expert parallel {ep}" if ep > 1 else "")
                       + (", all-reduce twice per layer over " + setup.system.name if tp > 1 else ""),
        "kv_cache": f"{'FP8' if kv_bytes == 1 else '16-bit'} KV cache, {kv.bytes_per_token} bytes per token per GPU",
        "engine": f"{setup.engine}: " + ("CUDA-graph launches" if eng.graphs else f"{eng.host_op_us:g} us per kernel launch")
                  + f", {cpu * 1e3:g} ms host time per step"
                  + (f" and {eng.step_host_us_per_seq:g} us per running request" if eng.step_host_us_per_seq else "")
                  + (f", MoE expert GEMMs at {eng.moe_efficiency:g} of the GEMM roofline"
                     if a.experts and eng.moe_efficiency < 1 else "")
                  + (" (SGLang timed with vLLM's kernel profile)" if setup.engine == "sglang" else ""),
        "moe": "uniform routing: the experts a step reads are those its tokens reach" if a.experts else "dense",
    })
