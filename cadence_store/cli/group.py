"""The command group and what its commands share: the URL option, opening a store,
turning an expected failure into `error: <code>` and what to do, JSON and progress output.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from ..errors import CadenceStoreError, InvalidInputError, SchemaOutOfDateError, StateRootError
from ..journal import js_stringify
from ..storage.backends import backend_of_url
from ..storage.database_url import sync_twin_url
from ..storage.engine import (
    create_store_engine,
    masked_url,
    missing_sqlite_file,
    parse_url,
)
from ..storage.failures import translate_database_error
from ..storage.schema import upgrade, upgrade_command
from ..store.run_store import RunStore
from ..store.state_root import StateRoot, consumer_root_hash, resolve_state_root
from . import render

F = TypeVar("F", bound=Callable[..., Any])
INSIDE_CONSUMER = "state-root-inside-consumer"
_URLS_KEY = "cadence_store.urls"
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}
SUPPORTED_URLS = (
    "postgresql+psycopg://USER@HOST/DB (postgres:// and postgresql:// mean psycopg too) "
    "or sqlite:///PATH"
)


# -- the group: one place that turns expected failures into `error: <code>` ---------------


def _known_urls(ctx: click.Context) -> list[str]:
    urls: list[str] = ctx.meta.setdefault(_URLS_KEY, [])
    return urls


def remember(url: str | None) -> str | None:
    """Note a URL given to the command, so that error texts can be scrubbed of it."""
    if url:
        ctx = click.get_current_context(silent=True)
        if ctx is not None:
            _known_urls(ctx).append(url)
    return url


def escape_unprintable_text() -> None:
    """Stored text may hold lone surrogates (cadence 1.x accepted any string as a pause
    code or an outcome key): they print as `\\udxxx` (valid in JSON too), never a crash."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


class StoreGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        escape_unprintable_text()
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
    Read-only commands never create it.

    Exit codes: 0 ok, 1 corruption found, 2 usage or invalid input, 3 the store refused
    (a fenced, expired or replaced lease included), needs an upgrade, is busy or
    unavailable, 4 permission denied (a missing grant, a read-only file).

    \b
    Example: cadence-store info --url postgresql+psycopg://app@db/cadence
    """


def _missing_driver(parsed: URL) -> InvalidInputError | None:
    """The refusal for a URL whose database driver is not installed, else None."""
    try:
        parsed.get_dialect().import_dbapi()
    except ImportError as error:
        module = error.name or str(error)
        return InvalidInputError(
            "database-driver-missing",
            f"{parsed.drivername}:// needs the Python module {module!r}, which is not "
            f"installed; cadence-store supports {SUPPORTED_URLS}",
        )
    return None


def _sync_form(parsed: URL) -> URL | None:
    """An async URL's sync twin (the commands run sync), else None: the URL stays as it
    was given."""
    twin = sync_twin_url(parsed)
    return twin if twin is not None and twin.drivername != parsed.drivername else None


def checked_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A database URL that parses with the store's own parser (every form `RunStore`
    takes: `postgres://`, the libpq multi-host form...) and whose driver is installed,
    refused up front (`invalid-database-url` / `database-driver-missing` /
    `in-memory-database-refused`, exit 2). An async URL becomes its sync twin."""
    if not value:
        return value
    remember(value)
    parsed = parse_url(value)
    twin = _sync_form(parsed)
    if twin is not None:
        parsed, value = twin, twin.render_as_string(hide_password=False)
        remember(value)
    try:
        missing_driver = _missing_driver(parsed)
    except (ArgumentError, ValueError) as error:  # an unknown dialect
        raise InvalidInputError("invalid-database-url", str(error)) from None
    if missing_driver is not None:
        raise missing_driver
    backend = backend_of_url(parsed)
    if backend is not None and backend.memory_only(parsed):
        # each command is one process: what it wrote would vanish as it exits
        raise InvalidInputError(
            "in-memory-database-refused",
            "an in-memory SQLite database lasts only as long as one command; "
            "give a file: --url sqlite:///PATH",
        )
    if backend is not None and backend.embedded and parsed.database:
        problem = backend.url_problem(parsed)
        if problem is not None:
            raise InvalidInputError("invalid-database-url", problem)
        try:
            os.stat(parsed.database)
        except OSError as error:
            if error.errno == errno.ENAMETOOLONG:
                raise InvalidInputError("invalid-database-url", error.strerror) from None
    return value


_SCHEMA_KEY = "cadence_store.schema"


def _remember_schema(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value:
        ctx.meta[_SCHEMA_KEY] = value


def url_option(function: F) -> F:
    """`--url`, and `--schema` beside it: every command that takes a URL can find
    cadence-store's tables in a PostgreSQL schema (`schema_for` reads it)."""
    with_schema = click.option(
        "--schema",
        default=None,
        expose_value=False,
        callback=_remember_schema,
        metavar="NAME",
        help="PostgreSQL schema of the cadence tables (default: $CADENCE_STORE_SCHEMA, "
        "else the database's default schema; ignored for SQLite).",
    )(function)
    return click.option(
        "--url",
        envvar="CADENCE_STORE_URL",
        default=None,
        callback=checked_url,
        metavar="URL",
        help="Database URL (default: $CADENCE_STORE_URL, else the embedded store of the "
        "current directory).",
    )(with_schema)


def json_option(function: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(
        function
    )


# -- choosing and opening the database ------------------------------------------------------


def default_root_hash() -> str:
    """The consumer root hash of the current directory, as cadence 1.x hashed it."""
    return consumer_root_hash(os.getcwd())


def _missing_store_file(url: str) -> str | None:
    """The path of the SQLite file `url` names if it does not exist, else None."""
    engine = create_store_engine(url)
    try:
        return missing_sqlite_file(engine)
    finally:
        engine.dispose()


def require_store_file(url: str) -> None:
    """Refuse a SQLite file that does not exist (connecting would create an empty one),
    with the code `RunStore` gives the same case: `run-store-upgrade-required`."""
    missing = _missing_store_file(url)
    if missing is not None:
        command = upgrade_command(url)
        raise SchemaOutOfDateError(f"{missing} does not exist; run: {command}", command=command)


def schema_for(url: str | None, schema: str | None = None) -> str | None:
    """The PostgreSQL schema of the cadence tables at `url`: `schema` if given, else the
    command's `--schema`, else `$CADENCE_STORE_SCHEMA`. SQLite has no schemas, so a
    SQLite URL (or the embedded store) gets none: one setting serves a copy between the
    two engines."""
    backend = backend_of_url(parse_url(url)) if url else None
    if not url or (backend is not None and not backend.named_schemas):
        return None
    ctx = click.get_current_context(silent=True)
    given = None if ctx is None else ctx.meta.get(_SCHEMA_KEY)
    return schema or given or os.environ.get("CADENCE_STORE_SCHEMA") or None


def create_store_file(url: str) -> None:
    """Create a SQLite file that does not exist yet, at head (what `demo --url` and
    `copy --to` write into); any other database is left to the command's own checks."""
    if _missing_store_file(url) is not None:
        upgrade(url)


def embedded_root() -> StateRoot:
    """The state root of the current directory's embedded store, or a refusal that says
    what it means and what to do."""
    cwd = os.getcwd()
    try:
        return resolve_state_root(cwd)
    except StateRootError as error:
        if error.code != INSIDE_CONSUMER:
            raise
        raise StateRootError(
            INSIDE_CONSUMER,
            f"without --url a command uses the embedded store of the current directory "
            f"({cwd}), kept under $XDG_STATE_HOME or ~/.local/state; that is inside "
            "this directory (as when run from the home directory), where a store is never "
            "kept",
        ) from None


def no_embedded_store() -> SchemaOutOfDateError:
    root = embedded_root()
    return SchemaOutOfDateError(
        f"no embedded store exists yet for {root.consumer_root} (a command that writes, "
        "or upgrade, creates it); run: cadence-store upgrade"
    )


def open_store(url: str | None, *, root_hash: str | None = None, create: bool = False) -> RunStore:
    """The selected database as a `RunStore`. The embedded default is opened and upgraded;
    only a command that writes (`create=True`) creates it."""
    if url:
        remember(url)
        return RunStore(url, root_hash=root_hash, schema=schema_for(url))
    root = embedded_root()
    if not create and not _embedded_store_exists(root):
        raise no_embedded_store()
    return RunStore.open(root)


def _embedded_store_exists(root: StateRoot) -> bool:
    try:
        os.stat(root.database_path)
    except FileNotFoundError:
        return False
    except OSError:  # e.g. not ours to read: RunStore.open names that refusal
        return True
    return True


@contextmanager
def opened(
    url: str | None, *, root_hash: str | None = None, create: bool = False
) -> Iterator[RunStore]:
    store = open_store(url, root_hash=root_hash, create=create)
    try:
        yield store
    finally:
        store.close()


def describe(store: RunStore) -> str:
    if store.state_root is not None:
        return store.state_root.database_path
    return masked_url(store.engine.url)


def print_json(value: Any) -> None:
    click.echo(js_stringify(value))


def read_json_argument(value: str, code: str) -> Any:
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


def lease_argument(value: str | None) -> Any:
    if value is None:
        return None
    lease = read_json_argument(value, "invalid-lease")
    if not isinstance(lease, dict):
        raise InvalidInputError("invalid-lease", "a lease is a JSON object")
    return lease


@contextmanager
def open_input(path: str) -> Iterator[Any]:
    if path == "-":
        yield sys.stdin
        return
    try:
        handle = open(path, encoding="utf-8", newline="")  # noqa: SIM115
    except OSError as error:
        raise InvalidInputError("export-file-unreadable", f"{path}: {error.strerror}") from None
    with handle:
        yield handle


def progress_bar(*, redirect_stdout: bool = True) -> Progress:
    """A progress bar on standard error, drawn only on a terminal. A command that writes
    its data to standard output passes `redirect_stdout=False`, so the data stays as is."""
    console = render.console(stderr=True)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
        redirect_stdout=redirect_stdout,
        disable=not console.is_terminal,
    )


class PhaseStep(Protocol):
    """A progress report of a command in phases (an archive's, a transfer's)."""

    @property
    def phase(self) -> str: ...
    @property
    def done(self) -> int: ...
    @property
    def total(self) -> int: ...


def phase_progress(bar: Progress, label: Callable[[str], str]) -> Callable[[PhaseStep], None]:
    """A progress callback that draws each phase as its own task of `bar`, named by
    `label(phase)` when the phase's first report comes."""
    tasks: dict[str, TaskID] = {}

    def advance(step: PhaseStep) -> None:
        if step.phase not in tasks:
            tasks[step.phase] = bar.add_task(label(step.phase), total=step.total)
        bar.update(tasks[step.phase], completed=step.done, total=step.total)

    return advance


# the command groups register themselves on `main`
