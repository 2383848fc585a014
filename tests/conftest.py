"""Shared test setup: a private trace cache per test session (and one per module on request),
torch availability."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Iterator

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None

# Never read or pollute the user's cache from tests.
os.environ.setdefault("WHICHGPU_CACHE_DIR", tempfile.mkdtemp(prefix="whichgpu-test-cache-"))

# The CLI lays out piped output at $COLUMNS when set (report/console.py). pytest-xdist workers
# set COLUMNS=80, a terminal may set anything: tests see the documented default (120) unless
# they set a width themselves.
os.environ.pop("COLUMNS", None)

needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra (pip install 'whichgpu[torch]')")


@pytest.fixture(scope="module")
def isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A trace cache of the test module's own, and no user catalog from the environment.
    A module opts in with ``pytestmark = pytest.mark.usefixtures("isolated_cache")``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WHICHGPU_CACHE_DIR", str(tmp_path_factory.mktemp("traces")))
        mp.delenv("WHICHGPU_CATALOG", raising=False)
        yield
