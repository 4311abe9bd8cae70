"""Engines: creating cadence-store's own, and `configure_engine` for a host's.

SQLite needs two things for concurrent writers (see NOTES-engines): `foreign_keys` set on
connect (it is a no-op inside a transaction) and write transactions that begin
IMMEDIATE (a deferred transaction that reads then writes fails at once under a concurrent
writer, ignoring busy_timeout). cadence-store never alters a host's engine by itself: its
own transactions on an unconfigured engine send `BEGIN IMMEDIATE` on their connection;
`configure_engine` is the host's opt-in that makes every transaction of the engine so.
"""

from __future__ import annotations

import os
import shlex
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from ..errors import InvalidInputError
from .call_budget import bound_attempts
from .database_url import driver_options
from .database_url import parse_url as _parse_url
from .pg_prepare import use_prepare_policy

parse_url = _parse_url  # callers import it from here

BUSY_TIMEOUT_MS: Final = 10_000

_immediate_engines: weakref.WeakSet[Engine] = weakref.WeakSet()
_CONFIGURED: Final = "cadence_store.configured"  # a pooled connection's mark (record.info)


def is_sqlite(bind: Engine | Connection) -> bool:
    return bind.dialect.name == "sqlite"


def is_postgresql(bind: Engine | Connection) -> bool:
    return bind.dialect.name == "postgresql"


def begins_immediate(engine: Engine) -> bool:
    """Whether every transaction of `engine` already begins IMMEDIATE (configure_engine)."""
    return engine in _immediate_engines


def driver_in_transaction(raw: Any) -> bool:
    """Whether a SQLite driver connection has a transaction open: sqlite3's
    `in_transaction`, or through aiosqlite's adapted connection, its driver connection's."""
    state = getattr(raw, "in_transaction", None)
    if state is None:
        state = getattr(getattr(raw, "driver_connection", None), "in_transaction", True)
    return bool(state)


def sqlite_path_has_nul(database: str | None) -> bool:
    """Whether a SQLite URL's path names a NUL byte, as `\\x00` or as `%00`: SQLAlchemy 2.1
    decodes percent escapes in the path and 2.0 keeps them, and both mean a NUL here."""
    return database is not None and ("\x00" in database or "%00" in database)


def _set_session_pragmas(dbapi_connection: Any, *, wal: bool) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if wal:
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = FULL")
    finally:
        cursor.close()


def create_store_engine(url: str | URL, **engine_options: Any) -> Engine:
    """An engine for cadence-store's own use.

    On SQLite each connection gets foreign_keys, busy_timeout and synchronous=FULL, but
    not journal_mode=WAL: that pragma rewrites the file, and a database must be checked
    (adoption, head revision) before anything changes it. `enable_wal` follows the check.

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
    if is_sqlite(engine) and sqlite_path_has_nul(engine.url.database):
        engine.dispose()
        # no file can have this name (the driver would raise a bare ValueError)
        raise InvalidInputError("invalid-database-url", "the SQLite path holds a NUL byte")
    use_store_pragmas(engine)
    use_prepare_policy(engine, engine_options.get("connect_args") or {}, masked_url(parsed))
    if is_postgresql(engine):
        bound_attempts(engine)
    return engine


def store_engine_arguments(
    parsed: URL, engine_options: dict[str, Any]
) -> tuple[URL, dict[str, Any]]:
    """The URL and engine options of an engine cadence-store makes (sync or async): the
    URL's query parameters checked and typed (`database_url.driver_options`) among the
    driver's `connect_args` (the caller's win)."""
    parsed, arguments = driver_options(parsed)
    if arguments:
        connect_args = {**arguments, **(engine_options.get("connect_args") or {})}
        engine_options = {**engine_options, "connect_args": connect_args}
    return parsed, engine_options


def use_store_pragmas(engine: Engine) -> None:
    """On SQLite, give each new connection of cadence-store's own `engine` (an async
    engine's `sync_engine` too) foreign_keys, busy_timeout and synchronous=FULL."""
    if is_sqlite(engine):

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            _set_session_pragmas(dbapi_connection, wal=False)


def missing_sqlite_file(engine: Engine) -> str | None:
    """The path of a SQLite file database that does not exist (connecting would create an
    empty one), else None."""
    database = engine.url.database
    if not is_sqlite(engine) or database in (None, "", ":memory:") or database.startswith("file:"):
        return None
    return None if os.path.exists(database) else database


def enable_wal(connection: Connection) -> None:
    """Switch a SQLite file database to WAL (persistent; call outside a transaction)."""
    if is_sqlite(connection) and connection.engine.url.database not in (None, "", ":memory:"):
        connection.exec_driver_sql("PRAGMA journal_mode = WAL")


def configure_engine(engine: Engine) -> Engine:
    """Make every transaction of a host SQLite engine fit for concurrent writers.

    On connect: foreign_keys, WAL, synchronous=FULL, busy_timeout; every transaction
    begins IMMEDIATE (the pysqlite recipe: the driver's own transaction handling is
    turned off and SQLAlchemy's begin emits the BEGIN). Other engines are returned as
    they are. Idempotent, and in either order with `upgrade(engine)`: a connection the
    engine's pool made before is configured when it is next checked out.
    """
    if not is_sqlite(engine) or engine in _immediate_engines:
        return engine

    def configure(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None
        _set_session_pragmas(dbapi_connection, wal=True)
        record.info[_CONFIGURED] = True

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, record: Any) -> None:
        configure(dbapi_connection, record)

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if not record.info.get(_CONFIGURED):
            configure(dbapi_connection, record)

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        begin_immediate(connection)

    _immediate_engines.add(engine)
    return engine


def begin_write(connection: Connection) -> None:
    """Start a write transaction on `connection` (IMMEDIATE on SQLite) if none is open.

    On an engine from `configure_engine` the begin event already emits BEGIN IMMEDIATE.
    """
    if connection.in_transaction():
        return
    connection.begin()  # SQLAlchemy's transaction; pysqlite sends nothing for it
    if is_sqlite(connection) and not begins_immediate(connection.engine):
        begin_immediate(connection)


@contextmanager
def read_snapshot(connection: Connection) -> Iterator[None]:
    """A read-only transaction: every read inside sees one snapshot of the database.

    Without it each statement sees its own snapshot, and a run row read before its events
    can be older than the events an appender committed in between (a false integrity
    alarm). SQLite: a deferred BEGIN on the driver connection (not SQLAlchemy's begin,
    which a `configure_engine` engine turns into BEGIN IMMEDIATE, a write lock);
    PostgreSQL: REPEATABLE READ, READ ONLY, committed when the block ends without error.
    """
    if is_sqlite(connection):
        raw = connection.connection.dbapi_connection
        assert raw is not None
        began = not driver_in_transaction(raw)
        if began:
            raw.execute("BEGIN")
        try:
            yield
        finally:
            if began and driver_in_transaction(raw):
                raw.rollback()
        return
    connection.begin()
    try:
        if is_postgresql(connection):
            connection.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield
    except BaseException:
        connection.rollback()
        raise
    # a read-only transaction's COMMIT keeps nothing, and keeps psycopg's prepared
    # statements: its ROLLBACK forgets them all (and sends DEALLOCATE ALL)
    if is_postgresql(connection):
        connection.commit()
    else:
        connection.rollback()


def begin_immediate(connection: Connection) -> None:
    """`BEGIN IMMEDIATE` on the driver connection of `connection` (`begin_immediate_on`)."""
    raw = connection.connection.dbapi_connection
    assert raw is not None
    begin_immediate_on(raw)


def begin_immediate_on(dbapi_connection: Any) -> None:
    """`BEGIN IMMEDIATE` on a SQLite DB-API connection: take SQLite's write lock first.
    The driver's own `commit()` and `rollback()` end the transaction (sqlite3 opens none
    of its own while one is open).

    A concurrent writer is waited for by SQLite's own busy handler (the connection's
    busy_timeout). Measured here: polling in sub-millisecond steps instead burnt the CPU
    the lock holder needed (4 writers on 2 cores reached 0.73-0.83x of one writer's
    throughput; SQLite's handler 0.95-0.98x).
    """
    dbapi_connection.execute("BEGIN IMMEDIATE")


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
