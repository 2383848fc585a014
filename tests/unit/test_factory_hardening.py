"""`file.py:factory` models and workload sizes as a hostile user gives them: the batch a factory
can or cannot take, impossible input shapes, sizes past what storage holds, names too long for
the file system, and user code that prints, exits, interrupts, hangs or imports its neighbours.
The factories are in tests/data/factories/."""

from __future__ import annotations

import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import needs_torch

from whichgpu import limits
from whichgpu.errors import CaptureError, InputError, UnknownNameError
from whichgpu.workload.spec import FixedBatchError, WorkloadSpec, classify

pytestmark = pytest.mark.usefixtures("isolated_cache")

FACTORIES = Path(__file__).parents[1] / "data" / "factories"


def _ref(ref: str) -> str:
    return str(FACTORIES / ref)


def _trace(ref: str, **kw):  # type: ignore[no-untyped-def]
    from whichgpu.workload.api import get_trace

    return get_trace(WorkloadSpec(_ref(ref), **kw))


def _one_line(e: BaseException) -> str:
    s = str(e)
    assert "\n" not in s and s == s.strip() and s[:1].islower(), s
    return s


# ---- the batch -------------------------------------------------------------------------------

@needs_torch
def test_a_factory_without_batch_size_has_its_inputs_batch() -> None:
    """The trace's batch and samples are the inputs' leading dimension (4), not -b or 1."""
    from whichgpu.workload.api import resolve

    t = _trace("fixed_batch.py:make")
    assert (t.batch_size, t.samples) == (4, 4)
    assert resolve(WorkloadSpec(_ref("fixed_batch.py:make")))[0].batch_size == 4
    assert any("batch 4 fixed by the factory" in n for n in t.notes)
    same = _trace("fixed_batch.py:make", batch_size=4)  # asking for the batch it builds is fine
    assert (same.batch_size, same.samples, same.total_flops()) == (4, 4, t.total_flops())


@needs_torch
@pytest.mark.parametrize("batch", [1, 16, 1024])
def test_a_factory_without_batch_size_refuses_another_batch(batch: int) -> None:
    """Before: -b was ignored by the trace yet multiplied into samples/s (x1024 at -b 1024)."""
    with pytest.raises(FixedBatchError) as e:
        _trace("fixed_batch.py:make", batch_size=batch)
    msg = _one_line(e.value)
    assert e.value.field == "batch_size" and e.value.batch == 4
    assert "builds batch 4" in msg and f"batch {batch} cannot be applied" in msg and "batch_size parameter" in msg


@needs_torch
def test_a_factory_with_batch_size_is_called_with_it() -> None:
    t = _trace("sized.py:make", batch_size=8)
    assert (t.batch_size, t.samples) == (8, 8)
    fwd = sum(o.total_flops for o in t.ops if o.category == "matmul" and o.phase == "forward")
    assert fwd == 2 * 8 * 16 * 32 + 2 * 8 * 32 * 2  # two Linear layers at batch 8
    d = _trace("sized.py:make")  # unset: the factory's default batch_size=2
    assert (d.batch_size, d.samples) == (2, 2)
    s = _trace("sized.py:seq_first", batch_size=3)  # (seq, batch, features): batch in the second place
    assert s.batch_size == 3


@needs_torch
def test_a_factory_that_ignores_its_batch_size_is_refused() -> None:
    with pytest.raises(CaptureError) as e:
        _trace("sized.py:ignores", batch_size=8)
    msg = _one_line(e.value)
    assert "batch_size=8" in msg and "(3, 16)" in msg and "build the inputs with batch_size" in msg


@needs_torch
@pytest.mark.parametrize(("field", "value"), [("seq_len", 128), ("image_size", 64)])
def test_a_size_the_factory_does_not_take_is_refused(field: str, value: int) -> None:
    """Before: the size was recorded in the trace but never reached the model."""
    with pytest.raises(InputError) as e:
        _trace("fixed_batch.py:make", **{field: value})
    assert e.value.field == field and f"takes no {field} argument" in _one_line(e.value)


@needs_torch
def test_fit_does_not_search_a_fixed_batch() -> None:
    """Before: the search "found" 1048576+ for a batch the factory cannot vary."""
    from whichgpu.hardware.catalog import load_catalog
    from whichgpu.memory.fit import fit
    from whichgpu.parallel.plan import Plan
    from whichgpu.workload.api import get_trace, resolve

    spec, _ = resolve(WorkloadSpec(_ref("fixed_batch.py:make")))
    tried: list[int | None] = []

    def trace_for(**changes: Any) -> Any:
        tried.append(changes.get("batch_size"))
        return get_trace(replace(spec, **changes))

    r = fit(trace_for(), load_catalog().get("a100-sxm4-80gb"), Plan(), trace_for)
    assert r.batch is not None and r.batch.fixed and not r.batch.capped
    assert r.batch.max_batch == 4 and [b for b, _ in r.batch.tried] == [4]
    assert max(b or 0 for b in tried) <= 4  # at most one other batch asked for (and refused)
    d = r.to_dict()
    assert d["max_batch"]["fixed"] is True and d["max_batch"]["batch_size"] == 4 and "fixed at 4" in d["max_batch"]["note"]
    assert any("fixed at 4" in n for n in d["notes"])  # shown as a note under the text report


# ---- impossible shapes and sizes ---------------------------------------------------------------

@needs_torch
@pytest.mark.parametrize(("fn", "words"), [
    ("negative", "(-1, 4) has a dimension < 1"),
    ("zero_batch", "(0, 4) has a dimension < 1"),
    ("zero_tensor", "(0, 4), with a zero dimension"),
    ("huge", "is too large"),
])
def test_impossible_factory_inputs_are_one_line_errors(fn: str, words: str) -> None:
    """Before: a negative dimension was a RuntimeError traceback; a batch-0 input was accepted."""
    with pytest.raises(CaptureError) as e:
        _trace(f"bad_shapes.py:{fn}")
    assert words in _one_line(e.value)


@pytest.mark.parametrize(("field", "bound"), [
    ("batch_size", limits.BATCH), ("seq_len", limits.SEQ_LEN), ("image_size", limits.IMAGE_SIZE),
    ("context", limits.CONTEXT), ("lora_rank", limits.LORA_RANK)])
@settings(max_examples=40, deadline=None)
@given(value=st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.just(2**64 + 1), st.just(10**20)))
def test_sizes_are_bounded_before_capture(field: str, bound: limits.Bound, value: int) -> None:
    """Before: past 64 bits or past storage (-b 99999999999999999999, --image-size 1000000) was a traceback."""
    spec = replace(WorkloadSpec("gpt2"), **{field: value})  # type: ignore[arg-type]
    if 1 <= value <= bound.hi:
        spec.validate()
        return
    with pytest.raises(InputError) as e:
        spec.validate()
    assert e.value.field == field and f"<= {int(bound.hi)}" in _one_line(e.value)


@pytest.mark.parametrize("value", [2.5, True, "8"])
def test_sizes_must_be_integers(value: object) -> None:
    with pytest.raises(InputError) as e:
        WorkloadSpec("gpt2", batch_size=value).validate()  # type: ignore[arg-type]
    assert e.value.field == "batch_size" and "integer" in str(e.value)


# ---- names too long for the file system ---------------------------------------------------------

@pytest.mark.parametrize(("name", "err", "words"), [
    ("a" * 300, UnknownNameError, "unknown model"),
    ("/tmp/" + "a" * 300 + ".json", CaptureError, "file name too long"),
    ("/tmp/" + "a" * 300 + "/config.json", CaptureError, "file name too long"),
    ("/tmp/" + "a" * 300 + ".py:make", CaptureError, "file name too long"),
    ("x/" * 3000 + "config.json", CaptureError, "config file"),
    ("/tmp/nul\0byte.py:make", CaptureError, "is not a valid path"),
])
def test_names_too_long_for_a_file_name(name: str, err: type[Exception], words: str) -> None:
    """Before: OSError [Errno 36] File name too long, as a traceback."""
    with pytest.raises(err) as e:
        classify(name)
    assert words in str(e.value) and "\n" not in str(e.value)


# ---- user code ----------------------------------------------------------------------------------

@needs_torch
def test_a_factory_that_prints_writes_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    """stdout may be JSON: the import, the call and the traced forward print to stderr."""
    t = _trace("user_code.py:prints", task="infer")
    assert t.batch_size == 2
    out, err = capfd.readouterr()
    assert out == ""
    for line in ("printed while importing", "printed in the factory", "written to file descriptor 1",
                 "printed in forward"):
        assert line in err


# (os._exit and KeyboardInterrupt, which would end this test process if not caught, are tested
# in a subprocess: tests/cli/test_factory_cli.py)
@needs_torch
@pytest.mark.parametrize(("ref", "words"), [
    ("user_code.py:exit0", "factory exit0() in user_code.py called sys.exit(0)"),
    ("user_code.py:exit3", "factory exit3() in user_code.py called sys.exit(3)"),
    ("exits_on_import.py:make", "importing exits_on_import.py called sys.exit(5)"),
])
def test_sys_exit_in_user_code_is_a_capture_error(ref: str, words: str) -> None:
    import os

    real_exit = os._exit
    with pytest.raises(CaptureError) as e:
        _trace(ref)
    assert words in _one_line(e.value)
    assert os._exit is real_exit  # put back


@needs_torch
@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="the time limit needs SIGALRM (POSIX)")
@pytest.mark.parametrize("fn", ["hangs", "spins"])
def test_a_factory_that_never_returns_times_out(fn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setenv("WHICHGPU_CAPTURE_TIMEOUT", "0.5")
    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(CaptureError) as e:
        _trace(f"user_code.py:{fn}")
    msg = _one_line(e.value)
    assert f"factory {fn}() in user_code.py did not finish within 0.5 s" in msg and "WHICHGPU_CAPTURE_TIMEOUT" in msg
    assert signal.getsignal(signal.SIGALRM) == before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert str(FACTORIES) not in sys.path  # the factory's directory is taken off the path again


@needs_torch
@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf"])
def test_a_bad_capture_timeout_is_named(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from whichgpu.workload.api import get_trace

    monkeypatch.setenv("WHICHGPU_CAPTURE_TIMEOUT", value)
    with pytest.raises(InputError, match=r"\$WHICHGPU_CAPTURE_TIMEOUT must be a number of seconds >= 0"):
        get_trace(WorkloadSpec(_ref("user_code.py:sibling")), use_cache=False)


@needs_torch
def test_a_factory_imports_a_module_beside_it() -> None:
    """Before: ModuleNotFoundError: No module named 'factory_sibling'."""
    t = _trace("user_code.py:sibling")
    assert t.params == 6 * 4 + 4


@needs_torch
def test_an_edited_module_beside_the_factory_is_recaptured(tmp_path: Path) -> None:
    """Its directory is on the import path, so a module beside it is part of the model: editing
    it changes the cache key, and it is imported afresh (not the copy an earlier capture left)."""
    import shutil
    import sys

    from whichgpu.workload.api import get_trace

    for name in ("user_code.py", "factory_sibling.py"):
        shutil.copy(FACTORIES / name, tmp_path / name)
    ref = str(tmp_path / "user_code.py:sibling")
    assert get_trace(WorkloadSpec(ref, task="infer")).params == 6 * 4 + 4
    assert "factory_sibling" not in sys.modules
    (tmp_path / "factory_sibling.py").write_text("WIDTH = 10\n")
    assert get_trace(WorkloadSpec(ref, task="infer")).params == 10 * 4 + 4
