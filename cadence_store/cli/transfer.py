"""Moving runs: `export`, `import` and `copy`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import InvalidInputError
from ..storage.engine import masked_url
from ..transfer import Progress as TransferProgress
from ..transfer import copy_store, export_store, import_store
from .group import (
    checked_url,
    create_store_file,
    describe,
    main,
    open_input,
    opened,
    phase_progress,
    progress_bar,
    remember,
    schema_for,
    url_option,
)

# -- export, import, copy ---------------------------------------------------------------------


@main.command(name="export")
@url_option
@click.option("--out", metavar="FILE", help="Write to FILE (default: standard output).")
def export_command(url: str | None, out: str | None) -> None:
    """Export every run as JSON Lines (one run per line, stored text verbatim).

    \b
    Example: cadence-store export --out runs.jsonl
    """
    with opened(url) as store, progress_bar(redirect_stdout=False) as bar:
        task = bar.add_task("exporting runs", total=None)

        def advance(update: TransferProgress) -> None:
            bar.update(task, completed=update.done, total=update.total)

        if out is None or out == "-":
            report = export_store(store.engine, sys.stdout, progress=advance)
            sys.stdout.flush()
            target = "standard output"
        else:
            partial = Path(f"{out}.partial")
            try:
                with partial.open("w", encoding="utf-8", newline="\n") as handle:
                    report = export_store(store.engine, handle, progress=advance)
                partial.replace(out)
            except OSError as error:
                raise InvalidInputError(
                    "export-file-unwritable", f"{out}: {error.strerror}"
                ) from None
            finally:
                partial.unlink(missing_ok=True)
            target = out
    click.echo(
        f"exported {report.runs_written} run(s), {report.events_written} event(s) to {target}",
        err=True,
    )


@main.command(name="import")
@click.argument("file", metavar="FILE")
@url_option
def import_command(file: str, url: str | None) -> None:
    """Import an export file, or restore an archive file ('-' for standard input), into
    a database at head.

    Every record is checked first, so a bad file or a conflicting run writes nothing;
    runs already present and identical are skipped (importing twice changes nothing). An
    archive's runs go back where the store archived them, their leaves matched with the
    ones it kept (checkpoint-mismatch when they differ).

    \b
    Example: cadence-store import runs.jsonl --url postgresql+psycopg://app@db/cadence
    Example: cadence-store import runs-2025.archive --url sqlite:///runs.sqlite3
    """
    with opened(url, create=True) as store, open_input(file) as lines, progress_bar() as bar:
        task = bar.add_task("importing runs", total=None)

        def advance(update: TransferProgress) -> None:
            bar.update(task, completed=update.done, total=update.total)

        report = import_store(store.engine, lines, progress=advance)
        label = describe(store)
    click.echo(
        f"imported {report.runs_written} run(s), {report.events_written} event(s) into "
        f"{label}; {report.runs_skipped} already present and identical"
    )


@main.command()
@click.option(
    "--from",
    "source",
    metavar="URL",
    envvar="CADENCE_STORE_URL",
    callback=checked_url,
    help="Source database (default: $CADENCE_STORE_URL, else the embedded store).",
)
@click.option(
    "--to",
    "destination",
    metavar="URL",
    required=True,
    callback=checked_url,
    help="Destination (at head).",
)
@click.option("--batch-size", default=200, show_default=True, type=click.IntRange(min=1))
def copy(source: str | None, destination: str, batch_size: int) -> None:
    """Copy runs, events, operations and bindings to another database, re-verified there.

    The destination must be at head (a SQLite file that does not exist yet is created
    at head). Re-running is a no-op; a destination holding a
    different run under the same id is refused (run-id-conflict) and left unchanged.

    \b
    Example: cadence-store copy --from sqlite:///control.sqlite3 --to postgresql+psycopg://app@db/cadence
    """
    remember(destination)
    destination_schema = schema_for(destination)
    with opened(source) as store, progress_bar() as bar:
        create_store_file(destination)  # once the source is known to exist
        advance = phase_progress(
            bar, lambda phase: "checking runs" if phase == "check" else "copying runs"
        )
        report = copy_store(
            store.engine,
            destination,
            batch_size=batch_size,
            progress=advance,
            destination_schema=destination_schema,
        )
        label = describe(store)
    click.echo(
        f"copied {report.runs_written} run(s), {report.events_written} event(s) from {label} "
        f"to {masked_url(destination)}; {report.runs_skipped} already present and identical; "
        "every copied chain verified at the destination"
    )
