"""What the terminal shows: tables laid out for 80-120 columns with nothing cut off, $COLUMNS
honoured when piped, user text never read as rich markup, null (not 0 or NaN) where a figure does
not exist, validate's summary without "nan"."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import runner, strict_json
from typer.testing import Result

from whichgpu.cli import app
from whichgpu.hardware.catalog import ENV_VAR
from whichgpu.report.console import PIPED_WIDTH, piped_width
from whichgpu.units import fmt_si, fmt_time

pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("isolated_cache")  # the module's own trace cache (tests/conftest.py)

GPUS = "rtx-4090,a100-sxm4-80gb,h100-sxm5-80gb"  # BF16 cards: one trace per workload
GPT2 = ("gpt2", "-b", "2", "--seq-len", "64")


def run(*args: str, columns: int | None = None, env: dict[str, str] | None = None) -> Result:
    e = dict(env or {})
    if columns is not None:
        e["COLUMNS"] = str(columns)
    return runner.invoke(app, list(args), env=e)


def run_json(*args: str) -> dict[str, Any]:
    res = run(*args, "--json")
    assert res.exit_code in (0, 1), res.output
    doc: dict[str, Any] = strict_json(res.stdout)
    return doc


def flat(text: str) -> str:
    """The text with every run of whitespace as one space: a cell wrapped over lines reads whole."""
    return " ".join(text.split())


def region(out: str, start: str, end: str) -> str:
    """The lines of `out` from the one holding `start` to the first after it holding `end`."""
    lines = out.splitlines()
    i = next(k for k, ln in enumerate(lines) if start in ln)
    j = next(k for k in range(i + 1, len(lines)) if end in lines[k])
    return "\n".join(lines[i:j])


def first_column(table: str) -> str:
    """The text of a table's first column, its lines joined (cells are 2+ spaces apart)."""
    return flat(" ".join(re.split(r"\s{2,}", ln.strip())[0] for ln in table.splitlines()[1:]
                         if ln.strip() and "─" not in ln))


def check_layout(out: str, table: str, width: int) -> None:
    """Nothing is cut with an ellipsis and no table line is wider than the terminal."""
    assert "…" not in out
    too_wide = [ln for ln in table.splitlines() if len(ln.rstrip()) > width]
    assert not too_wide, too_wide


# --------------------------------------------------------------------------- widths


@pytest.mark.parametrize("width", [80, 120])
def test_recommend_shows_rank_gpu_count_figure_and_reason(width: int) -> None:
    doc = run_json("recommend", *GPT2, "--gpu", GPUS)
    res = run("recommend", *GPT2, "--gpu", GPUS, columns=width)
    assert res.exit_code == 0, res.output
    table = region(res.stdout, "ranked by value", "more columns")
    check_layout(res.stdout, table, width)
    body = flat(table)
    for row in doc["rows"]:
        # one row reads: rank, GPUs, work per dollar, the GPU's name, then why (wrapped under it)
        expect = f"{row['rank']} {row['gpus']} {fmt_si(row['value_per_usd'])} {row['name']} {row['reason']}"
        assert flat(expect) in body, (expect, table)


@pytest.mark.parametrize("width", [80, 120])
def test_estimate_shows_gpu_count_figure_and_bound(width: int) -> None:
    doc = run_json("estimate", *GPT2, "--gpu", GPUS, "--gpus", "2")
    res = run("estimate", *GPT2, "--gpu", GPUS, "--gpus", "2", columns=width)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert "on 2 GPUs" in lines[0]  # the count, for every row
    table = region(res.stdout, "likely", "top ops")
    check_layout(res.stdout, table, width)
    names = first_column(table)  # the GPU names, whole, however wrapped
    for r in doc["results"]:
        row = next(ln for ln in table.splitlines() if fmt_time(r["step_s"]) in ln)
        assert fmt_si(r["throughput"]["tokens_per_s"]) in row  # the key figure, on the GPU's row
        assert r["bound"] in row  # what bounds the step: the reason
        name = strict_json(run("gpus", "show", r["gpu"], "--json").stdout)["gpu"]["name"]
        assert name in names, (name, names)


@pytest.mark.parametrize("width", [80, 120])
def test_fit_shows_gpu_count_figure_and_what_would_make_it_fit(width: int) -> None:
    args = ("fit", "gpt2", "-b", "64", "--seq-len", "1024", "--gpu", "rtx-4090")
    doc = run_json(*args)
    res = run(*args, columns=width)
    assert res.exit_code == 1, res.output  # it does not fit: the answer is no
    check_layout(res.stdout, region(res.stdout, "memory per GPU at the peak", "does not fit:"), width)
    check_layout(res.stdout, region(res.stdout, "what would make it fit", "as tools report it"), width)
    assert "on 1 x NVIDIA GeForce RTX 4090" in res.stdout
    assert f"does not fit: {doc['total_bytes'] / 1e9:,.2f} of" in res.stdout
    body = flat(res.stdout)
    assert doc["suggestions"], doc
    for s in doc["suggestions"]:
        assert flat(f"{s['change']} {s['how']}") in body, s  # the change and its flags, whole


def test_piped_width_is_columns_else_120() -> None:
    assert piped_width({}) == PIPED_WIDTH == 120
    assert piped_width({"COLUMNS": "97"}) == 97
    assert piped_width({"COLUMNS": "5"}) == 40 and piped_width({"COLUMNS": "99999"}) == 1000
    for junk in ("", "abc", "-80", "8O", "1e3"):
        assert piped_width({"COLUMNS": junk}) == PIPED_WIDTH, junk


def test_wide_tables_keep_every_column_whole_on_a_narrow_console(monkeypatch: pytest.MonkeyPatch) -> None:
    import whichgpu.report.estimate as est

    plain = est.print_estimates
    monkeypatch.setattr(est, "print_estimates", lambda r, x, top, **k: plain(r, x, top, wide=True))  # (--wide: commands/)
    res = run("estimate", *GPT2, "--gpu", GPUS, columns=80)
    assert res.exit_code == 0, res.output
    assert "…" not in res.stdout
    head = next(ln for ln in res.stdout.splitlines() if "precision" in ln and "MFU (HFU)" in ln)
    for col in ("GPU", "precision", "step", "samples/s", "tokens/s", "likely (p10-p90)", "MFU (HFU)", "bound",
                "compute", "memory", "overhead", "comm", "GPU memory"):
        assert f" {col} " in head, col  # one line of headers, none folded
    table = region(res.stdout, "MFU (HFU)", "└")
    assert len({len(ln) for ln in table.splitlines()}) == 1 and len(head) > 80  # one line a row, past 80


def test_console_width_follows_its_own_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress goes to stderr: on a terminal there, its width is the terminal's even when stdout is
    piped (it was 200 then, and a 200-column bar wraps into a new line at every refresh)."""
    import io
    import os

    from whichgpu.report.console import _Console

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(os, "get_terminal_size", lambda *a: os.terminal_size((93, 30)))
    assert _Console(file=Tty()).width == 93
    assert _Console(file=io.StringIO()).width == PIPED_WIDTH
    monkeypatch.setenv("COLUMNS", "88")
    assert _Console(file=io.StringIO()).width == 88  # read at each print, not at import


def test_systems_table_fits_in_100_columns() -> None:
    res = run("systems", columns=100)
    assert res.exit_code == 0, res.output
    table = region(res.stdout, "systems (GB/s per direction)", "sources of each figure")
    check_layout(res.stdout, table, 100)
    doc = strict_json(run("systems", "--json").stdout)
    column = first_column(table)  # each system's id with its name under it
    for s in doc["systems"]:
        assert flat(f"{s['id']} {s['name']}") in column, s["id"]


def test_gpus_table_keeps_ids_whole_at_80_columns() -> None:
    res = run("gpus", columns=80)
    assert res.exit_code == 0, res.output
    check_layout(res.stdout, region(res.stdout, "accelerators", "FP16* ="), 80)
    for g in strict_json(run("gpus", "--json").stdout)["gpus"]:
        assert re.search(rf"^\s+{re.escape(g['id'])}\s", res.stdout, re.M), g["id"]


# --------------------------------------------------------------------------- markup

NAME = "[/red] Acme [bold]X1[/bold] [link=https://example.com/x]ad[/link] <i>&amp;</i>"
ACME = f'''\
schema = "whichgpu.gpu/1"
id = "acme-x1"
name = "{NAME}"
vendor = "NVIDIA"
architecture = "hopper"
chip = "ACME1"
year = 2026
form_factor = "PCIe"
segment = "datacenter"
notes = "[/] a note [red]"

[memory]
size_gb = 64
type = "HBM3"
bandwidth_gbps = 3000

[peak_dense]
fp32_tflops = 50
bf16_tflops = 400

[price]
cloud_usd_per_hour = 2.5
cloud_provider = "[/b]cloud"

[sources]
default = "test fixture [/i], https://example.com/acme-x1"
'''


@pytest.fixture
def markup_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv(ENV_VAR, raising=False)
    (tmp_path / "acme-x1.toml").write_text(ACME, encoding="utf-8")
    return str(tmp_path)


@pytest.mark.parametrize("args", [
    ("gpus",), ("gpus", "show", "acme-x1"), ("estimate", *GPT2, "--gpu", "acme-x1,rtx-4090"),
    ("fit", *GPT2, "--gpu", "acme-x1"), ("recommend", *GPT2, "--gpu", "acme-x1,rtx-4090"),
    ("estimate", *GPT2, "--gpu", "acme-x1", "--explain"),
])
def test_a_gpu_name_with_markup_is_shown_as_written(markup_catalog: str, args: tuple[str, ...]) -> None:
    res = run(*args, "--catalog", markup_catalog, columns=200)
    assert res.exit_code == 0, res.output
    assert res.exception is None
    assert NAME in res.stdout
    if args[:2] == ("gpus", "show"):
        assert "[/] a note [red]" in res.stdout and "test fixture [/i]" in res.stdout


def test_html_report_escapes_a_gpu_name(markup_catalog: str, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = run("recommend", *GPT2, "--gpu", "acme-x1,rtx-4090", "--html", str(out), "--catalog", markup_catalog)
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    assert html.escape(NAME, quote=True) in page and "<i>&amp;</i>" not in page


def test_a_model_path_with_brackets_is_shown_as_written(tmp_path: Path) -> None:
    src = Path(__file__).resolve().parents[2] / "src" / "whichgpu" / "workload" / "configs" / "gpt2-medium.json"
    d = tmp_path / "[bold]exp[v1]"  # rich would embolden "exp" and drop "[v1]"
    d.mkdir()
    cfg = d / "config.json"
    cfg.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    res = run("estimate", str(cfg), "-b", "1", "--seq-len", "32", "--gpu", "rtx-4090", columns=200)
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0].startswith("[bold]exp[v1]")


def test_local_install_hint_keeps_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as if not installed
    res = run("gpus", "--local")
    assert res.exit_code == 0, res.output
    assert "pip install 'whichgpu[nvml]'" in res.stdout


# --------------------------------------------------------------------------- null, not 0.0 or NaN


def test_vision_workload_has_null_tokens_per_s() -> None:
    args = ("resnet50-v1.5", "-b", "2", "--image-size", "64", "--gpu", "rtx-4090")
    r = run_json("estimate", *args)["results"][0]
    assert r["tokens_per_s"] is None and r["throughput"]["tokens_per_s"] is None
    assert r["samples_per_s"] > 0
    if "error_band" in r:
        assert r["error_band"]["tokens_per_s"] is None
    doc = run_json("recommend", *args)
    for key in ("rows", "configurations"):
        for c in doc[key]:
            for run_ in c["runs"]:
                assert run_["tokens_per_s"] is None and run_["samples_per_s"] > 0
    text_tokens = run_json("estimate", *GPT2, "--gpu", "rtx-4090")["results"][0]
    assert text_tokens["tokens_per_s"] > 0 and text_tokens["throughput"]["tokens_per_s"] > 0


def test_estimate_all_gpus_json_is_strict() -> None:
    """The report: `estimate bert-base-squad --gpu all --gpus 8 --json` printed a NaN literal."""
    doc = run_json("estimate", "bert-base-squad", "--gpu", "all", "--gpus", "8")  # strict_json refuses NaN
    assert len(doc["results"]) > 50


def test_validate_summary_without_scores_says_na(tmp_path: Path) -> None:
    data = Path(__file__).resolve().parents[1] / "data" / "throughput_dev.csv"
    head, row = data.read_text(encoding="utf-8").splitlines()[:2]
    one = tmp_path / "one.csv"
    one.write_text(head + "\n" + row.replace("ResNet-50 v1.5", "No Such Model 9") + "\n", encoding="utf-8")
    res = run("validate", "--data", str(one))  # one row, not modelled: nothing to score, no GPU groups
    assert res.exit_code == 0, res.output
    assert not re.search(r"\bnan\b", res.stdout, re.I), res.stdout
    assert "GPU rank correlation n/a" in res.stdout and "median APE n/a" in res.stdout


def test_columns_is_read_at_each_print_not_frozen_when_the_console_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    # rich fixes $COLUMNS at construction: a console made (at import) under COLUMNS=80 stayed 80
    # wide for the process, whatever $COLUMNS said later
    from whichgpu.report.console import _Console

    monkeypatch.setenv("COLUMNS", "80")
    c = _Console()
    assert c.width == 80
    monkeypatch.delenv("COLUMNS")
    assert c.width == PIPED_WIDTH
    monkeypatch.setenv("COLUMNS", "100")
    assert c.width == 100


@pytest.mark.parametrize("args", [
    ("plan", "llama-3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--tp", "8", "--top", "1"),
    ("serve", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "2", "--input-len", "50", "--output-len", "5",
     "--requests", "10"),
    ("recommend", "gpt2", "--seq-len", "256", "-b", "4", "--gpu", "h100-sxm5-80gb"),
])
def test_a_report_path_that_cannot_be_written_is_one_line_exit_2(args: tuple[str, ...], tmp_path: Path) -> None:
    page = tmp_path / "no-such-dir" / "r.html"
    res = runner.invoke(app, [*args, "--html", str(page)])
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert err.startswith("error: --html: cannot write ") and str(page) in err and "\n" not in err
    assert "Traceback" not in res.output
