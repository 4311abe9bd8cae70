"""The ground every part of `RunRepository` stands on: `JournalAccess` (the transaction's
statements, the clock, the locks, a run's head, an operation's row and receipts), and the
values its parts share (an event computed after a head, a transition's payload).

Lock order, the same on every path so that no two paths can deadlock:

1. PostgreSQL advisory transaction locks on run lookup keys (and start operation ids),
   taken in sorted order — they serialise run creation per (root_hash, stage, key);
2. run rows (`SELECT ... FOR UPDATE`), one run per call;
3. operation rows (`SELECT ... FOR UPDATE`) for lease checks.

On SQLite the transaction itself is the lock (BEGIN IMMEDIATE), and `FOR UPDATE` renders
as nothing.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Concatenate, Final, ParamSpec, Protocol, TypeVar

from ..errors import (
    CadenceStoreError,
    InvalidInputError,
    JournalIntegrityError,
    OperationConflictError,
)
from ..journal import RunProjection
from ..journal.documents import Document, stored_projection
from ..journal.projection import event_after
from ..journal.validation import is_safe_integer
from ..journal.vocabulary import (
    COMMITTED,
    KIND_LEASE,
    KIND_START,
    STATE_TRANSITIONED,
)
from ..storage.append_statements import UPSERT_RECEIPT
from ..storage.backends import Backend
from ..storage.failures import WRITE, database_errors
from ..storage.rows import HeadRow, OperationRow
from ..storage.run_statements import (
    ADVISORY_LOCK,
    HEAD,
    HEAD_FOR_UPDATE,
    OPERATION,
    OPERATION_FOR_UPDATE,
    OPERATION_FOR_UPDATE_TIMED,
    OPERATION_TIMED,
)
from ..storage.statements import Statements
from .archived import missing_run
from .transaction import JournalTransaction, RunHead

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
class NextEvent:
    """An event computed from a locked run's head, and the run's projection after it."""

    head: RunHead
    type: str
    payload_json: str
    event_hash: str
    document: Document
    projection_json: str  # `document`'s JSON

    @classmethod
    def after(cls, head: RunHead, type_: str, payload: Document) -> NextEvent:
        """The event of `type_` with `payload` that follows a locked run's `head`, and
        the run after it: O(1), the stored projection is the base. Writes nothing (a
        batch's plan)."""
        payload_json, event_hash, document, projection_json = event_after(
            head.document(), head.run_id, head.sequence + 1, type_, payload, head.event_hash
        )
        return cls(head, type_, payload_json, event_hash, document, projection_json)

    def next_head(self) -> RunHead:
        """The run's head once this event is appended."""
        head = self.head
        return RunHead(
            head.run_id,
            head.root_hash,
            head.stage,
            self.projection_json,
            head.sequence + 1,
            self.event_hash,
            self.document,
        )

    def parameters(self) -> dict[str, Any]:
        """The bound values of the append's statements (`storage/statements.py`), by name."""
        return append_values(
            self.head,
            self.type,
            self.payload_json,
            self.event_hash,
            self.document,
            self.projection_json,
        )


def append_values(
    head: RunHead,
    type_: str,
    payload_json: str,
    event_hash: str,
    document: Document,
    projection_json: str,
) -> dict[str, Any]:
    """The bound values of an append's statements (`storage/append_statements.py`), by
    name: the event after `head` and the run's row after it (`document`, its JSON)."""
    return {
        "run_id": head.run_id,
        "prior_sequence": head.sequence,
        "prior_hash": head.event_hash,
        "sequence": head.sequence + 1,
        "type": type_,
        "payload_json": payload_json,
        "event_hash": event_hash,
        "state": document["state"],
        "delivery_revision": document.get("deliveryRevision"),
        "projection_json": projection_json,
        "terminal_tombstone": document.get("terminal"),
    }


class ExpiryNeeded(CadenceStoreError):
    """`inspect_operation(expire=False)` found an expired lease: only the primary can
    mark it interrupted (`RunStore` then asks the primary; callers never see it)."""

    default_code = "operation-expiry-needed"


def transition_payload(current: Document, to: str, code: str | None) -> Document:
    """A `state-transitioned` event's payload from the state of a run's projection
    `current` to `to`."""
    payload: Document = {"from": current.get("state"), "to": to}
    if code is not None:
        payload["code"] = code
    return payload


class InTransaction(Protocol):
    """What a journal call's error boundary (`journal_write`) needs of its object."""

    @property
    def transaction(self) -> JournalTransaction: ...


T = TypeVar("T", bound=InTransaction)


def journal_write(method: Callable[Concatenate[T, P], R]) -> Callable[Concatenate[T, P], R]:
    """`coded(WRITE)` for a journal call that writes, which also tells its transaction
    when the call failed (after writing a row, or at a statement): a unit of work must
    not commit what is left of it."""
    guard = database_errors(WRITE)  # `coded(WRITE)`, in the same frame

    @functools.wraps(method)
    def wrapper(journal: T, /, *args: P.args, **kwargs: P.kwargs) -> R:
        transaction = journal.transaction
        before = transaction.writes
        try:
            return method(journal, *args, **kwargs)
        except BaseException as error:
            # judged by the failure itself (a database error, or one coded from it)
            transaction.note_failure(error, wrote=transaction.writes != before)
            guard.raise_coded(error)
            raise

    return wrapper


class JournalAccess:
    """What every part of `RunRepository` stands on: one transaction's statements, the
    clock, the locks, and the rows a call reads first (a run's head, an operation's row,
    a receipt)."""

    __slots__ = ("_clock", "_explicit_clock", "transaction")

    def __init__(self, transaction: JournalTransaction, clock: Clock | None) -> None:
        """`clock`: the caller's (checked by `RunRepository`); None: the system's, or on
        PostgreSQL the server's."""
        self.transaction = transaction
        self._clock: Clock = system_clock if clock is None else clock
        self._explicit_clock = clock is not None

    # -- statements, time and locks --------------------------------------------------

    def write_statements(self) -> Statements:
        """Statements in a transaction fit for writing (see `JournalTransaction`)."""
        return self.transaction.statements(write=True)

    def read_statements(self) -> Statements:
        """Statements for a read (no write lock taken on a host's SQLite session)."""
        return self.transaction.statements(write=False)

    def now(self) -> int:
        """The clock's milliseconds (a caller's clock is checked for a safe integer)."""
        now = self._clock()
        if self._explicit_clock and (
            isinstance(now, bool) or not isinstance(now, int) or not is_safe_integer(now)
        ):
            raise InvalidInputError("invalid-clock", "clock() must return int milliseconds")
        return now

    def append_now(self, profile: Backend | None = None) -> int | None:
        """The time an append records: None lets the PostgreSQL server's clock stamp it
        in the same statement, as lease time does. `profile`: the transaction's, where
        the caller has it at hand."""
        if self._explicit_clock:
            return self.now()
        if profile is None:
            profile = self.transaction.profile
        # the system clock (`system_clock`, written out: its milliseconds are a safe
        # integer), unless the server's
        return None if profile.server_clock else time.time_ns() // 1_000_000

    def server_clock(self) -> bool:
        """Whether lease time is the database server's clock: on PostgreSQL, whose
        callers run on many machines, unless the caller gave its own `clock=`."""
        return not self._explicit_clock and self.transaction.profile.server_clock

    def advisory_locks(self, sql: Statements, keys: Iterable[str]) -> None:
        """PostgreSQL's advisory transaction locks on `keys`, in sorted order (the first
        step of the lock order, above); nothing on SQLite."""
        if self.transaction.profile.advisory_locks:
            for key in sorted(set(keys)):
                sql.one(ADVISORY_LOCK, key=_advisory_key(key))

    # -- run heads ---------------------------------------------------------------------

    def head(self, sql: Statements, run_id: str, *, lock: bool) -> RunHead | None:
        """The run's head (None: no such run); `lock`: locked for this transaction (a
        head it locked already is not read again)."""
        if lock:
            kept = self.transaction.kept_head(run_id)
            if kept is not None:
                return kept
        return self.head_of(
            run_id, sql.one(HEAD_FOR_UPDATE if lock else HEAD, run_id=run_id), keep=lock
        )

    def head_of(self, run_id: str, row: HeadRow | None, *, keep: bool) -> RunHead | None:
        """The head in `row` (read for `run_id`); `keep`: locked, kept for the rest of
        this transaction."""
        if row is None:
            return None
        if row.run_id != run_id:
            # a row of another run answered (a connection shared across a fork, say):
            # computing the next event from it would write into the wrong chain
            raise JournalIntegrityError(
                "run-projection-integrity-mismatch", run_id=run_id, sequence=row.sequence
            )
        head = RunHead(*row)
        if keep:
            self.transaction.keep_head(head)
        return head

    def require_head(self, sql: Statements, run_id: str, *, lock: bool) -> RunHead:
        """`head`, or `run-not-found` (`run-archived` for a run an archive deleted)."""
        head = self.head(sql, run_id, lock=lock)
        if head is None:
            raise missing_run(sql, run_id)
        return head

    def forget_head(self, run_id: str) -> None:
        """Read the run's head again at its next use (it moved under this transaction)."""
        self.transaction.forget_head(run_id)

    # -- operations and receipts ---------------------------------------------------------

    @staticmethod
    def operation(
        sql: Statements, run_id: str, operation_id: str, *, lock: bool = False
    ) -> OperationRow | None:
        """The row of `operation_id` (a receipt or a lease); `lock`: `FOR UPDATE`."""
        return sql.one(
            OPERATION_FOR_UPDATE if lock else OPERATION,
            run_id=run_id,
            operation_id=operation_id,
        )

    def timed_operation(
        self, sql: Statements, run_id: str, operation_id: str, *, lock: bool
    ) -> tuple[OperationRow | None, int | None]:
        """The operation row and the lease time to judge it by: the server's clock, read
        in the same statement (after the row lock), or the caller's clock."""
        if not self.server_clock():
            row = self.operation(sql, run_id, operation_id, lock=lock)
            return row, None if row is None else self.now()
        timed = sql.one(
            OPERATION_FOR_UPDATE_TIMED if lock else OPERATION_TIMED,
            run_id=run_id,
            operation_id=operation_id,
        )
        return (None, None) if timed is None else timed

    def replay(
        self, sql: Statements, run_id: str, operation_id: str, kind: str
    ) -> RunProjection | None:
        """The projection `operation_id`'s committed receipt recorded (a retried call
        replays it), or None; `operation-id-conflict` for a receipt of another `kind`."""
        row = self.operation(sql, run_id, operation_id)
        if row is not None and row.kind != kind:
            raise OperationConflictError("operation-id-conflict")
        if row is None or row.state != COMMITTED or row.outcome_json is None:
            return None
        return stored_projection(row.outcome_json)

    @staticmethod
    def record(
        sql: Statements, run_id: str, operation_id: str, kind: str, outcome: str, sequence: object
    ) -> None:
        """Upsert the committed receipt `outcome` (a projection's JSON; `sequence`: the
        one it names, which locates the receipt for verification; not an integer, as in a
        damaged stored projection: left unlocated, verification reads the text)."""
        sql.write(
            UPSERT_RECEIPT,
            run_id=run_id,
            operation_id=operation_id,
            kind=kind,
            outcome_json=outcome,
            sequence=sequence if type(sequence) is int else None,
        )
