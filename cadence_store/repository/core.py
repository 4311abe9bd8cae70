"""The ground `RunRepository` stands on: session, clock, locks, and one run's chain.

See `run_repository.py` for the lock order every path follows.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, ParamSpec, TypeVar

from sqlalchemy.orm import Session

from ..errors import (
    CadenceStoreError,
    InvalidInputError,
    InvalidTransitionError,
    JournalIntegrityError,
    OperationConflictError,
    RunNotFoundError,
)
from ..journal import RunProjection
from ..journal.documents import Document, stored_projection
from ..journal.projection import event_after
from ..journal.validation import is_safe_integer, require_clock, require_root_hash
from ..journal.vocabulary import (
    COMMITTED,
    KIND_LEASE,
    KIND_START,
    STATE_TRANSITIONED,
)
from ..storage.append_statements import (
    ADVANCE_KNOWN,
    ADVANCE_RUN,
    ADVANCE_UNRECORDED,
    APPEND_RECORDED,
    APPEND_RECORDED_KNOWN,
    INSERT_EVENT,
    INSERT_RECEIPT,
    UPSERT_RECEIPT,
)
from ..storage.dialects import DialectProfile
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
from ..storage.schema import require_schema_name
from ..storage.statements import Statements
from .transaction import JournalTransaction, RunHead

Clock = Callable[[], int]
P = ParamSpec("P")
R = TypeVar("R")

# The operation kind of each journal call's receipt (its event type, or "start").
START: Final = KIND_START
TRANSITIONED: Final = STATE_TRANSITIONED
LEASE: Final = KIND_LEASE
EVENT_BATCH: Final = 1000
# what an event's computation raises when the head does not allow it (`_append_event`)
EVENT_REFUSED: Final = (InvalidTransitionError, JournalIntegrityError)
# what an append writes once its guarded head UPDATE wrote the run's row
_EVENT: Final = (INSERT_EVENT,)
_EVENT_AND_RECEIPT: Final = (INSERT_EVENT, INSERT_RECEIPT)


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


def journal_write(method: Callable[P, R]) -> Callable[P, R]:
    """`coded(WRITE)` for a journal call that writes, which also tells its transaction
    when the call failed (after writing a row, or at a statement): a unit of work must
    not commit what is left of it."""
    assert not inspect.isgeneratorfunction(method)
    guard = database_errors(WRITE)  # `coded(WRITE)`, in the same frame

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        repository, *_ = args  # the method's self
        assert isinstance(repository, RepositoryCore)
        transaction = repository.transaction
        before = transaction.writes
        try:
            return method(*args, **kwargs)
        except BaseException as error:
            # judged by the failure itself (a database error, or one coded from it)
            transaction.note_failure(error, wrote=transaction.writes != before)
            guard.raise_coded(error)
            raise

    return wrapper


class RepositoryCore:
    """What every journal call of `RunRepository` stands on: its transaction, the clock,
    the locks, and reading, replaying and appending to one run's chain."""

    def __init__(
        self,
        session: Session | JournalTransaction,
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
        schema: str | None = None,
    ) -> None:
        """`session`: a host's `Session`, which the host commits (a `UnitOfWork` and
        `RunStore` pass the `JournalTransaction` they own, with the values they checked).

        `schema`: the PostgreSQL schema holding cadence-store's tables (the session's
        other statements, a host's own tables, are left as they are)."""
        if isinstance(session, JournalTransaction):
            transaction = session
            schema = transaction.schema
        else:
            root_hash = None if root_hash is None else require_root_hash(root_hash)
            require_clock(clock)
            schema = require_schema_name(schema)
            transaction = JournalTransaction.on_session(session, schema)
        self.transaction = transaction
        self.root_hash = root_hash
        self._clock: Clock = system_clock if clock is None else clock
        self._explicit_clock = clock is not None
        self.schema = schema

    @property
    def session(self) -> Session:
        """The session of this repository's transaction (for host rows)."""
        return self.transaction.session

    @property
    def dialect_name(self) -> str | None:
        """The engine's name (`sqlite`, `postgresql`), None while not known yet."""
        return self.transaction.dialect_name

    # -- connections and locks -------------------------------------------------------

    def _write_statements(self) -> Statements:
        """Statements in a transaction fit for writing (see `JournalTransaction`)."""
        return self.transaction.statements(write=True)

    def _read_statements(self) -> Statements:
        return self.transaction.statements(write=False)

    def _now(self) -> int:
        now = self._clock()
        # the system clock's milliseconds are a safe integer; a caller's clock is checked
        if self._explicit_clock and (
            isinstance(now, bool) or not isinstance(now, int) or not is_safe_integer(now)
        ):
            raise InvalidInputError("invalid-clock", "clock() must return int milliseconds")
        return now

    def _append_now(self, profile: DialectProfile | None = None) -> int | None:
        """The time an append records (`append_statements.append_time`): None lets the
        PostgreSQL server's clock stamp it in the same statement, as lease time does.
        `profile`: the transaction's, where the caller has it at hand."""
        if self._explicit_clock:
            return self._now()
        if profile is None:
            profile = self.transaction.profile
        # the system clock (`system_clock`, written out: its milliseconds are a safe
        # integer), unless the server's
        return None if profile.server_clock else time.time_ns() // 1_000_000

    def _server_clock(self) -> bool:
        """Whether lease time is the database server's clock: on PostgreSQL, whose
        callers run on many machines, unless the caller gave its own `clock=`."""
        return not self._explicit_clock and self.transaction.profile.server_clock

    def _require_root(self) -> str:
        if self.root_hash is None:
            raise InvalidInputError("invalid-root-hash")
        return self.root_hash

    def _advisory_locks(self, sql: Statements, keys: Iterable[str]) -> None:
        if self.transaction.profile.advisory_locks:
            for key in sorted(set(keys)):
                sql.one(ADVISORY_LOCK, key=_advisory_key(key))

    def _head(self, sql: Statements, run_id: str, *, lock: bool) -> RunHead | None:
        if lock:
            kept = self.transaction.kept_head(run_id)
            if kept is not None:
                return kept
        return self._head_of(
            run_id, sql.one(HEAD_FOR_UPDATE if lock else HEAD, run_id=run_id), keep=lock
        )

    def _head_of(self, run_id: str, row: HeadRow | None, *, keep: bool) -> RunHead | None:
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

    def _require_head(self, sql: Statements, run_id: str, *, lock: bool) -> RunHead:
        head = self._head(sql, run_id, lock=lock)
        if head is None:
            raise RunNotFoundError("run-not-found")
        return head

    @staticmethod
    def _operation(
        sql: Statements, run_id: str, operation_id: str, *, lock: bool = False
    ) -> OperationRow | None:
        return sql.one(
            OPERATION_FOR_UPDATE if lock else OPERATION,
            run_id=run_id,
            operation_id=operation_id,
        )

    def _timed_operation(
        self, sql: Statements, run_id: str, operation_id: str, *, lock: bool
    ) -> tuple[OperationRow | None, int | None]:
        """The operation row and the lease time to judge it by: the server's clock, read
        in the same statement (after the row lock), or the caller's clock."""
        if not self._server_clock():
            row = self._operation(sql, run_id, operation_id, lock=lock)
            return row, None if row is None else self._now()
        timed = sql.one(
            OPERATION_FOR_UPDATE_TIMED if lock else OPERATION_TIMED,
            run_id=run_id,
            operation_id=operation_id,
        )
        return (None, None) if timed is None else timed

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
    def _record(
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

    # -- the chain ---------------------------------------------------------------------

    @staticmethod
    def _next_event(head: RunHead, type_: str, payload: Document) -> NextEvent:
        """The event that follows a locked run's head, and the run after it: O(1), the
        stored projection is the base. Writes nothing (a batch's plan)."""
        payload_json, event_hash, document, projection_json = event_after(
            head.document(), head.run_id, head.sequence + 1, type_, payload, head.event_hash
        )
        return NextEvent(head, type_, payload_json, event_hash, document, projection_json)

    def _append(
        self, sql: Statements, head: RunHead, type_: str, payload: Document
    ) -> tuple[Document, str]:
        """Append one event to a locked run (its receipt is the caller's to record)."""
        appended = self._append_event(sql, head, head.document(), type_, payload)
        if appended is None:
            # the run row is not the head the event was computed from: writing the event
            # would fork the chain
            raise JournalIntegrityError(
                "run-projection-integrity-mismatch", run_id=head.run_id, sequence=head.sequence
            )
        return appended

    def _append_event(
        self,
        sql: Statements,
        head: RunHead,
        current: Document,
        type_: str,
        payload: Document,
        *,
        operation_id: str | None = None,
        known: bool = False,
    ) -> tuple[Document, str] | None:
        """Append the event of `type_` with `payload` after a run's `head` (`current`: its
        parsed projection) and move the run's row to the head after it, in one write that
        lands only while the row still holds `head`: all of it when `known` (a head
        remembered from an earlier commit, not read under this transaction's lock). With
        `operation_id`, that write also records the id's committed receipt (kind: the
        event's type), and lands only while the id has no row.

        Returns the run's projection after the event and its JSON; None when nothing was
        written (the head moved, or the operation id has a row). Raises, writing nothing,
        when `current` is not `head`'s or the event is not allowed after it (one of
        `EVENT_REFUSED`, before anything else is asked)."""
        sequence = head.sequence + 1
        payload_json, event_hash, document, projection_json = event_after(
            current, head.run_id, sequence, type_, payload, head.event_hash
        )
        params = append_values(head, type_, payload_json, event_hash, document, projection_json)
        profile = sql.profile
        params["now"] = self._append_now(profile)
        if operation_id is None:
            written = sql.write_guarded(ADVANCE_RUN, _EVENT, params)
        else:
            params["operation_id"] = operation_id
            params["kind"] = type_
            params["outcome_json"] = projection_json
            if known:
                params["prior_projection_json"] = head.projection_json
            if profile.one_statement_append:
                found = sql.one_from(APPEND_RECORDED_KNOWN if known else APPEND_RECORDED, params)
                written = found is not None and found.advanced == 1
            else:
                advance = ADVANCE_KNOWN if known else ADVANCE_UNRECORDED
                written = sql.write_guarded(advance, _EVENT_AND_RECEIPT, params)
        if not written:
            return None
        after = RunHead(
            head.run_id, head.root_hash, head.stage, projection_json, sequence, event_hash, document
        )
        self.transaction.keep_head(after, appended=profile)
        return document, projection_json

    def _forget_head(self, run_id: str) -> None:
        self.transaction.forget_head(run_id)
