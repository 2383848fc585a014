"""The `whichgpu` command: a thin Typer app composed of one module per command."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer._click.exceptions import (  # typer (pinned) vendors its own click
    BadParameter,
    ClickException,
)
from typer.core import TyperGroup

from whichgpu import __version__
from whichgpu.errors import NoAnswerError, WhichGPUError


def usage_line(e: Any) -> str:
    """A usage error (unknown flag, bad number, missing argument) as one line, with where to look."""
    def flat(text: str) -> str:  # one line, without pydantic's prefix on a parser's ValueError
        return " ".join(text.replace("Value error, ", "").split())

    param = getattr(e, "param", None)
    if isinstance(e, BadParameter) and e.message and param is not None and getattr(param, "opts", None):
        # a bad value: the flag in front, as the library's errors (report/flags.py), and what is valid
        return f"error: {max(param.opts, key=len)}: {flat(e.message)}"
    msg = flat(e.format_message()).rstrip(".")
    ctx = getattr(e, "ctx", None)
    cmd = ctx.command_path if ctx is not None else "whichgpu"
    return f"error: {msg[:1].lower() + msg[1:]} (see '{cmd} -h')"


class _Group(TyperGroup):
    """Root group: turns our user-facing errors and usage errors into one-line messages (exit 2),
    never tracebacks or boxed panels."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **extra: Any) -> Any:
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False,
                              windows_expand_args=windows_expand_args, **extra)
        except ClickException as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # `whichgpu` alone: the help, as typer shows it
                from typer import rich_utils

                rich_utils.rich_format_error(e)
                sys.exit(e.exit_code)
            typer.echo(usage_line(e), err=True)
            if not standalone_mode:
                raise
            sys.exit(e.exit_code)
        except typer.Abort:
            typer.echo("error: interrupted", err=True)
            if not standalone_mode:
                raise
            sys.exit(130)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: Any) -> Any:
        typed = [a.split("=", 1)[0] for a in ctx.args if a.startswith("--")]  # click empties ctx.args
        try:
            return super().invoke(ctx)
        except WhichGPUError as e:
            from whichgpu.report.flags import flag_message

            prefix = "no" if isinstance(e, NoAnswerError) else "error"  # exit 1: a valid question answered "no"
            typer.echo(f"{prefix}: {flag_message(e, typed)}", err=True)
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
