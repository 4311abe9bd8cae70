"""The ground `RunRepository` stands on: session, clock, locks, and one run's chain.

See `repository.py` for the lock order every path follows.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, ParamSpec, Self, TypeVar

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from .engine import (
    begin_immediate,
    begins_immediate,
    driver_in_transaction,
    is_sqlite,
)
from .errors import (
    CadenceStoreError,
    InvalidInputError,
    JournalIntegrityError,
    OperationConflictError,
    RunNotFoundError,
    StoreUnavailableError,
)
from .failures import WRITE, coded
from .journal import RunProjection, apply_event, hash_event, js_stringify
from .journal.documents import Document, parse_document, stored_projection
from .journal.validation import is_safe_integer, require_clock, require_root_hash
from .journal.vocabulary import (
    COMMITTED,
    KIND_LEASE,
    KIND_START,
    STATE_TRANSITIONED,
)
from .schema import require_schema_name
from .shape import assert_store_ready
from .sql import Statements
from .sql_rows import AppendedRow, HeadRow, OperationRow, TimedOperationRow
from .telemetry import note_appended

Clock = Callable[[], int]
P = ParamSpec("P")
R = TypeVar("R")

# The operation kind of each journal call's receipt (its event type, or "start").
START: Final = KIND_START
TRANSITIONED: Final = STATE_TRANSITIONED
LEASE: Final = KIND_LEASE
EVENT_BATCH: Final = 1000


def system_clock() -> int:
    return time.time_ns() // 1_000_000


def _advisory_key(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big", signed=True)


def expiry(now: int, ttl: int) -> int:
    """`now + ttl`, refused past 2**53 - 1 (cadence 1.x, JavaScript, cannot hold it)."""
    expires_at = now + ttl
    if not is_safe_integer(expires_at):
        raise InvalidInputError("invalid-lease-ttl", "the lease would expire past 2**53 - 1 ms")
    return expires_at


@dataclass(slots=True)
class RunHead:
    run_id: str
    root_hash: str
    stage: str
    projection_json: str
    sequence: int
    event_hash: str
    _document: Document | None = None

    def document(self) -> Document:
        """The stored projection, parsed once (callers must not modify it)."""
        if self._document is None:
            self._document = parse_document(self.projection_json)
        return self._document


class _NextEvent:
    """An event computed from a locked run's head, and the run's projection after it."""

    __slots__ = ("document", "event_hash", "head", "payload_json", "projection_json", "type")

    def __init__(
        self, head: RunHead, type_: str, payload_json: str, event_hash: str, document: Document
    ) -> None:
        self.head = head
        self.type = type_
        self.payload_json = payload_json
        self.event_hash = event_hash
        self.document = document
        self.projection_json = js_stringify(document)

    def parameters(self) -> dict[str, Any]:
        """The bound values of the append's statements (`sql.py`), by name."""
        head, document = self.head, self.document
        return {
            "run_id": head.run_id,
            "prior_sequence": head.sequence,
            "prior_hash": head.event_hash,
            "sequence": head.sequence + 1,
            "type": self.type,
            "payload_json": self.payload_json,
            "event_hash": self.event_hash,
            "state": document["state"],
            "delivery_revision": document.get("deliveryRevision"),
            "projection_json": self.projection_json,
            "terminal_tombstone": document.get("terminal"),
        }


class ExpiryNeeded(CadenceStoreError):
    """`inspect_operation(expire=False)` found an expired lease: only the primary can
    mark it interrupted (`RunStore` then asks the primary; callers never see it)."""

    default_code = "operation-expiry-needed"


def journal_write(method: Callable[P, R]) -> Callable[P, R]:
    """`coded(WRITE)` for a journal call that writes, which also marks its transaction
    unfinished when the call fails after it wrote a row: SQLite keeps
    the statements before a failed one, so a unit of work must not commit it."""
    guarded = coded(WRITE)(method)

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        repository, *_ = args  # the method's self
        assert isinstance(repository, RepositoryCore)
        statements = repository._statements
        before = 0 if statements is None else statements.writes
        try:
            return guarded(*args, **kwargs)
        except BaseException:
            statements = repository._statements
            if statements is not None and statements.writes != before:
                repository.left_unfinished = True
            raise

    return wrapper


class RepositoryCore:
    """What every journal call of `RunRepository` stands on: its session or connection,
    the clock, the locks, and reading, replaying and appending to one run's chain."""

    def __init__(
        self,
        session: Session,
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
        schema: str | None = None,
    ) -> None:
        """`schema`: the PostgreSQL schema holding cadence-store's tables (the session's
        other statements, a host's own tables, are left as they are)."""
        self._setup(session, None, None, root_hash, clock, schema)

    @classmethod
    def on_connection(
        cls,
        connection: Connection,
        session_factory: Callable[[], Session],
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
        schema: str | None = None,
    ) -> Self:
        """A repository on a connection whose transaction its owner (a unit of work)
        manages; the `Session` is made only if someone asks for `.session`."""
        repository = cls.__new__(cls)
        repository._setup(None, session_factory, connection, root_hash, clock, schema)
        return repository

    @classmethod
    def on_statements(
        cls,
        statements: Statements,
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
        schema: str | None = None,
    ) -> Self:
        """A repository on a pooled DB-API connection's statements, in a transaction its
        owner (`direct_write`) has begun and will end, on a store already checked ready,
        with arguments that store checked. It has no `Session`: it serves calls that run
        no host code."""
        repository = cls.__new__(cls)
        repository._setup(None, None, None, root_hash, clock, schema, checked=True)
        repository._statements = statements
        repository._dialect_name = statements.dialect_name
        repository._ready = True
        return repository

    def _setup(
        self,
        session: Session | None,
        session_factory: Callable[[], Session] | None,
        connection: Connection | None,
        root_hash: str | None,
        clock: Clock | None,
        schema: str | None,
        *,
        checked: bool = False,
    ) -> None:
        """`checked`: the owner has validated `root_hash`, `clock` and `schema` already."""
        self._session = session
        self._session_factory = session_factory
        self._own_connection = connection
        if not checked:
            root_hash = None if root_hash is None else require_root_hash(root_hash)
            require_clock(clock)
            schema = require_schema_name(schema)
        self.root_hash = root_hash
        self._clock: Clock = system_clock if clock is None else clock
        self._explicit_clock = clock is not None
        self.schema = schema
        self._ready = False
        self._statements: Statements | None = None  # a DB-API connection's (direct writes)
        self._dialect_name: str | None = None
        # The run rows this transaction has locked, as it left them. Only a repository
        # that lives and dies with one transaction (on a unit of work's connection, or
        # RunStore's direct writes) keeps them: a host's session outlives its transactions.
        self._locked_heads: dict[str, RunHead] | None = None if session is not None else {}
        # a call failed after some of its writes (see `journal_write`): never commit this
        self.left_unfinished = False

    @property
    def session(self) -> Session:
        if self._session is None:
            if self._session_factory is None:
                raise StoreUnavailableError(
                    "unit-of-work-not-active", "this repository serves no host session"
                )
            self._session = self._session_factory()
        return self._session

    # -- connections and locks -------------------------------------------------------

    def _connection(self) -> Connection:
        connection = (
            self._own_connection if self._own_connection is not None else self.session.connection()
        )
        if not self._ready:
            # once per engine: a store not at head, or drifted from the models, is refused
            assert_store_ready(connection, self.schema)
            self._ready = True
        return connection

    def _write_statements(self) -> Statements:
        """Statements on the session's connection, in a transaction fit for writing.

        On SQLite a transaction that has not touched the database yet is begun IMMEDIATE
        here (unless the engine already does so), so that a concurrent writer waits
        instead of failing the read-then-write halfway.
        """
        if self._statements is not None:
            return self._statements
        connection = self._connection()
        if is_sqlite(connection) and not begins_immediate(connection.engine):
            raw = connection.connection.dbapi_connection
            if raw is not None and not driver_in_transaction(raw):
                begin_immediate(connection)
        statements = Statements(connection, self.schema)
        if self._own_connection is not None:
            # a unit of work's connection and transaction are this repository's for life
            self._statements = statements
        return statements

    def _read_statements(self) -> Statements:
        if self._statements is not None:
            return self._statements
        return Statements(self._connection(), self.schema)

    def _on_postgresql(self) -> bool:
        if self._dialect_name is None:
            self._dialect_name = self._connection().dialect.name
        return self._dialect_name == "postgresql"

    def _now(self) -> int:
        now = self._clock()
        if isinstance(now, bool) or not isinstance(now, int) or not is_safe_integer(now):
            raise InvalidInputError("invalid-clock", "clock() must return int milliseconds")
        return now

    def _append_now(self) -> int | None:
        """The time an append records (`sql_append.append_time`): None lets the
        PostgreSQL server's clock stamp it in the same statement, as lease time does."""
        return None if self._server_clock() else self._now()

    def _server_clock(self) -> bool:
        """Whether lease time is the database server's clock: on PostgreSQL, whose
        callers run on many machines, unless the caller gave its own `clock=`."""
        return not self._explicit_clock and self._on_postgresql()

    def _require_root(self) -> str:
        if self.root_hash is None:
            raise InvalidInputError("invalid-root-hash")
        return self.root_hash

    def _advisory_locks(self, sql: Statements, keys: Iterable[str]) -> None:
        if self._on_postgresql():
            for key in sorted(set(keys)):
                sql.one("advisory_lock", key=_advisory_key(key))

    def _head(self, sql: Statements, run_id: str, *, lock: bool) -> RunHead | None:
        locked = self._locked_heads
        if lock and locked is not None:
            cached = locked.get(run_id)
            if cached is not None:
                return cached
        row = sql.row("head_for_update" if lock else "head", HeadRow, run_id=run_id)
        if row is None:
            return None
        head = RunHead(*row)
        if lock and locked is not None:
            locked[run_id] = head
        return head

    def _require_head(self, sql: Statements, run_id: str, *, lock: bool) -> RunHead:
        head = self._head(sql, run_id, lock=lock)
        if head is None:
            raise RunNotFoundError("run-not-found")
        return head

    @staticmethod
    def _operation(
        sql: Statements, run_id: str, operation_id: str, *, lock: bool = False
    ) -> OperationRow | None:
        return sql.row(
            "operation_for_update" if lock else "operation",
            OperationRow,
            run_id=run_id,
            operation_id=operation_id,
        )

    def _timed_operation(
        self, sql: Statements, run_id: str, operation_id: str, *, lock: bool
    ) -> tuple[OperationRow | TimedOperationRow | None, int | None]:
        """The operation row and the lease time to judge it by: the server's clock, read
        in the same statement (after the row lock), or the caller's clock."""
        if not self._server_clock():
            row = self._operation(sql, run_id, operation_id, lock=lock)
            return row, None if row is None else self._now()
        timed = sql.row(
            "operation_for_update_timed" if lock else "operation_timed",
            TimedOperationRow,
            run_id=run_id,
            operation_id=operation_id,
        )
        return (None, None) if timed is None else (timed, int(timed.now))

    # -- receipts ----------------------------------------------------------------------

    def _replay(
        self, sql: Statements, run_id: str, operation_id: str, kind: str
    ) -> RunProjection | None:
        row = self._operation(sql, run_id, operation_id)
        if row is not None and row.kind != kind:
            raise OperationConflictError("operation-id-conflict")
        if row is None or row.state != COMMITTED or row.outcome_json is None:
            return None
        return stored_projection(row.outcome_json)

    @staticmethod
    def _record(sql: Statements, run_id: str, operation_id: str, kind: str, outcome: str) -> None:
        sql.write(
            "upsert_receipt",
            run_id=run_id,
            operation_id=operation_id,
            kind=kind,
            outcome_json=outcome,
        )

    # -- the chain ---------------------------------------------------------------------

    @staticmethod
    def _next_event(head: RunHead, type_: str, payload: Document) -> _NextEvent:
        """The event that follows a locked run's head, and the run after it: O(1), the
        stored projection is the base. Writes nothing."""
        current = head.document()
        if current.get("sequence") != head.sequence or current.get("eventHash") != head.event_hash:
            raise JournalIntegrityError(
                "run-projection-integrity-mismatch", run_id=head.run_id, sequence=head.sequence
            )
        sequence = head.sequence + 1
        event_hash = hash_event(sequence, type_, payload, head.event_hash)
        document = apply_event(current, sequence, type_, payload, event_hash)
        assert document is not None
        return _NextEvent(head, type_, js_stringify(payload), event_hash, document)

    def _append(
        self, sql: Statements, head: RunHead, type_: str, payload: Document
    ) -> tuple[Document, str]:
        """Append one event to a locked run (its receipt is the caller's to record)."""
        event = self._next_event(head, type_, payload)
        params = event.parameters()
        params["now"] = self._append_now()
        if sql.write("advance_run", **params) != 1:
            # the run row is not the head the event was computed from: writing the event
            # would fork the chain
            raise JournalIntegrityError(
                "run-projection-integrity-mismatch", run_id=head.run_id, sequence=head.sequence
            )
        sql.write("insert_event", **params)
        note_appended()
        self._remember(event)
        return event.document, event.projection_json

    def _append_recorded(self, sql: Statements, event: _NextEvent, operation_id: str) -> bool:
        """Write `event`, the run's new head and the committed receipt of `operation_id`
        (kind: the event's type), unless the operation id has a row already or the head
        moved: then nothing is written, and False says so."""
        params = event.parameters()
        params["operation_id"] = operation_id
        params["kind"] = event.type
        params["outcome_json"] = event.projection_json
        params["now"] = self._append_now()
        if sql.dialect_name == "postgresql":
            found = sql.row("append_recorded", AppendedRow, **params)
            appended = found is not None and found.advanced == 1
        else:
            appended = sql.write("advance_unrecorded", **params) == 1
            if appended:
                sql.write("insert_event", **params)
                sql.write("insert_receipt", **params)
        if appended:
            note_appended()
            self._remember(event)
        return appended

    def _remember(self, event: _NextEvent) -> None:
        """Keep the run's new head for the rest of this transaction (which holds its lock)."""
        if self._locked_heads is not None:
            head = event.head
            self._locked_heads[head.run_id] = RunHead(
                head.run_id,
                head.root_hash,
                head.stage,
                event.projection_json,
                head.sequence + 1,
                event.event_hash,
                event.document,
            )

    def _forget_head(self, run_id: str) -> None:
        if self._locked_heads is not None:
            self._locked_heads.pop(run_id, None)
