"""--moe-capacity and --moe-skew (issue 16): the routing assumption of the built-in
mixture-of-experts decoders on analyze, estimate, fit and recommend. A capacity factor makes every
expert compute that many times its mean rows; a bad value is a one-line error (exit 2); a dense
model takes the flags with a one-line note; runs without them keep their workload options (and
trace cache keys)."""

from __future__ import annotations

import pytest
from tests.cli.conftest import invoke, invoke_json

from whichgpu.commands.common import moe_workload_options, workload_spec

pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("isolated_cache")

MIXTRAL = ("mixtral-8x7b", "--seq-len", "256")
GPU = ("--gpu", "h100-sxm5-80gb")
# recommend: cards on which Mixtral trains within 8 GPUs
COMMANDS = {"analyze": (), "estimate": GPU, "fit": (*GPU, "--no-search"), "recommend": ("--gpu", "h200-sxm-141gb,b200")}


def _expert_flops(doc: dict[str, object]) -> float:
    ops = doc["ops"]
    assert isinstance(ops, list)
    return sum(o["flops"] * o["count"] for o in ops if o["name"].startswith("whichgpu.grouped_mm"))


def test_capacity_factor_scales_the_expert_gemms() -> None:
    """Dropless, each expert computes its mean rows (8192 x 2 / 8 here, balanced); at capacity 1.5
    each computes 1.5 x that, padding included: the expert GEMMs (forward and backward) do 1.5 x
    the FLOPs and nothing else changes."""
    base = invoke_json("estimate", "whichgpu.estimate/1", "mixtral-8x7b", *GPU)["results"][0]
    cap = invoke_json("estimate", "whichgpu.estimate/1", "mixtral-8x7b", *GPU, "--moe-capacity", "1.5")["results"][0]
    experts = _expert_flops(invoke_json("analyze", "whichgpu.trace/1", "mixtral-8x7b"))
    assert experts > 0.5 * base["workload"]["flops_per_step"]  # most of Mixtral's step
    extra = cap["workload"]["flops_per_step"] - base["workload"]["flops_per_step"]
    assert extra == pytest.approx(0.5 * experts, rel=0.01)
    assert _expert_flops(invoke_json("analyze", "whichgpu.trace/1", "mixtral-8x7b", "--moe-capacity", "1.5")) \
        == pytest.approx(1.5 * experts, rel=1e-6)
    assert "capacity factor 1.5" in cap["assumptions"]["moe"]
    # padded rows are routed work, not missing work: no coverage warning
    assert cap["coverage"]["flops_uncovered"] == 0 and cap["coverage"]["warning"] is None


def test_capacity_below_one_drops_rows_without_a_coverage_warning() -> None:
    r = invoke_json("estimate", "whichgpu.estimate/1", *MIXTRAL, *GPU, "--moe-capacity", "0.5", "--moe-skew", "1.5")
    moe = r["results"][0]["assumptions"]["moe"]
    assert "capacity factor 0.5" in moe and "skew 1.5 drops" in moe
    assert r["results"][0]["coverage"]["warning"] is None


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_workload_command_takes_the_flags(command: str) -> None:
    schema = {"analyze": "whichgpu.trace/1", "estimate": "whichgpu.estimate/1", "fit": "whichgpu.memory/1",
              "recommend": "whichgpu.recommend/1"}[command]
    doc = invoke_json(command, schema, *MIXTRAL, *COMMANDS[command], "--moe-capacity", "1.25", "--moe-skew", "2",
                      code=1 if command == "fit" else 0)
    notes = {"analyze": lambda: " ".join(doc["notes"]), "estimate": lambda: doc["results"][0]["assumptions"]["moe"],
             "fit": lambda: doc["assumptions"]["moe"], "recommend": lambda: doc["workloads"][0]["assumptions"]["moe"]}
    assert "capacity factor 1.25" in notes[command]()


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(("flag", "value"), [("--moe-skew", "0.5"), ("--moe-capacity", "0"),
                                             ("--moe-capacity", "-1"), ("--moe-skew", "nan")])
def test_bad_values_are_one_line_errors(command: str, flag: str, value: str) -> None:
    res = invoke(command, *MIXTRAL, *COMMANDS[command], flag, value)
    assert res.exit_code == 2, res.output
    assert res.stdout == "" and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: ") and "valid:" in lines[0], lines


@pytest.mark.parametrize("command", ["estimate", "fit", "analyze"])
def test_a_dense_model_notes_that_the_flags_do_not_apply(command: str) -> None:
    res = invoke(command, "gpt2", "-b", "2", "--seq-len", "64", *COMMANDS[command], "--moe-capacity", "1.5",
                 "--moe-skew", "2")
    assert res.exit_code == 0, res.output
    (note,) = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert note == ("note: --moe-capacity and --moe-skew do not apply: gpt2 has no routed experts "
                    "(the built-in mixture-of-experts decoders do)")


def test_a_use_case_refuses_the_flags() -> None:
    res = invoke("recommend", "--moe-skew", "2")
    assert res.exit_code == 2 and "--moe-skew" in res.stderr and "use case" in res.stderr


def test_options_only_when_given() -> None:
    """Runs without the flags (or with the default balanced load) keep their options, hence the
    trace cache keys they had."""
    args = ("mixtral-8x7b", "train", None, None, None, "amp-bf16", None, "foreach", "full", None, "none", None)
    assert workload_spec(*args).options == ()
    assert workload_spec(*args, None, 1.0).options == ()
    assert workload_spec(*args, 1.5, None).options == (("moe_capacity", 1.5),)
    assert workload_spec(*args, 1.5, 2.0).options == (("moe_capacity", 1.5), ("moe_skew", 2.0))
    assert moe_workload_options(None, None) == ()
