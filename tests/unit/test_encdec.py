"""Encoder-decoder, speech and hybrid models of the zoo (entries/encdec.toml), built by
transformers through the generic path: T5-Base, BART-Large, Whisper (large-v3, small) and the
Mamba-2 hybrid Nemotron-H 8B.

Checked: parameter counts against transformers' own count of the full model and the model cards,
forward FLOPs against the GEMM and attention arithmetic of each architecture (exact), the layer
truncation against the untruncated model (same trace totals), and the defaults and phases run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import needs_torch

from whichgpu.workload.spec import WorkloadSpec
from whichgpu.workload.zoo import get_entry, load_entries

pytestmark = [needs_torch, pytest.mark.usefixtures("isolated_cache")]

ENTRIES = [e.id for e in load_entries("encdec")]
# transformers' num_parameters() of each full model on meta (checked below for the small ones),
# and the model card's figure with the tolerance its rounding allows.
CARDS = {"t5-base": (220e6, 0.02), "bart-large": (406e6, 0.005), "whisper-large-v3": (1550e6, 0.005),
         "whisper-small": (244e6, 0.01), "nemotron-h-8b": (8.1e9, 0.005)}
PAIR = 2 * 64 + 2 * 64 + 5  # attention FLOPs per (query, key) pair and head of dim 64: QK^T, PV, softmax


def _trace(model: str, **kw: Any) -> Any:
    from whichgpu.workload.api import get_trace

    return get_trace(WorkloadSpec(model=model, **kw))


def _matmul_flops(t: Any) -> float:
    return sum(float(o.total_flops) for o in t.ops if o.category in ("matmul", "conv", "attention"))


def test_entries() -> None:
    assert ENTRIES == ["t5-base", "bart-large", "whisper-large-v3", "whisper-small", "nemotron-h-8b"]
    for alias, eid in [("google-t5/t5-base", "t5-base"), ("facebook/bart-large", "bart-large"),
                       ("openai/whisper-large-v3", "whisper-large-v3"), ("openai/whisper-small", "whisper-small"),
                       ("nvidia/Nemotron-H-8B-Base-8K", "nemotron-h-8b")]:
        assert get_entry(alias).id == eid
    for eid in ENTRIES[:4]:
        e = get_entry(eid)
        assert (e.family, e.input_kind, e.causal_lm) == ("seq2seq", "tokens", False)
        assert "not generation" in e.notes
    nem = get_entry("nemotron-h-8b")
    assert (nem.family, nem.causal_lm, nem.default_seq_len) == ("decoder", True, 8192)


@pytest.mark.parametrize("eid", ENTRIES)
def test_parameters_match_the_cards(eid: str) -> None:
    e = get_entry(eid)
    card, tol = CARDS[eid]
    assert e.params_reference == pytest.approx(card, rel=tol)
    t = _trace(eid, task="infer", batch_size=1, seq_len=64, precision="bf16")
    assert t.params == e.params_reference  # the truncated build counts the full model


@pytest.mark.parametrize(("eid", "cls"), [("t5-base", "T5ForConditionalGeneration"),
                                          ("bart-large", "BartForConditionalGeneration"),
                                          ("whisper-small", "WhisperForConditionalGeneration")])
def test_parameters_are_transformers_count_of_the_full_model(eid: str, cls: str) -> None:
    import torch
    import transformers

    from whichgpu.workload.zoo.llm.build import load_packaged_config

    cfg = {k: v for k, v in load_packaged_config(get_entry(eid).config).items() if not k.startswith("_")}
    with torch.device("meta"):
        model = getattr(transformers, cls)(transformers.AutoConfig.for_model(**cfg))
    assert model.num_parameters() == get_entry(eid).params_reference


def test_t5_base_forward_flops() -> None:
    # d 768, 12 + 12 layers, FF 3072, 12 heads of 64, vocab 32128; source 512, target 128 (the
    # default target_len). No biases; every attention carries T5's position bias as an additive
    # mask, so no causal block skipping (SDPA's memory-efficient kernel with a bias).
    t = _trace("t5-base", task="infer", batch_size=1, seq_len=512, precision="fp32")
    d, n, ff, v, s, tg, h = 768, 12, 3072, 32128, 512, 128, 12
    enc = n * s * 2 * (4 * d * d + 2 * d * ff) + n * h * s * s * PAIR
    dec = n * tg * 2 * (6 * d * d + 2 * d * ff) + n * s * 2 * 2 * d * d  # + cross K/V over the source
    dec += n * h * (tg * tg + tg * s) * PAIR + 2 * d * v * tg
    assert _matmul_flops(t) == enc + dec
    assert any("mem-efficient" in o.tags for o in t.ops if o.name == "whichgpu.attention")


def test_bart_large_forward_flops() -> None:
    # d 1024, 12 + 12 layers, FF 4096, 16 heads of 64, vocab 50265; source 1024, target 128;
    # the decoder's self-attention is causal (flash: 128*129/2 pairs per head).
    t = _trace("bart-large", task="infer", batch_size=1, seq_len=1024, precision="fp32")
    d, n, ff, v, s, tg, h = 1024, 12, 4096, 50265, 1024, 128, 16
    enc = n * s * 2 * (4 * d * d + 2 * d * ff) + n * h * s * s * PAIR
    dec = n * tg * 2 * (6 * d * d + 2 * d * ff) + n * s * 2 * 2 * d * d
    dec += n * h * (tg * (tg + 1) // 2 + tg * s) * PAIR + 2 * d * v * tg
    assert _matmul_flops(t) == enc + dec


def test_whisper_small_forward_flops() -> None:
    # 30 s of audio: 80 mel bins x 3000 frames; conv1 (80 -> 768, k3) over 3000 frames, conv2
    # (768 -> 768, k3, stride 2) to 1500 encoder positions; d 768, 12 + 12 layers, FF 3072, 12
    # heads of 64, vocab 51865; 448 target tokens.
    t = _trace("whisper-small", task="infer", batch_size=1, precision="fp32")
    assert t.seq_len == 448
    d, n, ff, v, s, tg, h = 768, 12, 3072, 51865, 1500, 448, 12
    conv = 2 * 80 * 3 * d * 3000 + 2 * d * 3 * d * 1500
    enc = n * s * 2 * (4 * d * d + 2 * d * ff) + n * h * s * s * PAIR
    dec = n * tg * 2 * (6 * d * d + 2 * d * ff) + n * s * 2 * 2 * d * d
    dec += n * h * (tg * (tg + 1) // 2 + tg * s) * PAIR + 2 * d * v * tg
    assert _matmul_flops(t) == conv + enc + dec
    assert t.input_bytes >= 80 * 3000 * 4  # the log-mel features


def test_whisper_target_is_at_most_448_tokens() -> None:
    from whichgpu.errors import InputError

    with pytest.raises(InputError, match="max_target_positions 448"):
        _trace("whisper-small", task="infer", batch_size=1, seq_len=449)


@pytest.mark.parametrize("eid", ENTRIES)
def test_defaults_run(eid: str) -> None:
    e = get_entry(eid)
    t = _trace(eid)  # default batch, sequence, precision (amp-bf16), training
    assert (t.batch_size, t.seq_len) == (e.default_batch_size, e.default_seq_len)
    assert t.total_flops("backward") > t.total_flops("forward") > 0
    assert "attention: whichgpu fused kernel" in t.notes
    assert t.coverage()["ops"] > 0.99


# ---------------------------------------------------------------------------------------------
# truncation: two layers per stack (or of each kind) stand for all of them
# ---------------------------------------------------------------------------------------------

TINY = {
    "bart": dict(model_type="bart", architectures=["BartForConditionalGeneration"], d_model=64, encoder_layers=5,
                 decoder_layers=4, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                 decoder_ffn_dim=128, vocab_size=500, max_position_embeddings=128),
    "t5": dict(model_type="t5", architectures=["T5ForConditionalGeneration"], d_model=64, d_ff=128, d_kv=16,
               num_heads=4, num_layers=5, num_decoder_layers=3, vocab_size=500, decoder_start_token_id=0),
    "whisper": dict(model_type="whisper", architectures=["WhisperForConditionalGeneration"], d_model=64,
                    encoder_layers=3, decoder_layers=5, encoder_attention_heads=4, decoder_attention_heads=4,
                    encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=500, num_mel_bins=16,
                    max_source_positions=100, max_target_positions=64, pad_token_id=0, bos_token_id=1,
                    eos_token_id=2, decoder_start_token_id=3),
    # Nemotron-H's pattern, shortened: Mamba-2 (M), MLP (-) and attention (*) layers
    "nemotron_h": dict(model_type="nemotron_h", architectures=["NemotronHForCausalLM"], hidden_size=64,
                       intermediate_size=128, hybrid_override_pattern="M-M-M*-M-M*-", num_attention_heads=4,
                       num_key_value_heads=2, attention_head_dim=16, mamba_num_heads=4, mamba_head_dim=32,
                       ssm_state_size=16, n_groups=2, conv_kernel=4, expand=2, chunk_size=16, vocab_size=500,
                       max_position_embeddings=256, mlp_hidden_act="relu2"),
}


def _captured(cfg: dict[str, Any], task: str, truncate: bool) -> Any:
    from whichgpu.workload.capture import capture
    from whichgpu.workload.hf import build_hf
    from whichgpu.workload.noinit import skip_init
    from whichgpu.workload.optim import resolve_optimizer
    from whichgpu.workload.precision import get_precision
    from whichgpu.workload.zoo.base import BuildRequest

    req = BuildRequest(task, 2, seq_len=32, truncate_layers=truncate)
    with skip_init():
        built = build_hf(cfg, req, "tiny")
    return capture(built, name="tiny", task=task, precision=get_precision("bf16", task),
                   optimizer=resolve_optimizer("adamw", "foreach"))


@pytest.mark.parametrize("name", list(TINY))
@pytest.mark.parametrize("task", ["train", "infer"])
def test_truncated_trace_equals_the_full_model(name: str, task: str) -> None:
    cut, full = _captured(TINY[name], task, True), _captured(TINY[name], task, False)
    assert cut.repeats and not full.repeats
    assert len(cut.ops) < len(full.ops)
    assert cut.params == full.params
    gemms = ("matmul", "attention")  # (conv: see nemotron_h below)
    assert sum(o.total_flops for o in cut.ops if o.category in gemms) == sum(
        o.total_flops for o in full.ops if o.category in gemms)
    if name == "nemotron_h":
        # transformers' Mamba fallback applies a fresh ACT2FN module (not in the model's tree), so
        # the trace puts its SiLU, and in training the conv1d backward, outside the repeated
        # layer, counted once: 0.6 % of this tiny model's FLOPs (see the report on tracker.py).
        assert cut.total_flops() == pytest.approx(full.total_flops(), rel=0.01)
    elif task == "infer":
        assert cut.total_flops() == full.total_flops() and cut.total_bytes() == full.total_bytes()
    else:
        # the encoder output's gradient is summed over the decoder layers that read it, and T5's
        # shared position bias's gradient over the layers that add it (its attention runs SDPA's
        # math path, hf_interfaces._math_attention): those adds are outside the repeated layers
        # (4 of 9 decoder layers' worth of a (2, 32, 64) add; adds of the (1, 4, 32, 32) bias: 1.3e-4)
        assert cut.total_flops() == pytest.approx(full.total_flops(), rel=2e-4)


def test_t5_attention_with_a_bias_that_needs_a_gradient_runs_unfused_in_training() -> None:
    # T5's self-attention adds a learned position bias: in training it needs a gradient, which no
    # fused SDPA kernel gives, so PyTorch runs the math path (scores, softmax, probabilities); the
    # cross-attention (no learned bias) and inference stay fused (data/gpu_probes/README.md)
    def counts(task: str) -> dict[tuple[str, str], int]:
        tr = _captured(TINY["t5"], task, False)
        out: dict[tuple[str, str], int] = {}
        for o in tr.ops:
            if o.category in ("attention", "softmax"):
                out[(o.category, o.phase)] = out.get((o.category, o.phase), 0) + o.count
        return out

    # 5 encoder + 3 decoder self-attentions unfused, plus the loss's log-softmax; 3 cross fused
    assert counts("train") == {("softmax", "forward"): 9, ("softmax", "backward"): 9,
                               ("attention", "forward"): 3, ("attention", "backward"): 3}
    assert counts("infer") == {("attention", "forward"): 11}


def test_each_stack_is_truncated() -> None:
    t = _captured(TINY["t5"], "infer", True)
    assert t.repeats == {"encoder.block.1": 3, "decoder.block.1": 1}
    t = _captured(TINY["nemotron_h"], "infer", True)
    # 5 Mamba, 5 MLP, 2 attention layers: two of each built, the second Mamba and MLP repeated 3 times
    assert t.repeats == {"model.layers.2": 3, "model.layers.3": 3}


# ---------------------------------------------------------------------------------------------
# Nemotron-H: a Mamba-2 hybrid served as a causal LM (prefill + decode)
# ---------------------------------------------------------------------------------------------

def test_nemotron_h_phases(tmp_path: Path) -> None:
    e = get_entry("nemotron-h-8b")
    assert e.params_reference is not None
    pre = _trace(e.id, task="infer", phase="prefill", batch_size=1, seq_len=1024, precision="bf16")
    dec = _trace(e.id, task="infer", phase="decode", batch_size=4, context=1024, precision="bf16")
    assert any("24 linear_attention, 24 mlp, 4 full_attention; built 6" in n for n in pre.notes)
    # decode: 2 FLOPs per weight per token in GEMMs (the embedding is a lookup: 131072 x 4096 fewer),
    # plus attention over the 1024 cached positions and Mamba-2's state update (elementwise)
    active = e.params_reference - 131072 * 4096
    gemm = sum(o.total_flops for o in dec.ops if o.category == "matmul")
    assert gemm == pytest.approx(2 * active * 4, rel=0.005)
    assert dec.total_flops() == pytest.approx(2 * active * 4, rel=0.03)
    # ...and reads every weight once: at least 2 bytes per parameter in BF16
    assert dec.total_bytes() > 2 * e.params_reference
    # prefill: logits for the last position only; + the chunked scan's matmuls
    gemm = sum(o.total_flops for o in pre.ops if o.category == "matmul")
    assert gemm == pytest.approx(2 * (active - 131072 * 4096) * 1024, rel=0.03)
    for t in (pre, dec):
        att = sum(o.count for o in t.ops if o.name == "whichgpu.attention")
        assert att == 4 and t.coverage()["unmodelled_names"] == []


def test_nemotron_h_training_coverage() -> None:
    t = _trace("nemotron-h-8b", batch_size=1, seq_len=1024, precision="bf16")
    cov = t.coverage()
    # the one op that had no FLOP formula when the hybrid was added: the backward of the softplus of
    # Mamba-2's dt (elementwise); everything else of the trace is costed
    assert set(cov["unmodelled_names"]) <= {"aten.softplus_backward"} and cov["ops"] > 0.99
    assert t.params == get_entry("nemotron-h-8b").params_reference


def test_a_config_file_of_a_seq2seq_model(tmp_path: Path) -> None:
    # the same path for a user's config.json: the decoder length is the option target_len
    p = tmp_path / "config.json"
    p.write_text(json.dumps(TINY["bart"]))
    t = _trace(str(p), batch_size=2, seq_len=32, options=(("target_len", 16),))
    assert t.tokens == 2 * (32 + 16)
    assert any("source 32 tokens, target 16 tokens" in n for n in t.notes)
