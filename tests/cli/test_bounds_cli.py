"""Every numeric flag of every command: its valid range is in --help, and a value outside it (or
not a number, NaN, infinity, past 64 bits) is a one-line error with exit 2. Exit codes: 0 answered,
1 the answer is "no", 2 bad input."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.cli.conftest import invoke
from typer.main import get_command

from whichgpu import limits
from whichgpu.cli import app
from whichgpu.commands.common import bounded_parser

# the least a command needs to get past argument parsing (the flag under test fails before it runs)
REQUIRED: dict[str, list[str]] = {"estimate": ["gpt2"], "fit": ["gpt2"], "analyze": ["gpt2"],
                                  "validate": ["--data", "x.csv"], "recommend": [], "gpus": [], "systems": [],
                                  "engines": [], "models": [], "plan": ["llama-3-8b"],
                                  "validate-plan": ["--data", "x"], "serve": ["llama-3.1-8b"],
                                  "validate-serve": ["--data", "x"],
                                  "ui": ["--no-browser"]}  # (a bad --port fails before any server starts)
BAD = ["nan", "inf", "-inf", "1e400", "99999999999999999999999", "abc", "", "-1"]


def _numeric_flags() -> list[tuple[str, str, str]]:
    """(command, flag, help) for every numeric option of every command."""
    root: Any = get_command(app)
    out = []
    for name, cmd in root.commands.items():
        for p in cmd.params:
            if getattr(p, "metavar", None) in ("INTEGER", "NUMBER") and p.opts:
                out.append((name, max(p.opts, key=len), p.help or ""))
    return out


FLAGS = _numeric_flags()


def test_every_numeric_flag_is_bounded() -> None:
    # the flags the issue names are among them, so a flag added without a bound is caught here
    names = {(c, f) for c, f, _ in FLAGS}
    for want in [("estimate", "--gpus"), ("estimate", "--grad-accum"), ("estimate", "--top"),
                 ("estimate", "--power-limit-w"), ("fit", "--gpus"), ("recommend", "--electricity-usd-per-kwh"),
                 ("recommend", "--job-tokens"), ("recommend", "--top"), ("gpus", "--min-memory-gb"),
                 ("validate", "--worst"), ("recommend", "--max-gpus"), ("fit", "--grad-accum"),
                 ("estimate", "--step-host-ms"), ("plan", "--step-host-ms")]:
        assert want in names, want
    root: Any = get_command(app)
    for name, cmd in root.commands.items():  # no int/float flag escapes the bounded parsers
        for p in cmd.params:
            td = p.type_descriptor
            if td.annotation in (int, float):
                assert td.parameter_info.parser is not None and p.metavar in ("INTEGER", "NUMBER"), \
                    f"{name} {p.opts}: a number flag without a bounded parser (commands/common.py int_option)"


@pytest.mark.parametrize(("command", "flag", "help_text"), FLAGS, ids=[f"{c}{f}" for c, f, _ in FLAGS])
def test_range_in_help_and_enforced(command: str, flag: str, help_text: str) -> None:
    assert re.search(r"\[(>=?|>)?-?[\d.e+]+(-\d+|, <=[\d.e+]+)\]", help_text), help_text
    for bad in BAD:
        res = invoke(command, *REQUIRED[command], flag, bad)
        assert res.exit_code == 2, (flag, bad, res.output)
        err = res.stderr.strip()
        assert "\n" not in err and err.startswith(f"error: {flag}: ") and "valid:" in err, err
        assert "Traceback" not in res.output


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=30), st.integers().map(str), st.floats().map(str)),
       integer=st.booleans(), bound=st.sampled_from([limits.GPUS, limits.POWER_W, limits.USD_PER_KWH, limits.TOP]))
def test_parser_accepts_only_finite_numbers_in_range(text: str, integer: bool, bound: limits.Bound) -> None:
    try:
        v = bounded_parser(bound, integer)(text)
    except ValueError as e:
        assert "valid:" in str(e) and "\n" not in str(e)
        return
    assert bound.ok(v) and (isinstance(v, int) if integer else isinstance(v, float))


def test_usage_errors_are_one_line() -> None:
    for args, says in ((["estimate", "gpt2", "--bogus"], "no such option: --bogus"),
                       (["estimate"], "missing argument 'model'"),
                       (["fit", "gpt2", "--gpus", "1.5"], "--gpus: '1.5' is not an integer"),
                       (["gpus", "show"], "missing argument 'name'"),
                       (["recommend", "--top", "0"], "--top: 0 is out of range")):
        res = invoke(*args)
        err = res.stderr.strip()
        assert res.exit_code == 2 and "\n" not in err and err.startswith("error: ") and says in err, err


@pytest.mark.parametrize(("args", "message"), [
    (["recommend", "--use-case", ""], "unknown use case ''"),
    (["recommend", "gpt2", "--html", ""], "--html needs a file name"),
    (["estimate", "gpt2", "--gpu", "h100-sxm", "--context", "512"], "--context (tokens already in the KV cache)"),
    (["fit", "gpt2", "--gpu", "h100-sxm", "--context", "512"], "applies to --phase decode"),
])
def test_accepted_silently_before(args: list[str], message: str) -> None:
    res = invoke(*args)
    err = res.stderr.strip()
    assert res.exit_code == 2 and "\n" not in err and message in err, res.output


def test_no_search_does_not_fit_is_exit_1() -> None:
    # before: exit 0 with --no-search (and 2 without it) for the same "does not fit"
    for extra in ([], ["--no-search"]):
        res = invoke("fit", "llama-2-7b", "--gpu", "rtx-4090", "-b", "1", "--seq-len", "256", *extra)
        assert res.exit_code == 1, (extra, res.output)
        assert res.stderr.strip().startswith("no: llama-2-7b does not fit on NVIDIA GeForce RTX 4090")
