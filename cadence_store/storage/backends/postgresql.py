"""PostgreSQL (psycopg 3): concurrent writers, the server's clock, advisory locks.

Writers commit concurrently, so keys are serialised by transaction-level advisory locks
and the feed is numbered after commit (`feed_statements`); a lease is judged by the
server's clock; an append's three writes and a batch's rows are each one statement; a
long result streams through a named (server-side) cursor; the tables are always named
with their schema (`public` unless one is given), never left to a pooled connection's
`search_path`.
"""

from __future__ import annotations

import hashlib
import itertools
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import (
    JSON,
    BigInteger,
    Connection,
    Engine,
    Table,
    and_,
    bindparam,
    cast,
    extract,
    func,
    literal_column,
    null,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL
from sqlalchemy.sql import ColumnElement, FromClause
from sqlalchemy.sql.elements import ColumnClause

from ...errors import CadenceStoreError, StoreBusyError, StorePermissionError
from ...errors import StoreUnavailableError as Unavailable
from ..call_budget import bound_attempts
from ..database_url import driver_name, psycopg_options
from ..pg_prepare import rerun_unprepared
from . import postgresql_catalogue
from .base import Backend, UpsertInsert, driver_connection, driver_error
from .postgresql_errors import (
    INSUFFICIENT_PRIVILEGE,
    RETRYABLE_SQLSTATES,
    UNAVAILABLE_CLASSES,
    is_authentication_failure,
    pooler_symptom,
    sqlstate,
)

if TYPE_CHECKING:
    from ..catalogue import FoundTable

# psycopg's `pq.TransactionStatus.INERROR`: a statement failed, the server has aborted
# the transaction and refuses everything but ROLLBACK (COMMIT then rolls back, silently)
_INERROR: Final = 3
# One lock id for every cadence-store upgrade on a PostgreSQL server.
UPGRADE_LOCK_ID: Final = int.from_bytes(
    hashlib.sha256(b"cadence-store:upgrade").digest()[:8], "big", signed=True
)
_stream_ids = itertools.count()


def server_time_ms() -> ColumnElement[int]:
    """The server's clock in integer milliseconds (floored, as `system_clock`).

    `clock_timestamp()`, not `now()`: the time when the row is produced, not when the
    transaction began."""
    return cast(func.floor(extract("epoch", func.clock_timestamp()) * 1000), BigInteger)


class PostgreSQLBackend(Backend):
    __slots__ = ()

    name = "postgresql"
    server_clock = True
    advisory_locks = True
    one_statement_append = True
    default_schema = "public"
    named_schemas = True
    feed_numbered_by_readers = True
    notifies = True
    binds_row_sets = True
    lateral_lookups = True
    grants_per_table = True
    sync_drivername = "postgresql+psycopg"
    # psycopg 3 serves both; SQLAlchemy picks its async mode
    async_drivername = "postgresql+psycopg"
    # a refused privilege: `StorePermissionError`'s own hint (the role's grants)

    def in_transaction(self, raw: Any) -> bool:
        info = getattr(driver_connection(raw), "info", None)
        return info is not None and int(info.transaction_status) != 0

    def transaction_trouble(self, raw: Any) -> str | None:
        info = getattr(driver_connection(raw), "info", None)
        if info is not None and int(info.transaction_status) == _INERROR:
            return "a statement in this transaction failed, and PostgreSQL aborted it"
        return None

    def streaming_cursor(self, raw: Any, is_async: bool) -> Any:
        # a named cursor is server-side (psycopg, and its async adapter: name positional)
        return raw.cursor(f"cadence_stream_{next(_stream_ids)}")

    # -- statement pieces ----------------------------------------------------------------

    def upsert_insert(self, table: Table) -> UpsertInsert:
        return postgresql.insert(table)

    def append_time(self, now: ColumnElement[int]) -> ColumnElement[int]:
        # NULL: the server's clock, read by the statement itself (COALESCE evaluates it
        # only then)
        return func.coalesce(now, server_time_ms())

    def later_of(
        self, value: ColumnElement[int], previous: ColumnElement[int | None]
    ) -> ColumnElement[int]:
        return func.greatest(value, previous)  # NULLs are ignored

    def feed_position_on_insert(self) -> ColumnElement[int | None]:
        return cast(null(), BigInteger)  # numbered after commit (`NUMBER_FEED`)

    def feed_numbering_rights(self) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
        # the role may update `feed_position` (`tableoid`: the events table as the
        # statement's schema names it), on a server out of recovery; this transaction is
        # read-write, and READ COMMITTED: a REPEATABLE READ snapshot taken before the
        # numbering lock would not see the last numbering, and its UPDATE would fail to
        # serialize
        role_may = and_(
            func.has_column_privilege(literal_column("tableoid"), "feed_position", "UPDATE"),
            ~func.pg_is_in_recovery(),
        )
        here = and_(
            role_may,
            func.current_setting("transaction_read_only") == "off",
            func.current_setting("transaction_isolation") == "read committed",
        )
        return role_may, here

    def row_set(self, columns: Sequence[ColumnClause[Any]], alias: str) -> FromClause:
        rows = func.json_to_recordset(cast(bindparam("rows"), JSON))
        return rows.table_valued(*columns).render_derived(name=alias, with_types=True)

    # -- transactions ----------------------------------------------------------------

    def begin_write(self, connection: Connection) -> None:
        if not connection.in_transaction():
            connection.begin()

    @contextmanager
    def read_snapshot(self, connection: Connection) -> Iterator[None]:
        connection.begin()
        try:
            connection.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield
        except BaseException:
            connection.rollback()
            raise
        # a read-only transaction's COMMIT keeps nothing, and keeps psycopg's prepared
        # statements: its ROLLBACK forgets them all (and sends DEALLOCATE ALL)
        connection.commit()

    def lock_migration(self, connection: Connection, schema: str | None) -> None:
        connection.exec_driver_sql(
            "SELECT pg_advisory_xact_lock(%(lock)s)", {"lock": UPGRADE_LOCK_ID}
        )
        if schema is not None:
            quoted = connection.dialect.identifier_preparer.quote_schema(schema)
            connection.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
            # Alembic renders some DDL (ALTER TABLE ... ADD COLUMN) unqualified
            connection.exec_driver_sql(f"SET LOCAL search_path TO {quoted}")
        else:
            # the store's statements name the default schema (`public`); a pooled
            # connection's leftover search_path must not put the tables elsewhere
            connection.exec_driver_sql(f"SET LOCAL search_path TO {self.default_schema}")

    def search_path(self, connection: Connection) -> str | None:
        return str(connection.exec_driver_sql("SHOW search_path").scalar_one())

    def read_catalogue(
        self, connection: Connection, tables: Iterable[str], schema: str | None
    ) -> dict[str, FoundTable]:
        return postgresql_catalogue.read_tables(connection, sorted(tables), schema)

    # -- errors ----------------------------------------------------------------------

    def owns_error(self, orig: BaseException) -> bool:
        psycopg = sys.modules.get("psycopg")
        return (psycopg is not None and isinstance(orig, psycopg.Error)) or (
            sqlstate(orig) is not None
        )

    def classify(self, error: BaseException) -> CadenceStoreError | None:
        orig = driver_error(error)
        detail = f"{type(orig).__name__}: {orig}"
        state = sqlstate(error)
        if is_authentication_failure(error):
            return Unavailable("run-store-auth-failed", detail)
        if state == INSUFFICIENT_PRIVILEGE:
            return StorePermissionError(
                "run-store-permission-denied", detail, engine=self.name, hint=self.permission_hint
            )
        # a lost race, or a prepared statement a pooler lost (then nothing is prepared)
        if state in RETRYABLE_SQLSTATES or rerun_unprepared(state):
            return StoreBusyError("run-store-busy", detail)
        if state is not None and state.startswith(UNAVAILABLE_CLASSES):
            return Unavailable("run-store-unavailable", detail)
        # no SQLSTATE: the server never answered (refused, unreachable), or a pooler
        # lost the server connection under it
        if state is None and (type(orig).__name__ == "OperationalError" or pooler_symptom(orig)):
            return Unavailable("run-store-unavailable", detail)
        return None

    # -- engines and URLs --------------------------------------------------------------

    def url_arguments(self, url: URL) -> tuple[URL, dict[str, Any]]:
        if driver_name(url) != "psycopg":
            return url, {}
        return psycopg_options(url)

    def sync_twin(self, url: URL) -> URL | None:
        if url.get_driver_name() not in ("psycopg", "psycopg_async"):
            return None
        return url.set(drivername=self.sync_drivername)

    def async_url(self, url: URL) -> URL:
        if url.drivername in ("postgresql", "postgres"):
            return url.set(drivername=self.async_drivername)
        return url

    def bound_attempts(self, engine: Engine) -> None:
        # each attempt of a call is bounded by what is left of its `failover_timeout_s`
        bound_attempts(engine)


__all__ = ["UPGRADE_LOCK_ID", "PostgreSQLBackend", "server_time_ms"]
