"""Shared harness for CLI tests: JSON-invoking helpers (the private trace cache fixture,
``isolated_cache``, is in tests/conftest.py)."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner, Result

from whichgpu.cli import app

runner = CliRunner()


def _refuse(constant: str) -> Any:
    raise AssertionError(f"{constant} in JSON output: not valid JSON (RFC 8259)")


def strict_json(text: str) -> Any:
    """Parse a command's --json output as strict JSON: NaN, Infinity and -Infinity fail the test."""
    return json.loads(text, parse_constant=_refuse)


def invoke(command: str, *args: str) -> Result:
    return runner.invoke(app, [command, *args])


def invoke_json(command: str, schema: str, *args: str, code: int = 0) -> dict[str, Any]:
    """Run with --json, check the exit code and the document's schema, return the document."""
    res = invoke(command, *args, "--json")
    assert res.exit_code == code, res.output
    doc: dict[str, Any] = strict_json(res.stdout)
    assert doc["schema"] == schema
    return doc
