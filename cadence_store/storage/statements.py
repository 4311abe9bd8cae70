"""The repository's statements: Core, compiled once per dialect, run on the DB-API cursor.

Every statement is written as SQLAlchemy Core against the models' tables (so it follows
the schema and never formats caller data into SQL: values are bound parameters). Each is
compiled once per (dialect, schema map) and then executed on the raw DB-API cursor of the
session's connection, inside the session's transaction. That skips SQLAlchemy's
per-execution work (cache-key generation, result processing), which was most of an
append's cost; the statements themselves are unchanged.
"""

from __future__ import annotations

import itertools
import operator
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, TypeVar

from sqlalchemy import (
    Connection,
    bindparam,
    func,
    literal,
    select,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement, Select

from ..journal.vocabulary import INTERRUPTED, KIND_LEASE, RUNNING
from .append_statements import APPEND_STATEMENTS, OPERATION_MATCH, RUN_MATCH, server_time_ms
from .models import delivery_bindings, events, operations, runs
from .read_statements import READ_STATEMENTS, listing_of

SchemaMap = tuple[tuple[str | None, str | None], ...]
Row = TypeVar("Row", bound=tuple[Any, ...])


# where cadence-store's tables are on PostgreSQL when no schema is named
DEFAULT_PG_SCHEMA: Final = "public"
_RUN = RUN_MATCH
_OPERATION = OPERATION_MATCH
_HEAD_COLUMNS = (
    runs.c.run_id,
    runs.c.root_hash,
    runs.c.stage,
    runs.c.projection_json,
    runs.c.sequence,
    runs.c.event_hash,
)
_OPERATION_COLUMNS = (
    operations.c.kind,
    operations.c.state,
    operations.c.outcome_json,
    operations.c.lease_token,
    operations.c.lease_expires_at,
    operations.c.lease_fence,
)


def _timed(locked: ClauseElement) -> ClauseElement:
    """`locked`'s columns plus the server time, read after the row lock is granted.

    In a plain `SELECT ..., clock_timestamp() ... FOR UPDATE` PostgreSQL computes the
    select list below the lock, before waiting for it (measured: a second stale after a
    one-second wait); selected from a FOR UPDATE subquery, it is computed afterwards."""
    assert isinstance(locked, Select)
    inner = locked.subquery()
    return select(*inner.c, server_time_ms())


# A run's events in order (streamed in batches, see `Statements.stream`).
def _events_of_run() -> Select[Any]:
    return (
        select(
            events.c.sequence,
            events.c.type,
            events.c.payload_json,
            events.c.prior_hash,
            events.c.event_hash,
            events.c.recorded_at,
        )
        .where(events.c.run_id == bindparam("run_id"))
        .order_by(events.c.sequence)
    )


# name -> factory(dialect name) of a Core statement with named bind parameters (the run
# listings, one per filter shape, are built from their names: `sql_reads.listing_of`)
STATEMENTS: Final[Mapping[str, Callable[[str], ClauseElement]]] = MappingProxyType(
    {
        "advisory_lock": lambda _: select(func.pg_advisory_xact_lock(bindparam("key"))),
        **APPEND_STATEMENTS,
        **READ_STATEMENTS,
        "events_of_run": lambda _: _events_of_run(),
        # The same in pages of `limit` rows, keyed on the primary key: the first page, then the
        # rows after the last sequence seen. A short chain is one round trip on a plain cursor
        # (a server-side cursor on PostgreSQL costs four), a long one is never held whole.
        "events_of_run_page": lambda _: _events_of_run().limit(bindparam("limit")),
        "events_of_run_after": lambda _: (
            _events_of_run().where(events.c.sequence > bindparam("after")).limit(bindparam("limit"))
        ),
        "head": lambda _: select(*_HEAD_COLUMNS).where(_RUN),
        "head_for_update": lambda _: select(*_HEAD_COLUMNS).where(_RUN).with_for_update(),
        "operation": lambda _: select(*_OPERATION_COLUMNS).where(_OPERATION),
        "operation_for_update": lambda _: (
            select(*_OPERATION_COLUMNS).where(_OPERATION).with_for_update()
        ),
        # the same rows with the lease time of the database server's clock (PostgreSQL without
        # an explicit clock), so that it costs no extra round trip
        "head_for_update_timed": lambda _: _timed(
            select(*_HEAD_COLUMNS).where(_RUN).with_for_update()
        ),
        "operation_timed": lambda _: _timed(select(*_OPERATION_COLUMNS).where(_OPERATION)),
        "operation_for_update_timed": lambda _: _timed(
            select(*_OPERATION_COLUMNS).where(_OPERATION).with_for_update()
        ),
        # Receipts of an operation id, driven by the operation-id index: the run's lookup key
        # comes from a correlated lookup by primary key, NULL for runs of another root or stage
        # (the caller drops those). With the root and stage in a WHERE/EXISTS instead, the
        # planners drive the query from the runs of that root and stage — a scan that made
        # start_run slower as runs accumulated (PostgreSQL: 2 ms at 100 runs, 13 ms at 10,000).
        "start_receipts": lambda _: select(
            operations.c.run_id,
            operations.c.kind,
            operations.c.state,
            operations.c.outcome_json,
            select(runs.c.lookup_key)
            .where(
                runs.c.run_id == operations.c.run_id,
                runs.c.root_hash == bindparam("root_hash"),
                runs.c.stage == bindparam("stage"),
            )
            .scalar_subquery(),
        ).where(operations.c.operation_id == bindparam("operation_id")),
        "run_by_key": lambda _: select(runs.c.run_id, runs.c.projection_json).where(
            runs.c.root_hash == bindparam("root_hash"),
            runs.c.stage == bindparam("stage"),
            runs.c.lookup_key == bindparam("lookup_key"),
        ),
        "rekey_run": lambda _: update(runs).where(_RUN).values(lookup_key=bindparam("lookup_key")),
        "bind_change": lambda _: (
            update(runs)
            .where(_RUN)
            .values(
                lookup_key=bindparam("lookup_key"),
                change_name=bindparam("change_name"),
                provisional_key=None,
            )
        ),
        "binding": lambda _: select(
            delivery_bindings.c.receipt_hash,
            delivery_bindings.c.approval_revision,
            delivery_bindings.c.contract_hash,
            delivery_bindings.c.record_hash,
        ).where(
            delivery_bindings.c.run_id == bindparam("run_id"),
            delivery_bindings.c.gate == bindparam("gate"),
            delivery_bindings.c.revision == bindparam("revision"),
        ),
        "insert_binding": lambda _: delivery_bindings.insert().values(
            run_id=bindparam("run_id"),
            gate=bindparam("gate"),
            revision=bindparam("revision"),
            receipt_hash=bindparam("receipt_hash"),
            approval_revision=bindparam("approval_revision"),
            contract_hash=bindparam("contract_hash"),
            record_hash=bindparam("record_hash"),
            operation_id=bindparam("operation_id"),
        ),
        "insert_lease": lambda _: operations.insert().values(
            run_id=bindparam("run_id"),
            operation_id=bindparam("operation_id"),
            kind=literal(KIND_LEASE),
            state=literal(RUNNING),
            lease_token=bindparam("lease_token"),
            lease_expires_at=bindparam("lease_expires_at"),
            lease_fence=bindparam("lease_fence"),
        ),
        "restart_lease": lambda _: (
            update(operations)
            .where(_OPERATION)
            .values(
                state=RUNNING,
                outcome_json=None,
                lease_token=bindparam("lease_token"),
                lease_expires_at=bindparam("lease_expires_at"),
                lease_fence=bindparam("lease_fence"),
            )
        ),
        "renew_lease": lambda _: (
            update(operations)
            .where(_OPERATION, operations.c.lease_token == bindparam("token"))
            .values(lease_expires_at=bindparam("lease_expires_at"))
        ),
        "finish_lease": lambda _: (
            update(operations)
            .where(
                _OPERATION,
                operations.c.state == RUNNING,
                operations.c.lease_token == bindparam("token"),
            )
            .values(
                state=bindparam("new_state"),
                outcome_json=bindparam("outcome_json"),
                lease_token=None,
                lease_expires_at=None,
            )
        ),
        "expire_lease": lambda _: (
            update(operations)
            .where(
                _OPERATION,
                operations.c.state == RUNNING,
                operations.c.lease_expires_at < bindparam("now"),
            )
            .values(state=INTERRUPTED, lease_token=None, lease_expires_at=None)
        ),
        "expire_leases": lambda _: (
            update(operations)
            .where(operations.c.state == RUNNING, operations.c.lease_expires_at < bindparam("now"))
            .values(state=INTERRUPTED, lease_token=None, lease_expires_at=None)
        ),
        # every row is judged at the server's time when it is reached (and re-judged after
        # waiting for a holder's row lock, so a lease renewed meanwhile stays live)
        "expire_leases_timed": lambda _: (
            update(operations)
            .where(operations.c.state == RUNNING, operations.c.lease_expires_at < server_time_ms())
            .values(state=INTERRUPTED, lease_token=None, lease_expires_at=None)
        ),
        "owner_of_key": lambda _: select(runs.c.run_id).where(
            runs.c.root_hash == bindparam("root_hash"),
            runs.c.stage == bindparam("stage"),
            runs.c.lookup_key == bindparam("lookup_key"),
        ),
        "verify_columns": lambda _: select(
            runs.c.projection_json,
            runs.c.root_hash,
            runs.c.stage,
            runs.c.change_name,
            runs.c.provisional_key,
            runs.c.state,
            runs.c.sequence,
            runs.c.event_hash,
            runs.c.delivery_revision,
            runs.c.terminal_tombstone,
        ).where(_RUN),
        "bindings_of_run": lambda _: select(
            delivery_bindings.c.gate,
            delivery_bindings.c.revision,
            delivery_bindings.c.receipt_hash,
            delivery_bindings.c.approval_revision,
            delivery_bindings.c.contract_hash,
            delivery_bindings.c.record_hash,
        ).where(delivery_bindings.c.run_id == bindparam("run_id")),
        "run_ids": lambda _: select(runs.c.run_id).order_by(runs.c.run_id),
        # receipts and leases of a run, checked against its chain by verify_integrity
        "operations_of_run": lambda _: (
            select(operations.c.operation_id, *_OPERATION_COLUMNS)
            .where(operations.c.run_id == bindparam("run_id"))
            .order_by(operations.c.operation_id)
        ),
    }
)


@dataclass(frozen=True, slots=True)
class CompiledStatement:
    text: str
    positions: tuple[str, ...] | None  # parameter order for positional paramstyles
    constants: dict[str, Any]  # values the statement itself binds (e.g. state='committed')
    _pick: Callable[[Mapping[str, Any]], Any] | None = None  # positions, as one C call

    def arguments(self, params: Mapping[str, Any]) -> Any:
        values = {**self.constants, **params} if self.constants else params
        if self._pick is None:
            return values
        return self._pick(values)


_stream_ids = itertools.count()
# (dialect, driver, paramstyle, schema map) -> statement name -> compiled statement
_cache: dict[tuple[str, str, str, SchemaMap], dict[str, CompiledStatement]] = {}
_cache_lock: Final = threading.Lock()


def _compiled_statements(dialect: Dialect, schema_map: SchemaMap) -> dict[str, CompiledStatement]:
    """The statements compiled so far for one dialect and schema map (filled on use)."""
    key = (dialect.name, str(dialect.driver), str(dialect.paramstyle), schema_map)
    statements = _cache.get(key)
    if statements is None:
        with _cache_lock:
            statements = _cache.setdefault(key, {})
    return statements


def _compiled(dialect: Dialect, name: str, schema_map: SchemaMap) -> CompiledStatement:
    statements = _compiled_statements(dialect, schema_map)
    cached = statements.get(name)
    if cached is None:
        cached = statements[name] = _compile(dialect, name, schema_map)
    return cached


def _picker(positions: tuple[str, ...] | None) -> Callable[[Mapping[str, Any]], Any] | None:
    """The positional arguments' tuple from a mapping of named values."""
    if positions is None:
        return None
    if not positions:
        return lambda _values: ()
    if len(positions) == 1:
        (only,) = positions
        return lambda values: (values[only],)
    return operator.itemgetter(*positions)


def _compile(dialect: Dialect, name: str, schema_map: SchemaMap) -> CompiledStatement:
    factory = STATEMENTS.get(name)
    statement = listing_of(name) if factory is None else factory(dialect.name)
    options: dict[str, Any] = {}
    if schema_map:
        options = {"schema_translate_map": dict(schema_map), "render_schema_translate": True}
    compiled: Any = statement.compile(dialect=dialect, **options)
    positions = tuple(compiled.positiontup or ()) if compiled.positional else None
    # binds that carry their own value (literals, `values(x=None)`), not caller parameters
    constants = {
        name: bind.effective_value for name, bind in compiled.binds.items() if not bind.required
    }
    return CompiledStatement(compiled.string, positions, constants, _picker(positions))


class _ObservedCursor:
    """The cursor API the statements use, run through the `Connection` (its cursor
    events fire) instead of on the DB-API cursor."""

    __slots__ = ("_connection", "_result")

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._result: Any = None

    def execute(self, text: str, arguments: Any = None) -> None:
        self._result = self._connection.exec_driver_sql(text, arguments)

    def fetchone(self) -> Any:
        return self._result.fetchone()

    def fetchall(self) -> Any:
        return self._result.fetchall()

    @property
    def rowcount(self) -> int:
        return int(self._result.rowcount)


class Statements:
    """Executes the named statements on one SQLAlchemy connection's DB-API cursor."""

    __slots__ = ("_compiled", "_cursor", "_dialect", "_raw", "_schema_map", "writes")

    def __init__(self, connection: Connection, schema: str | None = None) -> None:
        """`schema`: where cadence-store's tables are (the connection's own statements,
        a host's, are not translated)."""
        raw = connection.connection.dbapi_connection
        assert raw is not None
        self._bind(connection.dialect, raw, schema)
        dispatch = connection.engine.dispatch
        if dispatch.before_cursor_execute or dispatch.after_cursor_execute:
            # a host listens to the engine's statements: let it see the store's too
            self._cursor = _ObservedCursor(connection)

    @classmethod
    def on_dbapi(cls, dialect: Dialect, raw: Any, schema: str | None = None) -> Statements:
        """Statements on a DB-API connection checked out of the pool (no `Connection`)."""
        statements = cls.__new__(cls)
        statements._bind(dialect, raw, schema)
        return statements

    def _bind(self, dialect: Dialect, raw: Any, schema: str | None) -> None:
        self._dialect = dialect
        if schema is None and dialect.name == "postgresql":
            # named, never left to the connection's search_path: a pooled server connection
            # may carry another client's `SET search_path`
            schema = DEFAULT_PG_SCHEMA
        self._schema_map: SchemaMap = () if schema is None else ((None, schema),)
        self._compiled = _compiled_statements(dialect, self._schema_map)
        self._raw = raw
        self._cursor = raw.cursor()
        self.writes = 0  # rows written so far (`journal_write` reads it)

    @property
    def dialect_name(self) -> str:
        return str(self._dialect.name)

    def begin_immediate(self) -> None:
        """SQLite: begin a transaction holding the write lock (see `engine.begin_immediate`)."""
        self._cursor.execute("BEGIN IMMEDIATE")

    def _run(self, name: str, params: Mapping[str, Any]) -> Any:
        statement = self._compiled.get(name) or _compiled(self._dialect, name, self._schema_map)
        self._cursor.execute(statement.text, statement.arguments(params))
        return self._cursor

    def one(self, name: str, **params: Any) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self._run(name, params).fetchone()
        return row

    def all(self, name: str, **params: Any) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = self._run(name, params).fetchall()
        return rows

    def row(self, name: str, row_type: Callable[..., Row], **params: Any) -> Row | None:
        """`one`, as the statement's row type (`sql_rows.ROW_TYPES`)."""
        found = self._run(name, params).fetchone()
        return None if found is None else row_type(*found)

    def rows(self, name: str, row_type: Callable[..., Row], **params: Any) -> list[Row]:
        """`all`, as the statement's row type (`sql_rows.ROW_TYPES`)."""
        return [row_type(*found) for found in self._run(name, params).fetchall()]

    def write(self, name: str, **params: Any) -> int:
        count: int = self._run(name, params).rowcount
        if count > 0:
            self.writes += count
        return count

    def stream(self, name: str, batch: int, **params: Any) -> Iterator[tuple[Any, ...]]:
        """Rows in batches of `batch`, never the whole result at once (a server-side
        cursor on PostgreSQL, whose client cursors would fetch everything)."""
        statement = _compiled(self._dialect, name, self._schema_map)
        args = statement.arguments(params)
        raw = self._raw
        if self._dialect.name == "postgresql":
            # a named cursor is server-side (psycopg, and its async adapter: name positional)
            cursor = raw.cursor(f"cadence_stream_{next(_stream_ids)}")
        elif self._dialect.is_async:
            # aiosqlite's adapter would otherwise fetch the whole result on execute
            cursor = raw.cursor(server_side=True)
        else:
            cursor = raw.cursor()
        try:
            cursor.execute(statement.text, args)
            while rows := cursor.fetchmany(batch):
                yield from rows
        finally:
            cursor.close()
