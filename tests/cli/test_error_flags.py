"""Bad input across estimate, analyze, fit and recommend: the library's error, in its own terms,
with the flag that sets the field at fault in front (report/flags.py), one line on stderr, exit 2."""

from __future__ import annotations

import pytest
from tests.cli.conftest import invoke

pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("isolated_cache")  # the module's own trace cache (tests/conftest.py)


@pytest.mark.parametrize(("args", "flag", "message"), [
    (("recommend", "gpt2", "--max-gpus", "0"), "--max-gpus", "0 is out of range; valid: an integer >= 1 and <= 65536"),
    (("recommend", "gpt2", "--budget", "-1"), "--budget", "-1 is out of range; valid: a finite number > 0 and <= 1e+12"),
    (("recommend", "gpt2", "--years", "0"), "--years", "0 is out of range; valid: a finite number > 0 and <= 30"),
    (("recommend", "gpt2", "--electricity-usd-per-kwh", "-1"), "--electricity-usd-per-kwh", "-1 is out of range"),
    (("recommend", "gpt2", "--job-epochs", "2"), "--dataset-size", "a job in epochs needs the dataset size"),
    (("recommend", "gpt2", "--dataset-size", "1000"), "--job-epochs", "a dataset size needs the number of epochs"),
    (("recommend", "--objective", "cost-per-job"), "--job-tokens", "the cost-per-job objective needs the job's size"),
    (("recommend", "gpt2", "--min-memory-gb", "1000"), "--min-memory-gb", "no GPU has 1000 GB of memory"),
    (("estimate", "gpt2", "--gpu", "t4", "--gpus", "0"), "--gpus", "0 is out of range; valid: an integer >= 1"),
    (("estimate", "gpt2", "--gpu", "t4", "-b", "0"), "--batch-size", "0 is out of range; valid: an integer >= 1"),
    (("analyze", "resnet50-v1.5", "--seq-len", "128"), "--seq-len", "ResNet-50 v1.5 takes images, not tokens"),
    (("analyze", "gpt2", "--image-size", "64"), "--image-size", "GPT-2 (124M) takes tokens, not images"),
    (("fit", "gpt2", "--gpu", "h100", "--finetune", "dora"), "--finetune", "finetune must be full, lora or qlora"),
    # an unknown mode names the field's flag, with suggestions
    (("fit", "gpt2", "--gpu", "h100", "--sharding", "zero4"), "--sharding", "unknown sharding 'zero4'; did you mean"),
])
def test_the_flag_at_fault_prefixes_a_one_line_error(args: tuple[str, ...], flag: str, message: str) -> None:
    res = invoke(*args)
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert "\n" not in err and "Traceback" not in res.output and not res.stdout.strip(), res.output
    assert err.startswith(f"error: {flag}: {message}" if flag else f"error: {message}"), err
    # the flag is named once, in front: the library's message itself names none
    assert err.count("--") == (1 if flag else 0), err
