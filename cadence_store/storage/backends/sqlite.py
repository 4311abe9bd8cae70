"""SQLite: one writer at a time, a file this process opens, the driver's result codes.

Concurrent writers need two things (see NOTES-engines): `foreign_keys` set on connect (it
is a no-op inside a transaction) and write transactions that begin IMMEDIATE (a deferred
transaction that reads then writes fails at once under a concurrent writer, ignoring
busy_timeout). cadence-store never alters a host's engine by itself: its own
transactions on an unconfigured engine send `BEGIN IMMEDIATE` on their connection;
`configure_engine` is the host's opt-in that makes every transaction of the engine so.
"""

from __future__ import annotations

import os
import sqlite3
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import Connection, Engine, Table, bindparam, event, func, literal_column, select
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import URL
from sqlalchemy.sql import ColumnElement, FromClause
from sqlalchemy.sql.elements import ColumnClause

from ...errors import CadenceStoreError, StoreBusyError, StorePermissionError
from ...errors import StoreUnavailableError as Unavailable
from .. import sqlite_pragmas as pragmas
from ..database_url import check_sqlite_query
from ..positions import highest_position
from .base import Backend, UpsertInsert, driver_connection, driver_error

if TYPE_CHECKING:
    from ..catalogue import FoundTable

BUSY_TIMEOUT_MS: Final = 10_000
_CONFIGURED: Final = "cadence_store.configured"  # a pooled connection's mark (record.info)
# SQLite primary result codes (https://sqlite.org/rescode.html)
_BUSY: Final = frozenset({5, 6})  # BUSY, LOCKED
_UNAVAILABLE: Final = frozenset({7, 10, 11, 13, 14, 15, 23, 26})
# PERM, READONLY: this process may not write the database (a file, a directory or a
# connection that is read-only); READONLY_DBMOVED is the file vanishing, not a privilege
_PERMISSION: Final = frozenset({3, 8})
_READONLY_DBMOVED: Final = 1032
_NOTADB: Final = 26


def driver_in_transaction(raw: Any) -> bool:
    """Whether a SQLite driver connection has a transaction open: sqlite3's
    `in_transaction`, or through aiosqlite's adapted connection, its driver connection's."""
    state = getattr(raw, "in_transaction", None)
    if state is None:
        state = getattr(driver_connection(raw), "in_transaction", True)
    return bool(state)


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


def begin_immediate(connection: Connection) -> None:
    """`BEGIN IMMEDIATE` on the driver connection of `connection`."""
    raw = connection.connection.dbapi_connection
    assert raw is not None
    begin_immediate_on(raw)


def set_session_pragmas(dbapi_connection: Any, *, wal: bool) -> None:
    """foreign_keys, busy_timeout, synchronous=FULL (and WAL) on a new connection."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if wal:
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = FULL")
    finally:
        cursor.close()


def path_has_nul(database: str | None) -> bool:
    """Whether a SQLite URL's path names a NUL byte, as `\\x00` or as `%00`: SQLAlchemy 2.1
    decodes percent escapes in the path and 2.0 keeps them, and both mean a NUL here."""
    return database is not None and ("\x00" in database or "%00" in database)


def _is_memory(url: URL) -> bool:
    return url.database in (None, "", ":memory:") or "mode=memory" in str(url)


class SQLiteBackend(Backend):
    __slots__ = ("_immediate_engines",)

    name = "sqlite"
    rolls_back_by_itself = True
    begins_immediate = True
    checkpoints_wal = True
    embedded = True
    sync_drivername = "sqlite+pysqlite"
    async_drivername = "sqlite+aiosqlite"
    permission_hint = (
        "the SQLite database is read-only to this process: check that the file and "
        "its directory are writable by this user (SQLite writes -wal, -shm and "
        "-journal files beside it) and that it is not opened read-only "
        "(mode=ro, PRAGMA query_only)"
    )

    def __init__(self) -> None:
        # the host engines `configure_engine` made begin every transaction IMMEDIATE
        self._immediate_engines: weakref.WeakSet[Engine] = weakref.WeakSet()

    def in_transaction(self, raw: Any) -> bool:
        return driver_in_transaction(raw)

    def transaction_trouble(self, raw: Any) -> str | None:
        if driver_in_transaction(raw):
            return None
        return "SQLite rolled the transaction back by itself (disk full, I/O error, no memory)"

    # -- statement pieces ----------------------------------------------------------------

    def upsert_insert(self, table: Table) -> UpsertInsert:
        return sqlite.insert(table)

    def append_time(self, now: ColumnElement[int]) -> ColumnElement[int]:
        return now  # the store's clock: SQLite has no server

    def later_of(
        self, value: ColumnElement[int], previous: ColumnElement[int | None]
    ) -> ColumnElement[int]:
        return func.max(value, func.coalesce(previous, value))  # max() of a NULL is NULL

    def feed_position_on_insert(self) -> ColumnElement[int | None]:
        # the next position, under the single writer's lock; the numbers written into the
        # statement: no value to pick for them on every append
        # (after the highest of the events and of the leaves archives kept)
        return (highest_position().scalar_subquery() + literal_column("1")).self_group()

    def feed_numbering_rights(self) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
        return literal_column("1"), literal_column("1")

    def row_set(self, columns: Sequence[ColumnClause[Any]], alias: str) -> FromClause:
        each = func.json_each(bindparam("rows")).table_valued("value")
        return (
            select(
                *(
                    func.json_extract(each.c.value, f"$.{item.name}").label(item.name)
                    for item in columns
                )
            )
            .select_from(each)
            .subquery(alias)
        )

    # -- transactions ----------------------------------------------------------------

    def begin_write(self, connection: Connection) -> None:
        if connection.in_transaction():
            return
        connection.begin()  # SQLAlchemy's transaction; pysqlite sends nothing for it
        if not self.host_engine_begins_write(connection.engine):
            begin_immediate(connection)

    def lock_host_write(self, connection: Connection) -> None:
        raw = connection.connection.dbapi_connection
        if (
            raw is not None
            and not self.host_engine_begins_write(connection.engine)
            and not driver_in_transaction(raw)
        ):
            begin_immediate(connection)

    def begin_write_on_driver(self, raw: Any) -> None:
        begin_immediate_on(raw)

    @contextmanager
    def read_snapshot(self, connection: Connection) -> Iterator[None]:
        # a deferred BEGIN on the driver connection (not SQLAlchemy's begin, which a
        # `configure_engine` engine turns into BEGIN IMMEDIATE, a write lock)
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

    def lock_migration(self, connection: Connection, schema: str | None) -> None:
        raw = connection.connection.dbapi_connection
        if not driver_in_transaction(raw):
            begin_immediate(connection)  # pysqlite would autocommit each DDL step

    def database_label(self, connection: Connection) -> str:
        return connection.engine.url.database or ":memory:"

    def read_catalogue(
        self, connection: Connection, tables: Iterable[str], schema: str | None
    ) -> dict[str, FoundTable]:
        from ..catalogue import Column, FoundTable, type_family

        query = pragmas.query_of(connection)
        present = pragmas.table_names(query)
        found: dict[str, FoundTable] = {}
        for name in tables:
            if name not in present:
                continue
            table = found[name] = FoundTable()
            info = pragmas.columns(query, name)
            for column in info:
                table.columns[str(column.name)] = Column(
                    type_family(str(column.type)), not column.notnull, column.default is not None
                )
            table.primary_key = frozenset(str(column.name) for column in info if column.pk)
            for index in pragmas.indexes(query, name):
                columns = pragmas.index_columns(query, index.name)
                table.indexes.add(columns)
                if index.unique:
                    table.unique_keys.add(frozenset(columns))
            table.foreign_keys = pragmas.foreign_keys(query, name)
        return found

    # -- errors ----------------------------------------------------------------------

    def owns_error(self, orig: BaseException) -> bool:
        return isinstance(orig, sqlite3.Error) or hasattr(orig, "sqlite_errorcode")

    def classify(self, error: BaseException) -> CadenceStoreError | None:
        orig = driver_error(error)
        detail = f"{type(orig).__name__}: {orig}"
        extended = getattr(orig, "sqlite_errorcode", None)
        code = None if extended is None else int(extended) & 0xFF
        if code == _NOTADB:
            return Unavailable("run-store-not-a-database", detail)
        if code in _PERMISSION:
            if extended == _READONLY_DBMOVED:
                return Unavailable("run-store-unavailable", detail)
            return StorePermissionError(
                "run-store-permission-denied", detail, engine=self.name, hint=self.permission_hint
            )
        if code in _BUSY:
            return StoreBusyError("run-store-busy", detail)
        if code in _UNAVAILABLE or (code is None and type(orig).__name__ == "OperationalError"):
            return Unavailable("run-store-unavailable", detail)
        return None

    # -- engines and URLs --------------------------------------------------------------

    def url_arguments(self, url: URL) -> tuple[URL, dict[str, Any]]:
        check_sqlite_query(url)
        return url, {}

    def sync_twin(self, url: URL) -> URL | None:
        if url.get_driver_name() != "aiosqlite" or _is_memory(url):
            return None  # an in-memory database is private to its connection
        return url.set(drivername=self.sync_drivername)

    def async_url(self, url: URL) -> URL:
        if url.drivername in ("sqlite", self.sync_drivername):
            return url.set(drivername=self.async_drivername)
        return url

    def memory_only(self, url: URL) -> bool:
        return (
            url.database in (None, "", ":memory:")
            or str(url.query.get("mode")) == "memory"
            or (url.database or "").startswith("file::memory:")
        )

    def url_problem(self, url: URL) -> str | None:
        # no file can have this name (the driver would raise a bare ValueError)
        return "the SQLite path holds a NUL byte" if path_has_nul(url.database) else None

    def prepare_engine(self, engine: Engine) -> None:
        # not journal_mode=WAL: that pragma rewrites the file, and a database must be
        # checked (adoption, head revision) before anything changes it (`after_upgrade`)
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            set_session_pragmas(dbapi_connection, wal=False)

    def configure_host_engine(self, engine: Engine) -> Engine:
        if engine in self._immediate_engines:
            return engine

        def configure(dbapi_connection: Any, record: Any) -> None:
            dbapi_connection.isolation_level = None
            set_session_pragmas(dbapi_connection, wal=True)
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

        self._immediate_engines.add(engine)
        return engine

    def host_engine_begins_write(self, engine: Engine) -> bool:
        return engine in self._immediate_engines

    def missing_file(self, engine: Engine) -> str | None:
        database = engine.url.database
        if database in (None, "", ":memory:") or database.startswith("file:"):
            return None
        return None if os.path.exists(database) else database

    def after_upgrade(self, connection: Connection) -> None:
        """Switch a file database to WAL (persistent; outside a transaction)."""
        if connection.engine.url.database not in (None, "", ":memory:"):
            connection.exec_driver_sql("PRAGMA journal_mode = WAL")

    def checkpoint(self, connection: Connection) -> None:
        connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")


__all__ = [
    "BUSY_TIMEOUT_MS",
    "SQLiteBackend",
    "begin_immediate",
    "begin_immediate_on",
    "driver_in_transaction",
    "path_has_nul",
    "set_session_pragmas",
]
