"""The CLI's console: rich on stdout, errors on stderr.

On a terminal rich uses its width; when piped (CI logs, files, tests) tables are laid out at a
fixed generous width so that columns are never squeezed into truncation.
"""

from __future__ import annotations

import sys

from rich.console import Console

_PIPED_WIDTH = 200


def _width() -> int | None:
    try:
        return None if sys.stdout.isatty() else _PIPED_WIDTH
    except (AttributeError, ValueError):
        return _PIPED_WIDTH


console = Console(width=_width(), soft_wrap=False, highlight=False)
err_console = Console(stderr=True, width=_width(), highlight=False)
