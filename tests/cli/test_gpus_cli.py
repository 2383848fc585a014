"""`whichgpu gpus`: listing, filters, sorting, `show`, user catalogs and `--local`, through the CLI."""

from __future__ import annotations

import shutil
import sys
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


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return runner.invoke(app, list(args), env=env)


def run_json(*args: str) -> dict[str, Any]:
    res = run(*args, "--json")
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = strict_json(res.stdout)
    return doc


def ids(doc: dict[str, Any]) -> list[str]:
    return [g["id"] for g in doc["gpus"]]


NEW_GPU = """\
schema = "whichgpu.gpu/1"
id = "acme-x1"
name = "Acme X1 Test Accelerator"
vendor = "NVIDIA"
architecture = "hopper"
chip = "ACME1"
year = 2026
form_factor = "PCIe"
segment = "datacenter"

[memory]
size_gb = 64
type = "HBM3"
bandwidth_gbps = 3000

[peak_dense]
fp32_tflops = 50
bf16_tflops = 400

[sources]
default = "test fixture, https://example.com/acme-x1"
"""


# --------------------------------------------------------------------------- list


def test_gpus_lists_the_catalog_as_a_table() -> None:
    res = run("gpus")
    assert res.exit_code == 0, res.output
    assert "accelerators (dense peaks" in res.stdout
    for gpu_id in ("h100-sxm5-80gb", "rtx-4090", "mi300x", "tpu-v5e"):
        assert gpu_id in res.stdout


def test_gpus_json_document() -> None:
    doc = run_json("gpus")
    assert doc["schema"] == "whichgpu.gpus/1"
    assert doc["count"] >= 55
    assert doc["count"] == len(doc["gpus"]) == len(set(ids(doc)))
    h100 = next(g for g in doc["gpus"] if g["id"] == "h100-sxm5-80gb")
    assert h100["peak_dense"]["bf16_tflops"] == pytest.approx(989.4)
    assert h100["peak_dense"]["int4_tops"] == "n/a"


def test_filter_by_vendor() -> None:
    doc = run_json("gpus", "--vendor", "AMD")
    assert doc["count"] >= 5
    assert {g["vendor"] for g in doc["gpus"]} == {"AMD"}
    assert "mi300x" in ids(doc)


def test_filter_by_architecture() -> None:
    doc = run_json("gpus", "--arch", "hopper")
    assert {g["architecture"] for g in doc["gpus"]} == {"hopper"}
    assert {"h100-sxm5-80gb", "h100-pcie-80gb", "h200-sxm-141gb", "gh200"} <= set(ids(doc))


def test_filter_by_minimum_memory() -> None:
    doc = run_json("gpus", "--min-memory-gb", "80")
    assert all(g["memory_gb"] >= 80 for g in doc["gpus"])
    assert "a100-sxm4-80gb" in ids(doc)
    assert "a100-sxm4-40gb" not in ids(doc)


def test_filter_by_dtype_returns_only_fp8_cards() -> None:
    doc = run_json("gpus", "--dtype", "fp8")
    assert doc["count"] >= 20
    for g in doc["gpus"]:
        assert isinstance(g["peak_dense"]["fp8_tflops"], float), g["id"]
        assert g["architecture"] in {"ada", "hopper", "blackwell", "cdna3", "cdna4", "gaudi"}
    assert "rtx-4090" in ids(doc)
    assert not {"a100-sxm4-80gb", "v100-sxm2-32gb", "t4"} & set(ids(doc))


def test_sort_by_bf16_descending_puts_unknown_last() -> None:
    doc = run_json("gpus", "--sort", "bf16_tflops")
    values = [g["peak_dense"]["bf16_tflops"] for g in doc["gpus"]]
    known = [v for v in values if isinstance(v, float)]
    assert known == sorted(known, reverse=True)
    assert values[: len(known)] == known  # unknown/"n/a" rows come after every known one
    assert doc["gpus"][0]["id"] in {"mi355x", "gb200"}  # 2500 TFLOPS dense BF16


def test_sort_ascending() -> None:
    doc = run_json("gpus", "--sort", "memory_bandwidth_gbps", "--ascending")
    bw = [g["memory_bandwidth_gbps"] for g in doc["gpus"]]
    assert bw == sorted(bw)


def test_bad_filter_values_exit_2() -> None:
    res = run("gpus", "--vendor", "Acme")
    assert res.exit_code == 2
    assert "unknown vendor" in res.stderr
    res = run("gpus", "--sort", "bf17_tflops")
    assert res.exit_code == 2
    assert "did you mean" in res.stderr


# --------------------------------------------------------------------------- show


def test_show_by_nvidia_smi_name() -> None:
    res = run("gpus", "show", "NVIDIA A100-SXM4-80GB")
    assert res.exit_code == 0, res.output
    assert "a100-sxm4-80gb" in res.stdout
    assert "bf16_tflops" in res.stdout and "312" in res.stdout


def test_show_json() -> None:
    doc = run_json("gpus", "show", "NVIDIA A100-SXM4-80GB")
    assert doc["schema"] == "whichgpu.gpu/1"
    gpu = doc["gpu"]
    assert gpu["id"] == "a100-sxm4-80gb"
    assert gpu["peak_dense"]["bf16_tflops"] == 312
    assert gpu["peak_dense"]["fp8_tflops"] == "n/a"
    assert gpu["sources"]["default"]
    assert gpu["measured"][0]["matmul_tflops"] == pytest.approx(271.2)


def test_show_ambiguous_name_exits_2() -> None:
    res = run("gpus", "show", "a100")
    assert res.exit_code == 2
    assert "ambiguous" in res.stderr
    assert "a100-sxm4-80gb" in res.stderr and "a100-pcie-40gb" in res.stderr
    assert "Traceback" not in res.output


def test_show_unknown_name_exits_2_with_suggestions() -> None:
    res = run("gpus", "show", "rtx 9090")
    assert res.exit_code == 2
    assert "did you mean" in res.stderr
    assert res.stdout == ""


# --------------------------------------------------------------------------- user catalogs


def test_catalog_flag_with_malformed_file_names_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "acme-x1.toml"
    bad.write_text(NEW_GPU.replace("bandwidth_gbps = 3000", "bandwidth_gbps = 3000\nbandwdith_gbps = 1"))
    res = run("gpus", "--catalog", str(tmp_path))
    assert res.exit_code == 2
    assert str(bad) in res.stderr
    assert "memory.bandwdith_gbps" in res.stderr
    assert "Traceback" not in res.output


def test_catalog_flag_adds_a_gpu(tmp_path: Path) -> None:
    (tmp_path / "acme-x1.toml").write_text(NEW_GPU)
    res = run("gpus", "show", "acme-x1", "--catalog", str(tmp_path), "--json")
    assert res.exit_code == 0, res.output
    assert strict_json(res.stdout)["gpu"]["peak_dense"]["bf16_tflops"] == 400
    doc = run_json("gpus", "--catalog", str(tmp_path))
    assert "acme-x1" in ids(doc)
    assert doc["user_catalog_dirs"] == [str(tmp_path)]


def test_env_var_catalog(tmp_path: Path) -> None:
    (tmp_path / "acme-x1.toml").write_text(NEW_GPU)
    (tmp_path / "h100-price.toml").write_text(
        'id = "h100-sxm5-80gb"\n[price]\nstreet_usd = 20000\nstreet_date = "2026-11"\nstreet_source = "quote"\n')
    res = run("gpus", "show", "Acme X1 Test Accelerator", "--json", env={ENV_VAR: str(tmp_path)})
    assert res.exit_code == 0, res.output
    assert strict_json(res.stdout)["gpu"]["id"] == "acme-x1"
    res = run("gpus", "show", "H100 SXM5", "--json", env={ENV_VAR: str(tmp_path)})
    gpu = strict_json(res.stdout)["gpu"]
    assert gpu["price"]["street_usd"] == 20000
    assert gpu["overridden_by"] == [str(tmp_path / "h100-price.toml")]
    # Without the variable the packaged entry is untouched.
    assert run_json("gpus", "show", "H100 SXM5")["gpu"]["overridden_by"] == []


def test_env_var_pointing_nowhere_exits_2(tmp_path: Path) -> None:
    res = run("gpus", env={ENV_VAR: str(tmp_path / "missing")})
    assert res.exit_code == 2
    assert "missing" in res.stderr


# --------------------------------------------------------------------------- --local


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA driver")
def test_local_without_gpu_says_so() -> None:
    res = run("gpus", "--local")
    assert res.exit_code == 0, res.output
    assert "No GPU found" in res.stdout
    doc = run_json("gpus", "--local")
    assert doc["schema"] == "whichgpu.local/1"
    assert doc["gpus"] == [] and doc["reason"]


def test_local_without_nvml_package_explains(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as if not installed
    res = run("gpus", "--local")
    assert res.exit_code == 0, res.output
    assert "No GPU found" in res.stdout
    assert "nvidia-ml-py" in res.stdout
