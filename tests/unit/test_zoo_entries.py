"""The zoo's entry files (whichgpu/workload/zoo/entries/*.toml) and their loader."""

from __future__ import annotations

from pathlib import Path

import pytest

from whichgpu.workload import zoo
from whichgpu.workload.zoo import ENTRY_FILES, all_entries, load_entries


def test_every_file_loads_in_order() -> None:
    ids = [e.id for name in ENTRY_FILES for e in load_entries(name)]
    assert ids == list(all_entries())
    assert len(ids) == len(set(ids))


def test_decoder_defaults_and_template() -> None:
    e = all_entries()["gpt2"]
    # [defaults] of decoders.toml under the entry's own fields
    assert (e.family, e.input_kind, e.default_batch_size, e.default_seq_len, e.causal_lm) == (
        "decoder", "tokens", 1, 1024, True)
    assert e.definition.startswith("in-house decoder mirroring transformers' GPT2LMHeadModel op for op")
    assert "LlamaForCausalLM" in all_entries()["llama-2-7b"].definition  # the default class


def test_tables_become_tuples() -> None:
    e = all_entries()["bert-large-pretraining"]
    assert e.batch_by_precision == (("amp", 64), ("fp16", 64), ("tf32", 64), ("fp32", 32))
    assert e.accumulated_batch == ((128, 8192), (512, 4096))
    assert e.grad_accum(64, 128) == 8192 // 64


def test_unknown_field_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bad.toml").write_text(
        '[[model]]\nid = "x"\ntitle = "X"\nfamily = "cnn"\ninput_kind = "image"\nbuilder = "m:f"\n'
        'definition = "d"\ndefault_batch_size = 1\nalias = ["y"]\n')
    monkeypatch.setattr(zoo, "ENTRIES_DIR", tmp_path)
    with pytest.raises(RuntimeError, match=r"bad.toml: model 'x': unknown fields \['alias'\]"):
        load_entries("bad")
