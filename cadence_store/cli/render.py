"""Output helpers of the `cadence-store` command: errors, secrets, tables, times.

Nothing printed by the command may carry a database password: every URL goes through
`masked_url`, and every error text through `scrub`, which also hides a password that a
driver or SQLAlchemy message repeated.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote, quote_plus

import click
from pydantic import BaseModel
from rich import box
from rich.console import Console
from rich.table import Table

from .. import errors
from ..journal.views import RunDetail
from ..journal.vocabulary import LeaseStanding
from ..storage.engine import is_secret_parameter, masked_url, parse_url

EXIT_OK: Final = 0
EXIT_CORRUPT: Final = 1
EXIT_INPUT: Final = 2
EXIT_STORE: Final = 3
EXIT_PERMISSION: Final = 4

# scheme://user:PASSWORD@ in any text (a URL the command was not told about)
_URL_PASSWORD: Final = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@'\"]*:)(?P<password>[^\s@'\"]+)@"
)
# password=VALUE (sslpassword=, token=, ...) in a URL's query or a libpq connection string
_QUERY_SECRET: Final = re.compile(
    r"(?P<key>\b[A-Za-z_]*(?:password|secret|token)[A-Za-z_]*\s*=\s*)(?P<value>[^&\s'\"]+)",
    re.IGNORECASE,
)
# a password shorter than this is not searched for inside a text: the text is withheld
_MIN_SCRUB_LENGTH: Final = 4
_WITHHELD: Final = "(details withheld: they may contain a credential)"
_MAX_DETAIL: Final = 300


def exit_code(error: errors.CadenceStoreError) -> int:
    """0 ok, 1 corruption found, 2 usage or invalid input, 3 store refused or unavailable,
    4 permission denied (a grant or a file's permissions to change, not a retry).

    A fenced (expired, replaced or already committed) lease is the store refusing a
    holder it no longer recognises, not a usage error: exit 3."""
    if isinstance(error, errors.JournalIntegrityError):
        return EXIT_CORRUPT
    if isinstance(
        error,
        errors.InvalidInputError
        | errors.RunNotFoundError
        | errors.OperationConflictError
        | errors.InvalidTransitionError,
    ):
        return EXIT_INPUT
    if isinstance(error, errors.StorePermissionError):
        return EXIT_PERMISSION
    return EXIT_STORE


def scrub(text: str, urls: Iterable[str] = ()) -> str:
    """`text` with every known URL masked and every password removed."""
    for url in urls:
        if not url:
            continue
        text = text.replace(url, masked_url(url))
        try:
            parsed = parse_url(url)  # the multi-host forms too
        except errors.InvalidInputError:
            continue
        secrets = [str(value) for key, value in parsed.query.items() if is_secret_parameter(key)]
        for secret in filter(None, [str(parsed.password or ""), *secrets]):
            for form in {secret, quote(secret, safe=""), quote_plus(secret)}:
                if form in text:
                    if len(form) < _MIN_SCRUB_LENGTH:
                        return _WITHHELD
                    text = text.replace(form, "***")
    text = _URL_PASSWORD.sub(r"\g<head>***@", text)
    return _QUERY_SECRET.sub(r"\g<key>***", text)


# what to do about a whole class of errors (after the codes that say more)
_CLASS_HINTS: Final[tuple[tuple[type[errors.CadenceStoreError], str], ...]] = (
    (
        errors.StoreUnavailableError,
        "check the database URL, that the server is reachable and the file is writable",
    ),
    (
        errors.StateRootError,
        "check $XDG_STATE_HOME / $HOME: the state root must be a real directory outside "
        "the current directory, owned by you, with no symlinked component (or pass --url)",
    ),
    (
        errors.JournalIntegrityError,
        "the journal does not verify; see `cadence-store verify` and restore from a backup",
    ),
    (errors.RunNotFoundError, "no run has that id; list them with `cadence-store runs`"),
)


def hint(error: errors.CadenceStoreError) -> str:
    """What to do about an expected failure, in one line."""
    if isinstance(error, errors.SchemaOutOfDateError):
        command = error.command
        if "postgresql" in command and "--url" in command and "--schema" not in command:
            # the store may be in a schema this command was not told about
            return (
                f"run: {command} (or, if cadence-store's tables are in a PostgreSQL "
                "schema, repeat this command with --schema NAME)"
            )
        return f"run: {error.command}"
    if isinstance(error, errors.StoreFormatError):
        return error.hint
    if isinstance(error, errors.MigrationError):
        return "the upgrade was rolled back and nothing changed; fix the cause and run it again"
    if isinstance(error, errors.StoreBusyError):
        return "another writer is holding the store; retry in a moment"
    if isinstance(error, errors.HostWriteError):
        return "the database refused the host's own row; nothing was kept: fix the row"
    if isinstance(error, errors.StorePermissionError):
        return error.hint
    if error.code == "run-store-auth-failed":
        return (
            "the server refused the login: check the user and password (in the URL, "
            "$PGPASSWORD or ~/.pgpass) and pg_hba.conf"
        )
    if error.code == "run-store-not-a-database":
        return "that file is not a SQLite database (or it is encrypted): check the path in --url"
    if error.code in ("run-store-read-failed", "run-store-write-failed"):
        return (
            "the database refused a statement of cadence-store's (a missing or altered "
            "table?); nothing was kept: check `cadence-store info` and restore the schema"
        )
    if error.code == "state-root-inside-consumer":
        return (
            "run it from your project's directory, or name a database: --url "
            "sqlite:///PATH (or $CADENCE_STORE_URL); `cadence-store demo` works anywhere"
        )
    for error_type, text in _CLASS_HINTS:
        if isinstance(error, error_type):
            return text
    if isinstance(error, errors.LeaseFencedError):
        if error.detail and "already committed" in error.detail:
            return "nothing to do: a new lease on it would start the operation again"
        return (
            "that lease expired or was replaced; acquire a new one (`cadence-store lease acquire`)"
        )
    if isinstance(error, errors.InvalidTransitionError):
        return "the run's state does not allow that; see `cadence-store show RUN_ID`"
    if isinstance(error, errors.OperationConflictError):
        if error.code == "operation-already-running":
            return (
                "that operation is running under a live lease: wait for it (`cadence-store "
                "lease status RUN_ID OPERATION_ID`), or take it over with --preempt"
            )
        if error.code in ("run-id-conflict", "run-lookup-conflict"):
            return "the destination holds different runs under those ids; nothing was written"
        return "the request contradicts what is recorded; use a new operation id or check the run"
    if error.code == "in-memory-database-refused":
        return "give a database file instead: --url sqlite:///PATH"
    if error.code == "invalid-change":
        return (
            "a change is 1-128 characters of a-z, 0-9 and '-', starting and ending with a "
            "letter or digit (e.g. add-login)"
        )
    if isinstance(error, errors.InvalidInputError):
        return "check the arguments (see --help)"
    return "see `cadence-store --help`"


def error_lines(error: errors.CadenceStoreError, urls: Iterable[str] = ()) -> list[str]:
    """`error: <code>`, then the (scrubbed) detail and what to do."""
    known = list(urls)
    lines = [f"error: {scrub(error.code, known)}"]
    if error.detail:
        detail = " ".join(scrub(str(error.detail), known).split())
        # an upgrade detail ends with the command, which the hint line repeats
        if isinstance(error, errors.SchemaOutOfDateError):
            detail = detail.removesuffix(f"; run: {scrub(error.command, known)}")
        if len(detail) > _MAX_DETAIL:
            detail = detail[: _MAX_DETAIL - 3] + "..."
        lines.append(f"  {detail}")
    lines.append(f"  {scrub(hint(error), known)}")
    return lines


def with_additions(value: BaseModel) -> dict[str, Any]:
    """A value's camelCase JSON with cadence-store's additions (a lease's `fence`), which
    `to_dict()`, cadence 1.x's object, leaves out."""
    return value.model_dump(mode="json", by_alias=True, exclude_none=True)


def printable(text: str) -> str:
    """`text` with lone surrogates (from a hostile run id or file) escaped as `\\udxxx`,
    so that printing it cannot fail."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def echo_error(error: errors.CadenceStoreError, urls: Iterable[str] = ()) -> int:
    for line in error_lines(error, urls):
        click.echo(printable(line), err=True)
    return exit_code(error)


# -- consoles and tables ------------------------------------------------------------------


def console(*, stderr: bool = False) -> Console:
    """A console that prints data as it is (no markup, no highlighting).

    Not on a terminal (a pipe, a file, a test) it is wide enough for a run id and a hash.
    """
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal else 200
    return Console(stderr=stderr, markup=False, highlight=False, width=width)


def table(*columns: str, title: str | None = None) -> Table:
    result = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for name in columns:
        result.add_column(name, overflow="fold")
    return result


def key_values(rows: Mapping[str, Any], *, title: str | None = None) -> Table:
    result = Table(title=title, title_justify="left", show_header=False, box=None)
    result.add_column("key", style="bold")
    result.add_column("value", overflow="fold")
    for key, value in rows.items():
        result.add_row(key, text(value))
    return result


def text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def short(value: str | None, length: int = 12) -> str:
    if not value:
        return "-"
    return value if len(value) <= length else value[:length] + "…"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def timestamp(ms: int | None, *, now: int | None = None) -> str:
    """`2026-01-15T09:30:00Z (in 59s)` for epoch milliseconds."""
    if ms is None:
        return "-"
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    delta = (ms - (now if now is not None else now_ms())) // 1000
    relative = f"in {_duration(delta)}" if delta >= 0 else f"{_duration(-delta)} ago"
    return f"{moment} ({relative})"


def local_time(ms: int | None) -> str:
    """Epoch milliseconds as a local ISO time (`2026-01-15T10:30:00.000+01:00`); "-" for
    a time nobody recorded (events cadence 1.x wrote)."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone().isoformat(timespec="milliseconds")


def _duration(seconds: int) -> str:
    if seconds >= 86_400:
        return f"{seconds // 86_400}d{(seconds % 86_400) // 3_600}h"
    if seconds >= 3_600:
        return f"{seconds // 3_600}h{(seconds % 3_600) // 60}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60}s"
    return f"{seconds}s"


def lease_label(standing: LeaseStanding) -> str:
    """How an operation's lease stands (`OperationRecord.lease`), in words."""
    if standing == LeaseStanding.MISSING:
        return "running (no lease)"
    return str(standing)


def print_run_detail(detail: RunDetail, *, now: int) -> None:
    """`show`'s tables: the run, its delivery bindings, operations and state timeline."""
    projection = detail.projection
    bindings = detail.delivery_bindings
    receipts = detail.operations
    timeline = detail.timeline
    out = console()
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
        "created": local_time(detail.created_at),
        "updated": local_time(detail.updated_at),
    }
    out.print(key_values({k: v for k, v in summary.items() if v is not None}, title="Run"))
    out.print()
    listing = table(
        "GATE", "REV", "RECEIPT", "APPROVAL PROOF", "OPERATION", title="Delivery bindings"
    )
    for b in bindings:
        approval = b.approval_proof
        proof = (
            f"r{approval.revision} contract {short(approval.contract_hash)} "
            f"record {short(approval.record_hash)}"
            if approval is not None
            else "-"
        )
        listing.add_row(b.gate, str(b.revision), b.receipt_hash, proof, b.operation_id)
    out.print(listing if bindings else "Delivery bindings: none")
    out.print()
    listing = table("OPERATION", "KIND", "STATE", "LEASE", "EXPIRES", "FENCE", title="Operations")
    for o in receipts:
        listing.add_row(
            o.operation_id,
            o.kind,
            o.state,
            lease_label(o.lease),
            timestamp(o.expires_at, now=now),
            text(o.fence),
        )
    out.print(listing if receipts else "Operations: none")
    out.print()
    listing = table("SEQ", "EVENT", "STATE", "CODE", "RECORDED", title="State timeline")
    for step in timeline:
        listing.add_row(
            str(step.sequence),
            step.event,
            step.state if step.state is not None else f"(chain broken: {step.error})",
            text(step.code),
            local_time(step.recorded_at),
        )
    out.print(listing)
    path = " → ".join(step.state for step in timeline if step.state is not None)
    out.print(f"path: {path}")
