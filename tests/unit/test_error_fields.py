"""Library errors speak in the library's terms and name the field at fault; report/flags.py maps
the field to the flag the CLI prints in front (torch-free, fast)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from whichgpu.errors import CatalogError, InputError, NotModelledError, WhichGPUError
from whichgpu.recommend import Job, Request, Workload
from whichgpu.recommend.cost import CostModel
from whichgpu.report.flags import FLAGS, flag_message, flag_of
from whichgpu.workload.spec import WorkloadSpec

GPT2 = (Workload("gpt2", WorkloadSpec("gpt2")),)


@pytest.mark.parametrize(("check", "flag"), [
    (Request(GPT2, "t", max_gpus=0).validate, "--max-gpus"),
    (Request(GPT2, "t", budget_usd=-1.0).validate, "--budget"),
    (Request(GPT2, "t", objective="speed").validate, "--objective"),
    (Request(GPT2, "t", min_memory_gb=-1.0).validate, "--min-memory-gb"),
    (Request(GPT2, "t", objective="cost-per-job").validate, "--job-tokens"),
    (Job(epochs=2).validate, "--dataset-size"),
    (Job(dataset_size=1e6).validate, "--job-epochs"),
    (CostModel(usd_per_kwh=-1.0).validate, "--electricity-usd-per-kwh"),
    (CostModel(hours_per_month=1000).validate, "--hours-per-month"),
    (WorkloadSpec("gpt2", batch_size=0).validate, "--batch-size"),
    (WorkloadSpec("gpt2", finetune="dora").validate, "--finetune"),
])
def test_library_errors_name_no_flag_and_the_cli_adds_it(check: Callable[[], None], flag: str) -> None:
    with pytest.raises(InputError) as e:
        check()
    assert e.value.field and "--" not in str(e.value), str(e.value)
    assert flag_message(e.value) == f"{flag}: {e.value}"


def test_a_field_missing_from_the_table_is_its_name_with_dashes() -> None:
    assert "max_power_w" not in FLAGS and flag_of("max_power_w") == "--max-power-w"
    assert flag_of("dp") == "--gpus" and flag_of("") == ""
    assert flag_message(NotModelledError("pipeline parallelism is not modelled yet", field="pp")).startswith("--pp: ")


def test_fields_no_flag_sets_and_other_errors_get_no_flag() -> None:
    # fragmentation comes from measurement files: no flag to blame
    assert flag_message(InputError("fragmentation must be in [0, 1), got 2", field="fragmentation")) == (
        "fragmentation must be in [0, 1), got 2")
    # a CatalogError's field is a field of the file, never a flag
    e = CatalogError("my.toml", "memory_gb", "must be > 0")
    assert e.field == "memory_gb" and flag_message(e) == str(e) and "--" not in flag_message(e)
    assert flag_message(WhichGPUError("plain")) == "plain"
    assert flag_message(InputError("no field")) == "no field"


def test_an_error_names_the_spelling_of_the_flag_the_user_typed() -> None:
    e = InputError("unknown recompute 'bogus'; valid: full, none, selective", field="recompute")
    assert flag_message(e).startswith("--checkpointing: ")
    assert flag_message(e, ["--gpus", "--recompute"]).startswith("--recompute: ")
    assert flag_message(e, ["--checkpointing", "--recompute"]).startswith("--checkpointing: ")
    assert flag_of("tp", ["--recompute"]) == "--tp"
