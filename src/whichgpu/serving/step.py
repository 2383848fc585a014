"""Seconds of one serving-engine step, from the kernel model. Torch-free.

A continuous-batching step runs one forward pass over T tokens: the prefill chunks' tokens plus one
per decoding request (`batch.StepBatch`). On one tensor-parallel rank, per decoder layer:

* GEMMs over the T tokens (QKV or MLA's projections, attention output, MLP or the router, the
  experts and the shared experts), timed by `perf.estimate.op_cost` (tiling, waves, the matmul
  ceiling; weights are read once per step, so a small decode batch is bound by weight bytes).
  Weight precisions: bf16/fp16, fp8 (FP8 GEMMs), int8 (W8A8), fp4 (Blackwell FP4 GEMMs, NVFP4:
  4 bits + an FP8 scale per 16 values), int4 (weight-only, dequantised in the GEMM: 16-bit math on
  4-bit weights).
* MoE layers read the weights of the experts the step's tokens reach: under uniform routing a
  rank's E_local experts are each missed by all T x k picks with probability (1 - k/E)^T, so
  E_local (1 - (1 - k/E)^T) of them are read. Expert GEMMs split the intermediate size over tensor
  parallelism, or the experts over expert parallelism.
* Attention: each prefill chunk attends to its cached context and itself (flash kernel FLOPs of
  its query x key pairs); each decoding request reads its whole KV cache once (memory-bound,
  grouped query heads share the read; MLA reads one latent per token), or its FLOPs where more.
* Fused elementwise kernels (add + norm, rotary, the MLP activation) as memory passes; two
  all-reduces of the T x hidden activations per layer under tensor parallelism.
* The engine's MoE kernels: the grouped expert GEMMs reach `moe_efficiency` of the GEMM roofline,
  and each MoE layer costs `moe_layer_us` of fixed GPU time per step whatever its tokens (engine
  profile: vLLM's fused-MoE path, which SGLang shares here, runs top-k routing, sorts the tokens by
  expert into padded blocks and launches its grouped GEMMs and the reduction as separate small
  kernels; a latency a small decode batch pays in full and a large one hides).
* The engine's GEMM kernels read weights at `weight_stream_efficiency` of the memory roofline
  (engine profile; 1: TensorRT-LLM's, which the dev rows' small-batch decode steps match): the
  weight bytes are counted 1 / that, so memory-bound (decode) GEMMs slow and compute-bound
  (prefill) ones do not. Dense FP4 GEMMs stream theirs at `fp4_stream_efficiency` (perf/params.toml)
  of that rate again: block-scaled FP4 tiles built for many rows, their scales and the
  activations' FP4 quantisation, at a decode batch's few rows. MoE expert GEMMs keep the engine's
  figures (their own grouped kernels).
* Host time per running sequence (`step_host_us_per_seq`, engine profile): the Python scheduler's,
  sampler's and output processor's work for each request of the step, on the step's critical path.
* The LM head on the sampled tokens only (one per decoding request and per prompt whose last
  chunk runs), with the final norm; each kernel pays the CUDA-graph replay cost (vLLM and SGLang
  capture decode batches; TensorRT-LLM runs its engine's graph).
* Steps the engine does not replay from a CUDA graph (vLLM: those with prefill tokens over its
  largest capture size, 512 tokens; SGLang and TensorRT-LLM's PyTorch backend: every step with
  prefill tokens) have the host launch each kernel:
  such a step takes at least the engine's ``eager_kernel_host_us`` per kernel of its layers
  (`eager_launch_s`), the GPU waiting for the launches when they take longer than its work (a
  short prefill on a fast GPU). Decode steps replay graphs and do not pay it.

Decode attention is linear in the summed context (its bytes and FLOPs both are), and everything
else depends on the token count only: a run of decode steps with a fixed batch is one evaluation
plus a slope (`decode_run`), exactly what calling the step on each batch gives.

Pipeline stages: a model may time layers ``first_layer .. last_layer - 1`` only, with or without
the LM head and the host time per sequence (`pipeline.PipelineStepTime` sums the stages).

Speculative decoding (`spec.py`), when the batch carries draft tokens: each decode request runs
1 + d query tokens (d its drafts) through the GEMMs and the LM head (logits for every verified
position); its attention reads its KV once with FLOPs x (1 + d). With ``speculative`` the drafter
runs d sequential passes over the decoding requests: a draft model's whole forward (its GEMMs, LM
head and KV reads) or, with no draft model, a one-layer head (EAGLE, DeepSeek MTP: one decoder
layer of the target's shape, its attention over the context, and the target's LM head); and one
pass over the step's prompt chunks. Approximations: every draft pass reads the context as at the
step's start, and a pass runs one token per request (EAGLE's first pass over the accepted tokens
is counted as one). The run of such steps is linear in the summed context too
(`spec_decode_run`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from whichgpu.hardware.engine import Engine
from whichgpu.hardware.system import System
from whichgpu.parallel.comm import collective_time
from whichgpu.perf.device import Device
from whichgpu.perf.estimate import op_cost
from whichgpu.serving.batch import StepBatch
from whichgpu.workload.trace import Op
from whichgpu.workload.zoo.llm.args import DecoderArgs, layer_kinds

# Bytes of one weight and the GEMM path, per serving precision.
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "fp4": 0.5 + 1.0 / 16, "int4": 0.5 + 2.0 / 128}
GEMM_PATH = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "int8", "fp4": "fp4", "int4": "bf16"}
PRECISIONS = tuple(WEIGHT_BYTES)
ACT_BYTES = 2.0  # 16-bit activations


def linear_state_bytes(a: DecoderArgs, attn_tp: int, value_bytes: float) -> int:
    """One request's state in one linear-attention layer on one GPU: a dk x dv matrix per value
    head (``value_bytes`` each) and the convolution's last width - 1 positions of q, k and v
    (16-bit); 0 for a model without such layers."""
    if not a.hybrid:
        return 0
    hv = a.lin_v_heads // attn_tp
    return int(hv * a.lin_k_dim * a.lin_v_dim * value_bytes + a.lin_conv_dim // attn_tp * (a.lin_conv - 1) * ACT_BYTES)


def sparse_pairs(batch: StepBatch, topk: int) -> float:
    """Query x key pairs of the prefill chunks under DeepSeek sparse attention: the query at
    position q (1-based) attends to min(q, topk) keys."""
    total = 0
    for t, c in zip(batch.prefill_tokens.tolist(), batch.prefill_context.tolist()):
        lo, hi = c - t + 1, c  # the chunk's query positions
        if hi <= topk:
            total += (lo + hi) * t // 2
        elif lo > topk:
            total += topk * t
        else:
            total += (lo + topk) * (topk - lo + 1) // 2 + topk * (hi - topk)
    return float(total)


def capped_sums(context: np.ndarray, steps: int, cap: int) -> np.ndarray:
    """For j in 0..steps-1: the sum over requests of min(context + j, cap) (decode contexts one
    token longer each step), in O((requests + steps) log requests)."""
    c = np.sort(np.asarray(context, dtype=np.int64))
    prefix = np.concatenate(([0], np.cumsum(c)))
    j = np.arange(steps, dtype=np.int64)
    below = np.searchsorted(c, cap - j, side="left")  # requests with context + j < cap
    out: np.ndarray = (prefix[below] + below * j + (c.size - below) * cap).astype(np.float64)
    return out


@dataclass
class StepModel:
    """The step-time function of one serving setup (`batch.DecodeRunStepTime`)."""

    args: DecoderArgs
    device: Device
    engine: Engine
    system: System
    tp: int = 1
    ep: int = 1
    precision: str = "bf16"
    kv_bytes: float = 2.0  # bytes of one cached K or V value (FP8 KV cache: 1)
    first_layer: int = 0
    """The decoder layers this model times: first_layer .. last_layer - 1 (a pipeline stage's)."""
    last_layer: int | None = None
    """Exclusive end of the layers timed; None: every layer."""
    lm_head: bool = True
    """Whether the final norm and LM head run here (a pipeline's last stage)."""
    host: bool = True
    """Whether the engine's host time per running sequence is charged here (once per pipeline)."""
    speculative: bool = False
    """Decode requests carrying draft tokens also pay the drafter's passes (`spec.py`)."""
    draft: StepModel | None = None
    """The draft model's step model (speculative, with a draft model); None: a one-layer draft head."""
    attn_dp: int = 1
    """Attention data parallelism (DP attention): the ``tp`` GPUs form ``attn_dp`` groups of tp / attn_dp
    that each run attention for their own requests; this model times one group's step, its MLP or
    experts over every group's tokens (the groups step in lockstep with equal batches)."""
    state_bytes: float = 2.0
    """Bytes of one value of a linear-attention layer's recurrent state (vLLM: the model's dtype;
    SGLang: float32, its ``--mamba-ssm-dtype`` default)."""
    decode_graph_tokens: float = math.inf
    """The largest decode-only step, in tokens, the engine replays from a CUDA graph (vLLM: its
    largest capture size, 512 with its defaults; SGLang: its ``cuda_graph_max_bs``); a larger one
    runs without graphs and takes at least `eager_launch_s`."""
    # memo tables (init=False: a copy made with dataclasses.replace starts with empty ones)
    _fixed: dict[tuple[int, int], float] = field(default_factory=dict, init=False, repr=False)
    _layers: dict[int, float] = field(default_factory=dict, init=False, repr=False)
    _heads: dict[int, float] = field(default_factory=dict, init=False, repr=False)
    _rates: tuple[float, float] | None = field(default=None, init=False, repr=False)
    _head_passes: dict[tuple[int, int], float] = field(default_factory=dict, init=False, repr=False)
    _parts: tuple[float, float, float] | None = field(default=None, init=False, repr=False)
    _prefill_attn: dict[tuple[float, int, int, int, float, float], float] = field(default_factory=dict, init=False,
                                                                                  repr=False)
    _eager: float | None = field(default=None, init=False, repr=False)

    # ---- the parts ----------------------------------------------------------------------
    @property
    def attn_tp(self) -> int:
        """GPUs one attention group splits its heads over: tp, or tp / attn_dp under DP attention."""
        return max(1, self.tp // self.attn_dp)

    @property
    def _launch_s(self) -> float:
        """GPU-side cost of one kernel: a CUDA-graph replay where the engine captures graphs."""
        p = self.device.params
        return (p.graph_kernel_us if self.engine.graphs else p.kernel_latency_us) * 1e-6

    def _cost(self, ops: list[Op]) -> float:
        lat = self._launch_s
        moe = self.engine.moe_efficiency
        return sum(op_cost(o, self.device, "max", lat, engine=self.engine, system=self.system)[0] * o.count
                   / (moe if "experts" in o.tags else 1.0) for o in ops)

    @property
    def _moe_layer_s(self) -> float:
        """Fixed GPU time of one MoE layer per step: routing and dispatch kernels (engine profile)."""
        return self.engine.moe_layer_us * 1e-6

    @property
    def _host_per_seq_s(self) -> float:
        return self.engine.step_host_us_per_seq * 1e-6 if self.host else 0.0

    @property
    def layer_span(self) -> tuple[int, int]:
        """(first, end) of the decoder layers timed here."""
        return self.first_layer, self.args.layers if self.last_layer is None else self.last_layer

    def _gemm(self, name: str, m: int, n: int, k: int, experts: float | None = None, rows_per: int | None = None) -> Op:
        """A forward GEMM (m x k) @ (k x n); with `experts`, a grouped GEMM over that many expert
        weight matrices (tagged "experts": timed at the engine's moe_efficiency, their math at its
        moe_compute_efficiency of a dense GEMM's rate)."""
        p = self.precision
        w = WEIGHT_BYTES[p]
        f = 2.0 * m * n * k
        path = GEMM_PATH[p]
        if p in ("fp8", "int8") and not self.device.spec.peak(p):
            path = "bf16"  # no such tensor cores (FP8 before Hopper): weight-only, dequantised to 16-bit math
        tags = (("wq",) if p == "int4" or path != GEMM_PATH[p] else ()) + (("experts",) if experts is not None else ())
        if experts is not None:  # grouped expert GEMMs run below a dense GEMM's math rate: timed as more math
            f /= self.engine.moe_compute_efficiency
        elif p == "fp4":  # dense NVFP4 GEMMs stream their weights below the 8/16-bit kernels' rate
            w /= self.device.params.fp4_stream_efficiency
        experts = 1.0 if experts is None else experts
        b = max(1, round(experts))
        mm = (b, max(1, rows_per if rows_per is not None else m), n, k)
        w /= self.engine.weight_stream_efficiency  # the engine's kernels stream weights below the roofline
        return Op(name, "matmul", "forward", "layer", path, f, m * k * ACT_BYTES + experts * k * n * w,
                  m * n * ACT_BYTES, mm=mm, tags=tags)

    def _layer_ops(self, layer: int, tokens: int) -> list[Op]:
        """One layer's GEMMs and elementwise kernels for `tokens` tokens on one rank."""
        a, t, T = self.args, self.tp, max(1, tokens)
        h = a.hidden
        heads = max(1, a.heads // self.attn_tp)
        ops: list[Op] = []
        linear = a.is_linear(layer)
        if linear:
            ops += self._linear_ops(T)
        elif a.mla:
            if a.q_lora_rank:
                ops += [self._gemm("q_a", T, a.q_lora_rank, h), self._gemm("q_b", T, heads * a.qk_dim, a.q_lora_rank)]
            else:
                ops.append(self._gemm("q", T, heads * a.qk_dim, h))
            ops.append(self._gemm("kv_a", T, a.kv_lora_rank + a.qk_rope_dim, h))
            ops.append(self._gemm("kv_b", T, heads * (a.qk_nope_dim + a.v_dim), a.kv_lora_rank))
            if a.dsa:  # the lightning indexer, replicated on every GPU: its query, key and head weights,
                # the rotary and FP8 quantisation of its query and key (the key stored in its cache),
                # and the top-k selection of each token's keys
                ops += [self._gemm("index.q", T, a.index_heads * a.index_dim, a.q_lora_rank),
                        self._gemm("index.k", T, a.index_dim + a.index_heads, h),
                        Op("index.rope_quant", "pointwise", "forward", "layer", "bf16", 0.0,
                           T * (a.index_heads + 1) * a.index_dim * ACT_BYTES, T * (a.index_heads + 1) * a.index_dim),
                        Op("index.topk", "reduction", "forward", "layer", "bf16", 0.0, T * a.index_topk * 4.0,
                           T * a.index_topk * 4.0)]
        else:
            kv = max(1, a.kv_heads // self.attn_tp)
            q = heads * (2 if a.attn_gate else 1)  # a gated output: q_proj also gives the gate
            ops.append(self._gemm("qkv", T, (q + 2 * kv) * a.head_dim, h))
        if not linear:
            ops.append(self._gemm("o", T, h, heads * a.v_dim))
        attn_heads = heads
        T = T * self.attn_dp  # DP attention: the MLP or experts run over every group's tokens
        gated = a.mlp_matrices == 3
        if a.is_moe(layer):
            k, e = a.experts_per_token, a.experts
            local = max(1, e // self.ep)
            i = a.expert_intermediate if self.ep > 1 else max(1, a.expert_intermediate // t)
            rows = max(1, T * k // self.ep) if self.ep > 1 else T * k
            reached = local * (1.0 - (1.0 - k / e) ** T)  # experts of this rank the T x k picks reach
            per = max(1, -(-rows // max(1, round(reached))))
            ops.append(Op("router", "matmul", "forward", "layer", "bf16", 2.0 * T * e * h,
                          T * h * ACT_BYTES + e * h * ACT_BYTES, T * e * 4.0, mm=(1, T, e, h)))
            ops.append(self._gemm("experts.up", rows, 2 * i, h, experts=reached, rows_per=per))
            ops.append(self._gemm("experts.down", rows, h, i, experts=reached, rows_per=per))
            ops.append(Op("experts.act", "pointwise", "forward", "layer", "bf16", 0.0, rows * 2 * i * ACT_BYTES,
                          rows * i * ACT_BYTES))
            ops.append(Op("permute", "copy", "forward", "layer", "bf16", 0.0, 2 * rows * h * ACT_BYTES,
                          2 * rows * h * ACT_BYTES))
            if a.shared_experts:
                si = max(1, a.expert_intermediate * a.shared_experts // t)
                ops += [self._gemm("shared.up", T, 2 * si, h), self._gemm("shared.down", T, h, si)]
        else:
            i = max(1, a.intermediate // t)
            ops += [self._gemm("mlp.up", T, (2 if gated else 1) * i, h), self._gemm("mlp.down", T, h, i)]
            ops.append(Op("mlp.act", "pointwise", "forward", "layer", "bf16", 0.0,
                          T * (2 if gated else 1) * i * ACT_BYTES, T * i * ACT_BYTES))
        # fused add + norm twice (on the group's own tokens), rotary on q and k
        rt = max(1, tokens)
        ops.append(Op("add_norm", "norm", "forward", "layer", "bf16", 0.0, 4 * rt * h * ACT_BYTES, 4 * rt * h * ACT_BYTES))
        if not linear:
            ops.append(Op("rotary", "pointwise", "forward", "layer", "bf16", 0.0,
                          2 * rt * attn_heads * a.qk_dim * ACT_BYTES, 2 * rt * attn_heads * a.qk_dim * ACT_BYTES))
        return ops

    def _linear_ops(self, tokens: int) -> list[Op]:
        """A Gated DeltaNet layer's kernels for `tokens` tokens on one rank (heads split over the
        attention group): the q/k/v/gate and beta/decay projections, the causal convolution, the
        chunked delta rule (Yang et al. 2024: per chunk of C = 64 tokens, the chunk's own q k^T,
        k k^T and WY products, and its exchange with the dk x dv state, in FLOPs per token and
        head 2C(3dk + 2dv) + 6 dk dv; the chunk states written and read), the gated norm and the
        output projection. The per-request state a decode step reads is `_state_s`."""
        a, ta, T = self.args, self.attn_tp, tokens
        hk, hv = max(1, a.lin_k_heads // ta), max(1, a.lin_v_heads // ta)
        kd, vd, h = a.lin_k_dim, a.lin_v_dim, a.hidden
        conv = 2 * hk * kd + hv * vd
        chunk = 64.0
        flops = T * hv * (2 * chunk * (3 * kd + 2 * vd) + 6 * kd * vd)
        states = T / chunk * hv * kd * vd * self.state_bytes  # each chunk's state, written then read
        return [self._gemm("lin.in", T, conv + hv * vd + 2 * hv, h),
                Op("lin.conv", "pointwise", "forward", "layer", "bf16", 0.0, T * conv * ACT_BYTES, T * conv * ACT_BYTES),
                Op("lin.delta_rule", "attention", "forward", "layer", "bf16", flops,
                   T * (conv + 2 * hv) * ACT_BYTES + states, T * hv * vd * ACT_BYTES + states,
                   mm=(hv, max(1, T), int(chunk), kd)),
                Op("lin.gated_norm", "norm", "forward", "layer", "bf16", 0.0, 2 * T * hv * vd * ACT_BYTES,
                   T * hv * vd * ACT_BYTES),
                self._gemm("lin.out", T, h, hv * vd)]

    @cached_property
    def _attn_layers(self) -> int:
        """Layers of the span that attend over a KV cache (linear-attention ones do not)."""
        lo, hi = self.layer_span
        return self.args.attention_layers(lo, hi)

    @cached_property
    def _state_s(self) -> float:
        """One request's pass over its linear-attention state in every such layer of the span: the
        dk x dv state per value head (`state_bytes` a value) and the convolution's last positions,
        read and written once per step it decodes or prefills a chunk in."""
        lo, hi = self.layer_span
        n = (hi - lo) - self._attn_layers
        dev = self.device
        return n * 2 * linear_state_bytes(self.args, self.attn_tp, self.state_bytes) / (dev.bw * dev.mem_ceiling)

    def fixed_s(self, tokens: int, sampled: int) -> float:
        """Everything of a step but attention: GEMMs, elementwise, all-reduces, LM head."""
        key = (tokens, sampled)
        got = self._fixed.get(key)
        if got is not None:
            return got
        total = self._layers.get(tokens)
        if total is None:  # the layers depend on the tokens only, the LM head on the rows sampled
            a = self.args
            lo, hi = self.layer_span
            total = sum(n * (self._cost(self._layer_ops(layer, tokens)) + (self._moe_layer_s if a.is_moe(layer) else 0.0))
                        for layer, n in layer_kinds(a, lo, hi))
            total += (hi - lo) * self._layer_comm_s(tokens)
            self._layers[tokens] = total
        if self.lm_head:
            head = self._heads.get(sampled)
            if head is None:
                head = self._heads[sampled] = self._cost([self._lm_head_op(sampled)])
            total += head
        self._fixed[key] = total
        return total

    def _all_reduce_s(self, tokens: int) -> float:
        nbytes = max(1, tokens) * self.args.hidden * ACT_BYTES
        return collective_time("all_reduce", nbytes, self.tp, self.system, self.device.params,
                               nvls=self.engine.nvls_for(self.tp, nbytes))

    def _layer_comm_s(self, tokens: int) -> float:
        """One layer's collectives: two all-reduces over tensor parallelism; under DP attention an
        all-reduce of the attention output within the group (tp / attn_dp > 1), then the groups'
        tokens all-gathered over the tp GPUs before the MLP or experts and reduce-scattered after."""
        if self.tp <= 1:
            return 0.0
        if self.attn_dp <= 1:
            return 2 * self._all_reduce_s(tokens)
        shard = max(1, tokens) * self.args.hidden * ACT_BYTES
        p = self.device.params
        group = (collective_time("all_reduce", shard, self.attn_tp, self.system, p,
                                 nvls=self.engine.nvls_for(self.attn_tp, shard)) if self.attn_tp > 1 else 0.0)
        return group + 2 * collective_time("all_gather", shard, self.tp, self.system, p)

    def _lm_head_op(self, sampled: int) -> Op:
        a = self.args
        s = max(1, sampled) * self.attn_dp  # DP attention: every group's sampled rows, vocabulary over tp
        vocab = -(-a.vocab // self.tp)
        return Op("lm_head", "matmul", "forward", "head", "bf16", 2.0 * s * vocab * a.hidden,
                  s * a.hidden * ACT_BYTES + vocab * a.hidden * ACT_BYTES, s * vocab * 4.0, mm=(1, s, vocab, a.hidden))

    def _decode_rates(self) -> tuple[float, float]:
        """(seconds per cached position read by decode attention over all layers, per-step
        latency of the attention kernels). DSA: the indexer's pass over every cached key; its
        attention over at most index_topk of them is `_sparse_rate`."""
        if self._rates is not None:
            return self._rates
        mem, comp, lat = self._indexer_parts() if self.args.dsa else self._attention_parts()
        attn_layers = self._attn_layers
        self._rates = (attn_layers * max(mem, comp), attn_layers * lat * (2 if self.args.dsa else 1))
        return self._rates

    @cached_property
    def _sparse_rate(self) -> float:
        """DSA: seconds per key its attention reads (at most index_topk per request), over all
        layers; 0 for dense attention."""
        if not self.args.dsa:
            return 0.0
        mem, comp, _ = self._attention_parts()
        return self._attn_layers * max(mem, comp)

    def _indexer_parts(self) -> tuple[float, float, float]:
        """DSA's lightning indexer in one layer, per cached key: (memory seconds: its FP8 key and
        scale, compute seconds: index_heads dot products of index_dim in FP8) and its latency."""
        a, dev = self.args, self.device
        rate = dev.rate("fp8" if dev.spec.peak("fp8") else "bf16")
        return ((a.index_dim + 4) / (dev.bw * dev.mem_ceiling),
                2.0 * a.index_heads * a.index_dim / (rate.flops * rate.ceiling), self._launch_s)

    def _sparse_keys(self, context: np.ndarray) -> float:
        """Keys DSA's attention reads for decode requests of these contexts: min(context, topk) each."""
        return float(np.minimum(context, self.args.index_topk).sum()) if self.args.dsa else 0.0

    def _attention_parts(self) -> tuple[float, float, float]:
        """Decode attention of one layer: (memory seconds, compute seconds for one query token) per
        cached position, and the kernel's latency."""
        if self._parts is not None:
            return self._parts
        a, t = self.args, self.attn_tp
        dev = self.device
        heads = max(1, a.heads // t)
        if a.mla:
            kv_per_pos = (a.kv_lora_rank + a.qk_rope_dim) * self.kv_bytes
            flops_per_pos = 2.0 * heads * (a.kv_lora_rank + a.qk_rope_dim) + 2.0 * heads * a.kv_lora_rank
        else:
            kv = max(1, a.kv_heads // t)
            kv_per_pos = 2 * kv * a.head_dim * self.kv_bytes
            flops_per_pos = 4.0 * heads * a.head_dim
        bw = dev.bw * dev.mem_ceiling
        rate = dev.rate("bf16")
        self._parts = (kv_per_pos / bw, flops_per_pos / (rate.flops * rate.ceiling), self._launch_s)
        return self._parts

    def _prefill_attention_s(self, batch: StepBatch) -> float:
        if batch.prefill_tokens.size == 0:
            return 0.0
        pairs = float(batch.prefill_attention_pairs)
        tokens = batch.num_prefill_tokens
        ctx = batch.prefill_context_max
        chunks = int(batch.prefill_tokens.size)
        ctx_sum = float(batch.prefill_context_sum)
        sparse = sparse_pairs(batch, self.args.index_topk) if self.args.dsa else 0.0
        key = (pairs, tokens, ctx, chunks, ctx_sum, sparse)  # all the op depends on: fixed lengths repeat them
        got = self._prefill_attn.get(key)
        if got is None:
            if len(self._prefill_attn) >= 65_536:  # sampled lengths rarely repeat: bound the memory
                self._prefill_attn.clear()
            got = self._prefill_attn[key] = self._prefill_attention_cost(pairs, tokens, ctx, chunks, ctx_sum, sparse)
        return got

    def _prefill_attention_cost(self, pairs: float, tokens: int, ctx: int, chunks: int, ctx_sum: float,
                                sparse_pairs: float = 0.0) -> float:
        a, t = self.args, self.attn_tp
        heads = max(1, a.heads // t)
        if a.dsa:  # the indexer scores every causal pair; MLA runs on the topk picked, in the latent
            idx = Op("index.prefill", "attention", "forward", "layer", "fp8" if self.device.spec.peak("fp8") else "bf16",
                     2.0 * pairs * a.index_heads * a.index_dim, tokens * a.index_heads * a.index_dim + ctx_sum * a.index_dim,
                     tokens * a.index_topk * 4.0, mm=(chunks, max(1, tokens // chunks) * a.index_heads, max(1, ctx),
                                                     a.index_dim))
            latent = a.kv_lora_rank + a.qk_rope_dim
            o = Op("attention.sparse", "attention", "forward", "layer", "bf16",
                   2.0 * sparse_pairs * heads * (latent + a.kv_lora_rank),
                   tokens * heads * latent * ACT_BYTES + sparse_pairs * latent * self.kv_bytes / max(1, heads),
                   tokens * heads * a.kv_lora_rank * ACT_BYTES,
                   mm=(chunks, max(1, tokens // chunks) * heads, min(max(1, ctx), a.index_topk), latent))
            return self._attn_layers * self._cost([idx, o])
        flops = 2.0 * pairs * heads * (a.qk_dim + a.v_dim)
        kv = heads if a.mla else max(1, a.kv_heads // t)
        mm = (chunks * kv, max(1, tokens // chunks) * max(1, heads // kv), max(1, ctx), a.qk_dim)
        o = Op("attention.prefill", "attention", "forward", "layer", "bf16", flops,
               tokens * heads * a.qk_dim * ACT_BYTES + ctx_sum * kv * a.qk_dim * 2 * ACT_BYTES,
               tokens * heads * a.v_dim * ACT_BYTES, mm=mm)
        return self._attn_layers * self._cost([o])

    @property
    def eager_launch_s(self) -> float:
        """Host time to launch one step's kernels outside CUDA graphs (the engine's
        ``eager_kernel_host_us`` per kernel: each layer's GEMMs and elementwise kernels as
        `_layer_ops` lists them, its attention and its collectives); 0 without such a cost."""
        if self._eager is None:
            us = self.engine.eager_kernel_host_us
            comm = 0 if self.tp <= 1 else 2 if self.attn_dp <= 1 else 2 + (self.attn_tp > 1)
            lo, hi = self.layer_span
            kernels = sum(n * (sum(o.count for o in self._layer_ops(layer, 1)) + 1 + comm)
                          for layer, n in layer_kinds(self.args, lo, hi))
            self._eager = kernels * us * 1e-6
        return self._eager

    def _graphed(self, batch: StepBatch) -> bool:
        """Whether the engine replays the step from a CUDA graph: a decode-only step of at most
        `decode_graph_tokens` tokens, or one with prefill tokens of at most ``prefill_graph_tokens``
        tokens (vLLM's capture sizes; SGLang and TensorRT-LLM's PyTorch backend never capture prefill)."""
        if not batch.prefill_tokens.size:
            return batch.num_tokens <= self.decode_graph_tokens
        return batch.num_tokens <= self.engine.prefill_graph_tokens

    def _eager_floor(self, times: np.ndarray, tokens: int) -> np.ndarray:
        """A run of decode steps of ``tokens`` tokens each: those over `decode_graph_tokens` run
        without graphs and take at least `eager_launch_s` each."""
        if tokens > self.decode_graph_tokens and self.engine.eager_kernel_host_us:
            out: np.ndarray = np.maximum(times, self.eager_launch_s)
            return out
        return times

    # ---- the protocol -------------------------------------------------------------------
    def __call__(self, batch: StepBatch) -> float:
        t = self._step_s(batch)
        if self.engine.eager_kernel_host_us and not self._graphed(batch):
            return max(t, self.eager_launch_s)  # the GPU waits for the host's launches
        return t

    def _step_s(self, batch: StepBatch) -> float:
        if batch.decode_drafts is not None:
            return self._spec_step(batch, batch.decode_drafts)
        sampled = batch.num_decode + int(batch.prefill_tokens.size)
        per_pos, lat = self._decode_rates()
        dec = per_pos * batch.decode_context_sum + (lat if batch.num_decode else 0.0)
        if self.args.dsa and batch.num_decode:
            dec += self._sparse_rate * self._sparse_keys(batch.decode_context)
        return (self.fixed_s(batch.num_tokens, sampled) + dec + self._prefill_attention_s(batch)
                + (self._host_per_seq_s + self._state_s) * sampled)

    def decode_run(self, decode_context: np.ndarray, steps: int) -> np.ndarray:
        n = int(decode_context.size)
        per_pos, lat = self._decode_rates()
        base = self.fixed_s(n, n) + (lat if n else 0.0) + (self._host_per_seq_s + self._state_s) * n
        s0 = float(decode_context.sum())
        j = np.arange(steps, dtype=np.float64)
        times = base + per_pos * (s0 + n * j)
        if self.args.dsa and n:
            times += self._sparse_rate * capped_sums(decode_context, steps, self.args.index_topk)
        return self._eager_floor(times, n)

    # ---- speculative decoding ---------------------------------------------------------------
    def _spec_step(self, batch: StepBatch, drafts: np.ndarray) -> float:
        """A step whose decode requests verify 1 + drafts tokens each (GEMMs and the LM head over
        all of them; decode attention reads each request's KV once, its FLOPs x (1 + drafts)),
        plus the drafter's passes when `speculative`."""
        ctx = batch.decode_context
        q = 1 + drafts  # query tokens per decode request
        verified = int(q.sum())
        chunks = int(batch.prefill_tokens.size)
        mem, comp, lat = self._attention_parts()
        attn = self._attn_layers * (float((ctx * np.maximum(mem, comp * q)).sum()) + lat) if ctx.size else 0.0
        prefill_attn = self._prefill_attention_s(batch)
        s = (self.fixed_s(batch.num_prefill_tokens + verified, chunks + verified) + attn
             + prefill_attn + (self._host_per_seq_s + self._state_s) * (ctx.size + chunks))
        if not self.speculative:
            return s
        if chunks:  # the drafter also runs over the prompt chunks (its own KV, its first proposals)
            s += self._draft_prefill_s(batch, prefill_attn)
        for m in range(1, int(drafts.max(initial=0)) + 1):  # draft pass m: the requests proposing an m-th token
            on = drafts >= m
            base, per_pos = self._draft_pass(int(on.sum()))
            s += base + per_pos * float(ctx[on].sum())
        return s

    def _head_pass(self, tokens: int, sampled: int) -> float:
        """A one-layer draft head over ``tokens`` tokens: one decoder layer of the target's shape
        (its last), its all-reduces, and the LM head on ``sampled`` tokens (attention apart)."""
        key = (tokens, sampled)
        got = self._head_passes.get(key)
        if got is None:
            got = self._cost(self._layer_ops(self.args.layers - 1, tokens)) + self._cost([self._lm_head_op(sampled)])
            got += self._layer_comm_s(tokens)
            self._head_passes[key] = got
        return got

    def _draft_pass(self, n: int) -> tuple[float, float]:
        """(seconds of one draft pass over ``n`` decoding requests but its KV reads, seconds per
        cached position it reads)."""
        if self.draft is not None:
            per_pos, lat = self.draft._decode_rates()
            return self.draft.fixed_s(n, n) + lat, per_pos
        mem, comp, lat = self._attention_parts()
        return self._head_pass(n, n) + lat, max(mem, comp)

    def _draft_prefill_s(self, batch: StepBatch, prefill_attention_s: float) -> float:
        """The drafter over the step's prompt chunks (``prefill_attention_s``: the target's)."""
        chunks = int(batch.prefill_tokens.size)
        if self.draft is not None:
            return self.draft.fixed_s(batch.num_prefill_tokens, chunks) + self.draft._prefill_attention_s(batch)
        return self._head_pass(batch.num_prefill_tokens, chunks) + prefill_attention_s / max(1, self._attn_layers)

    def spec_decode_run(self, num_decode: int, context_sums: np.ndarray, drafts: int) -> np.ndarray:
        """Pure-decode speculative steps (`batch.SpecRunStepTime`): every step costs the same but
        for terms linear in the summed decode context."""
        n, q = num_decode, 1 + drafts
        mem, comp, lat = self._attention_parts()
        base = self.fixed_s(n * q, n * q) + self._attn_layers * lat + (self._host_per_seq_s + self._state_s) * n
        slope = self._attn_layers * max(mem, comp * q)
        if self.speculative and drafts:
            pass_base, per_pos = self._draft_pass(n)
            base += drafts * pass_base
            slope += drafts * per_pos
        return self._eager_floor(base + slope * np.asarray(context_sums, dtype=np.float64), n * q)
