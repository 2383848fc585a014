"""`file.py:factory` models through the CLI, as a hostile user gives them: a batch the factory
cannot take, impossible shapes and sizes, names too long for a file name, user code that prints,
exits, interrupts, hangs or imports its neighbours, and a corrupt trace cache. Every failure is
one line on stderr with exit 2; every --json document is strict JSON. Factories are in
tests/data/factories/."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli.conftest import invoke, invoke_json, strict_json
from typer.testing import Result

pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("isolated_cache")

FACTORIES = Path(__file__).parents[1] / "data" / "factories"
GPU = ("--gpu", "a100-sxm4-80gb")


def ref(name: str) -> str:
    return str(FACTORIES / name)


def _one_line_error(res: Result | subprocess.CompletedProcess[str], *words: str) -> str:
    code = res.exit_code if isinstance(res, Result) else res.returncode
    err = res.stderr
    assert code == 2, (code, err)
    assert "Traceback" not in err and res.stdout == "", err
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _whichgpu(*args: str, env: dict[str, str] | None = None, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    """A real process: sys.exit/os._exit in user code would end the test runner itself in-process."""
    e = {**os.environ, **(env or {})}
    e.pop("WHICHGPU_CATALOG", None)
    return subprocess.run([sys.executable, "-m", "whichgpu", *args], capture_output=True, text=True, env=e,
                          timeout=timeout)


# ---- the batch -------------------------------------------------------------------------------

def test_estimate_counts_the_samples_the_factory_builds() -> None:
    """samples per step = the inputs' leading dimension (4), whatever -b was (before: -b x the same step)."""
    doc = invoke_json("estimate", "whichgpu.estimate/1", ref("fixed_batch.py:make"), *GPU)
    r = doc["results"][0]
    assert r["samples_per_s"] * r["step_s"] == pytest.approx(4)


@pytest.mark.parametrize("batch", ["1", "1024"])
def test_estimate_refuses_a_batch_the_factory_cannot_take(batch: str) -> None:
    res = invoke("estimate", ref("fixed_batch.py:make"), *GPU, "-b", batch)
    _one_line_error(res, "--batch-size", "builds batch 4", f"batch {batch} cannot be applied", "batch_size parameter")


def test_fit_reports_a_fixed_batch_without_searching() -> None:
    """Before: "largest batch that fits: 1048576+" for a factory that always builds one batch."""
    doc = invoke_json("fit", "whichgpu.memory/1", ref("fixed_batch.py:make"), *GPU)
    mb = doc["max_batch"]
    assert mb["batch_size"] == 4 and mb["fixed"] is True and mb["capped"] is False
    assert [t["batch_size"] for t in mb["tried"]] == [4] and "fixed at 4" in mb["note"]
    res = invoke("fit", ref("fixed_batch.py:make"), *GPU)
    assert res.exit_code == 0, res.output
    assert "1048576" not in res.stdout and "note: the batch is fixed at 4" in res.stdout


def test_fit_searches_a_factory_that_takes_batch_size() -> None:
    doc = invoke_json("fit", "whichgpu.memory/1", ref("sized.py:make"), *GPU, "-b", "8", "--task", "infer")
    mb = doc["max_batch"]
    assert mb["fixed"] is False and len(mb["tried"]) > 1 and mb["batch_size"] > 8


# ---- bad shapes, sizes and names ---------------------------------------------------------------

@pytest.mark.parametrize(("fn", "words"), [("negative", "(-1, 4)"), ("zero_batch", "(0, 4)"), ("zero_tensor", "(0, 4)")])
def test_impossible_factory_inputs(fn: str, words: str) -> None:
    _one_line_error(invoke("estimate", ref(f"bad_shapes.py:{fn}"), *GPU), words)


@pytest.mark.parametrize(("args", "flag"), [
    (("gpt2", "-b", "99999999999999999999"), "batch"),
    (("resnet50-v1.5", "--image-size", "1000000"), "image"),
    (("gpt2", "--seq-len", str(10**12)), "seq"),
])
def test_sizes_past_storage(args: tuple[str, ...], flag: str) -> None:
    _one_line_error(invoke("estimate", *args, *GPU), flag)


@pytest.mark.parametrize("model", ["a" * 300, "/tmp/" + "a" * 300 + ".json", "/tmp/" + "a" * 300 + ".py:make",
                                   "/tmp/" + "a" * 300 + "/config.json"])
@pytest.mark.parametrize("command", ["estimate", "fit", "analyze"])
def test_a_model_name_too_long_for_a_file_name(command: str, model: str) -> None:
    """Before: OSError [Errno 36] File name too long, as a traceback."""
    args = (model, *GPU) if command != "analyze" else (model,)
    _one_line_error(invoke(command, *args))


# ---- user code -----------------------------------------------------------------------------------

def test_a_factory_that_prints_keeps_json_on_stdout() -> None:
    """Prints at import, in the factory, in forward and on file descriptor 1 go to stderr."""
    out = _whichgpu("estimate", ref("user_code.py:prints"), *GPU, "--task", "infer", "--json", "--no-cache")
    assert out.returncode == 0, out.stderr
    assert strict_json(out.stdout)["schema"] == "whichgpu.estimate/1"
    for line in ("printed while importing", "printed in the factory", "written to file descriptor 1",
                 "printed in forward"):
        assert line in out.stderr and line not in out.stdout


@pytest.mark.parametrize(("fn", "words"), [
    ("exit0", "factory exit0() in user_code.py called sys.exit(0)"),
    ("exit3", "factory exit3() in user_code.py called sys.exit(3)"),
    ("os_exit0", "factory os_exit0() in user_code.py called os._exit(0)"),
    ("interrupt", "factory interrupt() in user_code.py was interrupted (KeyboardInterrupt)"),
])
def test_exits_in_the_factory_are_explained(fn: str, words: str) -> None:
    """Before: exit 0 with no output (sys.exit(0), os._exit(0)), or an unexplained exit 3 / 130."""
    _one_line_error(_whichgpu("estimate", ref(f"user_code.py:{fn}"), *GPU, "--json"), words)


def test_a_module_that_exits_on_import() -> None:
    _one_line_error(_whichgpu("fit", ref("exits_on_import.py:make"), *GPU),
                    "importing exits_on_import.py called sys.exit(5)", "__main__")


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="the time limit needs SIGALRM (POSIX)")
def test_a_factory_that_never_returns_is_stopped() -> None:
    out = _whichgpu("estimate", ref("user_code.py:hangs"), *GPU, env={"WHICHGPU_CAPTURE_TIMEOUT": "1"}, timeout=60)
    _one_line_error(out, "did not finish within 1 s", "$WHICHGPU_CAPTURE_TIMEOUT")


def test_a_factory_imports_a_module_beside_it() -> None:
    doc = invoke_json("estimate", "whichgpu.estimate/1", ref("user_code.py:sibling"), *GPU)
    assert doc["results"][0]["samples_per_s"] > 0


# ---- the trace cache ------------------------------------------------------------------------------

def test_a_corrupt_cache_entry_is_recaptured_once(tmp_path: Path) -> None:
    """Before: a garbage entry failed every later run (a traceback) until the cache was deleted."""
    env = {"WHICHGPU_CACHE_DIR": str(tmp_path)}
    args = ("estimate", ref("sized.py:make"), *GPU, "-b", "4", "--json")
    first = _whichgpu(*args, env=env)
    assert first.returncode == 0, first.stderr
    for p in tmp_path.glob("*.json"):
        p.write_bytes(b"\xff\xfe\x00garbage")
    again = _whichgpu(*args, env=env)
    assert again.returncode == 0, again.stderr
    assert strict_json(again.stdout)["results"] == strict_json(first.stdout)["results"]
    assert again.stderr.count("warning: discarding the unreadable trace cache entry") == 1
    third = _whichgpu(*args, env=env)
    assert third.returncode == 0 and "warning" not in third.stderr


def test_a_fixed_batch_that_does_not_fit_is_a_no_not_an_error() -> None:
    # recommend tried micro-batch 1, which a fixed-batch factory cannot build: exit 2 with a
    # misleading message before; now the card is "cannot run" and the answer is no (exit 1)
    big = ref("fixed_batch_big.py") + ":make"
    doc = invoke_json("recommend", "whichgpu.recommend/1", big, "--gpu", "t4", "--max-gpus", "1", code=1)
    (why,) = doc["cannot_run"]
    assert why["gpu"] == "t4" and why["reason"].startswith("does not fit: needs ")
    assert invoke_json("recommend", "whichgpu.recommend/1", big, "--gpu", "t4,h100-sxm", "--max-gpus", "1")["rows"]
    res = invoke("fit", big, "--gpu", "t4")
    assert res.exit_code == 1 and "batch fixed at 8 by the model: not searched" in res.stdout
    assert res.stderr.strip().startswith("no: ") and "at its fixed batch 8" in res.stderr
