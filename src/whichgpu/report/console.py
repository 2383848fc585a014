"""The CLI's console: rich on stdout, errors on stderr."""

from __future__ import annotations

import os

from rich.console import Console

# Wide enough that tables are readable in CI logs and pipes.
_width = int(os.environ.get("COLUMNS", "0") or 0) or None
console = Console(width=_width or 160, soft_wrap=False, highlight=False)
err_console = Console(stderr=True, width=_width or 160, highlight=False)
