"""Shared harness for CLI tests: JSON-invoking helpers (the private trace cache fixture,
``isolated_cache``, is in tests/conftest.py)."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner, Result

from whichgpu.cli import app

runner = CliRunner()


def invoke(command: str, *args: str) -> Result:
    return runner.invoke(app, [command, *args])


def invoke_json(command: str, schema: str, *args: str, code: int = 0) -> dict[str, Any]:
    """Run with --json, check the exit code and the document's schema, return the document."""
    res = invoke(command, *args, "--json")
    assert res.exit_code == code, res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    assert doc["schema"] == schema
    return doc
