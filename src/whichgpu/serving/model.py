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

Pipeline parallelism (``pp`` > 1, `pipeline.py`): each GPU holds one stage's layers (tensor-split
as above), the first stage the embedding and the last the LM head (a copy of the embedding when
tied); the weights per GPU are the largest stage's and each stage's KV cache holds its own
layers, so a GPU's cache holds about pp x the tokens for the same free memory. The capacity is
the stage with the fewest blocks (vLLM takes the minimum over its workers). The profiling run's
logits only on the last stage.

Speculative decoding (`spec.SpecDecode`): the drafter's weights are added to the GPU's (a draft
model's own weights in the serving precision, or one decoder layer of the target's shape for a
draft head, whose LM head is the target's), and its KV cache to the pool's bytes per token (the
head: one more layer; a draft model: its KV bytes per token as that many of the target's layers,
rounded up: an approximation of vLLM's shared page layout). Not combined with pipeline
parallelism here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from whichgpu.errors import InputError
from whichgpu.hardware.engine import Engine, get_engine
from whichgpu.hardware.spec import GpuSpec
from whichgpu.hardware.system import System
from whichgpu.parallel.comm import nvls_speedup, ring_allreduce_cap
from whichgpu.parallel.models import planner_model
from whichgpu.perf.device import Device
from whichgpu.perf.params import load_params
from whichgpu.serving.batch import StepTime
from whichgpu.serving.kv import (
    KvCapacity,
    KvLayout,
    default_non_torch_bytes,
    kv_cache_capacity,
    kv_layout,
    sglang_mem_fraction_static,
)
from whichgpu.serving.pipeline import (
    P2P_TENSORS,
    PipelineStepTime,
    boundary_links,
    simulate_pipeline,
    stage_layers,
)
from whichgpu.serving.results import ServingResult
from whichgpu.serving.scheduler import SchedulerConfig
from whichgpu.serving.spec import SpecDecode
from whichgpu.serving.step import ACT_BYTES, PRECISIONS, WEIGHT_BYTES, StepModel, linear_state_bytes
from whichgpu.serving.workload import Workload
from whichgpu.workload.zoo.llm.args import DecoderArgs

ENGINES = ("vllm", "sglang", "tensorrt-llm")
KV_DTYPES = ("auto", "fp8", "bf16", "fp16")


def serving_engine(name: str) -> str:
    """The serving engine's id for ``name``, its id or an alias of its profile (``trtllm``,
    ``trt-llm``); a one-line InputError for a name that is no serving engine."""
    from whichgpu.errors import WhichGPUError

    try:
        eid = get_engine(name).id
    except WhichGPUError:
        eid = name
    if eid not in ENGINES:
        raise InputError(f"--engine for serving must be one of {', '.join(ENGINES)}, got {name!r}", field="engine")
    return eid


def engine_unsupported(engine: str, gpu: GpuSpec) -> str | None:
    """Why ``engine`` does not run on ``gpu`` (the engine profile's ``vendors``: TensorRT-LLM runs
    on NVIDIA GPUs only; vLLM and SGLang also on AMD's); None when it runs there."""
    return get_engine(engine).unsupported_on(gpu.name, gpu.vendor)


DEFAULT_MEMORY_FRACTION = 0.9
"""vLLM's default gpu_memory_utilization and TensorRT-LLM's free_gpu_memory_fraction."""

KV_FP8_CHECKPOINTS: dict[str, tuple[str, ...]] = {
    "tensorrt-llm": ("fp8", "fp4"), "vllm": ("fp8", "fp4"), "sglang": ("fp4",)}
"""Per engine, the weight precisions whose checkpoint is read as declaring an FP8 KV cache, which the
engine's default ``auto`` then takes. NVIDIA ModelOpt exports declare ``kv_cache_quant_algo: FP8``
(NVIDIA/Model-Optimizer PR #557); TensorRT-LLM applies it ("quantization settings are detected from
the checkpoint", its quantization docs), vLLM too since PR #29980 (2025-12), and SGLang's
``configure_kv_cache_dtype`` reads the same field for ``auto`` (already there when its PR #18394,
2026-02, fixed a side effect of it). Every NVFP4 checkpoint is a ModelOpt export
(SGLang's cookbook also passes ``--kv-cache-dtype fp8_e4m3`` on its FP4 paths). FP8 is read as a
ModelOpt export on TensorRT-LLM and vLLM (their dev rows' TTFTs need that capacity), but not on
SGLang, whose FP8 rows are the model makers' own FP8 checkpoints (DeepSeek, Qwen, GLM), which
declare no KV scheme: its ``auto`` stays 16-bit there (DeepSeek-R1 on B200 included: its
server arguments pick the trtllm_mla backend and leave the KV dtype alone)."""


KV_FP8_TAKEN_BY = {"tensorrt-llm": "TensorRT-LLM", "vllm": "vLLM (since its PR #29980, 2025-12)",
                   "sglang": "SGLang"}
"""How the assumptions line names each engine that takes a checkpoint's FP8 KV cache."""


def kv_fp8_from_checkpoint(engine: str, precision: str) -> bool:
    """Whether `engine`'s ``--kv-cache-dtype auto`` is read as FP8 for `precision` weights
    (`KV_FP8_CHECKPOINTS`)."""
    return precision in KV_FP8_CHECKPOINTS.get(engine, ())


NO_EVICT_ENGINES = ("tensorrt-llm",)
"""Engines whose scheduler reserves each request's whole prompt and answer at admission and never
preempts: TensorRT-LLM's default capacity policy ``GUARANTEED_NO_EVICT`` (its LLM API
``SchedulerConfig.capacity_scheduler_policy``). vLLM admits on the next chunk's blocks and preempts
under pressure; SGLang keeps room for the running answers and retracts (`RETRACTING_ENGINES`)."""

UNCHUNKED_ENGINES = ("tensorrt-llm",)
"""Engines that do not split a prompt over steps by default: TensorRT-LLM's LLM API has
``enable_chunked_prefill=False`` (AIConfigurator's benchmark configs keep it); a prompt is prefilled
whole in one step, and one longer than max_num_tokens is refused. vLLM (v1) and SGLang chunk."""

RETRACTING_ENGINES = ("sglang",)
"""Engines that admit and retract as SGLang does (`scheduler.SchedulerConfig.sglang_admission`): its
``PrefillAdder`` starts a request only while its prompt and (clipped) answer fit beside the running
requests' remaining answers scaled by ``new_token_ratio`` (0.7, falling to about 0.1 over 600 decode
steps, raised again after a retraction), and its ``retract_decode`` frees the requests with the fewest
tokens generated, which rejoin the back of the queue. vLLM admits on the next chunk's blocks and
preempts the newest request, which goes first in the queue."""

LINEAR_STATE_BYTES = {"sglang": 4.0}
"""Bytes of a value of the linear-attention state, by engine: SGLang keeps it in float32 (its
``--mamba-ssm-dtype`` default); vLLM in the model's dtype (``mamba_ssm_cache_dtype`` auto), 2
bytes here; TensorRT-LLM assumed as vLLM."""
SGLANG_MAMBA_FULL_MEMORY_RATIO = 0.9
"""SGLang's ``--mamba-full-memory-ratio`` default: the linear-attention states' pool is r / (1 + r)
of the memory the KV pool would have had (its model runner's split)."""

PREFILL_FIRST_ENGINES = ("sglang",)
"""Engines whose steps do not mix prefill with decode: SGLang's scheduler runs a prefill batch
whenever it has one (``get_next_batch_to_run``: prefill first) and mixes the running requests' decode
in only with ``--enable-mixed-chunk`` (``ServerArgs.enable_mixed_chunk = False``); vLLM and
TensorRT-LLM put every running request's next token in each step (`scheduler.SchedulerConfig.prefill_first`)."""


def sglang_defaults(s: Setup) -> tuple[float, int, int]:
    """SGLang's default (mem_fraction_static, chunked_prefill_size, cuda_graph_max_bs) for a setup
    (`kv.sglang_mem_fraction_static`): the GPU's nvidia-smi total, all the replica's GPUs as its
    tp_size, DP attention's groups, a draft."""
    spec = None if s.spec is None else ("standalone" if s.spec.draft_model else "eagle")
    return sglang_mem_fraction_static(s.gpu.device_memory_mib, s.tp * s.pp, 1, s.attention_dp, spec)


def sglang_default_fraction(s: Setup) -> float:
    """SGLang's default ``mem_fraction_static`` for a setup (`sglang_defaults`)."""
    return sglang_defaults(s)[0]


def decode_graph_tokens(s: Setup, eng: Engine) -> float:
    """The largest decode-only step, in tokens, `s`'s engine replays from a CUDA graph: SGLang's
    default ``cuda_graph_max_bs`` for the GPU and layout (`kv.sglang_mem_fraction_static`: 8-512
    requests by memory band and TP), times the tokens each verifies under speculative decoding;
    vLLM's largest capture size (``prefill_graph_tokens``: its graphs serve decode and mixed steps
    alike); no limit for TensorRT-LLM (its CUDA-graph batch sizes are not modelled)."""
    if s.engine == "sglang":
        return float(sglang_defaults(s)[2] * (1 + (s.spec.draft_len if s.spec is not None else 0)))
    return float(eng.prefill_graph_tokens) if eng.prefill_graph_tokens else math.inf


def layout_text(tp: int, ep: int = 1, pp: int = 1, attention_dp: int = 1) -> str:
    """A replica's parallel layout as reports print it: "TP8", "TP8 EP8 DP-attention 8", "TP4 PP2"."""
    return (f"TP{tp}" + (f" EP{ep}" if ep > 1 else "") + (f" PP{pp}" if pp > 1 else "")
            + (f" DP-attention {attention_dp}" if attention_dp > 1 else ""))


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
    pp: int = 1
    """Pipeline-parallel stages (each of ``tp`` GPUs); 1: none."""
    spec: SpecDecode | None = None
    """Speculative decoding; None: off. The scheduler config must carry it too
    (`ServingModel.scheduler_config`)."""
    attention_dp: int = 1
    """Attention data parallelism (SGLang --enable-dp-attention --dp, vLLM --data-parallel-size with
    expert parallelism, TensorRT-LLM enable_attention_dp): the ``tp`` GPUs form this many attention
    groups of tp / attention_dp GPUs, each with its own requests, scheduler and KV cache; the MLP or
    experts run over all ``tp`` GPUs on every group's tokens. 1: off."""
    mixed_chunk: bool | None = None
    """SGLang's ``--enable-mixed-chunk`` (True: its prefill steps carry the running requests' decode,
    as vLLM's and TensorRT-LLM's always do); None: the engine's default (`PREFILL_FIRST_ENGINES`)."""
    adp_balance: tuple[int, int] | None = None
    """TensorRT-LLM's attention-DP balancing (``attention_dp_config: enable_balance: true``) as its
    (``timeout_iters``, ``batching_wait_iters``); None: off, its default (`scheduler.SchedulerConfig.adp_balance`)."""

    @property
    def prefill_first(self) -> bool:
        """Whether a step either prefills or decodes, never both (SGLang without --enable-mixed-chunk)."""
        return self.engine in PREFILL_FIRST_ENGINES and not self.mixed_chunk

    @property
    def attn_tp(self) -> int:
        """GPUs one attention group splits its heads (and KV heads) over."""
        return max(1, self.tp // max(1, self.attention_dp))


@dataclass
class ServingModel:
    setup: Setup
    model_id: str
    args: DecoderArgs
    step_time: StepModel | PipelineStepTime
    weight_bytes: float  # per GPU (the largest pipeline stage's)
    kv: KvLayout  # per GPU (the largest pipeline stage's)
    cpu_overhead_s: float  # the engine's host time per step, outside the GPU time
    assumptions: dict[str, str] = field(default_factory=dict)
    stages: tuple[tuple[float, KvLayout], ...] = ()
    """Pipeline parallelism: (weight bytes, KV layout) of each stage's GPUs; () without."""

    @property
    def request_latency_s(self) -> float:
        """The engine's fixed time per request before its scheduler sees it (engine profile
        ``request_overhead_ms``)."""
        return get_engine(self.setup.engine).request_overhead_ms * 1e-3

    def activation_peak_bytes(self, max_num_batched_tokens: int, max_num_seqs: int, logits: bool = True) -> float:
        a, t, ta, g = self.args, self.setup.tp, self.setup.attn_tp, max(1, self.setup.attention_dp)
        T = max_num_batched_tokens
        heads = max(1, a.heads // ta)
        qkv = (heads + 2 * max(1, a.kv_heads // ta)) * a.qk_dim if not a.mla else heads * (a.qk_dim + a.v_dim)
        if a.experts:
            i = a.expert_intermediate if self.setup.ep > 1 else max(1, a.expert_intermediate // t)
            mlp = a.experts_per_token * 3 * i + a.experts
        else:
            mlp = 3 * max(1, a.intermediate // t)
        per_token = (4 * a.hidden + qkv + g * mlp) * ACT_BYTES  # DP attention: the MLP runs on every group's tokens
        if not logits:  # a pipeline stage before the last: no sampler
            return T * per_token
        logits_bytes = 2 * g * max_num_seqs * -(-a.vocab // t) * 4.0
        return T * per_token + logits_bytes

    def capacity(self, *, gpu_memory_utilization: float | None = None, max_seq_len: int = 8192,
                 max_num_batched_tokens: int = 8192, max_num_seqs: int = 256) -> KvCapacity:
        """KV capacity of one GPU. vLLM gives the engine a fraction of the GPU's total memory
        (``gpu_memory_utilization``, default 0.9), the KV cache getting what the weights and the
        profiled activations leave; TensorRT-LLM gives the KV cache a fraction of the memory free
        after loading (KvCacheConfig free_gpu_memory_fraction, default 0.9); SGLang keeps
        ``mem_fraction_static`` of the memory free before loading for the weights and the KV pool,
        its activations and graphs in the rest (`sglang_mem_fraction`). `gpu_memory_utilization` is
        each engine's fraction; None: its default. Pipeline parallelism: the stage whose GPUs hold
        the fewest blocks (each block holds every stage's layers of its tokens)."""
        knobs = (gpu_memory_utilization, max_seq_len, max_num_batched_tokens, max_num_seqs)
        if not self.stages:
            return self._capacity(self.weight_bytes, self.kv, True, self.setup.tp, *knobs)
        last = len(self.stages) - 1
        caps = [self._capacity(w, kv, i == last, self.setup.tp * self.setup.pp, *knobs)
                for i, (w, kv) in enumerate(self.stages)]
        return min(caps, key=lambda c: c.num_blocks)

    def weights_hint(self, gpu_memory_utilization: float | None = None) -> str:
        """Where the weights alone overflow the engine's share of a GPU: the serving precisions and
        tensor-parallel degrees (within the node, dividing the heads) whose weights would fit, in
        one clause ("" when the weights fit). Weights only: the KV cache needs room beside them."""
        s, a = self.setup, self.args
        budget = (gpu_memory_utilization or (self.sglang_mem_fraction if s.engine == "sglang"
                                             else DEFAULT_MEMORY_FRACTION)) * s.gpu.usable_memory_bytes
        if self.weight_bytes <= budget or s.pp > 1:
            return ""
        gib = 2**30
        precisions = [s.precision] + [p for p in PRECISIONS if WEIGHT_BYTES[p] < WEIGHT_BYTES[s.precision]
                                      and (p in ("int4", "bf16", "fp16") or s.gpu.peak(p))]
        degrees = [s.tp] + [t for t in range(s.tp + 1, s.system.gpus_per_node + 1)
                            if a.heads % t == 0 and t % s.attention_dp == 0]
        found = []  # per precision, the fewest GPUs whose weights fit: (tp, larger weights first, text)
        for p in precisions:
            for tp in degrees:
                if (p, tp) == (s.precision, s.tp):
                    continue
                ep = tp if s.ep > 1 else 1
                w = weight_bytes(a, p, tp, ep, tp // s.attention_dp)
                if w <= budget:
                    flags = ([f"--precision {p}"] if p != s.precision else []) + (
                        [f"--tp {tp}" + (f" --ep {tp}" if ep > 1 else "")] if tp != s.tp else [])
                    found.append((tp, -WEIGHT_BYTES[p], f"{' '.join(flags)}: {w / gib:.0f} GiB per GPU"))
                    break
        options = [text for *_, text in sorted(found)]
        if not options:
            return (f"; no serving precision, nor tensor parallelism over the {s.system.gpus_per_node} GPUs of one node "
                    f"({s.system.name}), fits them: pipeline stages over nodes (--pp) or a larger GPU")
        return "; the weights would fit with " + ", or ".join(options) + " (the KV cache needs room beside them)"

    @property
    def sglang_mem_fraction(self) -> float:
        """SGLang's default ``mem_fraction_static`` for this GPU and layout (`sglang_default_fraction`)."""
        return sglang_default_fraction(self.setup)

    def _capacity(self, weights: float, layout: KvLayout, logits: bool, gpus: int,
                  gpu_memory_utilization: float | None, max_seq_len: int, max_num_batched_tokens: int,
                  max_num_seqs: int) -> KvCapacity:
        total = int(self.setup.gpu.usable_memory_bytes)  # cudaMemGetInfo's total, as the engines read it
        act = int(self.activation_peak_bytes(max_num_batched_tokens, max_num_seqs, logits))
        engine = self.setup.engine
        if gpu_memory_utilization is None:
            gpu_memory_utilization = self.sglang_mem_fraction if engine == "sglang" else DEFAULT_MEMORY_FRACTION
        util = gpu_memory_utilization
        if engine == "tensorrt-llm":
            other = weights + act + default_non_torch_bytes(gpus)
            free = total - other
            if free > 0:  # the same KV bytes as a fraction of the total (else: let it say no)
                util = min(1.0, (gpu_memory_utilization * free + other) / total)
        elif engine == "sglang":
            # profile_max_num_token: (free after the weights) - (free before them) x (1 - fraction),
            # the memory free before them being the total less the context and NCCL's buffers; the
            # activations are not profiled (they live in the rest). The same KV bytes as vLLM's terms:
            non_torch = default_non_torch_bytes(gpus)
            util = min(1.0, (gpu_memory_utilization * (total - non_torch) + act + non_torch) / total)
        ratio = SGLANG_MAMBA_FULL_MEMORY_RATIO if engine == "sglang" else 0.0
        cap = kv_cache_capacity(total_memory_bytes=total, weight_bytes=int(weights),
                                activation_peak_bytes=act, layout=layout, max_seq_len=max_seq_len,
                                gpu_memory_utilization=util, tp=gpus, state_pool_share=ratio / (1.0 + ratio))
        return cap if engine == "vllm" else replace(cap, engine_fraction=gpu_memory_utilization)

    @property
    def no_evict(self) -> bool:
        """Whether the engine admits requests by reserving their whole prompt and answer and never
        preempts (TensorRT-LLM's default ``GUARANTEED_NO_EVICT``; `scheduler.SchedulerConfig.no_evict`)."""
        return self.setup.engine in NO_EVICT_ENGINES

    @property
    def prefill_first(self) -> bool:
        """Whether a step either prefills or decodes, never both (SGLang's default; `Setup.prefill_first`)."""
        return self.setup.prefill_first

    def scheduler_config(self, capacity: KvCapacity, **knobs: Any) -> SchedulerConfig:
        """The scheduler's pool of ``capacity`` with this setup's host time per step, request
        latency, admission policy and speculative decoding; ``knobs``: the other `SchedulerConfig`
        fields."""
        if capacity.state_slots is not None and "max_num_seqs" in knobs:  # SGLang: a state per running request
            knobs["max_num_seqs"] = max(1, min(int(knobs["max_num_seqs"]), capacity.state_slots))
        knobs.setdefault("cpu_overhead_s", self.cpu_overhead_s)
        knobs.setdefault("request_latency_s", self.request_latency_s)
        knobs.setdefault("no_evict", self.no_evict)
        knobs.setdefault("prefill_first", self.prefill_first)
        knobs.setdefault("sglang_admission", self.setup.engine in RETRACTING_ENGINES)
        knobs.setdefault("chunked_prefill", self.setup.engine not in UNCHUNKED_ENGINES)
        knobs.setdefault("adp_balance", self.setup.adp_balance)
        knobs.setdefault("adp_groups", self.setup.attention_dp)
        return SchedulerConfig.from_capacity(capacity, spec=self.setup.spec, **knobs)

    def simulate(self, workload: Workload, config: SchedulerConfig, *, decode_runs: bool = True) -> ServingResult:
        """Serve ``workload``: `scheduler.simulate` with this setup's step time, or the pipeline's
        virtual engines under pipeline parallelism (`pipeline.simulate_pipeline`). ``config``
        must carry this setup's speculative decoding (`scheduler_config`)."""
        if config.spec != self.setup.spec:
            raise InputError(f"the scheduler's speculative decoding ({config.spec}) differs from the setup's "
                             f"({self.setup.spec}); build the config with scheduler_config()", field="spec")
        return simulate_pipeline(workload, self.step_time, config, self.setup.pp, decode_runs=decode_runs)

    def simulator(self, workload: Workload, step_time: StepTime, config: SchedulerConfig) -> ServingResult:
        """`simulate_pipeline` with this setup's stages, in `scheduler.simulate`'s signature: the
        ``simulate_fn`` of `slo.py`'s helpers (``step_time``: this model's)."""
        return simulate_pipeline(workload, step_time, config, self.setup.pp)


def check_request_tokens(model_id: str, a: DecoderArgs, tokens: int, field: str = "input_len") -> None:
    """Refuse requests longer than the model's context window (InputError on ``field``): the
    engines cap a request at max_model_len, which defaults to the model's max_position_embeddings,
    and refuse a longer one instead of serving it."""
    if tokens > a.max_positions:
        raise InputError(f"requests of up to {tokens:,} tokens (prompt + answer) exceed the {a.max_positions:,}-token "
                         f"context window of {model_id} (max_position_embeddings, the engines' default max_model_len)",
                         field=field)


def _layer_weight_bytes(a: DecoderArgs, i: int, w: float, tp: int, ep: int, attn_tp: int | None = None) -> float:
    """One layer's weights on one GPU; ``attn_tp``: the GPUs the attention weights split over (DP
    attention: tp / attention_dp, each group holding its own copy; None: tp)."""
    lp = a.layer_params(i)
    at = tp if attn_tp is None else attn_tp
    attn = a.mixer_params(i)
    rest = lp - attn
    if a.is_moe(i):
        ex = a.experts * a.expert_params()
        per_gpu_ex = ex / ep if ep > 1 else ex / tp
        return float(attn / at * w + (rest - ex) / tp * w + per_gpu_ex * w)
    return float(attn / at * w + rest / tp * w)


def weight_bytes(a: DecoderArgs, precision: str, tp: int, ep: int, attn_tp: int | None = None) -> float:
    """Bytes of the weights one GPU holds (see the module docstring)."""
    w = WEIGHT_BYTES[precision]
    layers = 0.0
    for i in range(a.layers):
        layers += _layer_weight_bytes(a, i, w, tp, ep, attn_tp)
    head = 0 if a.tie_embeddings else a.vocab * a.hidden
    return layers + (a.vocab * a.hidden + head) / tp * ACT_BYTES


def stage_weight_bytes(a: DecoderArgs, precision: str, tp: int, ep: int, first: int, end: int, *,
                       embedding: bool, head: bool) -> float:
    """Bytes of the weights one GPU of a pipeline stage (layers first .. end - 1) holds: its
    layers, the embedding on the first stage, the LM head on the last (its own copy when tied)."""
    w = WEIGHT_BYTES[precision]
    layers = 0.0
    for i in range(first, end):
        layers += _layer_weight_bytes(a, i, w, tp, ep)
    tables = int(embedding) + int(head) - int(embedding and head and a.tie_embeddings)
    return layers + tables * a.vocab * a.hidden / tp * ACT_BYTES


def _sglang_fp8_dsa(setup: Setup, a: DecoderArgs) -> bool:
    """SGLang's default KV cache for DeepSeek sparse attention on Blackwell is FP8 (its NSA
    backend's default: FlashMLA's FP8 cache for decode; 16 bits on Hopper), where --kv-dtype is auto."""
    return setup.kv_dtype == "auto" and a.dsa and setup.engine == "sglang" and setup.gpu.architecture == "blackwell"


def build(setup: Setup) -> ServingModel:
    """The serving model of `setup`; a bad combination is a one-line InputError."""
    if setup.precision not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, got {setup.precision!r}",
                         field="precision")
    if setup.kv_dtype not in KV_DTYPES:
        raise InputError(f"kv dtype must be one of {', '.join(KV_DTYPES)}, got {setup.kv_dtype!r}", field="kv_dtype")
    if setup.engine not in ENGINES:
        raise InputError(f"engine must be one of {', '.join(ENGINES)}, got {setup.engine!r}", field="engine")
    if (why := engine_unsupported(setup.engine, setup.gpu)) is not None:
        others = [e for e in ENGINES if engine_unsupported(e, setup.gpu) is None]
        raise InputError(why + (": give --engine " + " or ".join(others) if others else ""), field="engine")
    model_id, a, _ = planner_model(setup.model)
    tp, ep, pp, spec = setup.tp, setup.ep, setup.pp, setup.spec
    bounds = stage_layers(a.layers, pp)  # validates pp
    if spec is not None and a.dsa:
        raise InputError(f"speculative decoding with the sparse attention of {model_id} is not modelled; leave "
                         "--spec-draft-len out", field="spec_draft_len")
    if spec is not None and pp > 1:
        raise InputError("speculative decoding with pipeline parallelism is not modelled; give one of them",
                         field="pp")
    if tp < 1 or a.heads % tp:
        raise InputError(f"tensor parallelism {tp} does not divide the {a.heads} attention heads of {model_id}",
                         field="tp")
    if tp > setup.system.gpus_per_node:
        raise InputError(f"tensor parallelism {tp} exceeds the {setup.system.gpus_per_node} GPUs of one "
                         f"{setup.system.name}: a replica serves from one node", field="tp")
    if ep not in (1, tp):
        raise InputError(f"expert parallelism spans the tensor-parallel group: give --ep 1 or --ep equal to --tp "
                         f"({tp}), got {ep}", field="ep")
    if ep > 1 and (not a.experts or a.experts % ep):
        raise InputError(f"expert parallelism {ep} needs an MoE model whose experts it divides "
                         f"({model_id}: {a.experts or 'no'} experts)", field="ep")
    if setup.mixed_chunk is not None and setup.engine not in PREFILL_FIRST_ENGINES:
        raise InputError(f"--mixed-chunk is SGLang's choice; {setup.engine} always puts every running request's "
                         "decode in its prefill steps (give --engine sglang, or leave the flag out)", field="mixed_chunk")
    adp = setup.attention_dp
    if setup.adp_balance is not None and (setup.engine != "tensorrt-llm" or adp < 2):
        raise InputError("--adp-balance is TensorRT-LLM's attention-DP balancing: give --engine tensorrt-llm and "
                         f"--attention-dp 2 or more (got {setup.engine}, attention-dp {adp})", field="adp_balance")
    if adp < 1 or tp % adp:
        raise InputError(f"attention data parallelism {adp} must divide the tensor-parallel GPUs ({tp}): each "
                         f"attention group takes tp / attention_dp of them", field="attention_dp")
    if adp > 1 and (pp > 1 or spec is not None):
        raise InputError("DP attention with pipeline parallelism or speculative decoding is not modelled; give "
                         "--attention-dp 1", field="attention_dp")
    if setup.precision == "fp4" and not setup.gpu.peak("fp4"):
        raise InputError(f"{setup.gpu.name} has no FP4 tensor cores (Blackwell and later)", field="precision")
    bf16_as_fp16 = setup.precision == "bf16" and setup.gpu.supports("bf16") is False
    if bf16_as_fp16:  # the engines' --dtype auto serves a BF16 checkpoint in FP16 where the GPU has no BF16
        setup = replace(setup, precision="fp16")
    kv_bytes = 1.0 if setup.kv_dtype == "fp8" or _sglang_fp8_dsa(setup, a) else 2.0
    if a.hybrid and (a.lin_k_heads % setup.attn_tp or a.lin_v_heads % setup.attn_tp):
        raise InputError(f"tensor parallelism {setup.attn_tp} does not divide the {a.lin_k_heads} key and "
                         f"{a.lin_v_heads} value heads of {model_id}'s linear-attention layers", field="tp")
    state_bytes = LINEAR_STATE_BYTES.get(setup.engine, 2.0)
    eng = get_engine(setup.engine)  # sglang: vLLM's kernel and launch profile with its own request overhead
    dev = Device(setup.gpu, load_params())
    cpu = eng.step_host_ms_infer * 1e-3
    graph_tokens = decode_graph_tokens(setup, eng)

    def layout(lo: int, hi: int, extra: int = 0) -> KvLayout:
        """Layers lo..hi-1 (and ``extra`` drafter layers of full attention)."""
        attn = a.attention_layers(lo, hi)
        return kv_layout(layers=attn + extra, kv_heads=a.kv_heads, head_dim=a.head_dim, kv_dtype_bytes=kv_bytes,
                         tp=setup.attn_tp, kv_lora_rank=a.kv_lora_rank, qk_rope_head_dim=a.qk_rope_dim,
                         state_layers=hi - lo - attn, state_bytes_layer=linear_state_bytes(a, setup.attn_tp, state_bytes),
                         index_bytes=a.index_dim + 4 if a.dsa else 0)

    step: StepModel | PipelineStepTime
    stages: tuple[tuple[float, KvLayout], ...] = ()
    notes: dict[str, str] = {}
    if a.dsa:
        notes["sparse_attention"] = (
            f"DeepSeek sparse attention: each query's MLA over the {a.index_topk:,} keys a lightning indexer picks "
            f"({a.index_heads} heads of {a.index_dim}, FP8, replicated on every GPU) scoring every earlier key; "
            f"its keys cached beside the latent ({a.index_dim + 4} bytes a token and layer)"
            + ("; SGLang's NSA default on Blackwell: an FP8 KV cache" if _sglang_fp8_dsa(setup, a) else "")
            + "; not calibrated: "
            "validate-serve scores this family apart, and the accuracy line's runs are of other models")
    if a.hybrid:
        notes["linear_attention"] = (
            f"{a.layers - a.attention_layers()} of {a.layers} layers are Gated DeltaNet linear attention: no KV cache, "
            f"a state of {linear_state_bytes(a, setup.attn_tp, state_bytes) / 2**20:.2f} MiB per request and layer per GPU "
            f"({'float32, SGLang --mamba-ssm-dtype' if state_bytes == 4 else '16-bit, the model dtype'}), read and "
            "written each step a request decodes or prefills in; prefill as the chunked delta rule's FLOPs (chunks of "
            "64 tokens); " + ("SGLang keeps the states in their own pool, 0.9 / 1.9 of the KV memory "
                              "(--mamba-full-memory-ratio 0.9), which caps the running requests"
                              if setup.engine == "sglang" else
                              "one block per request in each linear-attention group of the hybrid KV cache, the "
                              "attention blocks as large as a state (vLLM's page-size unification)")
            + "; not calibrated: validate-serve scores this family apart, and the accuracy line's runs are of other "
            "models")
    if pp > 1:
        last = pp - 1
        models = tuple(StepModel(a, dev, eng, setup.system, tp, ep, setup.precision, kv_bytes, first_layer=lo,
                                 last_layer=hi, lm_head=s == last, host=s == last, state_bytes=state_bytes,
                                 decode_graph_tokens=graph_tokens)
                       for s, (lo, hi) in enumerate(bounds))
        links = boundary_links(setup.system, tp, pp, dev.params)
        step = PipelineStepTime(models, links, a.hidden)
        stages = tuple((stage_weight_bytes(a, setup.precision, tp, ep, lo, hi, embedding=s == 0, head=s == last),
                        layout(lo, hi)) for s, (lo, hi) in enumerate(bounds))
        wb = max(w for w, _ in stages)
        kv = stages[0][1]
        sizes = sorted({hi - lo for lo, hi in bounds}, reverse=True)
        notes["pipeline"] = (f"pipeline parallel {pp}: stages of {' or '.join(map(str, sizes))} layers, {pp} virtual "
                             f"engines of max_num_seqs / {pp} and 1/{pp} of the KV blocks, a step = every stage's time "
                             f"+ {pp - 1} point-to-point send(s) of {P2P_TENSORS} x tokens x hidden 16-bit values over "
                             + ", ".join(sorted({link.text for link in links})))
    else:
        wb = weight_bytes(a, setup.precision, tp, ep, setup.attn_tp)
        kv = layout(0, a.layers)
        draft = None
        if spec is not None:
            draft, draft_w, draft_layers, drafter = _drafter(a, spec, setup, tp, dev, eng, kv_bytes, kv)
            wb += draft_w
            kv = layout(0, a.layers, draft_layers)
            notes["speculative"] = (spec.label + f"; the target verifies {spec.draft_len + 1} tokens per decoding "
                                    f"request per step, the drafter runs {spec.draft_len} sequential passes ({drafter}); "
                                    f"{spec.draft_len} lookahead KV slots per decoding request; drafter weights "
                                    f"{draft_w / 1e9:.2f} GB per GPU, its KV as {draft_layers} more layer(s)")
        step = StepModel(a, dev, eng, setup.system, tp, ep, setup.precision, kv_bytes, speculative=spec is not None,
                         draft=draft, attn_dp=adp, state_bytes=state_bytes, decode_graph_tokens=graph_tokens)
        if adp > 1:
            notes["attention_dp"] = (
                f"DP attention: {adp} attention groups of {setup.attn_tp} GPU(s), each with its own requests "
                f"(concurrency or rate / {adp}), scheduler and KV cache; attention weights held per group; the "
                f"{'experts' if a.experts else 'MLP'} over all {tp} GPUs on every group's tokens (the groups step in "
                f"lockstep with equal batches), tokens all-gathered before and reduce-scattered after each MLP"
                + (", attention output all-reduced within the group" if setup.attn_tp > 1 else ""))
    launch_s = max(m.eager_launch_s for m in (step.stages if isinstance(step, PipelineStepTime) else (step,)))
    ring_cap = ring_allreduce_cap(setup.system, setup.attn_tp)
    ring_text = (f" at most {ring_cap / 1e9:g} GB/s bus bandwidth, NCCL's LL128 ring on this fabric"
                 if math.isfinite(ring_cap) else "")
    ring_note = ""  # how the engine's tensor-parallel all-reduces run where NCCL's NVLS is left off
    if not eng.nvls and tp > 2 and nvls_speedup(setup.system, setup.attn_tp) > 1.0:
        ring_note = (f" ({eng.name} turns NCCL's NVLS off: ring all-reduces" + ring_text
                     + (f", but its own multicast all-reduce up to {eng.multimem_max_mb:g} MiB"
                        if eng.multimem_min_gpus and setup.attn_tp >= eng.multimem_min_gpus else "") + ")")
    elif not eng.nvls and ring_text and setup.attn_tp > 1:
        ring_note = f" (ring all-reduces{ring_text})"
    sm_frac = sglang_default_fraction(setup)
    return ServingModel(setup, model_id, a, step, wb, kv, cpu, {
        "weights": f"{setup.precision} matmul weights ({WEIGHT_BYTES[setup.precision]:g} bytes each), 16-bit "
                   f"embedding and LM head, {wb / 1e9:.1f} GB per GPU"
                   + (f"; {setup.gpu.name} has no BF16 (before compute capability 8.0): the engines serve a BF16 "
                      "checkpoint in FP16 (vLLM's --dtype auto falls back to float16), at the same 2 bytes a weight"
                      if bf16_as_fp16 else "")
                   + (f"; {setup.gpu.name} has no {setup.precision.upper()} tensor cores: weight-only, dequantised "
                      "to 16-bit math (as vLLM's Marlin kernels run FP8 on Ampere)"
                      if setup.precision in ("fp8", "int8") and not setup.gpu.peak(setup.precision) else "")
                   + (f"; dense FP4 GEMMs stream their weights at {dev.params.fp4_stream_efficiency:g} of the 8/16-bit "
                      "kernels' rate (perf/params.toml fp4_stream_efficiency: block-scaled tiles at a decode "
                      "batch's few rows)" if setup.precision == "fp4" else ""),
        "parallelism": f"tensor parallel {tp}" + (f", expert parallel {ep}" if ep > 1 else "")
                       + (f", attention data parallel {adp}" if adp > 1 else "")
                       + (f", pipeline parallel {pp}" if pp > 1 else "")
                       + (", all-reduce twice per layer over " + setup.system.name if tp > 1 and adp == 1 else "")
                       + ring_note
                       + (", tokens all-gathered and reduce-scattered around each MLP over " + setup.system.name
                          if adp > 1 else ""),
        "memory": f"{setup.gpu.usable_memory_text} = {setup.gpu.usable_memory_bytes / 2**30:.2f} GiB "
                  f"({setup.gpu.usable_memory_bytes / 1e9:.1f} GB) per GPU: the total cudaMemGetInfo reports, which "
                  "the engine's memory fraction multiplies"
                  + (f"; SGLang's default mem_fraction_static {sm_frac:g} (its rule: the total less 512 MiB, 1.5 x its "
                     "prefill chunk, 2 MiB per CUDA-graph batch size and 1 GiB per 8 GPUs, at least 10 GiB on large "
                     "GPUs) of the memory free before loading holds the weights and the KV pool; the activations "
                     "and graphs use the rest (--gpu-memory-utilization sets the fraction)"
                     if setup.engine == "sglang" else ""),
        "kv_cache": f"{'FP8' if kv_bytes == 1 else '16-bit'} KV cache, {kv.bytes_per_token} bytes per token per GPU"
                    + (f"; an NVIDIA ModelOpt {setup.precision.upper()} checkpoint declares an FP8 KV cache, which "
                       f"{KV_FP8_TAKEN_BY.get(setup.engine, setup.engine)} takes by default: --kv-dtype fp8 to model that"
                       if setup.kv_dtype == "auto" and kv_fp8_from_checkpoint(setup.engine, setup.precision) else
                       f"; {KV_FP8_TAKEN_BY[setup.engine]} takes an FP8 KV cache from an {setup.precision.upper()} "
                       "checkpoint only where it declares one (NVIDIA ModelOpt exports do; DeepSeek's, Qwen's and GLM's "
                       "own FP8 releases do not): --kv-dtype fp8 to model that"
                       if setup.kv_dtype == "auto" and setup.precision in ("fp8", "fp4")
                       and setup.engine in KV_FP8_TAKEN_BY else ""),
        "scheduler": ("TensorRT-LLM's GUARANTEED_NO_EVICT (its default): a request starts when the KV blocks of its "
                      "whole prompt and answer fit beside the running requests'; none is preempted, the rest queue"
                      + ("; no chunked prefill (its default): each prompt is prefilled whole in one step, within the "
                         "step's token budget" if setup.engine in UNCHUNKED_ENGINES else "")
                      if setup.engine in NO_EVICT_ENGINES else
                      ("SGLang's admission: a request starts while its prompt and answer (clipped at 4,096 tokens) fit "
                       "in the free KV tokens beside the running requests' remaining answers x new_token_ratio (0.7, "
                       "falling to 0.1 over 600 decode steps); when the blocks run out, the requests with the fewest "
                       "tokens generated are retracted to the back of the queue and recomputed later (the radix cache "
                       "keeping their prompts is not modelled)"
                       + ("; under speculative decoding the newest is preempted instead" if setup.spec else "")
                       if setup.engine in RETRACTING_ENGINES else
                       "requests start when their next chunk's KV blocks fit; when the blocks run out the newest is "
                       "preempted and recomputed later"))
                     + ("; a step prefills (pending chunks, then new requests) or decodes, never both: SGLang's "
                        "prefill-first default (no --enable-mixed-chunk), the decoding requests wait out each prefill"
                        if setup.prefill_first else "; SGLang --enable-mixed-chunk: prefill steps carry the decode"
                        if setup.engine in PREFILL_FIRST_ENGINES else "")
                     + (f"; attention-DP balancing (attention_dp_config enable_balance, timeout_iters "
                        f"{setup.adp_balance[0]}, batching_wait_iters {setup.adp_balance[1]}): a group admits new "
                        f"requests only once all {adp} groups have some waiting ({setup.adp_balance[1]} steps later "
                        f"while all decode), or when a counter of steps reaches {setup.adp_balance[0]}; the other "
                        "groups simulated as independent copies of this one (their requests arriving at its rate)"
                        if setup.adp_balance else
                        "; no attention-DP balancing (TensorRT-LLM's default: --adp-balance to model it)"
                        if setup.engine == "tensorrt-llm" and adp > 1 else ""),
        "engine": f"{setup.engine}: " + ("CUDA-graph launches" if eng.graphs else f"{eng.host_op_us:g} us per kernel launch")
                  + f", {cpu * 1e3:g} ms host time per step"
                  + (f" and {eng.step_host_us_per_seq:g} us per running request" if eng.step_host_us_per_seq else "")
                  + (f", GEMM weights read at {eng.weight_stream_efficiency:g} of the memory roofline"
                     if eng.weight_stream_efficiency < 1 else "")
                  + (f", MoE expert GEMMs at {eng.moe_efficiency:g} of the GEMM roofline"
                     if a.experts and eng.moe_efficiency < 1 else "")
                  + (f", {eng.moe_layer_us:g} us per MoE layer per step for routing and expert dispatch"
                     if a.experts and eng.moe_layer_us else "")
                  + (f", MoE expert GEMMs' math at {eng.moe_compute_efficiency:g} of a dense GEMM's rate"
                     if a.experts and eng.moe_compute_efficiency < 1 else "")
                  + (f", {eng.request_overhead_ms:g} ms per request before the scheduler sees it (front end, "
                     "tokenisation, hand-off; counted in TTFT)" if eng.request_overhead_ms else "")
                  + ((f"; steps with prefill over {eng.prefill_graph_tokens:g} tokens" if eng.prefill_graph_tokens
                      else "; prefill steps")
                     + (f" and decode steps over {graph_tokens:g} tokens" if math.isfinite(graph_tokens) else "")
                     + " run outside CUDA graphs: at least "
                     f"{eng.eager_kernel_host_us:g} us of host time per kernel launched, "
                     f"{launch_s * 1e3:.1f} ms a step" + (" per stage" if pp > 1 else "") + " for this model"
                     if eng.eager_kernel_host_us else "")
                  + (" (SGLang timed with vLLM's kernel profile)" if setup.engine == "sglang" else ""),
        "moe": "uniform routing: the experts a step reads are those its tokens reach" if a.experts else "dense",
        **notes,
    }, stages)


def _drafter(a: DecoderArgs, spec: SpecDecode, setup: Setup, tp: int, dev: Device, eng: Engine, kv_bytes: float,
             kv: KvLayout) -> tuple[StepModel | None, float, int, str]:
    """(the draft model's step model or None for a draft head, its weight bytes per GPU, its KV as
    layers of the target's, words)."""
    if spec.draft_model is None:  # one decoder layer of the target's shape (its last); the target's LM head
        w = _layer_weight_bytes(a, a.layers - 1, WEIGHT_BYTES[setup.precision], tp, setup.ep)
        return None, w, 1, "one decoder layer + the target's LM head each"
    try:
        draft_id, d, _ = planner_model(spec.draft_model)
    except InputError as e:
        raise InputError(f"draft model: {e}", field="spec_draft_model") from e
    if d.vocab != a.vocab:
        raise InputError(f"draft model {draft_id} has a vocabulary of {d.vocab} tokens, the target {a.vocab}: "
                         "they must share the tokenizer", field="spec_draft_model")
    if d.heads % tp or (d.kv_heads % tp and tp % d.kv_heads):
        raise InputError(f"tensor parallelism {tp} does not divide the attention heads of draft model {draft_id}",
                         field="spec_draft_model")
    dkv = kv_layout(layers=d.layers, kv_heads=d.kv_heads, head_dim=d.head_dim, kv_dtype_bytes=kv_bytes, tp=tp,
                    kv_lora_rank=d.kv_lora_rank, qk_rope_head_dim=d.qk_rope_dim)
    model = StepModel(d, dev, eng, setup.system, tp, 1, setup.precision, kv_bytes, host=False)
    layers = -(-dkv.bytes_per_token // kv.bytes_per_token_layer)
    return model, weight_bytes(d, setup.precision, tp, 1), layers, f"{draft_id}'s full forward pass each"
