"""`cadence-store serve`: the read-only web view (`cadence_store.web`) on a local port.

It binds to loopback unless told otherwise, prints where it listens, and runs until
Ctrl-C (or SIGTERM), which uvicorn turns into a clean stop: exit status 0.
"""

from __future__ import annotations

import socket

import click

from ..errors import InvalidInputError
from .group import main, opened, url_option


def _listening_socket(host: str, port: int) -> socket.socket:
    """The listening socket (bound here, so that `--port 0` can say which port it got)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(128)  # a browser opened on the printed address waits, not refused
    except OSError as error:
        listener.close()
        raise InvalidInputError(
            "serve-address-unavailable", f"cannot listen on {host}:{port}: {error.strerror}"
        ) from None
    return listener


@main.command(name="serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port (0: any)."
)
@url_option
def serve(host: str, port: int, url: str | None) -> None:
    """Serve the read-only web view of the store (runs, a run's events and verification,
    the feed, JSON under /api/) until Ctrl-C. Needs the `web` extra.

    \b
    Example: cadence-store serve --url sqlite:///runs.sqlite3 --port 8765
    """
    try:
        import uvicorn

        from ..web import create_app
        from ..web.process import freeze_startup_heap
    except ImportError as error:
        raise InvalidInputError(
            "web-extra-missing",
            f"the web view needs {error.name!r}: pip install 'cadence-store[web]'",
        ) from None
    with opened(url) as store:
        listener = _listening_socket(host, port)
        bound_host, bound_port = listener.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        click.echo(f"cadence-store web view listening on http://{shown}:{bound_port}/")
        click.echo("Ctrl-C stops it")
        config = uvicorn.Config(create_app(store), log_level="warning", access_log=False)
        freeze_startup_heap()  # the collector's full passes then walk what requests make
        try:
            uvicorn.Server(config).run(sockets=[listener])
        except KeyboardInterrupt:
            pass  # uvicorn stops cleanly, then raises the Ctrl-C again: stopping is the end
        finally:
            listener.close()
