"""`whichgpu systems`: the table, the JSON document, --gpu, user systems from --catalog, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import strict_json
from typer.testing import CliRunner, Result

from whichgpu.cli import app
from whichgpu.hardware.catalog import ENV_VAR

runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_user_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def run(*args: str) -> Result:
    return runner.invoke(app, ["systems", *args])


def run_json(*args: str) -> dict[str, Any]:
    res = run(*args, "--json")
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = strict_json(res.stdout)
    assert doc["schema"] == "whichgpu.systems/1"
    assert doc["count"] == len(doc["systems"])
    return doc


def ids(doc: dict[str, Any]) -> list[str]:
    return [s["id"] for s in doc["systems"]]


USER_SYSTEM = """\
schema = "whichgpu.system/1"
id = "lab-4x4090"
name = "Lab box, 4x RTX 4090"
kind = "workstation"
gpu = "rtx-4090"
gpus_per_node = 4

[pcie]
gen = 4
lanes = 8
p2p = false
latency_us = 4

[sources]
default = "our lab inventory, 2026-02"
"""


def test_table_lists_every_system_with_its_links() -> None:
    res = run()
    assert res.exit_code == 0, res.output
    assert "systems (GB/s per direction)" in res.stdout
    for sid in ("dgx-h100", "gb200-nvl72", "aws-p5-48xlarge", "workstation-4gpu"):
        assert sid in res.stdout
    assert "infiniband-ndr" in res.stdout and "PCIe only" in res.stdout


def test_json_has_every_system_with_a_source_per_figure() -> None:
    doc = run_json()
    assert doc["count"] >= 12
    assert doc["gpu"] is None and doc["default_system"] is None
    for s in doc["systems"]:
        figures = ["gpus_per_node"] + [f"{sec}.{k}" for sec in ("scaleup", "pcie", "scaleout")
                                       for k in (s[sec] or {})]
        assert sorted(s["sources"]) == sorted(figures), s["id"]
        assert all(isinstance(v, str) and v for v in s["sources"].values()), s["id"]
    h100 = next(s for s in doc["systems"] if s["id"] == "dgx-h100")
    assert h100["scaleup"]["gbps_per_direction"] == 450.0
    assert h100["scaleout"] == {"kind": "infiniband-ndr", "gbps_per_gpu": 50.0, "rails": 8, "latency_us": 10.0}


def test_gpu_filter_keeps_the_systems_of_that_gpu_and_names_its_default() -> None:
    doc = run_json("--gpu", "h100-sxm5-80gb")
    assert sorted(ids(doc)) == ["aws-p5-48xlarge", "azure-nd-h100-v5", "dgx-h100", "gcp-a3-highgpu-8g"]
    assert doc["gpu"] == "h100-sxm5-80gb"
    assert doc["default_system"]["id"] == "dgx-h100"
    res = run("--gpu", "H100 SXM")
    assert res.exit_code == 0 and "* default system for h100-sxm5-80gb: dgx-h100" in res.stdout


def test_systems_with_measured_all_reduce_times_say_so() -> None:
    res = run("--gpu", "a100-sxm4-80gb")
    assert res.exit_code == 0
    assert "dgx-a100: NCCL all-reduce times measured on it for 2, 4, 8 GPUs, 1-256 MiB" in " ".join(res.stdout.split())
    doc = run_json("--gpu", "a100-sxm4-80gb")
    tables = doc["default_system"]["measured_allreduce"]
    assert [t["gpus"] for t in tables] == [2, 4, 8] and all(len(t["sizes_bytes"]) == len(t["times_us"]) for t in tables)
    assert "measured on it" not in run("--gpu", "h100-sxm5-80gb").stdout


def test_gpu_filter_for_a_pcie_card_lists_generic_systems_and_a_synthesised_default() -> None:
    doc = run_json("--gpu", "l40s")
    assert set(ids(doc)) == {"pcie-server-8gpu", "workstation-1gpu", "workstation-2gpu", "workstation-4gpu"}
    default = doc["default_system"]
    assert default["id"] == "l40s-default" and default["file"] == ""
    assert default["scaleup"] is None and default["scaleout"]["gbps_per_gpu"] == 25.0
    assert "synthesised" in run("--gpu", "l40s").stdout


def test_user_system_in_catalog_dir_appears(tmp_path: Path) -> None:
    (tmp_path / "lab.toml").write_text(USER_SYSTEM)
    doc = run_json("--catalog", str(tmp_path), "--gpu", "rtx-4090")
    lab = next(s for s in doc["systems"] if s["id"] == "lab-4x4090")
    assert lab["pcie"] == {"gen": 4, "lanes": 8, "p2p": False, "latency_us": 4.0}
    assert lab["sources"]["pcie.lanes"] == "our lab inventory, 2026-02"
    assert doc["user_catalog_dirs"] == [str(tmp_path)]
    # The GPU command reads the same directory and skips the system file.
    res = runner.invoke(app, ["gpus", "--catalog", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output


def test_bad_gpu_is_a_one_line_error() -> None:
    res = run("--gpu", "h100-sxm9")
    assert res.exit_code == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown GPU 'h100-sxm9'")
    assert "Traceback" not in res.output


def test_malformed_user_system_names_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "lab.toml"
    bad.write_text(USER_SYSTEM.replace("lanes = 8", "lanes = 12"))
    res = run("--catalog", str(tmp_path))
    assert res.exit_code == 2
    assert str(bad) in res.stderr and "pcie.lanes" in res.stderr and "one of 1, 2, 4, 8, 16" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
