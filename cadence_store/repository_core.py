"""The ground `RunRepository` stands on: session, clock, locks, and one run's chain.

See `repository.py` for the lock order every path follows.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Self

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from .engine import (
    begin_immediate,
    begins_immediate,
    driver_in_transaction,
    is_postgresql,
    is_sqlite,
)
from .errors import (
    CadenceStoreError,
    InvalidInputError,
    JournalIntegrityError,
    OperationConflictError,
    RunNotFoundError,
)
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
from .sql_rows import HeadRow, OperationRow, TimedOperationRow

Clock = Callable[[], int]

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
class _RunHead:
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


class ExpiryNeeded(CadenceStoreError):
    """`inspect_operation(expire=False)` found an expired lease: only the primary can
    mark it interrupted (`RunStore` then asks the primary; callers never see it)."""

    default_code = "operation-expiry-needed"


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

    def _setup(
        self,
        session: Session | None,
        session_factory: Callable[[], Session] | None,
        connection: Connection | None,
        root_hash: str | None,
        clock: Clock | None,
        schema: str | None,
    ) -> None:
        self._session = session
        self._session_factory = session_factory
        self._own_connection = connection
        self.root_hash = None if root_hash is None else require_root_hash(root_hash)
        require_clock(clock)
        self._clock: Clock = system_clock if clock is None else clock
        self._explicit_clock = clock is not None
        self.schema = require_schema_name(schema)
        self._ready = False

    @property
    def session(self) -> Session:
        if self._session is None:
            assert self._session_factory is not None
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
        connection = self._connection()
        if is_sqlite(connection) and not begins_immediate(connection.engine):
            raw = connection.connection.dbapi_connection
            if raw is not None and not driver_in_transaction(raw):
                begin_immediate(connection)
        return Statements(connection, self.schema)

    def _read_statements(self) -> Statements:
        return Statements(self._connection(), self.schema)

    def _now(self) -> int:
        now = self._clock()
        if isinstance(now, bool) or not isinstance(now, int) or not is_safe_integer(now):
            raise InvalidInputError("invalid-clock", "clock() must return int milliseconds")
        return now

    def _server_clock(self) -> bool:
        """Whether lease time is the database server's clock: on PostgreSQL, whose
        callers run on many machines, unless the caller gave its own `clock=`."""
        return not self._explicit_clock and is_postgresql(self._connection())

    def _require_root(self) -> str:
        if self.root_hash is None:
            raise InvalidInputError("invalid-root-hash")
        return self.root_hash

    def _advisory_locks(self, sql: Statements, keys: Iterable[str]) -> None:
        if is_postgresql(self._connection()):
            for key in sorted(set(keys)):
                sql.one("advisory_lock", key=_advisory_key(key))

    @staticmethod
    def _head(sql: Statements, run_id: str, *, lock: bool) -> _RunHead | None:
        row = sql.row("head_for_update" if lock else "head", HeadRow, run_id=run_id)
        return None if row is None else _RunHead(*row)

    def _require_head(self, sql: Statements, run_id: str, *, lock: bool) -> _RunHead:
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
    def _append(
        sql: Statements, head: _RunHead, type_: str, payload: Document
    ) -> tuple[Document, str]:
        """Append one event to a locked run: O(1), the stored projection is the base."""
        current = head.document()
        if current.get("sequence") != head.sequence or current.get("eventHash") != head.event_hash:
            raise JournalIntegrityError(
                "run-projection-integrity-mismatch", run_id=head.run_id, sequence=head.sequence
            )
        sequence = head.sequence + 1
        event_hash = hash_event(sequence, type_, payload, head.event_hash)
        document = apply_event(current, sequence, type_, payload, event_hash)
        assert document is not None
        projection_json = js_stringify(document)
        sql.write(
            "insert_event",
            run_id=head.run_id,
            sequence=sequence,
            type=type_,
            payload_json=js_stringify(payload),
            prior_hash=head.event_hash,
            event_hash=event_hash,
        )
        sql.write(
            "advance_run",
            run_id=head.run_id,
            state=document["state"],
            sequence=sequence,
            event_hash=event_hash,
            delivery_revision=document.get("deliveryRevision"),
            projection_json=projection_json,
            terminal_tombstone=document.get("terminal"),
        )
        return document, projection_json
