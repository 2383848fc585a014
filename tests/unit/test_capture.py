"""Workload capture: parameter counts, FLOPs against torch's FlopCounterMode, bytes, precision
policies, block repetition, LoRA/checkpointing, and clear errors for bad models."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from tests.conftest import needs_torch

pytestmark = needs_torch


def _trace(model: str, **kw):  # type: ignore[no-untyped-def]
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.spec import WorkloadSpec

    return get_trace(WorkloadSpec(model, **kw), use_cache=False)


def _capture(built, task="train", precision="fp32", **kw):  # type: ignore[no-untyped-def]
    from whichgpu.workload.capture import capture
    from whichgpu.workload.optim import resolve_optimizer
    from whichgpu.workload.precision import get_precision

    return capture(built, name="t", task=task, precision=get_precision(precision, task),
                   optimizer=resolve_optimizer("sgd"), **kw)


@pytest.mark.parametrize(("model", "params"), [
    ("llama-2-7b", 6_738_415_616),     # meta-llama/Llama-2-7b-hf safetensors index
    ("resnet50-v1.5", 25_557_032),     # torchvision resnet50
    ("gpt2", 124_439_808),             # openai-community/gpt2
])
def test_parameter_counts_are_exact(model: str, params: int) -> None:
    kw = {"seq_len": 128} if model != "resnet50-v1.5" else {"image_size": 64}
    assert _trace(model, batch_size=1, task="infer", precision="fp32", **kw).params == params


def test_bert_large_is_about_335m() -> None:
    t = _trace("bert-large-squad", batch_size=1, seq_len=128, task="infer", precision="fp32")
    # BERT-Large: 24 layers x 12.6M + embeddings (vocab padded to 30528 as NVIDIA's BERT) + QA head.
    assert 330e6 < t.params < 340e6


def _flop_counter_total(model, inputs, loss_fn=None) -> float:  # type: ignore[no-untyped-def]
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        out = model(**inputs) if isinstance(inputs, dict) else model(*inputs)
        if loss_fn is not None:
            loss_fn(out, inputs).backward()
    return float(fc.get_total_flops())


def test_gemm_flops_equal_flopcountermode_resnet50_training() -> None:
    """Convolution and matmul FLOPs, forward and backward, equal torch's own counter."""
    from whichgpu.workload.zoo import get_entry
    from whichgpu.workload.zoo.base import BuildRequest

    build = get_entry("resnet50-v1.5").load_builder()
    ref_b = build(BuildRequest("train", 2, image_size=64))
    ref = _flop_counter_total(ref_b.model, ref_b.inputs, ref_b.loss_fn)
    t = _capture(build(BuildRequest("train", 2, image_size=64)))
    ours = sum(o.flops * o.count for o in t.ops if o.category in ("conv", "matmul"))
    assert ours == pytest.approx(ref, rel=1e-9)


def test_gemm_flops_equal_flopcountermode_gpt2_eager_attention() -> None:
    from whichgpu.workload.zoo.base import BuildRequest
    from whichgpu.workload.zoo.llm.build import build_packaged

    req = BuildRequest("train", 2, seq_len=64, truncate_layers=False, options=(("attention", "eager"),))
    ref_b = build_packaged(req, "gpt2")
    ref = _flop_counter_total(ref_b.model, ref_b.inputs, ref_b.loss_fn)
    t = _capture(build_packaged(req, "gpt2"))
    ours = sum(o.flops * o.count for o in t.ops if o.category == "matmul")
    assert ours == pytest.approx(ref, rel=1e-9)


def test_llm_training_flops_match_6nt_plus_attention() -> None:
    """Training FLOPs = 6 * N * tokens (N without embeddings, Kaplan et al. 2020) + attention.

    Attention per layer, causal, flash kernels: forward 4*d per (query, key) pair over
    S(S+1)/2 pairs per head, backward 2.5x forward (recompute of S in the backward kernel).
    """
    s, b = 2048, 1
    t = _trace("llama-2-7b", batch_size=b, seq_len=s, precision="amp-bf16")
    layers, heads, hd, vocab, hidden = 32, 32, 128, 32000, 4096
    n_nonembed = t.params - vocab * hidden  # input embedding table does no matmul
    pairs = s * (s + 1) / 2
    attention = layers * b * heads * pairs * 4 * hd * 3.5
    expected = 6 * n_nonembed * b * s + attention
    gemm = sum(o.flops * o.count for o in t.ops if o.category in ("matmul", "attention"))
    assert gemm == pytest.approx(expected, rel=0.02)


def test_bytes_of_an_fp32_add_are_exact() -> None:
    import torch
    from torch import nn

    from whichgpu.workload.zoo.base import Built

    class Add(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a + b

    n = 1 << 20
    x = torch.empty(n, device="meta")
    t = _capture(Built(Add(), (x, torch.empty(n, device="meta"))), task="infer")
    adds = [o for o in t.ops if o.name == "aten.add"]
    assert len(adds) == 1
    assert adds[0].bytes_read == 8 * n  # two 4-byte inputs, read once each
    assert adds[0].bytes_written == 4 * n
    assert adds[0].flops == n and adds[0].category == "pointwise"


def test_amp_puts_matmuls_in_fp16_and_softmax_in_fp32() -> None:
    t = _trace("gpt2", batch_size=1, seq_len=64, precision="amp-fp16", attention="eager") if False else None
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.spec import WorkloadSpec

    t = get_trace(WorkloadSpec("gpt2", batch_size=1, seq_len=64, precision="amp-fp16",
                               options=(("attention", "eager"),)), use_cache=False)
    mms = [o for o in t.ops if o.category == "matmul" and o.phase == "forward"]
    soft = [o for o in t.ops if o.name == "aten._softmax" and o.phase == "forward"]
    assert mms and all(o.dtype == "fp16" for o in mms)
    assert soft and all(o.dtype == "fp32" for o in soft)
    # casts to fp16 are real kernels in the trace
    assert any(o.name == "aten._to_copy" for o in t.ops)


def test_fp32_and_tf32_policies_label_matmuls() -> None:
    t32 = _trace("gpt2", batch_size=1, seq_len=32, precision="fp32")
    tf = _trace("gpt2", batch_size=1, seq_len=32, precision="tf32")
    assert {o.dtype for o in t32.ops if o.category == "matmul"} == {"fp32"}
    assert {o.dtype for o in tf.ops if o.category == "matmul"} == {"tf32"}


def test_fused_attention_is_one_kernel_with_causal_flops() -> None:
    t = _trace("gpt2", batch_size=1, seq_len=128, precision="amp-bf16")
    att = [o for o in t.ops if o.category == "attention" and o.phase == "forward"]
    assert att and all("causal" in o.tags and "flash" in o.tags for o in att)


def test_repeated_blocks_equal_a_full_depth_capture() -> None:
    from whichgpu.workload.zoo.base import BuildRequest
    from whichgpu.workload.zoo.llm.build import build_packaged

    full = _capture(build_packaged(BuildRequest("train", 1, seq_len=64, truncate_layers=False), "gpt2-medium"))
    trunc = _capture(build_packaged(BuildRequest("train", 1, seq_len=64), "gpt2-medium"))
    assert trunc.repeats == {"transformer.h.1": 22}
    assert trunc.params == full.params
    for ph in ("forward", "backward", "optimizer"):
        assert trunc.total_flops(ph) == pytest.approx(full.total_flops(ph), rel=1e-9)
        assert trunc.total_bytes(ph) == pytest.approx(full.total_bytes(ph), rel=1e-9)


def test_lora_freezes_the_base_and_drops_weight_gradients() -> None:
    full = _trace("llama-2-7b", batch_size=1, seq_len=256)
    lora = _trace("llama-2-7b", batch_size=1, seq_len=256, finetune="lora", lora_rank=16)
    # r=16 on all linear layers but the head: 32 layers x (4 attn + 3 mlp) adapters
    assert lora.trainable_params == 39_976_960
    assert lora.total_flops("backward") < 0.6 * full.total_flops("backward")
    q = _trace("llama-2-7b", batch_size=1, seq_len=256, finetune="qlora")
    assert q.buffer_bytes > 3.0e9 and q.param_bytes < 2.0e9  # NF4 base weights ~0.5 byte each


def test_full_checkpointing_recomputes_the_forward() -> None:
    """Each block's forward runs again in backward, except what backward does not need: PyTorch's
    non-reentrant checkpoint stops once the last saved tensor is rebuilt, so a GPT-2 block skips
    its final MLP projection (4h^2 of its 12h^2 GEMM FLOPs): recompute = 2/3 of the block GEMMs."""
    base = _trace("gpt2", batch_size=2, seq_len=128)
    ckpt = _trace("gpt2", batch_size=2, seq_len=128, checkpointing="full")
    block_fwd = sum(o.flops * o.count for o in base.ops if o.phase == "forward" and o.category == "matmul"
                    and o.module.startswith("transformer.h."))
    recompute = sum(o.flops * o.count for o in ckpt.ops if "recompute" in o.tags and o.category == "matmul")
    assert recompute == pytest.approx(block_fwd * 8 / 12, rel=1e-6)
    assert ckpt.total_flops("backward") == pytest.approx(base.total_flops("backward") + recompute, rel=0.01)


def test_full_checkpointing_saves_only_block_inputs() -> None:
    """Bytes a repeated block allocates in forward and keeps for backward: with full
    checkpointing only its input (b*s*h FP32 = 2*128*768*4 bytes) survives."""
    def saved_per_block(t):  # type: ignore[no-untyped-def]
        blk = next(iter(t.repeats))
        end = max(i for i, o in enumerate(t.ops) if o.block == blk and o.phase == "forward")
        live: dict[int, int] = {}
        for e in t.mem_events:
            if e.op_index > end:
                break
            if e.delta > 0 and e.block == blk:
                live[e.sid] = e.delta
            elif e.delta < 0:
                live.pop(e.sid, None)
        return sum(live.values())

    base = _trace("gpt2", batch_size=2, seq_len=128, precision="fp32")
    ckpt = _trace("gpt2", batch_size=2, seq_len=128, precision="fp32", checkpointing="full")
    assert saved_per_block(ckpt) == 2 * 128 * 768 * 4
    assert saved_per_block(base) > 10 * saved_per_block(ckpt)


def test_coverage_is_reported() -> None:
    t = _trace("resnet50-v1.5", batch_size=2, image_size=64)
    cov = t.coverage()
    assert cov["ops"] == 1.0 and cov["unmodelled_names"] == []


def test_decode_reads_the_kv_cache() -> None:
    t = _trace("llama-2-7b", task="infer", phase="decode", context=1024, batch_size=4, precision="bf16")
    att = [o for o in t.ops if o.category == "attention"]
    kv_bytes = 2 * 32 * 4 * 1025 * 4096 * 2  # K and V, 32 layers, batch 4, 1025 positions, bf16
    assert sum(o.bytes_read * o.count for o in att) == pytest.approx(kv_bytes, rel=0.02)
    assert t.total_flops() < 2.1 * 4 * t.params  # ~2 FLOPs per parameter per token


def test_kv_cache_written_in_place_is_not_an_allocation() -> None:
    """The static KV cache is a model input: writing it in place allocates nothing."""
    t = _trace("llama-2-7b", task="infer", phase="decode", context=512, batch_size=2, precision="bf16")
    copies = {i for i, o in enumerate(t.ops) if o.name == "aten.index_copy_"}
    assert copies
    assert not [e for e in t.mem_events if e.op_index in copies and e.delta > 0]
    # allocation ids are unique even when storage addresses are reused
    allocs = [e.sid for e in t.mem_events if e.delta > 0]
    assert len(allocs) == len(set(allocs))


def test_trace_json_roundtrip() -> None:
    from whichgpu.workload.trace import Trace

    t = _trace("gpt2", batch_size=1, seq_len=32)
    t2 = Trace.from_json(t.to_json())
    assert t2.ops == t.ops and t2.mem_events == t.mem_events and t2.params == t.params


# ---- bad models ------------------------------------------------------------------------------

def test_factory_that_raises(tmp_path: Path) -> None:
    from whichgpu.errors import CaptureError

    f = tmp_path / "m.py"
    f.write_text("def make():\n    raise ValueError('boom')\n")
    with pytest.raises(CaptureError, match="raised ValueError: boom"):
        _trace(f"{f}:make")


def test_factory_with_an_op_that_cannot_run_on_meta(tmp_path: Path) -> None:
    from whichgpu.errors import CaptureError

    f = tmp_path / "m.py"
    f.write_text(textwrap.dedent("""
        import torch
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 4)
            def forward(self, x):
                return self.lin(x[x > 0].reshape(-1, 4))  # data-dependent shape
        def make():
            return M(), [(8, 4)]
    """))
    with pytest.raises(CaptureError, match=r"meta|trace"):
        _trace(f"{f}:make")


def test_factory_works_and_counts(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text(textwrap.dedent("""
        import torch
        def make(batch_size=4):
            m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
            return m, [(batch_size, 16)]
    """))
    t = _trace(f"{f}:make", batch_size=8)
    assert t.params == 16 * 32 + 32 + 32 * 2 + 2
    fwd = sum(o.flops for o in t.ops if o.category == "matmul" and o.phase == "forward")
    assert fwd == 2 * 8 * 16 * 32 + 2 * 8 * 32 * 2


def test_training_a_frozen_factory_model_blames_the_task(tmp_path: Path) -> None:
    from whichgpu.errors import InputError

    f = tmp_path / "m.py"
    f.write_text(textwrap.dedent("""
        import torch
        def make():
            m = torch.nn.Linear(4, 4)
            m.requires_grad_(False)
            return m, [(2, 4)]
    """))
    with pytest.raises(InputError, match="no trainable parameters") as e:
        _trace(f"{f}:make")
    assert e.value.field == "task" and "--" not in str(e.value)  # the CLI prints "--task: ..."


def test_missing_factory_function(tmp_path: Path) -> None:
    from whichgpu.errors import CaptureError

    f = tmp_path / "m.py"
    f.write_text("def other():\n    pass\n")
    with pytest.raises(CaptureError, match="no function 'make'"):
        _trace(f"{f}:make")


def test_malformed_config_json(tmp_path: Path) -> None:
    from whichgpu.errors import CaptureError

    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(CaptureError, match="not valid JSON"):
        _trace(str(bad))
    bad.write_text(json.dumps({"hidden_size": 10}))
    with pytest.raises(CaptureError, match="model_type"):
        _trace(str(bad))
    bad.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                               "num_attention_heads": 5, "intermediate_size": 128, "vocab_size": 100}))
    with pytest.raises(CaptureError, match="divisible"):
        _trace(str(bad), seq_len=16)


def test_hf_config_of_a_builtin_family(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
                               "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
                               "vocab_size": 1000, "max_position_embeddings": 512}))
    t = _trace(str(cfg), batch_size=2, seq_len=64)
    per_layer = 256 * 256 * 2 + 2 * 256 * 64 + 3 * 256 * 688 + 2 * 256
    assert t.params == 1000 * 256 * 2 + 4 * per_layer + 256


def test_unknown_model_name() -> None:
    from whichgpu.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="did you mean"):
        _trace("resnet-5O")


def test_a_capture_does_not_import_torch_dynamo(tmp_path: Path) -> None:
    """Cold-start cost: PyTorch's lazy disable-dynamo shims are resolved up front (nodynamo.py),
    and activation checkpointing is our own (checkpointing.py), so capturing a built-in model never
    imports torch._dynamo (1-1.5 s on this machine)."""
    import os
    import subprocess
    import sys

    code = ("import sys\n"
            "from whichgpu.workload.api import get_trace\n"
            "from whichgpu.workload.spec import WorkloadSpec\n"
            "get_trace(WorkloadSpec('gpt2', batch_size=2, seq_len=64))\n"
            "get_trace(WorkloadSpec('resnet50-v1.5', batch_size=2, image_size=64, precision='amp-fp16'))\n"
            "get_trace(WorkloadSpec('gpt2', batch_size=2, seq_len=64, finetune='lora', checkpointing='full'))\n"
            "get_trace(WorkloadSpec('gpt2', batch_size=2, seq_len=64, finetune='qlora', checkpointing='selective'))\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "WHICHGPU_CACHE_DIR": str(tmp_path)}).stdout.strip()
    assert out == "False"


def test_a_trace_does_not_depend_on_garbage_collection() -> None:
    """Captures run with the cyclic collector paused (a cold-start saving): the trace must be
    the same when it collects often, since tensors are freed by reference counting. The
    collector's state is restored afterwards."""
    import gc
    import json

    from whichgpu.workload.api import _capture, _capture_now, resolve
    from whichgpu.workload.spec import WorkloadSpec, classify

    spec, src = resolve(WorkloadSpec("gpt2", batch_size=2, seq_len=32, checkpointing="full"))
    assert src == classify("gpt2")
    assert gc.isenabled()
    paused = json.loads(_capture(spec, src).to_json())
    assert gc.isenabled()
    old = gc.get_threshold()
    gc.set_threshold(50, 2, 2)
    try:
        collected = json.loads(_capture_now(spec, src).to_json())
    finally:
        gc.set_threshold(*old)
    for d in (paused, collected):
        d.pop("capture_seconds")
    assert paused == collected
    assert paused["mem_events"]
