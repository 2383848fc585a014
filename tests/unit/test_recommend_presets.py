"""The use-case presets: docs/presets.md shows what runs, and every preset resolves (torch-free)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from whichgpu.errors import UnknownNameError
from whichgpu.recommend.presets import DEFAULT_PRESET, PRESETS, get_preset, markdown_table
from whichgpu.recommend.request import OBJECTIVES
from whichgpu.recommend.workloads import make_workload

DOC = Path(__file__).resolve().parents[2] / "docs" / "presets.md"
NAMES = ("learning", "kaggle", "cv-research", "nlp-research", "llm-finetune", "llm-pretrain", "llm-serving",
         "image-generation")


def doc_table() -> str:
    text = DOC.read_text(encoding="utf-8")
    m = re.search(r"<!-- presets:begin -->\n(.*?)\n<!-- presets:end -->", text, re.S)
    assert m, "docs/presets.md lost its presets:begin/end markers"
    return m.group(1).strip()


def test_the_documented_table_is_the_one_the_code_makes() -> None:
    assert doc_table() == markdown_table(), (
        "docs/presets.md is out of date: paste whichgpu.recommend.presets.markdown_table() between the markers")


def test_the_doc_lists_every_preset_and_its_rule() -> None:
    rows = [r for r in doc_table().splitlines()[2:]]
    assert [re.match(r"\| `([a-z-]+)`", r).group(1) for r in rows] == list(NAMES)  # type: ignore[union-attr]
    for p, row in zip(PRESETS, rows):
        assert f">= {p.min_memory_gb:g} GB" in row and f"up to {p.max_gpus}" in row
        for w in p.workloads:
            assert f"`{w.spec.model}`" in row
    assert "`llm-finetune` (default)" in doc_table() and DEFAULT_PRESET == "llm-finetune"


def test_the_guide_rules_of_thumb() -> None:
    assert get_preset("image-generation").min_memory_gb == 12
    for name in ("nlp-research", "llm-finetune", "llm-pretrain", "llm-serving"):
        assert get_preset(name).min_memory_gb == 24, name


@pytest.mark.parametrize("name", NAMES)
def test_every_preset_resolves_without_torch(name: str) -> None:
    p = get_preset(name)
    assert p.objective in OBJECTIVES and p.max_gpus >= 1
    for pw in p.workloads:
        w = make_workload(replace(pw.spec, precision="auto"), unit=pw.unit, unit_scale=pw.unit_scale)
        assert w.spec.batch_size == pw.spec.batch_size and w.spec.precision == "auto"
        assert w.serving == (name == "llm-serving")
        if p.job_tokens:
            assert w.tokens


def test_unknown_preset() -> None:
    with pytest.raises(UnknownNameError, match="unknown use case 'llm-finetuning'; did you mean 'llm-finetune'"):
        get_preset("llm-finetuning")
