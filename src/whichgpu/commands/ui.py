"""`whichgpu ui`: the local web app (recommend, compare, fit, plan, serve in the browser)."""

from __future__ import annotations

import typer

from whichgpu.commands.common import int_option
from whichgpu.limits import Bound


def ui_cmd(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (default: this machine only)."),
    port: int = int_option(8000, "--port", bound=Bound(1, 65535), help="TCP port."),
    no_browser: bool = typer.Option(False, "--no-browser", help="Do not open a browser tab."),
) -> None:
    """Serve the web app (a single page and a JSON API over the same calls as the CLI) until Ctrl-C."""
    import os
    import socket

    import uvicorn

    from whichgpu.errors import InputError
    from whichgpu.web.app import create_app

    try:  # an unknown host or a port in use is a one-line error, not uvicorn's traceback
        socket.getaddrinfo(host, port)
    except socket.gaierror as e:
        raise InputError(f"--host {host}: cannot resolve it ({(e.strerror or str(e)).lower()})") from None
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as e:
        why = os.strerror(e.errno) if e.errno and e.errno > 0 else str(e)
        raise InputError(f"cannot listen on {host}:{port} ({why.lower()}); pick another --host or --port") from None
    url = f"http://{'localhost' if host in ('127.0.0.1', '0.0.0.0', '::') else host}:{port}/"
    typer.echo(f"whichgpu ui: serving {url} (Ctrl-C to stop)", err=True)
    if not no_browser:
        _open_later(url)
    uvicorn.run(create_app(), host=host, port=port, log_level="warning")


def _open_later(url: str) -> None:
    """Open `url` in a browser once the server is up; never fails. Without a display (a Linux
    server, SSH) nothing is opened: Python's webbrowser would start a text browser (lynx, w3m) in
    the server's own terminal."""
    import contextlib
    import os
    import sys
    import threading
    import webbrowser

    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        typer.echo(f"no display: open {url} in a browser", err=True)
        return

    def go() -> None:
        with contextlib.suppress(Exception):  # a missing or broken browser must not stop the server
            webbrowser.open(url)

    timer = threading.Timer(1.0, go)
    timer.daemon = True
    timer.start()


def register(app: typer.Typer) -> None:
    app.command("ui")(ui_cmd)
