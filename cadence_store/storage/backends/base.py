"""What an engine must answer for the journal: the `Backend` protocol, one subclass each.

The repository, the store and the statements ask the backend, never the dialect's name:
how a write transaction takes its lock, whose clock judges a lease, whether keys are
serialised by advisory locks, whether an append's three writes are one statement, where
the tables are when no schema is named, how a long result is streamed, what a
transaction's state is, the statement pieces the engines write differently, the
migration lock, the catalogue, the driver errors and the URL forms. Transaction state is
answered from the DB-API connection (or an async driver's adapter of it), never through
SQLAlchemy's wrapping, so it costs an attribute read on the hot path.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

from sqlalchemy import Connection, Engine, Table
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement, ColumnElement, FromClause
from sqlalchemy.sql.elements import ColumnClause

from ...errors import CadenceStoreError

if TYPE_CHECKING:
    from ..catalogue import FoundTable


def driver_connection(raw: Any) -> Any:
    """The driver's own connection behind an async adapter (aiosqlite, psycopg async)."""
    return getattr(raw, "driver_connection", None) or raw


def driver_error(error: BaseException) -> BaseException:
    """The DB-API exception itself (SQLAlchemy wraps it; the hot path raises it bare)."""
    if isinstance(error, DBAPIError) and error.orig is not None:
        return error.orig
    return error


class UpsertInsert(Protocol):
    """An INSERT that updates the row it collides with (each engine's own INSERT)."""

    @property
    def excluded(self) -> Any:
        """The row the INSERT proposed (`EXCLUDED`)."""

    def values(self, *args: Any, **kwargs: Any) -> Self:
        """The INSERT's values."""

    def on_conflict_do_update(
        self, *, index_elements: Any = None, set_: Any = None, where: Any = None
    ) -> ClauseElement:
        """The update of the row the INSERT collides with on `index_elements`."""


class Backend(ABC):
    """One engine's answers to what the journal must know of it (one instance each)."""

    __slots__ = ()

    name: ClassVar[str]  # the SQLAlchemy dialect's name
    # SQLite ends a transaction on its own after some errors; PostgreSQL never does
    rolls_back_by_itself: ClassVar[bool] = False
    # a write transaction takes the database's write lock when it begins (BEGIN IMMEDIATE)
    begins_immediate: ClassVar[bool] = False
    # lease time is the server's clock (callers on many machines), unless `clock=` is given
    server_clock: ClassVar[bool] = False
    # keys are serialised by transaction-level advisory locks (SQLite has one writer)
    advisory_locks: ClassVar[bool] = False
    # an append's run, event and receipt writes are one statement (one round trip)
    one_statement_append: ClassVar[bool] = False
    # where the tables are when no schema is named (never the connection's search_path)
    default_schema: ClassVar[str | None] = None
    # the tables may live in a named schema of their own (`schema=`)
    named_schemas: ClassVar[bool] = False
    # the write-ahead log is folded back into the file when the store closes
    checkpoints_wal: ClassVar[bool] = False
    # feed positions are given after commit, under a lock (concurrent writers commit out
    # of order), by the appender's feed notifier or a reader that may write; else each
    # append numbers its event under the single writer's lock
    feed_numbered_by_readers: ClassVar[bool] = False
    # followers are woken by LISTEN/NOTIFY (else they poll for a changed database)
    notifies: ClassVar[bool] = False
    # a batch's rows are bound as one JSON row set, in one statement (else each row is an
    # execution of its own: `Statements.write_rows`)
    binds_row_sets: ClassVar[bool] = False
    # a lookup per row of a row set can be a LATERAL subquery (else a plain join)
    lateral_lookups: ClassVar[bool] = False
    # the database is a file this process opens (no server); cadence 1.x stores are such
    embedded: ClassVar[bool] = False
    # a refused privilege is a grant per table (so a host table's refusal is the host's)
    grants_per_table: ClassVar[bool] = False
    # the driver names of a URL: the sync one cadence-store uses, and its async twin
    sync_drivername: ClassVar[str]
    async_drivername: ClassVar[str]
    # what a refused privilege means here, and what to do (`StorePermissionError.hint`;
    # None: its own, the grants a PostgreSQL role needs)
    permission_hint: ClassVar[str | None] = None

    # -- a raw connection's transaction ----------------------------------------------------

    @abstractmethod
    def in_transaction(self, raw: Any) -> bool:
        """Whether the DB-API connection `raw` has a transaction open."""

    @abstractmethod
    def transaction_trouble(self, raw: Any) -> str | None:
        """Why `raw`'s transaction can no longer commit, or None."""

    def streaming_cursor(self, raw: Any, is_async: bool) -> Any:
        """A cursor that streams a long result."""
        # aiosqlite's adapter would otherwise fetch the whole result on execute
        return raw.cursor(server_side=True) if is_async else raw.cursor()

    # -- statement pieces ----------------------------------------------------------------

    @abstractmethod
    def upsert_insert(self, table: Table) -> UpsertInsert:
        """An INSERT of `table` that takes `.on_conflict_do_update(...)` and `.excluded`."""

    @abstractmethod
    def append_time(self, now: ColumnElement[int]) -> ColumnElement[int]:
        """The time an append records, from the bound `now` (milliseconds, or NULL where
        the server's clock stands in for it)."""

    @abstractmethod
    def later_of(
        self, value: ColumnElement[int], previous: ColumnElement[int | None]
    ) -> ColumnElement[int]:
        """`value`, or `previous` if that is later (`previous` may be NULL)."""

    @abstractmethod
    def feed_position_on_insert(self) -> ColumnElement[int | None]:
        """The value an appended event's `feed_position` gets in its INSERT."""

    @abstractmethod
    def feed_numbering_rights(self) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
        """Whether this role could number the feed, and whether this transaction can."""

    @abstractmethod
    def row_set(self, columns: Sequence[ColumnClause[Any]], alias: str) -> FromClause:
        """The rows of the JSON parameter `rows` (an array of objects), `columns` each."""

    # -- transactions ----------------------------------------------------------------

    @abstractmethod
    def begin_write(self, connection: Connection) -> None:
        """Start a write transaction on `connection`, taking the write lock where the
        engine has one, if none is open."""

    def lock_host_write(self, connection: Connection) -> None:
        """A host's transaction that has not touched the database yet takes the write
        lock now (`begins_immediate` engines; nothing elsewhere)."""
        return None  # nothing to do on an engine without it

    def begin_write_on_driver(self, raw: Any) -> None:
        """Begin a write transaction on a pooled DB-API connection (`begins_immediate`)."""
        return None  # nothing to do on an engine without it

    @abstractmethod
    def read_snapshot(self, connection: Connection) -> AbstractContextManager[None]:
        """A read-only transaction: every read inside sees one snapshot of the database."""

    @abstractmethod
    def lock_migration(self, connection: Connection, schema: str | None) -> None:
        """In the upgrade's open transaction: exclude a second migrator, and (a named
        schema's engine) point unqualified DDL at the store's schema."""

    def search_path(self, connection: Connection) -> str | None:
        """The connection's schema search path (None: the engine has none)."""
        return None

    def database_label(self, connection: Connection) -> str:
        """The database, named for logs and messages (no secret)."""
        from ..engine import masked_url

        return masked_url(connection.engine.url)

    @abstractmethod
    def read_catalogue(
        self, connection: Connection, tables: Iterable[str], schema: str | None
    ) -> dict[str, FoundTable]:
        """The tables of `tables` that exist, as the database's own catalogue says."""

    # -- errors ----------------------------------------------------------------------

    @abstractmethod
    def owns_error(self, orig: BaseException) -> bool:
        """Whether `orig` (a DB-API exception) is this engine's driver's."""

    @abstractmethod
    def classify(self, error: BaseException) -> CadenceStoreError | None:
        """The coded error this driver's failure is, by result code or SQLSTATE (None:
        the database refused the statement itself)."""

    # -- engines and URLs --------------------------------------------------------------

    def url_arguments(self, url: URL) -> tuple[URL, dict[str, Any]]:
        """`url` without the query parameters that are the driver's own arguments, and
        those arguments typed (for `connect_args`); every other parameter checked."""
        return url, {}

    @abstractmethod
    def sync_twin(self, url: URL) -> URL | None:
        """The same database through the sync driver, None where there is no such twin."""

    @abstractmethod
    def async_url(self, url: URL) -> URL:
        """`url` with the async driver where it names the engine without one (or the
        sync driver): the async engines' URL."""

    def memory_only(self, url: URL) -> bool:
        """Whether `url` names a database that lasts only as long as its connection."""
        return False

    def url_problem(self, url: URL) -> str | None:
        """Why `url` can name no database of this engine, or None."""
        return None

    def prepare_engine(self, engine: Engine) -> None:
        """Set up an engine cadence-store made (its connections' settings)."""
        return None  # nothing to do on an engine without it

    def bound_attempts(self, engine: Engine) -> None:
        """Bound each attempt of a call on cadence-store's own sync `engine` by the call's
        budget (`call_budget`), where a connection can hang on the network."""
        return None  # nothing to do on an engine without it

    def configure_host_engine(self, engine: Engine) -> Engine:
        """`configure_engine`: a host's engine made fit for concurrent writers."""
        return engine

    def host_engine_begins_write(self, engine: Engine) -> bool:
        """Whether every transaction of `engine` already begins as a write."""
        return False

    def missing_file(self, engine: Engine) -> str | None:
        """The path of a file database that does not exist, else None."""
        return None

    def after_upgrade(self, connection: Connection) -> None:
        """Outside a transaction, after cadence-store upgraded its own engine's database."""
        return None  # nothing to do on an engine without it

    def checkpoint(self, connection: Connection) -> None:
        """Housekeeping when the store closes (`checkpoints_wal`)."""
        return None  # nothing to do on an engine without it

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


__all__ = ["Backend", "UpsertInsert", "driver_connection", "driver_error"]
