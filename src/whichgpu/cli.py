"""The `whichgpu` command: a thin Typer app composed of one module per command."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from whichgpu import __version__
from whichgpu.errors import WhichGPUError


class _Group(TyperGroup):
    """Root group: turns our user-facing errors into one-line messages, never tracebacks."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except WhichGPUError as e:
            from whichgpu.report.flags import flag_message

            typer.echo(f"error: {flag_message(e)}", err=True)
            raise typer.Exit(e.exit_code) from None


app = typer.Typer(
    name="whichgpu",
    cls=_Group,
    help="How fast will my model train or serve on that GPU, will it fit, and which GPU to get.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"whichgpu {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """Predict step time, memory and value of deep-learning workloads on any GPU."""


def _register() -> None:
    from whichgpu.commands import register

    register(app)


_register()


def main() -> None:
    """Console-script entry point.

    A command that captured a model has torch loaded, and the interpreter's orderly teardown of
    torch's modules takes 0.5-0.8 s after the work is done. Such a process flushes its output
    and ends with os._exit: every file it writes (trace cache, HTML report) is closed by then,
    and it registers no exit handlers of its own.
    """
    try:
        app()
        code: int = 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    if "torch" not in sys.modules:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe takes no more
            stream.flush()
    os._exit(code)
