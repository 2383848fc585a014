"""`whichgpu validate` on hostile measurement files (issue 15): a value that is no measurement (infinite,
negative, NaN), a row shorter or longer than the header, a file that is not UTF-8 are one-line
errors naming the file, the line and the column, exit 2; a run with nothing to rank carries null,
never NaN."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tests.cli.conftest import strict_json
from typer.testing import CliRunner, Result

from whichgpu.cli import app
from whichgpu.measure.corpus import read_measurements
from whichgpu.measure.validate import RowResult, summarize

runner = CliRunner()
THROUGHPUT = "model,task,gpu,gpu_count,precision,batch_size_per_gpu,seq_len_or_image_size,metric_unit,value"
ROW = "ResNet-50 v1.5,train,A100-SXM4-80GB,1,AMP,256,224,images/s,{value}"
EXTERNAL = "row_id,source,model,task,phase,gpu,gpu_count,precision,batch,metric,unit,value"
FITS = "F1,test,Llama-2-7B,infer,full,RTX 3090,1,fp16,1,fits,,{value}"


def validate(*args: str) -> Result:
    return runner.invoke(app, ["validate", *args])


def one_line_error(r: Result) -> str:
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def _csv(tmp_path: Path, *lines: str, name: str = "m.csv") -> Path:
    f = tmp_path / name
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return f


@pytest.mark.parametrize("value", ["inf", "-inf", "-5", "nan", "1e999", "fast"])
def test_a_value_that_is_no_measurement_names_file_line_and_column(tmp_path: Path, value: str) -> None:
    f = _csv(tmp_path, THROUGHPUT, ROW.format(value="938"), ROW.format(value=value))
    msg = one_line_error(validate("--data", str(f)))
    assert f"{f}: line 3, column 'value'" in msg
    assert "a finite number >= 0" in msg and repr(value) in msg


@pytest.mark.parametrize("value", ["inf", "-1"])
def test_the_json_mode_refuses_it_the_same_way(tmp_path: Path, value: str) -> None:
    f = _csv(tmp_path, THROUGHPUT, ROW.format(value=value))
    r = validate("--data", str(f), "--json")
    assert "line 2, column 'value'" in one_line_error(r) and r.stdout == ""


def test_a_short_row_names_the_line_and_the_first_missing_column(tmp_path: Path) -> None:
    f = _csv(tmp_path, THROUGHPUT, ROW.format(value="938"), "ResNet-50 v1.5,train,A100-SXM4-80GB,1")
    msg = one_line_error(validate("--data", str(f)))
    assert f"{f}: line 3: 4 cells but the header has 9 columns (no cell for column 'precision')" in msg


def test_a_long_row_names_the_line(tmp_path: Path) -> None:
    f = _csv(tmp_path, THROUGHPUT, ROW.format(value="1,938"))  # an unquoted thousands separator
    msg = one_line_error(validate("--data", str(f)))
    assert f"{f}: line 2: 10 cells but the header has 9 columns" in msg and "quote" in msg


def test_a_fits_row_takes_its_labels_and_nothing_else(tmp_path: Path) -> None:
    ok = _csv(tmp_path, EXTERNAL, FITS.format(value="OOM"), FITS.format(value="fits"), name="ok.csv")
    assert [m.value for m in read_measurements([str(ok)])] == ["OOM", "fits"]
    bad = _csv(tmp_path, EXTERNAL, FITS.format(value="maybe"), name="bad.csv")
    msg = one_line_error(validate("--data", str(bad)))
    assert "line 2, column 'value': a fits row's value is one of fits, yes, ok, oom, no" in msg


def test_a_csv_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "latin1.csv"
    f.write_bytes((THROUGHPUT + "\n" + ROW.format(value="938") + ",caf\xe9\n").encode("latin-1"))
    msg = one_line_error(validate("--data", str(f)))
    assert str(f) in msg and "not UTF-8" in msg and "save it as UTF-8" in msg


def test_the_shipped_measurement_files_still_read() -> None:
    data = Path(__file__).resolve().parents[1] / "data"
    rows = read_measurements([str(data / "throughput_dev.csv"), str(data / "external_dev")])
    assert len(rows) > 1000


def test_a_run_with_no_rank_groups_carries_null_not_nan(tmp_path: Path) -> None:
    # One row on a GPU no catalog has: read, not modelled, nothing scored or ranked (no capture: fast).
    f = _csv(tmp_path, THROUGHPUT, ROW.format(value="938").replace("A100-SXM4-80GB", "Acme X9"))
    r = validate("--data", str(f), "--json")
    assert r.exit_code == 0, r.output
    s = strict_json(r.stdout)["summary"]
    assert s["rank_groups"] == 0 and s["rank_correlation"] is None
    assert s["median_ape"] is None and s["mean_log_error"] is None and s["fits"]["accuracy"] is None


def test_the_summary_of_nothing_is_strict_json() -> None:
    """The library's summary itself (not only the CLI's JSON writer) holds None, never NaN."""
    s = summarize([])
    json.dumps(s, allow_nan=False)  # raises ValueError on NaN or Infinity
    assert s["rank_correlation"] is None and s["p90_ape"] is None and s["all_scored"]["median_ape"] is None
    row = RowResult(0, "unmodelled", None, None, None, "unknown GPU", "m", "g", "bf16", "train", 1, "1")
    s = summarize([row])
    json.dumps(s, allow_nan=False)
    assert not any(isinstance(v, float) and math.isnan(v) for v in s.values())


def test_a_power_limit_setting_that_is_no_number_of_watts_is_the_rows_reason(tmp_path: Path) -> None:
    # before: power_limit_w=inf was taken as "no cap" silently, and the row scored with exit 0
    src = Path(__file__).parents[1] / "data" / "external_dev" / "llm_infer.csv"
    lines = src.read_text(encoding="utf-8").splitlines()
    row = next(line for line in lines if line.startswith("L0009,"))
    assert "power_limit_w=330" in row
    for bad in ("inf", "nan", "-5"):
        f = _csv(tmp_path, lines[0], row.replace("power_limit_w=330", f"power_limit_w={bad}"), name=f"{bad}.csv")
        r = validate("--data", str(f), "--json")
        assert r.exit_code == 0, r.output
        (only,) = strict_json(r.stdout)["rows"]
        assert only["predicted"] is None and "settings power_limit_w must be a number > 0" in only["reason"]
