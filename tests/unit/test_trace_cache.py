"""The on-disk trace cache (workload/cache.py) under corruption and concurrency: an unreadable
entry is discarded with a one-line warning and recaptured, never a traceback and never a failure
on every later run; concurrent writers and readers never see a torn entry. Torch-free except the
recapture test."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import needs_torch

from whichgpu.workload import cache
from whichgpu.workload.shape import ModelShape
from whichgpu.workload.trace import SCHEMA, MemEvent, Op, Trace

KEY = "0123456789abcdef01234567"


def _trace(batch: int = 2) -> Trace:
    ops = [
        Op("aten.mm", "matmul", "forward", "lin", "bf16", 2.0 * batch * 16 * 32, 4096.0, 2048.0, count=3,
           mm=(1, batch, 32, 16), ins=(0, 1), in_bytes=(1024.0, 3072.0), outs=(2,), out_bytes=(2048.0,),
           tags=("x",), shapes="[2,16] -> [2,32]"),
        Op("aten.relu", "pointwise", "backward", "act", "bf16", 64.0, 128.0, 128, fusible=True, block="layers.0"),
    ]
    ev = [MemEvent(0, 2048, 2, "activation"), MemEvent(1, -2048, 2, "activation", "layers.0")]
    return Trace(model="m", task="train", phase="full", batch_size=batch, seq_len=16, image_size=None, context=None,
                 precision="amp-bf16", optimizer="adamw/foreach", sparsity="none", samples=batch, tokens=batch * 16,
                 params=544, trainable_params=544, param_bytes=2176, buffer_bytes=0, input_bytes=64, ops=ops,
                 mem_events=ev, repeats={"layers.0": 3}, shape=ModelShape(family="decoder", layers=4),
                 notes=["a note"], key=KEY, capture_seconds=0.5)


@pytest.fixture
def cdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "traces"
    monkeypatch.setenv(cache.ENV, str(d))
    return d


def _entry(d: Path) -> Path:
    return d / f"{KEY}.json"


def _warned(err: str) -> None:
    lines = [x for x in err.splitlines() if x]
    assert len(lines) == 1 and lines[0].startswith("warning: discarding the unreadable trace cache entry"), err
    assert "capturing the trace again" in lines[0]


def test_round_trip(cdir: Path) -> None:
    t = _trace()
    cache.store(KEY, t)
    got = cache.load(KEY)
    assert got == t and cache.wrong_field(got) is None
    assert [p.name for p in cdir.iterdir()] == [f"{KEY}.json"]  # no temporary file left behind


def _valid_doc() -> dict[str, Any]:
    return dict(json.loads(_trace().to_json()))


def _with(**fields: Any) -> bytes:
    d = _valid_doc()
    d.update(fields)
    return json.dumps(d).encode()


def _row(i: int, value: Any) -> bytes:
    d = _valid_doc()
    d["ops"][0][i] = value
    return json.dumps(d).encode()


CORRUPT: dict[str, bytes] = {
    "garbage bytes": b"\x00\x13\x37garbage\xde\xad",
    "non-UTF-8": b'{"schema": "\xff\xfe"}',
    "empty": b"",
    "truncated": _trace().to_json().encode()[:200],
    "a JSON list": b"[1, 2, 3]",
    "a JSON string": b'"whichgpu.trace/2"',
    "null": b"null",
    "no schema": b"{}",
    "schema only": json.dumps({"schema": SCHEMA}).encode(),
    "an unknown field": _with(colour="red"),
    "a missing field": json.dumps({k: v for k, v in _valid_doc().items() if k != "batch_size"}).encode(),
    "batch as text": _with(batch_size="8"),
    "batch as float": _with(batch_size=8.5),
    "ops not a list": _with(ops={"a": 1}),
    "strings not a list": _with(strings=7),
    "shape not an object": _with(shape=[1, 2]),
    "shape unknown key": _with(shape={"wings": 2}),
    "repeats of text": _with(repeats={"layers.0": "three"}),
    "notes of numbers": _with(notes=[1, 2]),
    "flops as text": _row(5, "many"),
    "flops NaN": _row(5, float("nan")),
    "bytes Infinity": _row(6, float("inf")),
    "string index out of range": _row(0, 999),
    "string index as text": _row(0, "0"),
    "mm an integer": _row(11, 7),
    "mm wrong length": _row(11, [1, 2]),
    "in_bytes of text": _row(18, ["x"]),
    "short op row": json.dumps({**_valid_doc(), "ops": [[0, 1, 2]]}).encode(),
    "deeply nested": b"[" * 100000 + b"]" * 100000,
}


@pytest.mark.parametrize("kind", list(CORRUPT))
def test_a_corrupt_entry_is_discarded_with_a_warning(kind: str, cdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: several kinds raised (UnicodeDecodeError, AttributeError) on every run until the
    cache was deleted, and wrong field types loaded and failed later, mid-estimate."""
    cdir.mkdir()
    _entry(cdir).write_bytes(CORRUPT[kind])
    assert cache.load(KEY) is None
    _warned(capsys.readouterr().err)
    assert not _entry(cdir).exists()  # discarded: the next run does not warn again
    assert cache.load(KEY) is None and capsys.readouterr().err == ""
    cache.store(KEY, _trace())  # the recaptured trace replaces it
    assert cache.load(KEY) == _trace()


def test_an_entry_of_another_schema_is_stale_not_corrupt(cdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cdir.mkdir()
    _entry(cdir).write_text(json.dumps({**_valid_doc(), "schema": "whichgpu.trace/1"}))
    assert cache.load(KEY) is None
    assert capsys.readouterr().err == ""


def test_a_read_only_cache_never_breaks_a_run(cdir: Path) -> None:
    cdir.parent.joinpath("traces").write_text("a file where the directory should be")
    cache.store(KEY, _trace())  # cannot create the directory: silently not cached
    assert cache.load(KEY) is None


# ---- mutations of a valid entry --------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)


def _paths(x: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(x, dict):
        for k, v in x.items():
            out += _paths(v, (*at, k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            out += _paths(v, (*at, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return doc


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_mutation_loads_a_well_formed_trace_or_none(data: st.DataObject, cdir: Path) -> None:
    """Whatever one value of a valid entry is replaced with (or deleted), load() never raises: it
    returns None (discarded) or a trace whose fields have their types and whose totals are finite."""
    doc = _valid_doc()
    path = data.draw(st.sampled_from(_paths(doc)))
    if path and data.draw(st.booleans()) and isinstance(_parent(doc, path), dict):
        del _parent(doc, path)[path[-1]]
    else:
        doc = _set(doc, path, data.draw(JSON_VALUES))
    cdir.mkdir(exist_ok=True)
    _entry(cdir).write_text(json.dumps(doc))
    t = cache.load(KEY)
    if t is not None:
        assert cache.wrong_field(t) is None
        assert all(math.isfinite(x) for x in (t.total_flops(), t.total_bytes(), t.kernel_count()))
        assert isinstance(t.shape, ModelShape) and all(isinstance(o, Op) for o in t.ops)


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    node = doc
    for p in path[:-1]:
        node = node[p]
    return node


# ---- concurrency -----------------------------------------------------------------------------

WORKER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from test_trace_cache import _trace, KEY
    from whichgpu.workload import cache
    me = int(sys.argv[1])
    mine = _trace(batch=me + 1)
    valid = {{n: _trace(batch=n + 1) for n in range({n})}}
    seen = set()
    for i in range({rounds}):
        if i % 3 == me % 3:
            cache.store(KEY, mine)
        t = cache.load(KEY)
        if t is not None:
            assert t == valid[t.batch_size - 1], "a torn or mixed entry"
            seen.add(t.batch_size)
    print(len(seen))
""")


def test_concurrent_processes_store_and_load_the_same_key(cdir: Path) -> None:
    """Several processes write different traces under one key and read it back in a loop: every
    read is one whole trace, nothing warns, and no temporary file is left."""
    n, rounds = 4, 150
    code = WORKER.format(tests=str(Path(__file__).parent), n=n, rounds=rounds)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in range(n)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and err == "", err
        assert int(out) >= 1
    assert [x.name for x in cdir.iterdir()] == [f"{KEY}.json"]
    t = cache.load(KEY)
    assert t is not None and t == _trace(batch=t.batch_size)


# ---- end to end: recapture ---------------------------------------------------------------------

@needs_torch
def test_a_corrupt_entry_is_recaptured(cdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from whichgpu.workload.api import get_trace
    from whichgpu.workload.spec import WorkloadSpec

    spec = WorkloadSpec(str(Path(__file__).parents[1] / "data" / "factories" / "sized.py:make"), batch_size=4)
    first = get_trace(spec)
    entries = list(cdir.glob("*.json"))
    for p in entries:
        p.write_bytes(b"\xff\xfe not a trace")
    again = get_trace(spec)
    assert again.total_flops() == first.total_flops() and again.batch_size == 4
    assert "warning: discarding the unreadable trace cache entry" in capsys.readouterr().err
    assert cache.load(again.key) is not None  # written back whole
    get_trace(spec)
    assert capsys.readouterr().err == ""  # and read without a warning from then on
