"""`cadence-store follow`: print the journal feed's events as they commit.

It runs until interrupted: Ctrl-C (SIGINT) or SIGTERM stops the follower cleanly (the
item being printed is finished) and the command exits with status 0, printing nothing
more: ending it is how a follow is meant to end, not a failure.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from .group import json_option, main, opened, print_json, url_option


@contextmanager
def _stopped_by_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set `stop` instead of raising, for this block (main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are the main thread's: nothing to catch here
        return
    previous = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}

    def on_signal(_number: int, _frame: Any) -> None:
        stop.set()

    for number in previous:
        signal.signal(number, on_signal)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@main.command(name="follow")
@click.option("--run", "run_id", metavar="ID", help="Only this run's events.")
@click.option(
    "--after",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    metavar="N",
    help="Start after feed position N (0: from the first event).",
)
@url_option
@json_option
def follow(run_id: str | None, after: int, url: str | None, as_json: bool) -> None:
    """Print every committed event after --after, then each new one as it commits, until
    Ctrl-C (exit status 0). --json prints one object per line: position, runId, and the
    cadence 1.x event.

    \b
    Example: cadence-store follow --after 120 --json
    """
    stop = threading.Event()
    with opened(url) as store, _stopped_by_signals(stop):
        for item in store.follow(after=after, run_id=run_id, stop=stop):
            if as_json:
                print_json(
                    {"position": item.position, "runId": item.run_id, "event": item.event.to_dict()}
                )
            else:
                event = item.event
                click.echo(f"{item.position}\t{item.run_id}\t{event.sequence}\t{event.type}")
            sys.stdout.flush()
