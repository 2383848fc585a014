"""Shared harness for CLI tests: a private trace cache and JSON-invoking helpers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from whichgpu.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A trace cache of the test module's own, and no user catalog from the environment."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WHICHGPU_CACHE_DIR", str(tmp_path_factory.mktemp("traces")))
        mp.delenv("WHICHGPU_CATALOG", raising=False)
        yield


def invoke(command: str, *args: str) -> Result:
    return runner.invoke(app, [command, *args])


def invoke_json(command: str, schema: str, *args: str, code: int = 0) -> dict[str, Any]:
    """Run with --json, check the exit code and the document's schema, return the document."""
    res = invoke(command, *args, "--json")
    assert res.exit_code == code, res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    assert doc["schema"] == schema
    return doc
