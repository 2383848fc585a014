"""Shared test setup: a private trace cache per test session, torch availability."""

from __future__ import annotations

import importlib.util
import os
import tempfile

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None

# Never read or pollute the user's cache from tests.
os.environ.setdefault("WHICHGPU_CACHE_DIR", tempfile.mkdtemp(prefix="whichgpu-test-cache-"))

needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra (pip install 'whichgpu[torch]')")
