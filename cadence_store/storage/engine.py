"""Engines: creating cadence-store's own, and `configure_engine` for a host's.

What differs between the engines is their backend's (`backends`): the connections'
settings, how a write transaction begins, a read snapshot. cadence-store never alters a
host's engine by itself: `configure_engine` is the host's opt-in.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from ..errors import InvalidInputError
from .backends import backend_for, backend_of_url
from .database_url import parse_url as _parse_url
from .pg_prepare import use_prepare_policy

parse_url = _parse_url  # callers import it from here


def create_store_engine(url: str | URL, **engine_options: Any) -> Engine:
    """An engine for cadence-store's own use, set up by its backend
    (`Backend.prepare_engine`).

    On SQLite each connection gets foreign_keys, busy_timeout and synchronous=FULL, but
    not journal_mode=WAL: that pragma rewrites the file, and a database must be checked
    (adoption, head revision) before anything changes it (`Backend.after_upgrade`).

    On psycopg, statements are prepared on the server, unless the engine is reached
    through a pooler or the URL or `connect_args` name a `prepare_threshold`
    (`pg_prepare`). Each attempt of a call is bounded by what is left of its
    `failover_timeout_s` (`call_budget`).
    """
    parsed, engine_options = store_engine_arguments(parse_url(url), engine_options)
    try:
        engine = create_engine(parsed, **engine_options)
    except (ImportError, NoSuchModuleError, ArgumentError, TypeError, ValueError) as error:
        # an unknown dialect, a driver that is not installed, or bad engine options
        raise InvalidInputError("invalid-database-url", type(error).__name__) from None
    try:
        backend = backend_for(engine)
    except InvalidInputError:
        engine.dispose()
        raise
    problem = backend.url_problem(engine.url)
    if problem is not None:
        engine.dispose()
        raise InvalidInputError("invalid-database-url", problem)
    backend.prepare_engine(engine)
    use_prepare_policy(engine, engine_options.get("connect_args") or {}, masked_url(parsed))
    backend.bound_attempts(engine)
    return engine


def store_engine_arguments(
    parsed: URL, engine_options: dict[str, Any]
) -> tuple[URL, dict[str, Any]]:
    """The URL and engine options of an engine cadence-store makes (sync or async): the
    URL's query parameters checked and typed (`Backend.url_arguments`) among the
    driver's `connect_args` (the caller's win)."""
    backend = backend_of_url(parsed)
    if backend is None:
        return parsed, engine_options  # `create_engine` says what is wrong with it
    parsed, arguments = backend.url_arguments(parsed)
    if arguments:
        connect_args = {**arguments, **(engine_options.get("connect_args") or {})}
        engine_options = {**engine_options, "connect_args": connect_args}
    return parsed, engine_options


def use_store_pragmas(engine: Engine) -> None:
    """Give each new connection of cadence-store's own `engine` (an async engine's
    `sync_engine` too) its backend's settings (SQLite: foreign_keys, busy_timeout and
    synchronous=FULL)."""
    backend_for(engine).prepare_engine(engine)


def missing_sqlite_file(engine: Engine) -> str | None:
    """The path of a file database that does not exist (connecting would create an
    empty one), else None."""
    return backend_for(engine).missing_file(engine)


def enable_wal(connection: Connection) -> None:
    """Switch a SQLite file database to WAL (persistent; call outside a transaction)."""
    backend_for(connection).after_upgrade(connection)


def configure_engine(engine: Engine) -> Engine:
    """Make every transaction of a host SQLite engine fit for concurrent writers.

    On connect: foreign_keys, WAL, synchronous=FULL, busy_timeout; every transaction
    begins IMMEDIATE (the pysqlite recipe: the driver's own transaction handling is
    turned off and SQLAlchemy's begin emits the BEGIN). Other engines are returned as
    they are. Idempotent, and in either order with `upgrade(engine)`: a connection the
    engine's pool made before is configured when it is next checked out.
    """
    return backend_for(engine).configure_host_engine(engine)


def begin_write(connection: Connection) -> None:
    """Start a write transaction on `connection` (IMMEDIATE on SQLite) if none is open.

    On an engine from `configure_engine` the begin event already emits BEGIN IMMEDIATE.
    """
    backend_for(connection).begin_write(connection)


@contextmanager
def read_snapshot(connection: Connection) -> Iterator[None]:
    """A read-only transaction: every read inside sees one snapshot of the database.

    Without it each statement sees its own snapshot, and a run row read before its events
    can be older than the events an appender committed in between (a false integrity
    alarm). SQLite: a deferred BEGIN on the driver connection (not SQLAlchemy's begin,
    which a `configure_engine` engine turns into BEGIN IMMEDIATE, a write lock);
    PostgreSQL: REPEATABLE READ, READ ONLY, committed when the block ends without error.
    """
    with backend_for(connection).read_snapshot(connection):
        yield


def is_secret_parameter(name: str) -> bool:
    """A URL query parameter that carries a credential (libpq's `password`,
    `sslpassword`, a driver's `token` or `secret`)."""
    lowered = name.lower()
    return any(word in lowered for word in ("password", "secret", "token"))


_MASK: Final = "***"
_PLACEHOLDER: Final = "CADENCESTOREMASKED"  # survives URL quoting, then becomes ***


def _secret_keys(url: URL) -> list[str]:
    return [key for key in url.query if is_secret_parameter(key)]


def masked_url(url: str | URL) -> str:
    """The URL with every secret hidden (the password, and credential parameters of its
    query such as `?password=`), fit for messages and logs."""
    try:
        parsed = parse_url(url)  # the multi-host forms too
        parsed = parsed.update_query_dict(dict.fromkeys(_secret_keys(parsed), _PLACEHOLDER))
        return parsed.render_as_string(hide_password=True).replace(_PLACEHOLDER, _MASK)
    except (InvalidInputError, ArgumentError, ValueError, TypeError):
        return "<invalid database url>"


def url_without_secrets(url: str | URL) -> str:
    """The URL with its secrets left out (not masked), for a command a user can paste:
    libpq then takes the password from $PGPASSWORD or ~/.pgpass."""
    try:
        parsed = parse_url(url)
        # namedtuple._replace: URL.set() ignores a None value
        parsed = parsed._replace(password=None).difference_update_query(_secret_keys(parsed))
        return parsed.render_as_string(hide_password=False)
    except (InvalidInputError, ArgumentError, ValueError, TypeError):
        return "<invalid database url>"


def url_argument(url: str | URL, *, always_quote: bool = False) -> str:
    """`url` as a shell argument a user can paste, never carrying a secret: as it is when
    it has none, `"$CADENCE_STORE_URL"` when it came from there, else with its secrets
    left out (libpq finds the password in $PGPASSWORD or ~/.pgpass)."""
    quote = _quoted if always_quote else shlex.quote
    if not has_secrets(url):
        return quote(masked_url(url))
    from_environment = os.environ.get("CADENCE_STORE_URL")
    try:
        if from_environment and parse_url(from_environment) == parse_url(url):
            return '"$CADENCE_STORE_URL"'
    except (InvalidInputError, ArgumentError, ValueError, TypeError):
        pass
    return quote(url_without_secrets(url))


def _quoted(text: str) -> str:
    quoted = shlex.quote(text)
    return quoted if quoted.startswith("'") else f"'{text}'"


def has_secrets(url: str | URL) -> bool:
    try:
        parsed = parse_url(url)
    except (InvalidInputError, ArgumentError, ValueError, TypeError):
        return False
    return parsed.password is not None or any(is_secret_parameter(key) for key in parsed.query)
