"""Uploaded Hugging Face config.json files: checked as the CLI reads one (JSON data, never code),
then kept by content hash beside the trace cache, so that a shared link naming ``upload:HASH``
finds the same model after a restart.

A model a request names is a zoo name (resolved by the zoo, so a path or a factory never gets
through) or ``upload:HASH`` of a stored upload.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

from whichgpu.errors import CaptureError, InputError, WhichGPUError

MAX_BYTES = 256 * 1024
"""Largest config.json accepted: real ones are a few KiB (DeepSeek-V3's is 1.7 KiB)."""

PREFIX = "upload:"
_HASH = re.compile(r"[0-9a-f]{16}")


class TooLargeError(InputError):
    """An upload over MAX_BYTES (HTTP 413)."""


def upload_dir() -> Path:
    """Where uploads are kept: ``uploads/`` in the trace cache ($WHICHGPU_CACHE_DIR)."""
    from whichgpu.workload.cache import cache_dir

    return cache_dir() / "uploads"


def store(data: bytes, filename: str = "config.json") -> tuple[str, dict[str, object]]:
    """Check an uploaded config.json as `whichgpu` reads one and keep it: (its model token
    ``upload:HASH``, the config). A malformed file is the CLI's one-line error, naming the file as
    the browser sent it."""
    from whichgpu.workload.spec import read_config

    name = os.path.basename(filename or "config.json") or "config.json"
    if len(data) > MAX_BYTES:
        raise TooLargeError(f"{name}: {len(data):,} bytes is over the {MAX_BYTES // 1024} KiB limit of an "
                            "uploaded config.json")
    digest = hashlib.sha256(data).hexdigest()[:16]
    root = upload_dir()
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        path = Path(tmp) / "config.json"
        path.write_bytes(data)
        try:
            cfg = read_config(str(path))
        except WhichGPUError as e:
            raise CaptureError(str(e).replace(str(path), name)) from None
        final = root / digest
        if not (final / "config.json").is_file():
            final.mkdir(exist_ok=True)
            os.replace(path, final / "config.json")  # atomic: a concurrent upload of the same file is the same file
    return PREFIX + digest, cfg


def resolve_model(model: str) -> str:
    """The MODEL argument for the library: a zoo id, or the stored path of an upload. Anything
    else (a path, file.py:factory) is refused before the library sees it."""
    m = model.strip()
    if m.startswith(PREFIX):
        digest = m[len(PREFIX):]
        path = upload_dir() / digest / "config.json"
        if not _HASH.fullmatch(digest) or not path.is_file():
            raise InputError(f"no uploaded config.json {m!r} on this server; upload it again")
        return str(path)
    if m.startswith(("/", ".", "~")) or m.endswith((".json", ".py")) or ".py:" in m:
        raise InputError(f"model {m!r}: the web app takes a zoo name or an uploaded config.json, not a path")
    # names only (ids, titles, Hugging Face ids): never a file
    from whichgpu.workload.zoo import get_entry

    return get_entry(m).id


def scrub(message: str) -> str:
    """An error message with the server's upload paths shown as the model token the browser knows."""
    root = str(upload_dir())
    return re.sub(re.escape(root) + r"/([0-9a-f]{16})/config\.json", lambda m: PREFIX + m.group(1), message)
