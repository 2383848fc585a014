"""The op registry: one registration per op name, categories and per-element FLOPs from it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import whichgpu.workload.costs  # noqa: F401  (registers the aten formulas)
from whichgpu.workload.registry import REGISTRY, Cost, kind_of, register


@pytest.fixture
def scratch() -> Iterator[list[str]]:
    """Names a test registers, removed afterwards."""
    names: list[str] = []
    yield names
    for n in names:
        REGISTRY.pop(n, None)


def test_a_second_registration_of_a_name_raises(scratch: list[str]) -> None:
    scratch.append("whichgpu.test_op")
    register("whichgpu.test_op", category="copy")
    with pytest.raises(ValueError, match="registered twice"):
        register("whichgpu.test_op", category="memset")
    with pytest.raises(ValueError, match="registered twice"):
        register("whichgpu.test_op")(lambda args, kwargs, out: Cost(0.0, "copy"))
    assert REGISTRY["whichgpu.test_op"].category == "copy"


def test_a_bare_name_and_its_aten_packet_are_one_name() -> None:
    # "view" is registered bare (aten.view and prims.view); "aten.mm" with its formula
    with pytest.raises(ValueError, match="registered twice"):
        register("aten.view", category="view")
    with pytest.raises(ValueError, match="registered twice"):
        register("mm", category="matmul")


def test_one_adapter_serves_several_ops() -> None:
    assert REGISTRY["aten.mv"].formula is REGISTRY["aten.addmv"].formula is not None
    assert REGISTRY["aten.convolution"].formula is REGISTRY["aten._convolution"].formula


def test_a_category_registration_is_not_a_decorator(scratch: list[str]) -> None:
    scratch.append("whichgpu.test_view")
    with pytest.raises(TypeError, match="no formula"):
        register("whichgpu.test_view", category="view")(lambda args, kwargs, out: Cost(0.0, "view"))


@pytest.mark.parametrize(("packet", "category", "per_element"), [
    ("aten.view", "view", 0.0),
    ("prims.view", "view", 0.0),
    ("aten.zeros", "memset", 0.0),
    ("aten.cat", "copy", 0.0),
    ("aten.sum", "reduction", 1.0),
    ("aten.nll_loss_forward", "loss", 4.0),
    ("aten.nonzero", "embedding", 0.0),
    ("aten.gelu", "pointwise", 10.0),
    ("aten.gelu_", "pointwise", 10.0),  # in-place variant: its op's figure
    ("aten.mul_", "pointwise", 1.0),
    ("aten._foreach_mul_", "optimizer", 2.0),  # multi-tensor apply, by prefix
    ("aten._foreach_norm", "reduction", 1.0),  # registered by name before the prefix rule
])
def test_categories_and_per_element_flops(packet: str, category: str, per_element: float) -> None:
    kind = kind_of(packet + ".default", packet, is_pointwise=False)
    assert kind is not None and kind.formula is None
    assert (kind.category, kind.flops_per_element) == (category, per_element)


def test_ops_with_a_formula_and_unknown_ops() -> None:
    mm = kind_of("aten.mm.default", "aten.mm", is_pointwise=False)
    assert mm is not None and mm.formula is not None
    # an op registered under no name: pointwise at 1 FLOP per element when aten tags it so,
    # else not modelled
    tagged = kind_of("aten.frobnicate.default", "aten.frobnicate", is_pointwise=True)
    assert tagged is not None and (tagged.category, tagged.flops_per_element) == ("pointwise", 1.0)
    assert kind_of("aten.frobnicate.default", "aten.frobnicate", is_pointwise=False) is None
    # the in-place rule applies to pointwise ops only: cumsum_ is not cumsum
    assert kind_of("aten.cumsum_.default", "aten.cumsum_", is_pointwise=False) is None


def test_embedding_reads_only_the_gathered_rows() -> None:
    torch = pytest.importorskip("torch")
    formula = REGISTRY["aten.embedding"].formula
    assert formula is not None
    with torch.device("meta"):
        w = torch.empty(32000, 4096, dtype=torch.bfloat16)
        idx = torch.zeros(2, 8, dtype=torch.long)
        out = torch.empty(2, 8, 4096, dtype=torch.bfloat16)
    cost = formula((w, idx), {}, out)
    # 16 rows x 4096 x 2 B = 131072, plus 16 indices x 8 B = 128: 131200 read; 2*8*4096*2 = 131072 written
    assert (cost.flops, cost.category, cost.bytes_read, cost.bytes_written) == (0.0, "embedding", 131200, 131072)
