"""`archive`: finished runs older than a time written to a durable archive file, then
deleted from the store, their leaves kept in its tree (`RunStore.archive`)."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from ..errors import InvalidInputError
from ..store.retention import DEFAULT_ARCHIVE_BATCH
from .checkpoints import SIGNING_KEY_ENV, read_signer_key_file, signer_key_option
from .group import main, opened, phase_progress, progress_bar, url_option

ARCHIVE_TIME_INVALID = "invalid-archive-request"


def parse_time(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC when it names no offset)."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInputError(
            ARCHIVE_TIME_INVALID, f"--before {text!r} is neither ISO 8601 nor milliseconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


@main.command(name="archive")
@click.option(
    "--before",
    "before",
    required=True,
    metavar="TIME",
    help="Archive finished runs whose last event is older (ISO 8601, or ms since the epoch).",
)
@click.option("--to", "to", required=True, metavar="FILE", help="The archive file to write.")
@signer_key_option(f"The signer key file for its checkpoint (default: ${SIGNING_KEY_ENV}).")
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=DEFAULT_ARCHIVE_BATCH,
    show_default=True,
    metavar="N",
    help="Runs deleted per transaction.",
)
@url_option
def archive(before: str, to: str, key_file: str, batch: int, url: str | None) -> None:
    """Archive finished runs (completed, discarded, rejected) whose last event is older
    than TIME: sign a checkpoint, write them with their inclusion proofs to FILE (made
    durable before anything is deleted), then delete them from the store, keeping their
    leaves in its tree. Run it again with the same FILE after an interruption: it
    finishes deleting the runs the file holds.

    \b
    Example: cadence-store archive --before 2025-01-01 --to runs-2024.archive --key runs.key
    Example: cadence-store archive --before 1735689600000 --to old.archive --batch 200
    """
    bound = parse_time(before)
    key = read_signer_key_file(key_file)
    with opened(url) as store, progress_bar() as bar:
        advance = phase_progress(
            bar, lambda phase: "writing runs" if phase == "archive" else "deleting runs"
        )
        report = store.archive(
            finished_before_ms=bound, to=to, key=key, batch=batch, progress=advance
        )
    how = "finished the archive" if report.resumed else "archived"
    click.echo(
        f"{how} {report.runs_archived} run(s), {report.events_archived} event(s) to "
        f"{report.path} ({report.runs_written} run(s) in the file; its checkpoint: "
        f"{report.checkpoint.size} leaves, root {report.checkpoint.root_hash})"
    )
    if report.already_archived:
        click.echo(f"{report.already_archived} run(s) of the file were archived before")
    if report.kept:
        click.echo(f"{report.kept} run(s) changed since the file was written: left in the store")
