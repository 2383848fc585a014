"""One rank's share of a decoder layer, as kernels, for the parallel planner. Torch-free.

The planner evaluates thousands of layouts (tensor, pipeline, context and expert degrees,
micro-batch, recomputation), so it cannot trace the model once per layout. Instead it writes down
the kernels one rank runs for one layer, one micro-batch, in the shapes the layout gives them, and
times each with the same kernel model as a traced step (``perf.estimate.op_cost``: GEMM tiling and
waves, the measured matmul ceiling, flash-attention FLOPs, memory-bound elementwise kernels at the
bandwidth ceiling). What is assumed, as Megatron-LM with Transformer Engine runs a GPT/Llama layer:

* GEMMs: QKV (fused, column-parallel), attention output (row-parallel), MLP up (gate and up fused
  for gated MLPs) and down; in backward each has an input-gradient (B) and a weight-gradient (W)
  GEMM of the same FLOPs. FP8 precision runs the weight GEMMs on the FP8 path (attention in BF16).
* Attention: one fused flash kernel (causal), forward and backward (2.5x the forward matmuls);
  under context parallelism each rank computes its share of the causal pairs (load-balanced ring).
* Elementwise work fused as Megatron/TE fuses it: norm, rotary, bias-dropout-add, the MLP
  activation; each one memory pass over its tensors, backward about twice the bytes. Under
  sequence parallelism norms and residuals run on 1/tp of the tokens.
* MoE layers: a router GEMM, token permutation, and grouped expert GEMMs over a balanced routing
  (each rank's experts see tokens x top-k x ep / experts rows each), one GEMM kernel per local
  expert (Transformer Engine's GroupedLinear), each launched and, in eager mode, issued by the host.

Tensor-, context- and expert-parallel communication are not kernels here: ``LayerCost`` carries
their message sizes and the planner times them over the system's links (parallel/comm.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from whichgpu.perf.device import Device
from whichgpu.workload.flops import sdpa_backward_flops, sdpa_flops
from whichgpu.workload.trace import Op
from whichgpu.workload.zoo.llm.args import DecoderArgs, layer_kinds


@dataclass(frozen=True)
class Shard:
    """How one rank sees a layer: micro-batch, full sequence length, degrees, compute dtype."""

    micro_batch: int
    seq: int
    tp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False
    dtype: str = "bf16"  # the matmul path: bf16, fp16, fp8, tf32, fp32
    act_bytes: float = 2.0  # bytes of one activation value (16-bit, or 4 under fp32/tf32)
    attention: str = "flash"  # "flash" (FlashAttention-2 or later), "flash1" (first-generation fused
    # kernels: half the rate, perf.estimate.FLASH1_SPEED) or "unfused" (score GEMMs, fused softmax, dropout)
    etp: int | None = None  # the tensor-parallel split of each expert; None = tp (Plan.etp)

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def tokens(self) -> int:
        """Tokens of this rank's micro-batch (the sequence split over context parallelism)."""
        return self.micro_batch * self.seq // self.cp


@dataclass(frozen=True)
class LayerCost:
    """Seconds and bytes of one layer, one micro-batch, one rank."""

    forward_gpu_s: float  # GPU time of the forward pass's kernels
    input_grad_gpu_s: float  # B: activation gradients (dgrad GEMMs, attention and elementwise backward)
    forward_host_s: float  # the host's time to issue the forward kernels (0 under CUDA graphs)
    input_grad_host_s: float  # the same for the input-gradient pass
    weight_grad_s: float  # W: weight-gradient GEMMs
    attention_fwd_s: float  # the attention core's forward (what selective recomputation repeats)
    tp_bytes: float  # one tensor-parallel collective's message (T x h activations)
    tp_collectives: int  # collectives per pass (forward; backward has as many)
    cp_bytes: float  # K/V this rank passes around the context-parallel ring per pass
    ep_bytes: float  # one all-to-all's message (dispatch or combine) under expert parallelism
    flops_fwd: float  # executed forward FLOPs (matmuls and attention)
    activation_bytes: float  # activations saved for backward (no recomputation)
    input_bytes: float  # the layer's input (what full recomputation keeps)
    moe: bool

    @property
    def forward_s(self) -> float:
        """The forward pass: its kernels, or the host issuing them when that is longer."""
        return max(self.forward_gpu_s, self.forward_host_s)

    @property
    def input_grad_s(self) -> float:
        """The input-gradient pass, likewise."""
        return max(self.input_grad_gpu_s, self.input_grad_host_s)


def _gemm(name: str, m: int, n: int, k: int, dtype: str, e: float, w: float, module: str) -> list[Op]:
    """Forward GEMM (m x k) @ (k x n) and its two backward GEMMs: dgrad (B) and wgrad (W).
    e: bytes of an activation element; w: bytes of a weight element."""
    f = 2.0 * m * n * k
    fwd = Op(name, "matmul", "forward", module, dtype, f, m * k * e + k * n * w, m * n * e, mm=(1, m, n, k))
    dgrad = Op(name + ".dgrad", "matmul", "backward", module, dtype, f, m * n * e + k * n * w, m * k * e,
               mm=(1, m, k, n))
    wgrad = Op(name + ".wgrad", "matmul", "backward", module, dtype, f, m * n * e + m * k * e, k * n * 4.0,
               mm=(1, n, k, m), tags=("wgrad",))
    return [fwd, dgrad, wgrad]


def _elementwise(name: str, read: float, write: float, module: str, category: str = "pointwise") -> tuple[Op, Op]:
    """A fused memory-bound kernel and its backward (reads the saved inputs and the output
    gradient, writes the input gradients: about twice the bytes)."""
    fwd = Op(name, category, "forward", module, "bf16", 0.0, read, write)
    bwd = Op(name + ".bwd", category, "backward", module, "bf16", 0.0, read + write, read)
    return fwd, bwd


def layer_ops(a: DecoderArgs, layer: int, sh: Shard) -> tuple[list[Op], list[Op], list[Op], list[Op]]:
    """(forward, input-gradient, weight-gradient, attention-forward) kernels of `layer` on one rank."""
    t, e = sh.tp, sh.act_bytes
    mm_dtype = sh.dtype
    w = 1.0 if mm_dtype == "fp8" else e
    attn_dtype = "bf16" if mm_dtype == "fp8" else mm_dtype
    T = max(1, sh.tokens)
    T_sp = max(1, T // t) if sh.sp else T  # tokens of the norms and residuals
    h = a.hidden
    heads = max(1, a.heads // t)
    kv = max(1, a.kv_heads // t) if not a.mla else heads
    d, dv = a.qk_dim, a.v_dim
    gemms: list[Op] = []
    ew: list[tuple[Op, Op]] = []
    mod = f"layer{layer}"
    norms = 4 if a.gemma else 2
    for i in range(norms):
        ew.append(_elementwise(f"norm{i}", T_sp * h * e, T_sp * h * e, mod, "norm"))
    ew.append(_elementwise("residual.attn", 2 * T_sp * h * e, T_sp * h * e, mod))
    ew.append(_elementwise("residual.mlp", 2 * T_sp * h * e, T_sp * h * e, mod))
    # ---- attention projections
    if a.mla:
        if a.q_lora_rank:
            gemms += _gemm("q_a", T, a.q_lora_rank, h, mm_dtype, e, w, mod)
            gemms += _gemm("q_b", T, heads * d, a.q_lora_rank, mm_dtype, e, w, mod)
        else:
            gemms += _gemm("q", T, heads * d, h, mm_dtype, e, w, mod)
        gemms += _gemm("kv_a", T, a.kv_lora_rank + a.qk_rope_dim, h, mm_dtype, e, w, mod)
        gemms += _gemm("kv_b", T, heads * (a.qk_nope_dim + dv), a.kv_lora_rank, mm_dtype, e, w, mod)
    else:
        gemms += _gemm("qkv", T, (heads + 2 * kv) * d, h, mm_dtype, e, w, mod)
    gemms += _gemm("o", T, h, heads * dv, mm_dtype, e, w, mod)
    if a.family != "gpt2":
        ew.append(_elementwise("rotary", T * (heads + kv) * d * e, T * (heads + kv) * d * e, mod))
    # ---- attention core (flash, causal; context parallel: this rank's share of the pairs)
    s = sh.seq
    win = a.window(layer)
    pairs_share = 1.0 / sh.cp
    rep = max(1, heads // kv)
    mm = (sh.micro_batch * kv, max(1, s // sh.cp) * rep, s, d)
    af = sdpa_flops(sh.micro_batch, heads, s, s, d, dv, True, win) * pairs_share
    ab = sdpa_backward_flops(sh.micro_batch, heads, s, s, d, dv, True, win) * pairs_share
    qkv_bytes = T * (heads * d + 2 * kv * d) * e
    gen = ("flash1",) if sh.attention == "flash1" else ()
    attn_f = Op("attention", "attention", "forward", mod, attn_dtype, af, qkv_bytes, T * heads * dv * e, mm=mm,
                tags=gen)
    attn_b = Op("attention.bwd", "attention", "backward", mod, attn_dtype, ab, 2 * qkv_bytes + 2 * T * heads * dv * e,
                qkv_bytes, mm=mm, kernels=3, tags=gen)
    attn_fwd_ops, attn_bwd_ops = [attn_f], [attn_b]
    if sh.attention == "unfused":
        attn_fwd_ops, attn_bwd_ops = _unfused_attention(sh, heads, d, dv, attn_dtype, mod)
    # ---- MLP
    moe = a.is_moe(layer)
    gated = a.mlp_matrices == 3
    if moe:
        k = a.experts_per_token
        etp = sh.expert_tp
        i = max(1, a.expert_intermediate // etp)
        gemms += _gemm("router", T, a.experts, h, "bf16" if mm_dtype == "fp8" else mm_dtype, e, e, mod)
        # rows this rank's experts receive under balanced routing (dispatch over ep): its tensor-parallel
        # group's tokens, each rank with 1/tp of them (sequence parallel), gathered over the etp ranks
        # that split an expert (etp = tp: the group's T tokens at 1/tp of the width; etp 1: T / tp, whole)
        rows = max(1, T * k * etp // t)
        local = local_experts(a, sh.ep)
        per_expert = max(1, -(-rows // local))
        # Transformer Engine's GroupedLinear (Megatron-core's grouped expert MLP, as Megatron-Bridge's
        # recipes run it) issues each local expert's GEMM as its own kernel: a grouped op is `local`
        # kernels to launch and for an eager host to issue, so fewer, wider ranks pay less of both
        f = 2.0 * rows * (2 * i) * h
        up = Op("experts.up", "matmul", "forward", mod, mm_dtype, f, rows * h * e + local * 2 * i * h * w,
                rows * 2 * i * e, mm=(local, per_expert, 2 * i, h), kernels=local)
        up_b = Op("experts.up.dgrad", "matmul", "backward", mod, mm_dtype, f, rows * 2 * i * e + local * 2 * i * h * w,
                  rows * h * e, mm=(local, per_expert, h, 2 * i), kernels=local)
        up_w = Op("experts.up.wgrad", "matmul", "backward", mod, mm_dtype, f, rows * (2 * i + h) * e,
                  local * 2 * i * h * 4.0, mm=(local, 2 * i, h, per_expert), tags=("wgrad",), kernels=local)
        fd = 2.0 * rows * i * h
        down = Op("experts.down", "matmul", "forward", mod, mm_dtype, fd, rows * i * e + local * i * h * w, rows * h * e,
                  mm=(local, per_expert, h, i), kernels=local)
        down_b = Op("experts.down.dgrad", "matmul", "backward", mod, mm_dtype, fd, rows * h * e + local * i * h * w,
                    rows * i * e, mm=(local, per_expert, i, h), kernels=local)
        down_w = Op("experts.down.wgrad", "matmul", "backward", mod, mm_dtype, fd, rows * (i + h) * e,
                    local * i * h * 4.0, mm=(local, h, i, per_expert), tags=("wgrad",), kernels=local)
        gemms += [up, up_b, up_w, down, down_b, down_w]
        ew.append(_elementwise("experts.act", rows * 2 * i * e, rows * i * e, mod))
        ew.append(_elementwise("permute", 2 * rows * h * e, 2 * rows * h * e, mod, "copy"))
        if a.shared_experts:
            si = max(1, a.expert_intermediate * a.shared_experts // t)
            gemms += _gemm("shared.up", T, 2 * si, h, mm_dtype, e, w, mod)
            gemms += _gemm("shared.down", T, h, si, mm_dtype, e, w, mod)
            ew.append(_elementwise("shared.act", T * 2 * si * e, T * si * e, mod))
    else:
        i = max(1, a.intermediate // t)
        gemms += _gemm("mlp.up", T, (2 if gated else 1) * i, h, mm_dtype, e, w, mod)
        gemms += _gemm("mlp.down", T, h, i, mm_dtype, e, w, mod)
        ew.append(_elementwise("mlp.act", T * (2 if gated else 1) * i * e, T * i * e, mod))
    if mm_dtype == "fp8":
        ew += _fp8_casts(gemms, mod)
    fwd = [o for o in gemms if o.phase == "forward"] + [f for f, _ in ew] + attn_fwd_ops
    wgrad = [o for o in gemms if "wgrad" in o.tags]
    dgrad = [o for o in gemms if o.phase == "backward" and "wgrad" not in o.tags] + [b for _, b in ew] + attn_bwd_ops
    return fwd, dgrad, wgrad, attn_fwd_ops


def local_experts(a: DecoderArgs, ep: int) -> int:
    """Experts on each rank of an expert-parallel group of `ep`: the grouped expert GEMMs' batch and
    their kernel count (Transformer Engine's GroupedLinear runs one GEMM per local expert)."""
    return max(1, a.experts // ep)


def _fp8_casts(gemms: list[Op], mod: str) -> list[tuple[Op, Op]]:
    """Transformer Engine's FP8 GEMMs need their 16-bit inputs quantised: forward, each GEMM's
    activation input is cast to FP8 (read 2 bytes, write 1, and a transposed copy for the weight
    gradient); backward, the output gradient is cast and transposed (read 2, write 1 + 1).
    Memory-bound kernels beside the GEMMs (weights are cast once per step: not counted here)."""
    out = []
    for o in gemms:
        if o.phase != "forward" or o.dtype != "fp8" or o.mm is None:
            continue
        _, m, n, k = o.mm
        b = o.mm[0]
        fwd = Op(o.name + ".cast", "copy", "forward", mod, "bf16", 0.0, 2.0 * b * m * k, 2.0 * b * m * k)
        bwd = Op(o.name + ".grad_cast", "copy", "backward", mod, "bf16", 0.0, 2.0 * b * m * n, 2.0 * b * m * n)
        out.append((fwd, bwd))
    return out


def fused_softmax_available(micro_batch: int, heads: int, seq: int) -> bool:
    """Whether Megatron's fused causal scale-mask-softmax kernel takes this shape
    (megatron/model/fused_softmax.py, FusedScaleMaskSoftmax.is_kernel_available, in the Megatron-LM and
    Megatron-DeepSpeed releases that still used it): 16 < s <= 4096,
    s divisible by 4, and the attention batches (micro-batch x this rank's heads) divisible by 4 and
    by the kernel's batches per block (128 threads / 32-lane warps, one row per warp past 128 keys:
    4). Otherwise it falls back to five separate PyTorch kernels each way."""
    rows = micro_batch * heads
    per_block = 4 if seq > 128 else 8
    return 16 < seq <= 4096 and seq % 4 == 0 and rows % 4 == 0 and rows % per_block == 0


def _unfused_attention(sh: Shard, heads: int, d: int, dv: int, dtype: str, mod: str) -> tuple[list[Op], list[Op]]:
    """Attention before fused kernels (Megatron-LM 2020-21): Q K^T and P V as batched GEMMs over
    the whole square, a fused scale-mask-softmax kernel and dropout on the probabilities, each
    reading and writing the b x heads x s x s scores; backward: four GEMMs, the softmax and
    dropout gradients."""
    b, s, e = sh.micro_batch, sh.seq, sh.act_bytes
    bh = b * heads
    sq = float(bh) * s * s
    qk = Op("scores", "matmul", "forward", mod, dtype, 2.0 * sq * d, 2 * bh * s * d * e, sq * e, mm=(bh, s, s, d))
    if fused_softmax_available(b, heads, s):
        sm = [Op("softmax", "softmax", "forward", mod, dtype, 0.0, sq * e, sq * e)]
        sm_b = [Op("softmax.bwd", "softmax", "backward", mod, dtype, 0.0, 2 * sq * e, sq * e)]
    else:
        # Megatron's torch fallback (FusedScaleMaskSoftmax.forward_torch_softmax): cast to FP32,
        # scale, mask, softmax, cast back; the same five kernels in reverse for the gradient
        sm = [Op("softmax.cast", "copy", "forward", mod, dtype, 0.0, sq * e, sq * 4.0),
              Op("softmax.scale", "pointwise", "forward", mod, "fp32", 0.0, sq * 4.0, sq * 4.0),
              Op("softmax.mask", "pointwise", "forward", mod, "fp32", 0.0, sq * 5.0, sq * 4.0),
              Op("softmax", "softmax", "forward", mod, "fp32", 0.0, sq * 4.0, sq * 4.0),
              Op("softmax.uncast", "copy", "forward", mod, dtype, 0.0, sq * 4.0, sq * e)]
        sm_b = [Op("softmax.cast.bwd", "copy", "backward", mod, dtype, 0.0, sq * e, sq * 4.0),
                Op("softmax.bwd", "softmax", "backward", mod, "fp32", 0.0, 2 * sq * 4.0, sq * 4.0),
                Op("softmax.mask.bwd", "pointwise", "backward", mod, "fp32", 0.0, sq * 5.0, sq * 4.0),
                Op("softmax.scale.bwd", "pointwise", "backward", mod, "fp32", 0.0, sq * 4.0, sq * 4.0),
                Op("softmax.uncast.bwd", "copy", "backward", mod, dtype, 0.0, sq * 4.0, sq * e)]
    dr = Op("dropout", "pointwise", "forward", mod, dtype, 0.0, sq * e, sq * (e + 1))
    pv = Op("context", "matmul", "forward", mod, dtype, 2.0 * sq * dv, sq * e + bh * s * dv * e, bh * s * dv * e,
            mm=(bh, s, dv, s))
    fwd = [qk, *sm, dr, pv]
    bwd = [
        Op("context.dgrad", "matmul", "backward", mod, dtype, 2.0 * sq * dv, sq * e + bh * s * dv * e, sq * e,
           mm=(bh, s, s, dv)),
        Op("context.wgrad", "matmul", "backward", mod, dtype, 2.0 * sq * dv, sq * e + bh * s * dv * e, bh * s * dv * e,
           mm=(bh, s, dv, s)),
        Op("dropout.bwd", "pointwise", "backward", mod, dtype, 0.0, sq * (e + 1), sq * e),
        *sm_b,
        Op("scores.dgrad", "matmul", "backward", mod, dtype, 2.0 * sq * d, sq * e + bh * s * d * e, bh * s * d * e,
           mm=(bh, s, d, s)),
        Op("scores.wgrad", "matmul", "backward", mod, dtype, 2.0 * sq * d, sq * e + bh * s * d * e, bh * s * d * e,
           mm=(bh, s, d, s)),
    ]
    return fwd, bwd


def activation_bytes(a: DecoderArgs, layer: int, sh: Shard) -> tuple[float, float]:
    """(saved activations, layer input) in bytes for one micro-batch on one rank: the tensors a
    flash-attention layer keeps for backward (norm inputs, GEMM inputs, q/k/v and the attention
    output with its log-sum-exp, the MLP's pre-activation and activation; GPT: dropout masks).
    Under sequence parallelism the tensors outside the tensor-parallel region are 1/tp
    (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models")."""
    t, e = sh.tp, sh.act_bytes
    T = max(1, sh.tokens)
    T_sp = T / t if sh.sp else T
    h = a.hidden
    heads = max(1, a.heads // t)
    kv = max(1, a.kv_heads // t) if not a.mla else heads
    d, dv = a.qk_dim, a.v_dim
    g = 1.0 if sh.dtype == "fp8" else e  # Transformer Engine saves the FP8 copy of a GEMM's input
    outside = 2 * T_sp * h * e + 2 * T_sp * h * g  # norm inputs (2) and the GEMM inputs they feed (2)
    if a.family == "gpt2":
        outside += 2 * T_sp * h  # dropout masks after attention and MLP (1 byte each)
    attn = T * (heads * d + 2 * kv * d) * e + T * heads * dv * g + T * heads * 4.0  # q, k, v, out, lse
    if sh.attention == "unfused":  # scores' softmax output, dropout mask and output (Korthikanti: 5 a s^2 b)
        attn += heads * float(sh.seq) * sh.seq * sh.micro_batch * (2 * e + 1)
    if a.is_moe(layer):
        k = a.experts_per_token
        i = max(1, a.expert_intermediate // t)
        mlp = T * k * (h + 3 * i) * e + T * a.experts * 4.0
        if a.shared_experts:
            mlp += T * 3 * max(1, a.expert_intermediate * a.shared_experts // t) * e
    else:
        i = max(1, a.intermediate // t)
        gated = a.mlp_matrices == 3
        mlp = T * ((2 if gated else 1) * i * e + i * g)
    return outside + attn + mlp, T_sp * h * e


@dataclass(frozen=True)
class EdgeCost:
    """Embedding (first stage) or LM head and loss (last stage) of one micro-batch."""

    forward_s: float
    input_grad_s: float
    weight_grad_s: float
    activation_bytes: float


def _gpu_host(ops: list[Op], dev: Device, latency_s: float, host_s: float = 0.0) -> tuple[float, float]:
    """(GPU time of the kernels, the host's time to launch them): eager PyTorch issues each kernel
    from Python, ``host_s`` per kernel and its views (engine profile)."""
    from whichgpu.hardware.engine import DEFAULT_ENGINE, get_engine
    from whichgpu.perf.estimate import op_cost

    eng = get_engine(DEFAULT_ENGINE)  # op_cost's default profile, resolved once for the layer's ops
    gpu = sum(op_cost(o, dev, "max", latency_s, engine=eng)[0] for o in ops)
    return gpu, host_s * sum(o.kernels for o in ops)


def _time(ops: list[Op], dev: Device, latency_s: float, host_s: float = 0.0) -> float:
    """GPU time of the kernels, or the host's time to launch them when that is longer."""
    return max(_gpu_host(ops, dev, latency_s, host_s))


@lru_cache(maxsize=4096)
def _layer_cost(a: DecoderArgs, layer_kind: tuple[int, bool, bool], layer: int, sh: Shard, dev_key: int,
                host_s: float) -> LayerCost:
    dev = _DEVICES[dev_key]
    lat = dev.params.kernel_latency_us * 1e-6
    fwd, dgrad, wgrad, attn = layer_ops(a, layer, sh)
    saved, inp = activation_bytes(a, layer, sh)
    T = max(1, sh.tokens)
    kvh = max(1, a.kv_heads // sh.tp) if not a.mla else max(1, a.heads // sh.tp)
    cp_bytes = 0.0
    if sh.cp > 1:
        kv_width = (a.kv_lora_rank + a.qk_rope_dim) if a.mla else 2 * kvh * a.qk_dim
        cp_bytes = T * kv_width * sh.act_bytes
    ep_bytes = (T * a.experts_per_token * a.hidden * sh.act_bytes * sh.expert_tp / sh.tp
                if (a.is_moe(layer) and sh.ep > 1) else 0.0)
    f_gpu, f_host = _gpu_host(fwd, dev, lat, host_s)
    b_gpu, b_host = _gpu_host(dgrad, dev, lat, host_s)
    return LayerCost(
        forward_gpu_s=f_gpu, input_grad_gpu_s=b_gpu, forward_host_s=f_host, input_grad_host_s=b_host,
        weight_grad_s=_time(wgrad, dev, lat, host_s), attention_fwd_s=_time(attn, dev, lat, host_s),
        tp_bytes=T * a.hidden * sh.act_bytes if sh.tp > 1 else 0.0,
        tp_collectives=2 if sh.tp > 1 else 0, cp_bytes=cp_bytes, ep_bytes=ep_bytes,
        flops_fwd=sum(o.flops for o in fwd), activation_bytes=saved, input_bytes=inp, moe=a.is_moe(layer))


_DEVICES: dict[int, Device] = {}


def layer_cost(a: DecoderArgs, layer: int, sh: Shard, dev: Device, host_s: float = 0.0) -> LayerCost:
    """Cost of `layer` (layers of one kind share it: cached by `DecoderArgs.kind`); `host_s`:
    the host's time to issue one kernel (with its views) under the engine."""
    key = id(dev)
    _DEVICES[key] = dev
    kind = a.kind(layer)
    rep = next(first for first, _ in layer_kinds(a, 0, a.layers) if a.kind(first) == kind)
    return _layer_cost(a, kind, rep, sh, key, host_s)


def edge_costs(a: DecoderArgs, sh: Shard, dev: Device, host_s: float = 0.0,
               cross_entropy: str = "fused") -> tuple[EdgeCost, EdgeCost]:
    """`_edge_costs`, cached by the job's shape (as `layer_cost`)."""
    key = id(dev)
    _DEVICES[key] = dev
    return _edge_costs(a, sh, key, host_s, cross_entropy)


VOCAB_MULTIPLE = 128  # Megatron-LM's --make-vocab-size-divisible-by default


def rank_vocab(vocab: int, tp: int) -> int:
    """The LM head's vocabulary rows on one tensor-parallel rank: Megatron pads the vocabulary to a
    multiple of 128 x TP (so that every rank's GEMMs stay aligned, `perf.kernels.unaligned_dims`)."""
    step = VOCAB_MULTIPLE * tp
    return -(-vocab // step) * step // tp


@lru_cache(maxsize=4096)
def _edge_costs(a: DecoderArgs, sh: Shard, dev_key: int, host_s: float,
                cross_entropy: str) -> tuple[EdgeCost, EdgeCost]:
    """(embedding, LM head + cross-entropy) on one rank for one micro-batch. The head is split over
    the vocabulary; the loss over the rank's logits in FP32 (`hardware.engine.CROSS_ENTROPIES`):
    ``fused``, one kernel each way (forward: read the logits, write and re-read an FP32 row buffer;
    backward: read it, write the logits' gradient), or ``vocab-parallel``, Megatron's unfused
    ``_VocabParallelCrossEntropy`` (megatron/core/tensor_parallel/cross_entropy.py, on the
    ``.float()`` logits the GPT model hands it): forward the FP32 copy, the row max, the subtraction
    (a new tensor), exp in place, the row sum and the in-place division that leaves the softmax for
    backward; backward an in-place multiply by the loss gradient and the cast back to 16 bits."""
    dev = _DEVICES[dev_key]
    lat = dev.params.kernel_latency_us * 1e-6
    T = max(1, sh.tokens)
    e = sh.act_bytes
    h = a.hidden
    v = rank_vocab(a.vocab, sh.tp)
    emb_f = [Op("embedding", "copy", "forward", "embed", "bf16", 0.0, T * h * e + T * 8, T * h * e)]
    emb_b = [Op("embedding.bwd", "copy", "backward", "embed", "bf16", 0.0, T * h * e, T * h * 4.0)]
    head = _gemm("lm_head", T, v, h, sh.dtype if sh.dtype != "fp8" else "bf16", e, e, "head")
    n = T * v
    if cross_entropy == "vocab-parallel":
        loss_f = [Op("logits.float", "copy", "forward", "head", "fp32", 0.0, n * e, n * 4.0),
                  Op("ce.max", "reduction", "forward", "head", "fp32", 0.0, n * 4.0, T * 4.0),
                  Op("ce.sub_max", "pointwise", "forward", "head", "fp32", 0.0, n * 4.0, n * 4.0),
                  Op("ce.exp", "pointwise", "forward", "head", "fp32", 0.0, n * 4.0, n * 4.0),
                  Op("ce.sum_exp", "reduction", "forward", "head", "fp32", 0.0, n * 4.0, T * 4.0),
                  Op("ce.softmax_div", "pointwise", "forward", "head", "fp32", 0.0, n * 4.0, n * 4.0)]
        loss_b = [Op("ce.grad_mul", "pointwise", "backward", "head", "fp32", 0.0, n * 4.0, n * 4.0),
                  Op("logits.float.bwd", "copy", "backward", "head", "fp32", 0.0, n * 4.0, n * e)]
    else:
        loss_f = [Op("cross_entropy", "loss", "forward", "head", "fp32", 0.0, n * (e + 4.0), n * 4.0)]
        loss_b = [Op("cross_entropy.bwd", "loss", "backward", "head", "fp32", 0.0, n * 4.0, n * e)]
    norm = _elementwise("final_norm", T * h * e, T * h * e, "head", "norm")
    embed = EdgeCost(_time(emb_f, dev, lat, host_s), _time(emb_b, dev, lat, host_s), 0.0, T * 8.0)
    last = EdgeCost(_time([head[0], *loss_f, norm[0]], dev, lat, host_s),
                    _time([head[1], *loss_b, norm[1]], dev, lat, host_s),
                    _time([head[2]], dev, lat, host_s), T * h * e * 2 + T * v * (e + 4.0))
    return embed, last
