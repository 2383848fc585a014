"""Measurements only a GPU can give, each beside what whichgpu predicts for it.

Run on a machine with a CUDA GPU and PyTorch (the lent device machines hold both; the package needs
no install there):

    PYTHONPATH=src python3 scripts/gpu_probe.py --out DIR [--only launch,gemm,...] [--quick]

It writes ``DIR/gpu_probe.json`` (schema ``whichgpu.gpu_probe/1``: the machine, torch and CUDA
versions, and one row per measurement with what the model predicts) and ``DIR/gpu_probe.md`` (the
same as tables), and prints the tables. Commit the JSON under ``data/gpu_probes/`` with the
command that made it. Without CUDA it runs every probe on the CPU at toy sizes (``--quick``
implied) to check itself: those timings mean nothing, and the predictions are then for ``--gpu``.

What each probe answers (the open accuracy questions of the serving and planner models):

* ``launch``: host time to issue one eager PyTorch kernel, and the GPU's cost of one kernel
  replayed from a CUDA graph, against the kernel-latency parameters and the engines' host costs.
* ``gemm``: BF16, FP16 and FP8 GEMMs at the shapes of serving prefill (Llama-3.1-8B's layers at
  128-8,192 tokens) and of the vTrain layouts (a GPT layer of hidden 1,024 or 2,048 split over
  tensor parallelism 1-8, micro-batch 1-8 of 1,024 tokens), against ``perf.estimate.op_cost``.
* ``prefill_layer``: one Llama-3.1-8B decoder layer's forward over T prompt tokens, eager and
  compiled with torch.compile: its GPU time, the host's time to issue it and its kernel count,
  against the serving step model's layer time and the eager launch floor (the engine profile's
  ``eager_kernel_host_us`` per kernel): is a short prefill on a fast GPU host-bound, and by how much.
* ``train_layer``: a Megatron-style GPT layer (FP16, unfused attention, full activation
  checkpointing), forward, recomputation and backward, at the vTrain shapes, one tensor-parallel
  rank's share emulated by splitting heads and FFN (no communication): against the planner's layer
  cost (``parallel.layer.layer_cost``), GPU time and host-bound time.
* ``moe_layer``: a Qwen3-30B-A3B MoE block (router, top-8 of 128 experts, token permutation,
  grouped expert GEMMs, weighted combine), forward and backward, against the planner's MoE kernels.
* ``train_step``: whole training steps of zoo models (the zoo's own builders, full depth, random
  weights; autocast BF16, the zoo's default optimizer from ``torch.optim``, eager): step time and
  the PyTorch allocator's peaks. Their predictions (``whichgpu estimate`` and ``whichgpu fit``) are
  filled in afterwards on the machine that runs the tests, with the pinned torch:
  ``python scripts/gpu_probe.py --predict DIR/gpu_probe.json``.
* ``step_profile`` (written by ``train_step`` on CUDA): one step's GPU kernel time by estimate's op
  categories (kernel names matched by ``KERNEL_CATEGORIES``), filled in by ``--predict`` with
  estimate's time per category: where a step's error comes from.
* ``sustained``: an 8192^3 BF16 GEMM issued back to back for 40 s, its rate each second beside the
  SM clock, board power, temperature and clock-limit reasons NVML reads: the clock the card holds
  under sustained tensor work, against the power model's (``perf/device.py``: the clock scale and
  the rate it gives this GEMM). Short benchmarks (every other probe) see the card before it heats.

Each row says what was run; no row is fitted to anything here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from whichgpu.hardware.catalog import load_catalog
from whichgpu.hardware.engine import get_engine
from whichgpu.hardware.system import load_systems
from whichgpu.measure.planner_validate import gpt_args
from whichgpu.parallel.layer import Shard, layer_cost, layer_ops
from whichgpu.parallel.models import planner_model
from whichgpu.perf.device import Device
from whichgpu.perf.estimate import op_cost
from whichgpu.perf.params import load_params
from whichgpu.serving.batch import StepBatch
from whichgpu.serving.step import StepModel
from whichgpu.workload.trace import Op
from whichgpu.workload.zoo.llm.args import DecoderArgs

SCHEMA = "whichgpu.gpu_probe/1"
PROBES = ("launch", "gemm", "prefill_layer", "train_layer", "moe_layer", "train_step", "sustained")
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass
class Row:
    probe: str
    case: str
    measured_s: float
    predicted_s: float | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        """measured / predicted."""
        return self.measured_s / self.predicted_s if self.predicted_s else None


class Probe:
    """The device, the timers and the model side shared by the probes."""

    def __init__(self, device: str, gpu: str, quick: bool) -> None:
        self.dev = torch.device(device)
        self.cuda = self.dev.type == "cuda"
        self.quick = quick
        name = torch.cuda.get_device_name(self.dev) if self.cuda else gpu
        self.spec = load_catalog().get(name)
        self.params = load_params()
        self.device = Device(self.spec, self.params)
        self.rows: list[Row] = []

    # ---- timing -----------------------------------------------------------------------------
    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.dev)

    def device_s(self, fn: Callable[[], object], iters: int = 10, warmup: int = 3) -> float:
        """Seconds per call with calls queued back to back: the longer of the GPU's work and the
        host's issuing (CUDA events; wall clock on the CPU). Median of three batches."""
        iters = 2 if self.quick else iters
        for _ in range(1 if self.quick else warmup):
            fn()
        self.sync()
        out = []
        for _ in range(3):
            if self.cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(iters):
                    fn()
                b.record()
                b.synchronize()
                out.append(a.elapsed_time(b) / 1e3 / iters)
            else:
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn()
                out.append((time.perf_counter() - t0) / iters)
        return statistics.median(out)

    def host_s(self, fn: Callable[[], object], iters: int = 10) -> float:
        """The host's time to issue one call onto an idle GPU (the queue drained before each, so
        the host never waits for room in it). Median over calls."""
        iters = 2 if self.quick else iters
        fn()
        out = []
        for _ in range(iters):
            self.sync()
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        self.sync()
        return statistics.median(out)

    def kernels(self, fn: Callable[[], object]) -> int | None:
        """Device kernels one call launches (torch.profiler); None off CUDA."""
        if not self.cuda:
            return None
        from torch.profiler import ProfilerActivity, profile

        fn()
        self.sync()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            self.sync()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)

    # ---- model side -------------------------------------------------------------------------
    def op_s(self, o: Op) -> float:
        lat = self.params.kernel_latency_us * 1e-6
        return op_cost(o, self.device, "max", lat, engine=get_engine("pytorch"))[0] * o.count

    def add(self, probe: str, case: str, measured: float, predicted: float | None, **extra: Any) -> None:
        row = Row(probe, case, measured, predicted, extra)
        self.rows.append(row)
        r = f"{row.ratio:6.2f}" if row.ratio is not None else "     -"
        p = f"{predicted * 1e3:10.4f}" if predicted is not None else "         -"
        print(f"{probe:14s} {case:46s} {measured * 1e3:10.4f} {p} {r}  "
              + " ".join(f"{k}={_fmt(v)}" for k, v in extra.items()), flush=True)


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _shrink(a: DecoderArgs, quick: bool) -> DecoderArgs:
    """Toy dimensions for the CPU self-check: every width / 16, at most 8 experts."""
    if not quick:
        return a
    from dataclasses import replace

    heads = max(2, a.heads // 8)
    kv = max(1, min(heads, a.kv_heads // 8))
    return replace(a, hidden=heads * 32, heads=heads, kv_heads=kv, head_dim_override=32,
                   intermediate=max(64, a.intermediate // 16),
                   moe_intermediate=max(32, a.expert_intermediate // 16) if a.experts else 0,
                   experts=min(a.experts, 8), experts_per_token=min(a.experts_per_token, 2))


# ---------------------------------------------------------------------------------------------
# launch
# ---------------------------------------------------------------------------------------------

def probe_launch(p: Probe) -> None:
    x = torch.zeros(1, device=p.dev)
    n = 200 if p.quick else 20_000

    def many() -> None:
        for _ in range(n):
            x.add_(1.0)

    p.sync()
    t0 = time.perf_counter()
    many()
    p.sync()
    per_op = (time.perf_counter() - t0) / n
    host = {e: get_engine(e) for e in ("pytorch", "vllm", "megatron")}
    p.add("launch", "eager x.add_(1) back to back, per op", per_op, host["pytorch"].host_op_us * 1e-6,
          predicted_is="pytorch engine host_op_us", vllm_eager_kernel_host_us=host["vllm"].eager_kernel_host_us,
          megatron_host_op_us=host["megatron"].host_op_us)
    w = torch.zeros(64, 64, device=p.dev)

    def linears() -> None:
        for _ in range(n // 4):
            F.linear(w, w)

    p.sync()
    t0 = time.perf_counter()
    linears()
    p.sync()
    p.add("launch", "eager F.linear 64x64 back to back, per op", (time.perf_counter() - t0) / (n // 4),
          host["pytorch"].host_op_us * 1e-6, predicted_is="pytorch engine host_op_us")
    if p.cuda:
        k = 1000
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                x.add_(1.0)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            for _ in range(k):
                x.add_(1.0)
        per = p.device_s(g.replay, iters=20) / k
        p.add("launch", "CUDA graph replay of 1,000 x.add_(1), per kernel", per, p.params.graph_kernel_us * 1e-6,
              predicted_is="params graph_kernel_us", kernel_latency_us=p.params.kernel_latency_us)


# ---------------------------------------------------------------------------------------------
# gemm
# ---------------------------------------------------------------------------------------------

def _gemm_op(m: int, n: int, k: int, dtype: str) -> Op:
    e = 1.0 if dtype == "fp8" else 2.0
    return Op("gemm", "matmul", "forward", "", dtype, 2.0 * m * n * k, (m * k + k * n) * e, m * n * 2.0,
              mm=(1, m, n, k))


def _gemm_cases(quick: bool) -> list[tuple[str, int, int, int, str]]:
    cases: list[tuple[str, int, int, int, str]] = []
    if quick:
        return [("toy", 64, 96, 128, "bf16"), ("toy", 64, 96, 128, "fp16")]
    for n in (4096, 8192):  # the ceilings: square GEMMs that fill the chip
        for dt in ("bf16", "fp16", "fp8"):
            cases.append((f"square {n}", n, n, n, dt))
    _, a, _ = planner_model("llama-3.1-8b")
    h, i = a.hidden, a.intermediate
    qkv = (a.heads + 2 * a.kv_heads) * a.head_dim
    for t in (128, 512, 2048, 8192):
        for what, n, k in (("qkv", qkv, h), ("o", h, a.heads * a.head_dim), ("gate_up", 2 * i, h), ("down", h, i)):
            for dt in ("bf16", "fp8"):
                cases.append((f"llama-3.1-8b {what} T{t}", t, n, k, dt))
    for hid in (1024, 2048):
        for tp in (1, 2, 4, 8):
            for mb in (1, 2, 4, 8):
                m = mb * 1024
                for what, n, k in (("qkv", 3 * hid // tp, hid), ("proj", hid, hid // tp), ("fc1", 4 * hid // tp, hid),
                                   ("fc2", hid, 4 * hid // tp)):
                    cases.append((f"gpt h{hid} tp{tp} mb{mb} {what}", m, n, k, "fp16"))
    return cases


def probe_gemm(p: Probe) -> None:
    if p.cuda:  # the memory ceiling: a device-to-device copy, bytes read plus written
        src = torch.empty(2 * 1024**3, dtype=torch.uint8, device=p.dev).random_()
        dst = torch.empty_like(src)
        t = p.device_s(lambda: dst.copy_(src), iters=20)
        p.add("gemm", "device-to-device copy 2 GiB (read + write)", t, 2 * src.numel() / (p.spec.memory_bandwidth_gbps * 1e9),
              predicted_is="datasheet bandwidth", tb_per_s=2 * src.numel() / t / 1e12)
        del src, dst
    fp8_ok = p.cuda and hasattr(torch, "_scaled_mm") and torch.cuda.get_device_capability(p.dev) >= (8, 9)
    for name, m, n, k, dt in _gemm_cases(p.quick):
        if dt == "fp8" and not fp8_ok:
            continue
        if dt == "fp8":
            a = torch.randn(m, k, device=p.dev).to(torch.float8_e4m3fn)
            b = torch.randn(n, k, device=p.dev).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
            one = torch.ones((), device=p.dev)

            def fn(a: torch.Tensor = a, b: torch.Tensor = b, one: torch.Tensor = one) -> object:
                return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        else:
            tdt = TORCH_DTYPES[dt] if p.cuda else torch.float32
            x = torch.randn(m, k, device=p.dev, dtype=tdt)
            w = torch.randn(n, k, device=p.dev, dtype=tdt)

            def fn(x: torch.Tensor = x, w: torch.Tensor = w) -> object:
                return F.linear(x, w)
        t = p.device_s(fn, iters=20)
        pred = p.op_s(_gemm_op(m, n, k, dt))
        p.add("gemm", f"{name} {dt} {m}x{n}x{k}", t, pred, tflops=2.0 * m * n * k / t / 1e12)


# ---------------------------------------------------------------------------------------------
# prefill_layer: a Llama decoder layer's forward
# ---------------------------------------------------------------------------------------------

class LlamaLayer(torch.nn.Module):
    """A Llama decoder layer in plain PyTorch (RMSNorm, fused QKV, RoPE, SDPA with grouped KV
    heads, gated SiLU MLP), as a serving engine runs it without its custom kernels."""

    def __init__(self, a: DecoderArgs, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.a = a
        q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
        kw: dict[str, Any] = {"dtype": dtype, "device": device}
        self.qkv = torch.nn.Linear(a.hidden, q + 2 * kv, bias=False, **kw)
        self.o = torch.nn.Linear(q, a.hidden, bias=False, **kw)
        self.gate_up = torch.nn.Linear(a.hidden, 2 * a.intermediate, bias=False, **kw)
        self.down = torch.nn.Linear(a.intermediate, a.hidden, bias=False, **kw)
        self.n1 = torch.ones(a.hidden, **kw)
        self.n2 = torch.ones(a.hidden, **kw)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        a = self.a
        t = x.shape[0]
        h = F.rms_norm(x, (a.hidden,), self.n1)
        q, k, v = self.qkv(h).split([a.heads * a.head_dim, a.kv_heads * a.head_dim, a.kv_heads * a.head_dim], -1)
        q = q.view(t, a.heads, a.head_dim).transpose(0, 1)
        k = k.view(t, a.kv_heads, a.head_dim).transpose(0, 1)
        v = v.view(t, a.kv_heads, a.head_dim).transpose(0, 1)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        o = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True, enable_gqa=True)[0]
        x = x + self.o(o.transpose(0, 1).reshape(t, -1))
        h = F.rms_norm(x, (a.hidden,), self.n2)
        g, u = self.gate_up(h).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat((-x2, x1), -1) * sin


def probe_prefill_layer(p: Probe) -> None:
    mid, a, _ = planner_model("llama-3.1-8b")
    one = _shrink(a, p.quick)
    dtype = torch.bfloat16 if p.cuda else torch.float32
    layer = LlamaLayer(one, dtype, p.dev)
    systems = load_systems()
    system = systems.get("dgx-h100")
    # the serving step model's one layer (no LM head, no host time per sequence), a plain PyTorch profile
    sm = StepModel(one, p.device, get_engine("pytorch"), system, tp=1, precision="bf16", first_layer=0, last_layer=1,
                   lm_head=False, host=False)
    vllm = get_engine("vllm")
    vllm_floor = StepModel(one, p.device, vllm, system, tp=1, precision="bf16", first_layer=0, last_layer=1,
                           lm_head=False, host=False).eager_launch_s
    floor_kernels = round(vllm_floor / (vllm.eager_kernel_host_us * 1e-6))  # the kernels the floor counts
    variants: list[tuple[str, Callable[..., torch.Tensor]]] = [("eager", layer)]
    if p.cuda:
        variants.append(("compiled", torch.compile(layer, dynamic=False)))
    for t in ((16, 64) if p.quick else (128, 512, 1024, 2048, 4096, 8192)):
        x = torch.randn(t, one.hidden, device=p.dev, dtype=dtype)
        pos = torch.arange(t, device=p.dev, dtype=torch.float32)[:, None]
        freq = 1.0 / (500000.0 ** (torch.arange(0, one.head_dim // 2, device=p.dev, dtype=torch.float32) * 2 / one.head_dim))
        ang = torch.cat((pos * freq, pos * freq), -1)
        cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)
        batch = StepBatch(np.array([t], np.int64), np.array([t], np.int64), np.zeros(0, np.int64))
        pred = sm._step_s(batch)
        for name, fn in variants:
            with torch.inference_mode():
                def call(fn: Callable[..., torch.Tensor] = fn, x: torch.Tensor = x, cos: torch.Tensor = cos,
                         sin: torch.Tensor = sin) -> object:
                    return fn(x, cos, sin)
                dev_t = p.device_s(call)
                host_t = p.host_s(call)
                kern = p.kernels(call)
            p.add("prefill_layer", f"{mid} layer forward T{t} {name}", dev_t, pred, host_s=host_t, kernels=kern,
                  host_us_per_kernel=(host_t / kern * 1e6) if kern else None, model_kernels=floor_kernels,
                  vllm_floor_s=vllm_floor)


# ---------------------------------------------------------------------------------------------
# train_layer: a Megatron-style GPT layer, full recomputation (vTrain's jobs)
# ---------------------------------------------------------------------------------------------

class GptLayer(torch.nn.Module):
    """One tensor-parallel rank's share of a GPT-2-style layer as Megatron-DeepSpeed ran it in FP16:
    LayerNorm, QKV and attention-output GEMMs with biases, score GEMMs with a causal masked softmax
    and dropout (no flash attention), bias-dropout-add, GeLU MLP; heads and FFN divided by tp (the
    collectives left out)."""

    def __init__(self, hidden: int, heads: int, tp: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        kw: dict[str, Any] = {"dtype": dtype, "device": device}
        self.heads, self.d = heads // tp, hidden // heads
        w = self.heads * self.d
        self.ln1 = torch.nn.LayerNorm(hidden, **kw)
        self.qkv = torch.nn.Linear(hidden, 3 * w, **kw)
        self.proj = torch.nn.Linear(w, hidden, **kw)
        self.ln2 = torch.nn.LayerNorm(hidden, **kw)
        self.fc1 = torch.nn.Linear(hidden, 4 * hidden // tp, **kw)
        self.fc2 = torch.nn.Linear(4 * hidden // tp, hidden, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (seq, batch, hidden), Megatron's layout
        s, b, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(s, b * self.heads, 3 * self.d).chunk(3, -1)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
        scores = torch.baddbmm(torch.empty(b * self.heads, s, s, dtype=x.dtype, device=x.device), q, k.transpose(1, 2),
                               beta=0.0, alpha=1.0 / math.sqrt(self.d))
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        probs = F.dropout(scores.masked_fill(mask, -10000.0).softmax(-1), 0.1, self.training)
        ctx = torch.bmm(probs, v).transpose(0, 1).reshape(s, b, -1)
        x = x + F.dropout(self.proj(ctx), 0.1, self.training)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), 0.1, self.training)


def probe_train_layer(p: Probe) -> None:
    from torch.utils.checkpoint import checkpoint

    dtype = torch.float16 if p.cuda else torch.float32
    host = get_engine("megatron").host_op_us * 1e-6
    sizes = ((128,), (1,), (1, 2), 64) if p.quick else ((1024, 2048), (1, 2, 4, 8), (1, 2, 4, 8), 1024)
    hiddens, tps, mbs, seq = sizes
    layers = 1 if p.quick else 4
    for hid in hiddens:
        a = gpt_args(hid, layers, 16 if not p.quick else 4, 50257, seq)
        for tp in tps:
            stack = torch.nn.ModuleList(GptLayer(hid, a.heads, tp, dtype, p.dev) for _ in range(layers)).train()
            for mb in mbs:
                x = torch.randn(seq, mb, hid, device=p.dev, dtype=dtype, requires_grad=True)
                grad = torch.randn_like(x)

                def step(stack: torch.nn.ModuleList = stack, x: torch.Tensor = x, grad: torch.Tensor = grad) -> object:
                    y = x
                    for layer in stack:
                        y = checkpoint(layer, y, use_reentrant=False)
                    y.backward(grad)
                    return None

                t = p.device_s(step, iters=5) / layers
                kern = p.kernels(step)
                lc = layer_cost(a, 0, Shard(mb, seq, tp, dtype="fp16", attention="unfused"), p.device, host)
                gpu = 2 * lc.forward_gpu_s + lc.input_grad_gpu_s + lc.weight_grad_s
                bound = 2 * lc.forward_s + lc.input_grad_s + lc.weight_grad_s
                fwd, dgrad, wgrad, _ = layer_ops(a, 0, Shard(mb, seq, tp, dtype="fp16", attention="unfused"))
                p.add("train_layer", f"gpt h{hid} tp{tp} mb{mb} fwd+recompute+bwd", t, gpu, predicted_host_bound_s=bound,
                      kernels_per_layer=(kern / layers) if kern else None,
                      model_kernels_per_layer=2 * len(fwd) + len(dgrad) + len(wgrad))


# ---------------------------------------------------------------------------------------------
# moe_layer: a fine-grained MoE block, forward and backward
# ---------------------------------------------------------------------------------------------

def _grouped(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, counts: list[int] | None) -> torch.Tensor:
    """Rows of x grouped by expert (offs: cumulative row ends) times each expert's w[e] (K x N)."""
    if counts is None:
        return torch._grouped_mm(x, w, offs=offs)
    out, start = [], 0
    for e, c in enumerate(counts):
        out.append(x[start:start + c] @ w[e])
        start += c
    return torch.cat(out)


def _moe_step(x: torch.Tensor, g: torch.Tensor, wr: torch.Tensor, up_t: torch.Tensor, down_t: torch.Tensor, k: int,
              grouped: bool) -> None:
    """One MoE block forward (softmax router, top-k, tokens sorted by expert, gated SiLU experts,
    probability-weighted combine) and its backward."""
    e = wr.shape[0]
    probs = F.linear(x, wr).float().softmax(-1)
    top_p, top_i = probs.topk(k, -1)
    flat = top_i.flatten()
    order = flat.argsort(stable=True)
    src = order // k
    counts_t = torch.bincount(flat, minlength=e)
    offs = counts_t.cumsum(0).to(torch.int32)
    counts = None if grouped else counts_t.tolist()  # the sequential path syncs, as Megatron's does
    up = _grouped(x[src], up_t.transpose(-2, -1), offs, counts)
    gate, lin = up.chunk(2, -1)
    y = _grouped(F.silu(gate) * lin, down_t.transpose(-2, -1), offs, counts)
    y = y * top_p.flatten()[order, None].to(y.dtype)
    torch.zeros_like(x).index_add(0, src, y).backward(g)


def probe_moe_layer(p: Probe) -> None:
    mid, a, _ = planner_model("qwen3-30b-a3b")
    a = _shrink(a, p.quick)
    dtype = torch.bfloat16 if p.cuda else torch.float32
    h, e, k, i = a.hidden, a.experts, a.experts_per_token, a.expert_intermediate
    kw: dict[str, Any] = {"dtype": dtype, "device": p.dev, "requires_grad": True}
    wr = torch.randn(e, h, **kw)
    # expert weights stored (E, N, K), handed over as (E, K, N) views with K contiguous, as torchtitan
    # hands them to the grouped GEMM
    up_t = (torch.randn(e, 2 * i, h, device=p.dev, dtype=dtype) / math.sqrt(h)).requires_grad_()
    down_t = (torch.randn(e, h, i, device=p.dev, dtype=dtype) / math.sqrt(i)).requires_grad_()
    mode = {"grouped": p.cuda and hasattr(torch, "_grouped_mm") and torch.cuda.get_device_capability(p.dev) >= (9, 0)}
    moe_layer = next(j for j in range(a.layers) if a.is_moe(j))
    for t in ((32,) if p.quick else (4096, 16384)):
        x = torch.randn(t, h, **kw)
        g = torch.randn(t, h, device=p.dev, dtype=dtype)

        def block(x: torch.Tensor = x, g: torch.Tensor = g) -> object:
            _moe_step(x, g, wr, up_t, down_t, k, mode["grouped"])
            return None

        try:
            t_s = p.device_s(block, iters=5)
        except (RuntimeError, NotImplementedError):  # no grouped GEMM backward in this torch: one GEMM per expert
            if not mode["grouped"]:
                raise
            mode["grouped"] = False
            t_s = p.device_s(block, iters=5)
        kern = p.kernels(block)
        sh = Shard(max(1, t // 4096), min(t, 4096), dtype="bf16")
        fwd, dgrad, wgrad, _ = layer_ops(a, moe_layer, sh)
        moe_names = ("router", "experts", "permute")
        pick = [o for o in fwd + dgrad + wgrad if o.name.startswith(moe_names)]
        pred = sum(p.op_s(o) for o in pick)
        p.add("moe_layer", f"{mid} MoE block fwd+bwd T{t} {'grouped_mm' if mode['grouped'] else 'per-expert loop'}",
              t_s, pred, kernels=kern, model_kernels=len(pick), experts=e, top_k=k, expert_intermediate=i)


# ---------------------------------------------------------------------------------------------
# sustained: the clock under sustained tensor work
# ---------------------------------------------------------------------------------------------

def _nvml() -> Callable[[], dict[str, Any]] | None:
    """A reader of the GPU's SM clock (MHz), power (W), temperature (C) and clock-limit reasons
    (NVML's bitmask), or None without NVML."""
    try:
        import pynvml
    except ImportError:
        return None
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())

    def read() -> dict[str, Any]:
        return {"sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "max_sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1e3,
                "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3,
                "temp_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                "clock_limit_reasons": pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)}

    return read


@contextlib.contextmanager
def _sampling(read: Callable[[], dict[str, Any]] | None, every_s: float = 0.005) -> Iterator[dict[str, Any]]:
    """While the block runs, NVML read every `every_s` on a thread; afterwards the dict holds the SM
    clock's p10 / median / p90 (MHz), the mean power (W) and the samples taken (empty without NVML)."""
    out: dict[str, Any] = {}
    if read is None:
        yield out
        return
    samples: list[dict[str, Any]] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            samples.append(read())
            time.sleep(every_s)

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    try:
        yield out
    finally:
        stop.set()
        th.join()
        clocks = np.array([x["sm_clock_mhz"] for x in samples], float)
        out.update(sm_clock_p10_mhz=float(np.percentile(clocks, 10)), sm_clock_median_mhz=float(np.median(clocks)),
                   sm_clock_p90_mhz=float(np.percentile(clocks, 90)), max_sm_clock_mhz=samples[0]["max_sm_clock_mhz"],
                   mean_power_w=float(np.mean([x["power_w"] for x in samples])),
                   power_limit_w=samples[0]["power_limit_w"], nvml_samples=len(samples))


def probe_sustained(p: Probe) -> None:
    n = 256 if p.quick else 8192
    seconds = 2.0 if p.quick else 40.0
    dt = torch.bfloat16 if p.cuda else torch.float32
    a = torch.randn(n, n, device=p.dev, dtype=dt)
    b = torch.randn(n, n, device=p.dev, dtype=dt)
    pred = p.op_s(_gemm_op(n, n, n, "bf16"))
    read = _nvml() if p.cuda else None
    rate = p.device.rate("bf16")
    model = {"model_clock_scale": p.device.clock_scale, "model_ceiling": rate.ceiling,
             "model_tflops": rate.flops * rate.ceiling / 1e12}
    start = time.perf_counter()
    while (now := time.perf_counter() - start) < seconds:
        k = 0
        p.sync()
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 1.0 and k < 5000:
            for _ in range(10):
                torch.mm(a, b)
            k += 10
            p.sync()
        per = (time.perf_counter() - t0) / k
        card = read() if read else {}
        p.add("sustained", f"bf16 {n}^3 GEMMs, second {now:4.1f}", per, pred, tflops=2.0 * n**3 / per / 1e12,
              **card, **model)


# ---------------------------------------------------------------------------------------------
# train_step: whole zoo models, one training step, against estimate and fit
# ---------------------------------------------------------------------------------------------

# (zoo id or config.json, batch, tokens per sample, image side, channels-last): the zoo's defaults
# where they fit one 80 GB GPU with autocast BF16 and no recomputation. Llama-3.1-8B's layers, four
# of them (its config with num_hidden_layers 4), stand for a modern decoder whose full depth does
# not fit one GPU with AdamW.
LLAMA_4L = "data/gpu_probes/llama-3.1-8b-4layers.json"
TRAIN_STEPS: tuple[tuple[str, int, int | None, int | None, bool], ...] = (
    ("resnet50-v1.5", 256, None, 224, True),
    ("vit-b16", 128, None, 224, False),
    ("bert-large-squad", 32, 384, None, False),
    ("t5-base", 8, 512, None, False),
    ("gpt2", 8, 1024, None, False),
    ("gpt2-medium", 8, 1024, None, False),
    ("gpt2-xl", 4, 1024, None, False),
    (LLAMA_4L, 2, 4096, None, False),
)
QUICK_STEPS = (("gpt2", 1, 32, None, False),)


def _real(x: Any, dev: torch.device) -> Any:
    """`x` with every meta tensor replaced by a real one of its shape and dtype on `dev`: floats
    random normal, booleans true, integers zero (valid token ids, labels and positions)."""
    if isinstance(x, torch.Tensor) and x.device.type == "meta":
        if x.is_floating_point():
            return torch.randn(x.shape, dtype=x.dtype, device=dev)
        return (torch.ones if x.dtype == torch.bool else torch.zeros)(x.shape, dtype=x.dtype, device=dev)
    if isinstance(x, dict):
        return {k: _real(v, dev) for k, v in x.items()}
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_real(v, dev) for v in x)
    return x


def _materialise(built: Any, dev: torch.device, channels_last: bool) -> None:
    """The zoo's meta model and inputs made real on `dev`: weights N(0, 0.02) (running variances 1),
    tied weights kept tied, inputs and the loss function's captured labels as `_real`."""
    shared: dict[int, list[tuple[torch.nn.Module, str]]] = {}
    for mod in built.model.modules():
        for name, t in mod.named_parameters(recurse=False):
            shared.setdefault(id(t), []).append((mod, name))
    built.model = built.model.to_empty(device=dev)
    for places in shared.values():  # to_empty unties tied weights (GPT-2's embedding and LM head): tie again
        first = getattr(places[0][0], places[0][1])
        for mod, name in places[1:]:
            setattr(mod, name, first)
    with torch.no_grad():
        for name, t in [*built.model.named_parameters(), *built.model.named_buffers()]:
            if t.is_floating_point():
                t.fill_(1.0) if name.endswith("running_var") else t.normal_(0.0, 0.02)
            else:
                t.zero_()
    built.inputs = _real(built.inputs, dev)
    fn = built.loss_fn
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            cell.cell_contents = _real(cell.cell_contents, dev)
        except ValueError:  # an empty cell
            continue
    if channels_last:
        from whichgpu.workload.api import _channels_last

        _channels_last(built)  # as capture converts the model and its inputs


def _real_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
                    window: int = 0, softcap: float = 0.0, sinks: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:
    """``whichgpu::attention`` (a meta-only op) run for real by PyTorch's SDPA, which picks the flash
    kernel as the model assumes; the variants SDPA has no kernel for are refused."""
    if (window and causal) or softcap or sinks is not None:
        raise NotImplementedError("sliding windows, soft-capping and sinks have no SDPA kernel")
    return _sdpa_gqa(q, k, v, attn_mask=mask, is_causal=causal and mask is None), None


_SDPA = F.scaled_dot_product_attention


def _sdpa_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
              dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False) -> torch.Tensor:
    """SDPA with grouped K/V heads taken as they are (the zoo's decoders pass them unexpanded, as
    capture's fused attention op takes them)."""
    return _SDPA(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                 enable_gqa=enable_gqa or k.shape[-3] != q.shape[-3])


def _optimizer(name: str, params: Any) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=1e-4)
    return (torch.optim.Adam if name == "adam" else torch.optim.AdamW)(params, lr=1e-4)


def probe_train_step(p: Probe) -> None:
    import whichgpu.workload.ops  # noqa: F401  (defines whichgpu::attention)

    meta_attention = torch.ops.whichgpu.attention
    torch.ops.whichgpu.attention = _real_attention  # the namespace's attribute, looked up at each call
    F.scaled_dot_product_attention = _sdpa_gqa
    try:
        for case in (QUICK_STEPS if p.quick else TRAIN_STEPS):
            _train_step(p, *case)
    finally:  # capture (in this process too, in the tests) needs both back
        torch.ops.whichgpu.attention = meta_attention
        F.scaled_dot_product_attention = _SDPA


def _train_step(p: Probe, mid: str, b: int, seq: int | None, img: int | None, nhwc: bool) -> None:
    optim, step = _step_fn(p, mid, b, seq, img, nhwc)
    step()
    step()
    if p.cuda:
        torch.cuda.reset_peak_memory_stats(p.dev)
    with _sampling(_nvml() if p.cuda else None) as card:
        t = p.device_s(step, iters=5)
    alloc = torch.cuda.max_memory_allocated(p.dev) if p.cuda else None
    reserved = torch.cuda.max_memory_reserved(p.dev) if p.cuda else None
    host = p.host_s(step, iters=3)
    case = f"{Path(mid).stem} b{b} {'x' + str(seq) + ' tok' if seq else str(img) + 'px'} amp-bf16 {optim}"
    p.add("train_step", case, t, None, model=mid, batch=b, seq_len=seq, image_size=img,
          channels_last=nhwc, precision="amp-bf16", optimizer=optim,
          measured_alloc_bytes=alloc, measured_reserved_bytes=reserved, host_s=host, **card)
    if p.cuda:
        _profile_step(p, case, step)
    del step
    if p.cuda:
        torch.cuda.empty_cache()


# kernel name patterns -> estimate's op categories (by_category), first match wins
KERNEL_CATEGORIES = (
    ("attention", ("flash", "fmha", "attention", "attn")),
    ("optimizer", ("multi_tensor_apply",)),
    ("matmul", ("gemm", "xmma", "nvjet", "cutlass", "cublas", "sm90_", "sm80_", "wgmma", "splitk", "conv", "implicit")),
    ("softmax", ("softmax",)),
    ("loss", ("nll_loss", "cross_entropy")),
    ("norm", ("layer_norm", "layernorm", "rms_norm", "batch_norm", "batchnorm", "bn_", "welford")),
    ("embedding", ("embedding", "indexselect", "index_select")),
    ("reduction", ("reduce",)),
    ("copy", ("copy", "cat", "transpose", "fill", "memcpy", "index")),
)


def _kernel_category(name: str) -> str:
    low = name.lower()
    return next((c for c, keys in KERNEL_CATEGORIES if any(k in low for k in keys)), "pointwise")


def _profile_step(p: Probe, case: str, step: Callable[[], object]) -> None:
    """One step under torch.profiler: GPU kernel time by estimate's categories (name patterns,
    KERNEL_CATEGORIES) and the kernel count, each a row; predictions filled by --predict."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        p.sync()
    by: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            by.setdefault(_kernel_category(e.name), []).append(e.device_time_total * 1e-6)
    for cat, times in sorted(by.items()):
        p.add("step_profile", f"{case} {cat}", sum(times), None, category=cat, kernels=len(times), step_case=case)


def _step_fn(p: Probe, mid: str, b: int, seq: int | None, img: int | None,
             nhwc: bool) -> tuple[str, Callable[[], object]]:
    """The zoo model's training step on the probe's device (built, materialised, its optimizer)."""
    from whichgpu.workload.api import _build
    from whichgpu.workload.capture import _loss_of
    from whichgpu.workload.noinit import skip_init
    from whichgpu.workload.spec import classify
    from whichgpu.workload.zoo import get_entry, is_zoo_name
    from whichgpu.workload.zoo.base import BuildRequest

    amp = torch.bfloat16 if p.cuda else torch.float32
    optim = get_entry(mid).default_optimizer if is_zoo_name(mid) else "adamw"
    req = BuildRequest(task="train", batch_size=b, seq_len=seq, image_size=img, truncate_layers=False)
    with skip_init():
        built = _build(classify(mid), req, b)[0]
    _materialise(built, p.dev, nhwc and p.cuda)
    built.model.train()
    opt = _optimizer(optim, built.model.parameters())

    def step(built: Any = built, opt: torch.optim.Optimizer = opt) -> object:
        with torch.autocast(p.dev.type, dtype=amp, enabled=p.cuda):
            out = built.model(**built.inputs) if isinstance(built.inputs, dict) else built.model(*built.inputs)
            loss = _loss_of(built, out)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return None

    return optim, step


PROBE_STEP_HOST_MS = 0.0  # host time per step outside kernel issue of the probe's bare loop


def predict_train_steps(path: Path) -> None:
    """Fill the train_step rows of a probe's JSON with `whichgpu estimate`'s step time and `whichgpu
    fit`'s allocator peaks for the probe's GPU, and the step_profile rows after each with estimate's
    GPU time of that category (run where the tests run: the pinned torch captures)."""
    import subprocess

    doc = json.loads(path.read_text())
    by_case: dict[str, dict[str, Any]] = {}
    for r in doc["rows"]:
        x = r["extra"]
        if r["probe"] == "step_profile" and x["step_case"] in by_case:
            seconds = by_case[x["step_case"]].get(x["category"], {}).get("seconds")
            r["predicted_s"] = seconds or None
            r["ratio"] = r["measured_s"] / seconds if seconds and r["measured_s"] else None
            x["predicted_kernels"] = by_case[x["step_case"]].get(x["category"], {}).get("kernels")
            continue
        if r["probe"] != "train_step" or "model" not in x:
            continue
        # the probe's loop (_step_fn) does no host work beyond issuing the kernels: no data loader,
        # no logging, no loss read back; the engine's per-step figure stands for scripts that do
        args = [x["model"], "--gpu", doc["gpu"], "-b", str(x["batch"]), "--precision", x["precision"],
                "--optimizer", x["optimizer"], "--json"]
        args += ["--seq-len", str(x["seq_len"])] if x["seq_len"] else ["--image-size", str(x["image_size"])]

        def cli(*command: str, args: list[str] = args) -> dict[str, Any]:
            run = subprocess.run([sys.executable, "-m", "whichgpu", *command, *args], check=True, capture_output=True,
                                 text=True)
            return json.loads(run.stdout)  # type: ignore[no-any-return]

        # (fit has no memory-format switch: NHWC changes no tensor's size)
        est = cli("estimate", "--step-host-ms", f"{PROBE_STEP_HOST_MS:g}",
                  *(["--channels-last"] if x["channels_last"] else []))["results"][0]
        fit = cli("fit")["as_reported"]
        by_case[r["case"]] = est["by_category"]
        r["predicted_s"] = est["step_s"]
        r["ratio"] = r["measured_s"] / est["step_s"] if r["measured_s"] else None
        x["predicted_alloc_bytes"] = fit["torch_max_memory_allocated_bytes"]
        x["predicted_reserved_bytes"] = fit["torch_max_memory_reserved_bytes"]
        x["predicted_bound"] = est["bound"]
        x["predicted_gpu_s"] = est["gpu_busy_s"]  # the kernels' time, without the host's share
        x["predicted_step_host_ms"] = PROBE_STEP_HOST_MS
        if x.get("measured_alloc_bytes"):
            x["alloc_ratio"] = x["measured_alloc_bytes"] / x["predicted_alloc_bytes"]
    path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    path.with_suffix(".md").write_text(_markdown(doc))
    print(train_step_summary(doc))


def train_step_summary(doc: dict[str, Any]) -> str:
    """The train_step rows' errors (predicted / measured - 1) of step time and of the allocator's
    peak, one line each, and their medians."""
    lines = [f"{'train_step on ' + doc['device_name']:52s} {'meas ms':>8s} {'pred ms':>8s} {'error':>7s} "
             f"{'alloc GB':>8s} {'pred GB':>8s} {'error':>7s}"]
    step, mem = [], []
    for r in doc["rows"]:
        x = r["extra"]
        if r["probe"] != "train_step" or not r["predicted_s"] or not x.get("measured_alloc_bytes"):
            continue
        step.append(r["predicted_s"] / r["measured_s"] - 1)
        mem.append(x["predicted_alloc_bytes"] / x["measured_alloc_bytes"] - 1)
        lines.append(f"{r['case']:52s} {r['measured_s'] * 1e3:8.1f} {r['predicted_s'] * 1e3:8.1f} {step[-1]:+7.1%} "
                     f"{x['measured_alloc_bytes'] / 1e9:8.2f} {x['predicted_alloc_bytes'] / 1e9:8.2f} {mem[-1]:+7.1%}")
    if step:
        med = statistics.median
        lines.append(f"{len(step)} rows: step time median |error| {med(map(abs, step)):.1%} (signed {med(step):+.1%}); "
                     f"allocator peak median |error| {med(map(abs, mem)):.1%} (signed {med(mem):+.1%})")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------

def run(out: Path, only: tuple[str, ...], device: str, gpu: str, quick: bool) -> dict[str, Any]:
    p = Probe(device, gpu, quick)
    print(f"gpu_probe on {p.spec.name} ({device}, torch {torch.__version__})"
          + (" -- CPU self-check, timings meaningless" if not p.cuda else ""), flush=True)
    print(f"{'probe':14s} {'case':46s} {'meas ms':>10s} {'pred ms':>10s} {'ratio':>6s}", flush=True)
    fns: dict[str, Callable[[Probe], None]] = {"launch": probe_launch, "gemm": probe_gemm,
                                               "prefill_layer": probe_prefill_layer, "train_layer": probe_train_layer,
                                               "moe_layer": probe_moe_layer, "train_step": probe_train_step,
                                               "sustained": probe_sustained}
    doc: dict[str, Any] = {}
    for name in only:
        try:
            fns[name](p)
        except Exception as exc:  # one probe failing must not lose the others' rows
            p.add(name, f"FAILED: {type(exc).__name__}: {exc}"[:200], float("nan"), None)
        doc = _write(out, p)  # after each probe: a run stopped at its time limit keeps what it measured
    return doc


def _write(out: Path, p: Probe) -> dict[str, Any]:
    doc = {
        "schema": SCHEMA,
        "gpu": p.spec.id,
        "device_name": torch.cuda.get_device_name(p.dev) if p.cuda else "cpu",
        "self_check": not p.cuda,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "command": " ".join(sys.argv),
        "rows": [_finite(dict(asdict(r), ratio=r.ratio)) for r in p.rows],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_probe.json").write_text(json.dumps(doc, indent=1, default=_json_default, allow_nan=False) + "\n")
    (out / "gpu_probe.md").write_text(_markdown(doc))
    return doc


def _finite(v: Any) -> Any:
    """`v` with every NaN or infinity (a failed probe's measurement) as None: strict JSON."""
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _json_default(v: Any) -> Any:
    return str(v)


def _markdown(doc: dict[str, Any]) -> str:
    lines = [f"# gpu_probe: {doc['device_name']} ({doc['gpu']}), torch {doc['torch']}, CUDA {doc['cuda']}", "",
             f"`{doc['command']}`", ""]
    probe = None
    for r in doc["rows"]:
        if r["probe"] != probe:
            probe = r["probe"]
            lines += ["", f"## {probe}", "", "| case | measured ms | predicted ms | measured / predicted | notes |",
                      "|---|---|---|---|---|"]
        pred = f"{r['predicted_s'] * 1e3:.4g}" if r["predicted_s"] else "-"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else "-"
        notes = ", ".join(f"{k} {_fmt(v)}" for k, v in r["extra"].items())
        meas = r["measured_s"]
        lines.append(f"| {r['case']} | {meas * 1e3:.4g} | {pred} | {ratio} | {notes} |"
                     if meas is not None else f"| {r['case']} | - | - | - | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="folder for gpu_probe.json and gpu_probe.md")
    ap.add_argument("--predict", type=Path, metavar="JSON",
                    help="fill a probe JSON's train_step rows with estimate's and fit's predictions, and stop")
    ap.add_argument("--only", default=",".join(PROBES), help=f"probes, comma-separated: {', '.join(PROBES)}")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--gpu", default="h100-sxm5-80gb", help="catalog GPU the predictions are for, off CUDA")
    ap.add_argument("--quick", action="store_true", help="toy sizes (implied off CUDA)")
    args = ap.parse_args(argv)
    if args.predict:
        predict_train_steps(args.predict)
        return 0
    if args.out is None:
        print("error: --out DIR is required (or --predict JSON)", file=sys.stderr)
        return 2
    only = tuple(s.strip() for s in args.only.split(",") if s.strip())
    bad = [s for s in only if s not in PROBES]
    if bad:
        print(f"error: unknown probe(s) {', '.join(bad)}; valid: {', '.join(PROBES)}", file=sys.stderr)
        return 2
    quick = args.quick or not args.device.startswith("cuda")
    run(args.out, only, args.device, args.gpu, quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
