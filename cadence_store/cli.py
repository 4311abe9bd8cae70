"""The `cadence-store` command.

Every command works on one database: `--url`, else `$CADENCE_STORE_URL`, else the
embedded default — the cadence 1.x owner-private store of the current directory
(`RunStore.open(resolve_state_root(cwd))`, a SQLite file under `$XDG_STATE_HOME` or
`~/.local/state`).

Exit codes: 0 ok, 1 verification found corruption, 2 usage or invalid input, 3 the store
refused, needs an upgrade, is busy or unavailable. An expected failure prints
`error: <code>` and what to do, never a traceback, and never a password.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from . import cli_render as render
from .engine import create_store_engine, masked_url, parse_url
from .errors import (
    CadenceStoreError,
    InvalidInputError,
    StoreUnavailableError,
)
from .failures import READ, database_errors, translate_database_error
from .journal import RUN_STAGES, RUN_STATES, js_stringify
from .journal.views import StoreCounts
from .parallel_verify import verify_runs
from .schema import current_revision, head_revision, schema_options, upgrade_command
from .schema import upgrade as upgrade_database
from .state_root import resolve_state_root
from .store import RunStore
from .transfer import (
    Progress as TransferProgress,
)
from .transfer import (
    RunCheck,
    copy_store,
    export_store,
    import_store,
    iter_verify_export,
)

F = TypeVar("F", bound=Callable[..., Any])
_URLS_KEY = "cadence_store.urls"
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}


# -- the group: one place that turns expected failures into `error: <code>` ---------------


def _known_urls(ctx: click.Context) -> list[str]:
    urls: list[str] = ctx.meta.setdefault(_URLS_KEY, [])
    return urls


def _remember(url: str | None) -> str | None:
    """Note a URL given to the command, so that error texts can be scrubbed of it."""
    if url:
        ctx = click.get_current_context(silent=True)
        if ctx is not None:
            _known_urls(ctx).append(url)
    return url


class StoreGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CadenceStoreError as error:
            ctx.exit(render.echo_error(error, _known_urls(ctx)))
        except SQLAlchemyError as error:
            if isinstance(error, ArgumentError):
                invalid = InvalidInputError("invalid-database-url", str(error))
                ctx.exit(render.echo_error(invalid, _known_urls(ctx)))
            ctx.exit(render.echo_error(translate_database_error(error), _known_urls(ctx)))
        except ArgumentError as error:
            invalid = InvalidInputError("invalid-database-url", str(error))
            ctx.exit(render.echo_error(invalid, _known_urls(ctx)))


@click.group(name="cadence-store", cls=StoreGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(package_name="cadence-store", prog_name="cadence-store")
def main() -> None:
    """cadence-store: a durable, sha256 hash-chained run journal.

    Database: --url, else $CADENCE_STORE_URL, else the embedded store of the current
    directory (the cadence 1.x state root under $XDG_STATE_HOME or ~/.local/state).

    Exit codes: 0 ok, 1 corruption found, 2 usage or invalid input, 3 the store refused,
    needs an upgrade, is busy or unavailable.

    \b
    Example: cadence-store info --url postgresql+psycopg://app@db/cadence
    """


def _checked_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A database URL that parses, refused up front (`invalid-database-url`, exit 2)."""
    if not value:
        return value
    _remember(value)
    try:
        parsed = make_url(value)
    except (ArgumentError, ValueError) as error:
        raise InvalidInputError("invalid-database-url", str(error)) from None
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        if "\x00" in parsed.database:
            raise InvalidInputError("invalid-database-url", "the SQLite path holds a NUL byte")
        try:
            os.stat(parsed.database)
        except OSError as error:
            if error.errno == errno.ENAMETOOLONG:
                raise InvalidInputError("invalid-database-url", error.strerror) from None
    return value


def url_option(function: F) -> F:
    return click.option(
        "--url",
        envvar="CADENCE_STORE_URL",
        default=None,
        callback=_checked_url,
        metavar="URL",
        help="Database URL (default: $CADENCE_STORE_URL, else the embedded store of the "
        "current directory).",
    )(function)


def json_option(function: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(
        function
    )


# -- choosing and opening the database ------------------------------------------------------


def default_root_hash() -> str:
    """sha256 of the current directory's real path, as cadence 1.x hashed a consumer root."""
    real = os.path.realpath(os.getcwd())
    return hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()


def _require_existing_sqlite(url: str) -> None:
    """Refuse a SQLite file that does not exist (instead of creating an empty one)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return
    database = parsed.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    try:
        exists = Path(database).exists()
    except OSError as error:  # e.g. a path longer than the system allows
        raise InvalidInputError("invalid-database-url", f"{error.strerror}") from None
    if not exists:
        raise StoreUnavailableError(
            "run-store-unavailable", f"no database file at {database} (create it with upgrade)"
        )


def schema_for(url: str | None, schema: str | None = None) -> str | None:
    """The PostgreSQL schema of the cadence tables at `url`: `schema` if given, else
    `$CADENCE_STORE_SCHEMA`. SQLite has no schemas, so a SQLite URL (or the embedded
    store) gets none: one setting serves a copy between the two engines."""
    if not url or parse_url(url).get_backend_name() == "sqlite":
        return None
    return schema or os.environ.get("CADENCE_STORE_SCHEMA") or None


def open_store(url: str | None, *, root_hash: str | None = None) -> RunStore:
    """The selected database as a `RunStore` (the embedded default is opened and upgraded)."""
    if url:
        _remember(url)
        _require_existing_sqlite(url)
        return RunStore(url, root_hash=root_hash, schema=schema_for(url))
    return RunStore.open(resolve_state_root(os.getcwd()))


@contextmanager
def opened(url: str | None, *, root_hash: str | None = None) -> Iterator[RunStore]:
    store = open_store(url, root_hash=root_hash)
    try:
        yield store
    finally:
        store.close()


def describe(store: RunStore) -> str:
    if store.state_root is not None:
        return store.state_root.database_path
    return masked_url(store.engine.url)


def _print_json(value: Any) -> None:
    click.echo(js_stringify(value))


def _read_json_argument(value: str, code: str) -> Any:
    """A JSON argument: literal JSON, `-` for standard input, or `@FILE`."""
    if value == "-":
        value = sys.stdin.read()
    elif value.startswith("@"):
        try:
            value = Path(value[1:]).read_text(encoding="utf-8")
        except OSError as error:
            raise InvalidInputError(code, f"cannot read {value[1:]}: {error.strerror}") from None
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        raise InvalidInputError(code, "not valid JSON") from None


def _lease_argument(value: str | None) -> Any:
    if value is None:
        return None
    lease = _read_json_argument(value, "invalid-lease")
    if not isinstance(lease, dict):
        raise InvalidInputError("invalid-lease", "a lease is a JSON object")
    return lease


def _progress() -> Progress:
    """A progress bar on standard error, drawn only on a terminal."""
    console = render.console(stderr=True)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
        disable=not console.is_terminal,
    )


# -- upgrade and info ---------------------------------------------------------------------


@main.command()
@url_option
@click.option(
    "--schema",
    envvar="CADENCE_STORE_SCHEMA",
    default=None,
    help="PostgreSQL schema for the cadence tables (default: the database's default schema).",
)
def upgrade(url: str | None, schema: str | None) -> None:
    """Bring a database to the head revision (adopting a cadence 1.x store).

    Without --url (or $CADENCE_STORE_URL) the embedded store of the current directory is
    upgraded (and created if it does not exist).

    \b
    Example: cadence-store upgrade --url sqlite:///control.sqlite3
    """
    if url:
        _remember(url)
        revision = upgrade_database(url, schema=schema_for(url, schema))
        click.echo(f"{masked_url(url)} is at {revision} (head)")
        return
    with opened(None) as store:
        with store.engine.connect() as connection:
            revision = current_revision(connection)
        click.echo(f"{describe(store)} is at {revision} (head)")


def _counts(counted: StoreCounts) -> dict[str, Any]:
    return {
        "runs": counted.runs,
        "events": counted.events,
        "operations": counted.operations,
        "bindings": counted.bindings,
        "byState": counted.by_state,
    }


@main.command()
@url_option
@json_option
def info(url: str | None, as_json: bool) -> None:
    """Engine, database (password masked), schema revision vs head, run and event counts.

    \b
    Example: cadence-store info --url postgresql+psycopg://app:secret@db/cadence
    """
    head = head_revision()
    details: dict[str, Any] = {}
    schema = schema_for(url)
    if url:
        _remember(url)
        _require_existing_sqlite(url)
        engine = create_store_engine(url)
        try:
            with database_errors(READ), engine.connect() as connection:
                connection.execution_options(**schema_options(schema))
                revision = current_revision(connection, schema)
                details["engine"] = f"{engine.dialect.name} ({engine.driver})"
                details["database"] = masked_url(engine.url)
                if schema is not None:
                    details["schema"] = schema
                details["revision"] = revision
                details["head"] = head
                connection.rollback()
            if revision == head:  # a store not at head is refused until it is upgraded
                with RunStore(engine, schema=schema) as store:
                    details.update(_counts(store.counts()))
        finally:
            engine.dispose()
    else:
        with opened(None) as store:
            root = store.state_root
            assert root is not None
            with store.engine.connect() as connection:
                details["engine"] = f"{store.engine.dialect.name} ({store.engine.driver})"
                details["database"] = masked_url(store.engine.url)
                details["path"] = root.database_path
                details["consumerRoot"] = root.consumer_root
                details["rootHash"] = root.consumer_root_hash
                details["revision"] = current_revision(connection)
                details["head"] = head
                connection.rollback()
            details.update(_counts(store.counts()))
    at_head = details["revision"] == head
    details["atHead"] = at_head
    if as_json:
        click.echo(json.dumps(details, ensure_ascii=False))
    else:
        labels = {"consumerRoot": "consumer root", "rootHash": "root hash"}
        shown = {labels.get(k, k): v for k, v in details.items()}
        by_state = shown.pop("byState", None)
        shown["revision"] = f"{details['revision'] or '(none)'}" + (
            " (head)" if at_head else f" (head is {head}: upgrade required)"
        )
        shown.pop("head")
        shown.pop("atHead")
        if by_state:
            shown["states"] = ", ".join(f"{state} {count}" for state, count in by_state.items())
        render.console().print(render.key_values(shown))
    if not at_head:
        command = upgrade_command(url, schema) if url else "cadence-store upgrade"
        click.echo(f"error: run-store-upgrade-required\n  run: {command}", err=True)
        sys.exit(render.EXIT_STORE)


# -- reading runs ---------------------------------------------------------------------------


@main.command(name="runs")
@url_option
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(RUN_STATES),
    help="Only runs in this state (repeatable).",
)
@click.option("--stage", type=click.Choice(RUN_STAGES), help="Only runs of this stage.")
@click.option("--change", help="Only runs bound to this change.")
@click.option("--root-hash", help="Only runs of this consumer root hash.")
@json_option
def list_runs(
    url: str | None,
    states: Sequence[str],
    stage: str | None,
    change: str | None,
    root_hash: str | None,
    as_json: bool,
) -> None:
    """List runs (filter by state, stage, change); --json prints one projection per line.

    \b
    Example: cadence-store runs --stage abel-implement --state running --state paused
    """
    with opened(url) as store:
        listed = store.list_runs(
            stage=stage or None,
            state=states or None,
            change=change or None,
            root_hash=root_hash or None,
        )
    rows = sorted(listed, key=lambda run: run.stage)  # by stage, then run id (stable sort)
    if as_json:
        for row in rows:
            click.echo(row.to_json())
        return
    listing = render.table("RUN ID", "STAGE", "CHANGE / KEY", "STATE", "SEQ", "DELIVERY", "PAUSE")
    for row in rows:
        key = row.change or (
            f"provisional {render.short(row.provisional_key)}" if row.provisional_key else None
        )
        listing.add_row(
            row.run_id,
            row.stage,
            render.text(key),
            row.state,
            str(row.sequence),
            render.text(row.delivery_revision),
            render.text(row.pause_code),
        )
    out = render.console()
    out.print(listing)
    out.print(f"{len(rows)} run(s) in {describe(store)}")


@main.command()
@click.argument("run_id")
@url_option
@json_option
def show(run_id: str, url: str | None, as_json: bool) -> None:
    """A run: projection, delivery bindings, operations and leases, state timeline.

    \b
    Example: cadence-store show 8ffecc31-80bd-4ba5-88d6-963b08ad4b23
    """
    now = render.now_ms()
    with opened(url) as store:
        detail = store.run_detail(run_id)
    projection = detail.projection
    bindings = detail.delivery_bindings
    receipts = detail.operations
    timeline = detail.timeline
    if as_json:
        _print_json(
            {
                "status": projection.document(),
                "deliveryBindings": [b.to_dict() for b in bindings],
                "operations": [
                    {
                        "operationId": o.operation_id,
                        "kind": o.kind,
                        "state": str(o.state),
                        "lease": render.lease_label(o.lease),
                        "expiresAt": o.expires_at,
                        "fence": o.fence,
                    }
                    for o in receipts
                ],
                "timeline": [step.to_dict() for step in timeline],
            }
        )
        return
    out = render.console()
    summary = {
        "run": projection.run_id,
        "stage": projection.stage,
        "change": projection.change,
        "provisional key": projection.provisional_key,
        "state": projection.state,
        "pause code": projection.pause_code,
        "terminal": projection.terminal,
        "sequence": projection.sequence,
        "head hash": projection.event_hash,
        "delivery revision": projection.delivery_revision,
        "root hash": projection.root_hash,
    }
    out.print(render.key_values({k: v for k, v in summary.items() if v is not None}, title="Run"))
    out.print()
    listing = render.table(
        "GATE", "REV", "RECEIPT", "APPROVAL PROOF", "OPERATION", title="Delivery bindings"
    )
    for b in bindings:
        approval = b.approval_proof
        proof = (
            f"r{approval.revision} contract {render.short(approval.contract_hash)} "
            f"record {render.short(approval.record_hash)}"
            if approval is not None
            else "-"
        )
        listing.add_row(b.gate, str(b.revision), b.receipt_hash, proof, b.operation_id)
    out.print(listing if bindings else "Delivery bindings: none")
    out.print()
    listing = render.table(
        "OPERATION", "KIND", "STATE", "LEASE", "EXPIRES", "FENCE", title="Operations"
    )
    for o in receipts:
        listing.add_row(
            o.operation_id,
            o.kind,
            o.state,
            render.lease_label(o.lease),
            render.timestamp(o.expires_at, now=now),
            render.text(o.fence),
        )
    out.print(listing if receipts else "Operations: none")
    out.print()
    listing = render.table("SEQ", "EVENT", "STATE", "CODE", title="State timeline")
    for step in timeline:
        listing.add_row(
            str(step.sequence),
            step.event,
            step.state if step.state is not None else f"(chain broken: {step.error})",
            render.text(step.code),
        )
    out.print(listing)
    path = " → ".join(step.state for step in timeline if step.state is not None)
    out.print(f"path: {path}")


@main.command(name="events")
@click.argument("run_id")
@url_option
@json_option
def list_events(run_id: str, url: str | None, as_json: bool) -> None:
    """A run's events in order; --json prints one cadence 1.x event object per line.

    \b
    Example: cadence-store events 8ffecc31-80bd-4ba5-88d6-963b08ad4b23 --json
    """
    with opened(url) as store:
        if as_json:
            for event in store.iter_events(run_id):
                _print_json(
                    {
                        "sequence": event.sequence,
                        "type": event.type,
                        "payload": event.payload,
                        "priorHash": event.prior_hash,
                        "hash": event.hash,
                    }
                )
            return
        listing = render.table("SEQ", "TYPE", "PAYLOAD", "PRIOR HASH", "HASH")
        for event in store.iter_events(run_id):
            listing.add_row(
                str(event.sequence),
                event.type,
                js_stringify(event.payload),
                render.short(event.prior_hash),
                render.short(event.hash),
            )
    render.console().print(listing)


# -- verification ---------------------------------------------------------------------------


def _report_checks(results: Sequence[RunCheck], label: str) -> None:
    broken = [check for check in results if not check.ok]
    for check in broken:
        where = f"line {check.line}: " if check.line is not None else ""
        name = check.run_id or "(unreadable record)"
        click.echo(render.printable(f"BROKEN run {name}: {where}{check.detail}"))
    click.echo(
        f"verified {len(results)} run(s) in {label}: {len(results) - len(broken)} ok, "
        f"{len(broken)} broken"
    )
    if broken:
        sys.exit(render.EXIT_CORRUPT)


def _verify_file(path: str) -> None:
    results: list[RunCheck] = []
    with _open_input(path) as lines, _progress() as bar:
        task = bar.add_task("verifying", total=None)
        for check in iter_verify_export(lines):
            results.append(check)
            bar.advance(task)
        bar.update(task, total=len(results))
    _report_checks(results, path)


@main.command()
@click.argument("run_ids", nargs=-1, metavar="[RUN_ID]...")
@url_option
@click.option(
    "--file",
    "file_",
    metavar="FILE",
    help="Check an export file offline instead (no database; '-' reads standard input).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="Verify the database's runs across N processes.",
)
def verify(run_ids: Sequence[str], url: str | None, file_: str | None, jobs: int) -> None:
    """Verify hash chains and stored projections (all runs, or the ones named).

    Names every broken run, its first bad sequence and what differs; exits 1 if any.

    \b
    Example: cadence-store verify --url sqlite:///control.sqlite3
    Example: cadence-store verify --jobs 2 --url postgresql+psycopg://app@db/cadence
    Example: cadence-store verify --file runs.jsonl
    """
    if file_ is not None:
        if run_ids:
            raise click.UsageError("--file checks a whole export; do not name runs with it")
        _verify_file(file_)
        return
    with opened(url) as store:
        ids = list(run_ids) if run_ids else store.run_ids()
        for run_id in run_ids:
            store.status(run_id)  # an unknown id is a usage error, before any work
        with _progress() as bar:
            task = bar.add_task("verifying runs", total=len(ids))
            results = verify_runs(store, ids, jobs=jobs, on_result=lambda _: bar.advance(task))
        label = describe(store)
    _report_checks(results, label)


# -- export, import, copy ---------------------------------------------------------------------


@contextmanager
def _open_input(path: str) -> Iterator[Any]:
    if path == "-":
        yield sys.stdin
        return
    try:
        handle = open(path, encoding="utf-8", newline="")  # noqa: SIM115
    except OSError as error:
        raise InvalidInputError("export-file-unreadable", f"{path}: {error.strerror}") from None
    with handle:
        yield handle


@main.command(name="export")
@url_option
@click.option("--out", metavar="FILE", help="Write to FILE (default: standard output).")
def export_command(url: str | None, out: str | None) -> None:
    """Export every run as JSON Lines (one run per line, stored text verbatim).

    \b
    Example: cadence-store export --out runs.jsonl
    """
    with opened(url) as store:
        if out is None or out == "-":
            report = export_store(store.engine, sys.stdout)
            sys.stdout.flush()
            target = "standard output"
        else:
            partial = Path(f"{out}.partial")
            try:
                with partial.open("w", encoding="utf-8", newline="\n") as handle:
                    report = export_store(store.engine, handle)
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
    """Import an export file ('-' for standard input) into a database at head.

    Every record is checked first, so a bad file or a conflicting run writes nothing;
    runs already present and identical are skipped (importing twice changes nothing).

    \b
    Example: cadence-store import runs.jsonl --url postgresql+psycopg://app@db/cadence
    """
    with opened(url) as store, _open_input(file) as lines, _progress() as bar:
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
    callback=_checked_url,
    help="Source database (default: $CADENCE_STORE_URL, else the embedded store).",
)
@click.option(
    "--to",
    "destination",
    metavar="URL",
    required=True,
    callback=_checked_url,
    help="Destination (at head).",
)
@click.option("--batch-size", default=200, show_default=True, type=click.IntRange(min=1))
def copy(source: str | None, destination: str, batch_size: int) -> None:
    """Copy runs, events, operations and bindings to another database, re-verified there.

    The destination must be at head. Re-running is a no-op; a destination holding a
    different run under the same id is refused (run-id-conflict) and left unchanged.

    \b
    Example: cadence-store copy --from sqlite:///control.sqlite3 --to postgresql+psycopg://app@db/cadence
    """
    _remember(destination)
    _require_existing_sqlite(destination)
    destination_schema = schema_for(destination)
    with opened(source) as store, _progress() as bar:
        tasks: dict[str, Any] = {}

        def advance(update: TransferProgress) -> None:
            if update.phase not in tasks:
                label = "checking runs" if update.phase == "check" else "copying runs"
                tasks[update.phase] = bar.add_task(label, total=update.total)
            bar.update(tasks[update.phase], completed=update.done, total=update.total)

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


# -- writing (for operators) ------------------------------------------------------------------


def _operation_option(function: F) -> F:
    return click.option(
        "--operation-id",
        required=True,
        help="Idempotency key: repeating a command with it returns the recorded result.",
    )(function)


def _lease_option(function: F) -> F:
    return click.option(
        "--lease",
        metavar="JSON",
        help="Fence with this lease (JSON from `lease acquire`, '-' for stdin, @FILE).",
    )(function)


@main.command()
@click.option("--stage", required=True, help="abel-design or abel-implement.")
@_operation_option
@click.option("--change", help="The change the run is for.")
@click.option("--provisional-key", help="sha256 key of a design run without a change yet.")
@click.option("--alias", "aliases", multiple=True, help="Extra provisional key (repeatable).")
@click.option(
    "--root-hash",
    help="Consumer root hash (with --url; default: sha256 of the current directory's real "
    "path). The embedded store uses its state root's.",
)
@url_option
def start(
    stage: str,
    operation_id: str,
    change: str | None,
    provisional_key: str | None,
    aliases: Sequence[str],
    root_hash: str | None,
    url: str | None,
) -> None:
    """Start (or find) a run; prints its projection as JSON.

    \b
    Example: cadence-store start --stage abel-implement --change add-login --operation-id start-1
    """
    if not url and root_hash is not None:
        raise click.UsageError(
            "--root-hash needs --url: the embedded store uses its state root's hash"
        )
    with opened(url, root_hash=(root_hash or default_root_hash()) if url else None) as store:
        projection = store.start_run(
            stage,
            operation_id=operation_id,
            change=change,
            provisional_key=provisional_key,
            provisional_aliases=list(aliases) if aliases else None,
        )
    click.echo(projection.to_json())


@main.command(name="bind-change")
@click.argument("run_id")
@click.argument("change")
@_operation_option
@url_option
def bind_change(run_id: str, change: str, operation_id: str, url: str | None) -> None:
    """Bind a change to a provisional design run; prints its projection.

    \b
    Example: cadence-store bind-change RUN_ID add-login --operation-id bind-change-1
    """
    with opened(url) as store:
        projection = store.bind_change(run_id, change, operation_id=operation_id)
    click.echo(projection.to_json())


@main.command()
@click.argument("run_id")
@click.argument("state")
@_operation_option
@click.option("--code", help="Pause / reason code recorded with the transition.")
@_lease_option
@url_option
def transition(
    run_id: str,
    state: str,
    operation_id: str,
    code: str | None,
    lease: str | None,
    url: str | None,
) -> None:
    """Move a run to STATE (a legal transition); prints its projection.

    \b
    Example: cadence-store transition RUN_ID paused --code operator-pause --operation-id pause-1
    """
    with opened(url) as store:
        projection = store.transition(
            run_id, state, operation_id=operation_id, code=code, lease=_lease_argument(lease)
        )
    click.echo(projection.to_json())


@main.command(name="bind-delivery")
@click.argument("run_id")
@click.option("--gate", required=True, help="gate-a or gate-b.")
@click.option("--revision", required=True, type=int, help="Delivery revision (>= 1).")
@click.option("--receipt-hash", required=True, help="sha256 of the gate receipt.")
@_operation_option
@click.option("--approval-revision", type=int, help="Approval proof: revision.")
@click.option("--contract-hash", help="Approval proof: contract hash.")
@click.option("--record-hash", help="Approval proof: record hash.")
@_lease_option
@url_option
def bind_delivery(
    run_id: str,
    gate: str,
    revision: int,
    receipt_hash: str,
    operation_id: str,
    approval_revision: int | None,
    contract_hash: str | None,
    record_hash: str | None,
    lease: str | None,
    url: str | None,
) -> None:
    """Record the gate receipt a run was admitted under; prints its projection.

    \b
    Example: cadence-store bind-delivery RUN_ID --gate gate-a --revision 1 \\
      --receipt-hash HASH --operation-id bind-1
    """
    proof_parts = (approval_revision, contract_hash, record_hash)
    if any(part is not None for part in proof_parts) and None in proof_parts:
        raise click.UsageError(
            "an approval proof needs --approval-revision, --contract-hash and --record-hash"
        )
    proof = (
        None
        if approval_revision is None
        else {
            "revision": approval_revision,
            "contract_hash": contract_hash,
            "record_hash": record_hash,
        }
    )
    with opened(url) as store:
        projection = store.bind_delivery(
            run_id,
            gate,
            revision,
            receipt_hash,
            operation_id=operation_id,
            approval_proof=proof,
            lease=_lease_argument(lease),
        )
    click.echo(projection.to_json())


# -- leases ------------------------------------------------------------------------------------


@main.group(context_settings=CONTEXT_SETTINGS)
def lease() -> None:
    """Operation leases: acquire, renew, commit, interrupt (leases are JSON).

    \b
    Example: cadence-store lease acquire RUN_ID apply-1 --ttl-ms 60000 > lease.json
    """


_ttl_option = click.option(
    "--ttl-ms", default=60_000, show_default=True, type=int, help="Lease lifetime (ms)."
)


@lease.command(name="acquire")
@click.argument("run_id")
@click.argument("operation_id")
@_ttl_option
@click.option("--preempt", is_flag=True, help="Replace a live lease (fencing its holder).")
@click.option("--exclusive", is_flag=True, help="Fail if the operation is already running.")
@url_option
def lease_acquire(
    run_id: str, operation_id: str, ttl_ms: int, preempt: bool, exclusive: bool, url: str | None
) -> None:
    """Acquire (or rejoin) the lease of an operation; prints the lease JSON.

    `fence` grows with each new grant of the operation: pass it to resources outside
    the database, which refuse any fence lower than the highest they have seen.

    \b
    Example: cadence-store lease acquire RUN_ID apply-1 --ttl-ms 60000 --preempt
    """
    with opened(url) as store:
        granted = store.acquire_lease(
            run_id, operation_id, ttl_ms, preempt=preempt, exclusive=exclusive
        )
    _print_json(granted.to_dict())


@lease.command(name="renew")
@click.argument("lease_json", metavar="LEASE")
@_ttl_option
@url_option
def lease_renew(lease_json: str, ttl_ms: int, url: str | None) -> None:
    """Extend a live lease; prints the renewed lease JSON.

    \b
    Example: cadence-store lease renew @lease.json --ttl-ms 60000
    """
    with opened(url) as store:
        renewed = store.renew_lease(_lease_argument(lease_json), ttl_ms)
    _print_json(renewed.to_dict())


@lease.command(name="commit")
@click.argument("lease_json", metavar="LEASE")
@click.option("--outcome", default="{}", show_default=True, metavar="JSON", help="Outcome object.")
@url_option
def lease_commit(lease_json: str, outcome: str, url: str | None) -> None:
    """Commit a live lease with its outcome; prints the recorded outcome.

    \b
    Example: cadence-store lease commit @lease.json --outcome '{"applied": true}'
    """
    value = _read_json_argument(outcome, "operation-outcome-invalid")
    with opened(url) as store:
        recorded = store.commit_lease(_lease_argument(lease_json), value)
    _print_json(recorded)


@lease.command(name="interrupt")
@click.argument("lease_json", metavar="LEASE")
@url_option
def lease_interrupt(lease_json: str, url: str | None) -> None:
    """Give up a live lease (the operation is recorded as interrupted).

    \b
    Example: cadence-store lease interrupt @lease.json
    """
    checked = _lease_argument(lease_json)
    with opened(url) as store:
        store.interrupt_lease(checked)
    _print_json(
        {
            "runId": checked.get("runId", checked.get("run_id")),
            "operationId": checked.get("operationId", checked.get("operation_id")),
            "state": "interrupted",
        }
    )


@lease.command(name="status")
@click.argument("run_id")
@click.argument("operation_id")
@url_option
def lease_status(run_id: str, operation_id: str, url: str | None) -> None:
    """An operation's state, outcome, lease expiry and current or last fence as JSON
    (null if unknown).

    \b
    Example: cadence-store lease status RUN_ID apply-1
    """
    with opened(url) as store:
        status = store.inspect_operation(run_id, operation_id)
    _print_json(None if status is None else status.to_dict())


# -- demo ----------------------------------------------------------------------------------------


@main.command()
@url_option
def demo(url: str | None) -> None:
    """A scripted lifecycle on the embedded store: runs, bindings, leases, verification.

    Prints every step and where the store lives.

    \b
    Example: cadence-store demo
    """
    from .cli_demo import run_demo

    with opened(url, root_hash=default_root_hash() if url else None) as store:
        run_demo(store, describe(store), click.echo)


__all__ = ["main"]
