"""The generic config.json path: models that transformers builds (a model_type with no in-house
definition), with whichgpu's kernels registered in transformers' interfaces
(whichgpu/workload/zoo/hf_interfaces.py, whichgpu/workload/hf.py).

Every model here is a tiny config written to a temporary config.json and captured through the
public API (`get_trace`); the shapes are chosen so that the arithmetic in the comments is exact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import needs_torch

from whichgpu.workload.spec import WorkloadSpec
from whichgpu.workload.zoo.llm.args import SUPPORTED

pytestmark = [needs_torch, pytest.mark.usefixtures("isolated_cache")]

# OLMoE scaled down: hidden 128, expert intermediate 512 (the experts dominate the FLOPs).
OLMOE = dict(model_type="olmoe", architectures=["OlmoeForCausalLM"], hidden_size=128, intermediate_size=512,
             num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, vocab_size=1000,
             max_position_embeddings=512, num_experts=8, num_experts_per_tok=2)
B, S = 2, 64  # 128 tokens per step


def _config(tmp_path: Path, cfg: dict[str, Any], name: str = "config.json") -> str:
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return str(p)


def _trace(model: str, **kw: Any) -> Any:
    from whichgpu.workload.api import get_trace

    kw.setdefault("batch_size", B)
    kw.setdefault("seq_len", S)
    return get_trace(WorkloadSpec(model=model, **kw))


def _flops(trace: Any, name: str) -> float:
    return sum(float(o.total_flops) for o in trace.ops if o.name.startswith(name))


# ---------------------------------------------------------------------------------------------
# routed experts through ExpertsInterface
# ---------------------------------------------------------------------------------------------

def test_the_moe_configs_take_the_generic_path() -> None:
    assert "olmoe" not in SUPPORTED and "granite_swa" not in SUPPORTED and "deberta-v2" not in SUPPORTED


@pytest.mark.parametrize("precision", ["fp32", "amp-bf16", "bf16"])
def test_moe_traces_in_every_precision(tmp_path: Path, precision: str) -> None:
    t = _trace(_config(tmp_path, OLMOE), precision=precision)
    names = {o.name for o in t.ops}
    assert {"whichgpu.grouped_mm", "whichgpu.grouped_mm_backward"} <= names
    # transformers' own experts (torch._grouped_mm, BF16-only on meta) and anything data-dependent
    assert not names & {"aten._grouped_mm", "aten.histc", "aten.nonzero", "aten.sort", "aten.unique",
                        "aten._unique2", "aten.bincount", "aten.where"}
    assert t.coverage()["unmodelled_names"] == []
    assert any("experts: grouped GEMMs, balanced routing, dropless" in n for n in t.notes)
    # 4 layers x 2 grouped GEMMs forward (gate_up, down), whatever the truncation
    assert sum(o.count for o in t.ops if o.name == "whichgpu.grouped_mm") == 4 * 2


def test_moe_flops_scale_with_top_k_not_experts(tmp_path: Path) -> None:
    top2 = _trace(_config(tmp_path, OLMOE, "e8.json"), task="infer", precision="bf16")
    wide = _trace(_config(tmp_path, {**OLMOE, "num_experts": 32}, "e32.json"), task="infer", precision="bf16")
    top4 = _trace(_config(tmp_path, {**OLMOE, "num_experts_per_tok": 4}, "k4.json"), task="infer", precision="bf16")
    # 32 experts instead of 8: only the router grows (128 tokens x 2 x 128 x 24 per layer)
    assert wide.total_flops() == pytest.approx(top2.total_flops(), rel=0.01)
    assert _flops(wide, "whichgpu.grouped_mm") == _flops(top2, "whichgpu.grouped_mm")
    # experts per token: 128 tokens x 2 rows x (2 x 128 x 1024 + 2 x 512 x 128) x 4 layers
    expert_flops = 128 * 2 * (2 * 128 * 1024 + 2 * 512 * 128) * 4
    assert _flops(top2, "whichgpu.grouped_mm") == expert_flops
    assert _flops(top4, "whichgpu.grouped_mm") == 2 * expert_flops
    assert top4.total_flops() > 1.5 * top2.total_flops()


def test_moe_capacity_option(tmp_path: Path) -> None:
    path = _config(tmp_path, OLMOE)
    dropless = _trace(path, task="infer", precision="bf16")
    padded = _trace(path, task="infer", precision="bf16", options=(("moe_capacity", 1.25),))
    # ceil(1.25 x 256 routed rows / 8 experts) = 40 rows per expert: 320 rows, 1.25 x the dropless
    assert _flops(padded, "whichgpu.grouped_mm") == 1.25 * _flops(dropless, "whichgpu.grouped_mm")
    assert any("capacity factor 1.25" in n for n in padded.notes)


# ---------------------------------------------------------------------------------------------
# attention through AttentionInterface, and the fallbacks
# ---------------------------------------------------------------------------------------------

# granite_swa: a sliding window (32) on 4 of 6 layers and attention sinks on all of them.
GRANITE_SWA = dict(model_type="granite_swa", architectures=["GraniteSWAForCausalLM"], hidden_size=128,
                   intermediate_size=256, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
                   vocab_size=1000, max_position_embeddings=512, sliding_window=32,
                   layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
                                "sliding_attention", "full_attention"])


def test_attention_is_the_fused_kernel_with_window_and_sinks(tmp_path: Path) -> None:
    t = _trace(_config(tmp_path, GRANITE_SWA), seq_len=128, task="infer", precision="bf16")
    assert "attention: whichgpu fused kernel" in t.notes
    att = [o for o in t.ops if o.name == "whichgpu.attention"]
    windowed = sum(o.count for o in att if "window=32" in o.tags)
    full = sum(o.count for o in att if not any(x.startswith("window=") for x in o.tags))
    assert (windowed, full) == (4, 2)  # every layer counted once, truncated or not
    assert all("sinks" in o.tags and "causal" in o.tags and "gqa=2" in o.tags for o in att)
    assert not {o.name for o in t.ops} & {"aten._softmax", "aten.bmm"}  # no eager attention
    # causal window 32 over 128 queries: 32*33/2 + 96*32 = 3600 pairs per head, against 128*129/2
    w = next(o for o in att if "window=32" in o.tags)
    f = next(o for o in att if "window=32" not in o.tags)
    assert w.flops / f.flops == pytest.approx(3600 / (128 * 129 / 2))


def test_mixed_layer_kinds_are_truncated_per_kind(tmp_path: Path) -> None:
    t = _trace(_config(tmp_path, GRANITE_SWA), seq_len=128, task="infer", precision="bf16")
    # kept: layers 0, 1 (sliding) and 2, 5 (full); the second sliding one stands for the other two
    assert t.repeats == {"model.layers.1": 2}
    assert any("4 sliding_attention, 2 full_attention; built 4" in n for n in t.notes)


def test_softcap_reaches_the_kernel(tmp_path: Path) -> None:
    cfg = dict(model_type="vaultgemma", hidden_size=128, intermediate_size=256, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=1000,
               max_position_embeddings=512, attn_logit_softcapping=50.0)
    assert cfg["model_type"] not in SUPPORTED
    t = _trace(_config(tmp_path, cfg), task="infer", precision="bf16")
    att = [o for o in t.ops if o.name == "whichgpu.attention"]
    assert len(att) == 2 and all("softcap" in o.tags for o in att)


DEBERTA_V3 = dict(model_type="deberta-v2", architectures=["DebertaV2ForMaskedLM"], hidden_size=128,
                  intermediate_size=256, num_hidden_layers=3, num_attention_heads=4, vocab_size=1000,
                  max_position_embeddings=512, relative_attention=True, position_buckets=256,
                  norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
                  position_biased_input=False, type_vocab_size=0)


def test_deberta_v3_runs_with_its_own_attention(tmp_path: Path) -> None:
    # DeBERTa-v2/v3 has its own disentangled attention: no AttentionInterface, no SDPA (it used
    # to fail: "does not support ... scaled_dot_product_attention").
    t = _trace(_config(tmp_path, DEBERTA_V3), seq_len=128, precision="amp-bf16")
    note = next(n for n in t.notes if n.startswith("attention:"))
    assert note.startswith("attention: eager (") and "DebertaV2ForMaskedLM does not support SDPA" in note
    assert t.total_flops("backward") > 0 and t.repeats == {"deberta.encoder.layer.1": 1}


BART = dict(model_type="bart", architectures=["BartForConditionalGeneration"], d_model=128, encoder_layers=4,
            decoder_layers=4, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
            decoder_ffn_dim=256, vocab_size=1000, max_position_embeddings=512)


def test_a_failing_kernel_falls_back_to_sdpa(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from whichgpu.workload.zoo import hf_interfaces

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("kernel refused")

    monkeypatch.setattr(hf_interfaces, "attention_forward", broken)
    try:
        t = _trace(_config(tmp_path, BART), task="infer")
    finally:
        monkeypatch.undo()
        hf_interfaces.register()  # the real kernel back in transformers' registry
    note = next(n for n in t.notes if n.startswith("attention:"))
    assert note.startswith("attention: sdpa (whichgpu: RuntimeError: kernel refused")
    # SDPA is routed to the same fused kernel by the capture
    assert sum(o.count for o in t.ops if o.name == "whichgpu.attention") == 4 + 2 * 4


def test_bart_masks_do_not_read_meta_values_under_sdpa(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # BART's decoder builds a 2-D mask of ones; SDPA's mask code asks whether it is all ones
    # (.item()), which meta tensors cannot answer: the patched helper answers "no padding".
    from whichgpu.workload.zoo import hf_interfaces

    monkeypatch.setattr(hf_interfaces, "supports_interface", lambda cls: False)
    t = _trace(_config(tmp_path, BART), precision="bf16")
    assert any(n.startswith("attention: sdpa") for n in t.notes)
    att = [o for o in t.ops if o.name == "whichgpu.attention"]
    assert all(o.tags[0] == "flash" for o in att)  # no materialised mask: the flash kernel


def test_reading_meta_values_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import PreTrainedModel

    from whichgpu.errors import CaptureError
    from whichgpu.workload.zoo import hf_interfaces

    hf_interfaces.register()
    original = PreTrainedModel.warn_if_padding_and_no_attention_mask.__wrapped__  # type: ignore[attr-defined]
    monkeypatch.setattr(PreTrainedModel, "warn_if_padding_and_no_attention_mask", original)
    monkeypatch.setattr(hf_interfaces, "_meta_pad_warning", lambda f: f)  # (register() leaves it unpatched)
    with pytest.raises(CaptureError) as e:
        _trace(_config(tmp_path, DEBERTA_V3), seq_len=128)
    msg = str(e.value)
    assert "\n" not in msg and "model_type 'deberta-v2'" in msg
    assert "reads tensor values (.item() on a meta tensor) in modeling_utils.py:" in msg


def test_decode_is_refused_for_an_encoder_decoder(tmp_path: Path) -> None:
    from whichgpu.errors import InputError

    with pytest.raises(InputError, match="phase decode applies to causal LMs"):
        _trace(_config(tmp_path, BART), task="infer", phase="decode", context=32, seq_len=None)
