"""The CLI's console (rich, on stdout; errors and progress on stderr) and the two ways to put
text on it without rich reading user text as markup.

Width: on a terminal, rich's (the terminal's). When piped (files, CI logs, tests), $COLUMNS if it
holds a whole number (kept within 40-1000), else 120: the terminal output is laid out for 80-120
columns, so 120 shows every default table unsqueezed, and a fixed figure keeps what a pipe receives
the same on every machine. The width is read at each print, so a changed $COLUMNS takes effect.
Tables asked for with ``--wide`` are printed at their own full width (see ``print_wide``).

Markup: a GPU, model, file or preset name may hold ``[...]`` (a catalog name ``[/red]``, a path
``runs/[2024]``). Rich would read it as markup: crash on a closing tag, drop ``[nvml]``, render
``[link=...]`` as a link. So user text never goes through markup: tables are made with ``Table``
from here, whose ``str`` title and cells are literal text, and lines are printed with ``say``,
whose ``str`` parts are literal and whose ``(text, style)`` pairs are styled. Styled cells are
``styled(text, style)``.
"""

from __future__ import annotations

import os
from typing import Any

from rich import box
from rich.console import Console, ConsoleDimensions, OverflowMethod, RenderableType
from rich.measure import Measurement
from rich.segment import Segment, Segments
from rich.table import Table as _RichTable
from rich.text import Text

PIPED_WIDTH = 120
MIN_WIDTH, MAX_WIDTH = 40, 1000

Part = str | tuple[str, str] | Text


def piped_width(environ: Any = None) -> int:
    """The layout width when not on a terminal: $COLUMNS (within MIN_WIDTH..MAX_WIDTH) if it
    is a whole number, else PIPED_WIDTH."""
    cols = str((os.environ if environ is None else environ).get("COLUMNS", "")).strip()
    if cols.isdigit():
        return min(max(int(cols), MIN_WIDTH), MAX_WIDTH)
    return PIPED_WIDTH


class _Console(Console):
    """A Console whose width is decided at each print: the terminal's, else ``piped_width()``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if kwargs.get("width") is None:
            # rich freezes $COLUMNS as it is when the console is made (at import); the width
            # is read at each print instead (`size`)
            self._width = None

    @property
    def size(self) -> ConsoleDimensions:
        if self._width is not None or self._is_tty():
            return super().size
        return ConsoleDimensions(piped_width(self._environ), super().size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size

    def _is_tty(self) -> bool:
        try:
            return bool(self.file.isatty())
        except (AttributeError, ValueError, OSError):
            return False


console = _Console(soft_wrap=False, highlight=False)
err_console = _Console(stderr=True, highlight=False)


def styled(text: object, style: str) -> Text:
    """`text` (shown literally) in a rich style ("bold", "red", "dim", ...)."""
    return Text(str(text), style=style)


def line(*parts: Part) -> Text:
    """One line of literal text: each ``str`` is shown as it is, each ``(text, style)`` styled."""
    return Text.assemble(*((str(p[0]), p[1]) if isinstance(p, tuple) else p for p in parts))


def say(*parts: Part, wrap: bool = False, out: Console | None = None) -> None:
    """Print `line(*parts)`; long lines are left to the terminal (soft wrap) unless `wrap`."""
    (out or console).print(line(*parts), soft_wrap=not wrap)


class Table(_RichTable):
    """A rich Table whose ``str`` title, caption and cells are literal text (never markup): a
    user's name in a cell is shown as written. Style a cell with ``styled(...)``. A word too
    long for its column is folded onto the next line, never cut with an ellipsis."""

    def __init__(self, *headers: Any, title: str | Text | None = None, caption: str | Text | None = None,
                 **kw: Any) -> None:
        super().__init__(*headers, title=Text(title, style="table.title") if isinstance(title, str) else title,
                         caption=Text(caption, style="table.caption") if isinstance(caption, str) else caption, **kw)

    def add_column(self, *args: Any, overflow: OverflowMethod = "fold", **kw: Any) -> None:
        super().add_column(*args, overflow=overflow, **kw)

    def add_row(self, *renderables: RenderableType | None, **kw: Any) -> None:
        super().add_row(*(Text(r) if isinstance(r, str) else r for r in renderables), **kw)


def compact_table(title: str, **kw: Any) -> Table:
    """The default (80-120 column) tables: a light frame, so that the columns get the room."""
    return Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", **kw)


def print_wide(renderable: RenderableType, out: Console | None = None) -> None:
    """Print a (``--wide``) table at its own full width, however narrow the console: every column
    whole, one line per row; wider than a terminal, lines wrap there (pipe to ``less -S``)."""
    c = out or console
    need = Measurement.get(c, c.options.update(width=MAX_WIDTH * 4), renderable).maximum
    if need <= c.width:
        c.print(renderable)
        return
    segments: list[Segment] = []
    for ln in c.render_lines(renderable, c.options.update(width=need), pad=False):
        segments += [*ln, Segment.line()]
    c.print(Segments(segments), soft_wrap=True, crop=False)
