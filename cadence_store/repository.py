"""`RunRepository`: the journal rules, inside a caller's SQLAlchemy `Session`.

It never commits: whoever owns the session (a `UnitOfWork`, `RunStore`, or a host
application) commits or rolls back the journal rows together with its own.

Hash-chain append and lease fencing are enforced here, inside the transaction, after the
rows they depend on are locked. Lock order, the same on every path so that no two paths
can deadlock:

1. PostgreSQL advisory transaction locks on run lookup keys (and start operation ids),
   taken in sorted order — they serialise run creation per (root_hash, stage, key);
2. run rows (`SELECT ... FOR UPDATE`), one run per call;
3. operation rows (`SELECT ... FOR UPDATE`) for lease checks.

On SQLite the transaction itself is the lock (BEGIN IMMEDIATE), and `FOR UPDATE` renders
as nothing.

The hot path runs Core statements, compiled once (`sql.py`), on the DB-API cursor of the
session's connection: the ORM's and SQLAlchemy's per-call work was the largest cost of an
append (NOTES-engines), and an append only needs the locked run row, one INSERT and one
UPDATE — O(1) in the chain's length.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from . import queries
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
    InvalidTransitionError,
    JournalIntegrityError,
    LeaseFencedError,
    OperationConflictError,
    RunNotFoundError,
)
from .failures import READ, WRITE, coded
from .journal import (
    RUN_STATES,
    TERMINAL_STATES,
    ZERO_EVENT_HASH,
    ChainVerifier,
    OperationLease,
    OperationStatus,
    RunEvent,
    RunProjection,
    apply_event,
    hash_event,
    js_stringify,
)
from .journal.canonical import JsonValueError, has_lossy_number, is_nested_too_deep
from .journal.receipts import ReceiptVerifier, receipt_error
from .journal.validation import (
    coerce_approval_proof,
    coerce_lease,
    coerce_optional_lease,
    is_safe_integer,
    lookup_keys,
    require_change,
    require_clock,
    require_delivery,
    require_operation_id,
    require_root_hash,
    require_run_id,
    require_stage,
    require_transition_code,
    require_ttl,
)
from .journal.values import ApprovalProof, BindDelivery
from .journal.verification import MIRRORED_COLUMNS, stored_difference
from .journal.views import RunDetail, StoreCounts, check_run_listing
from .schema import require_schema_name
from .shape import assert_store_ready
from .sql import Statements

Clock = Callable[[], int]
Document = dict[str, Any]

START: Final = "start"
CHANGE_BOUND: Final = "change-bound"
DELIVERY_BOUND: Final = "delivery-bound"
TRANSITIONED: Final = "state-transitioned"
LEASE: Final = "lease"
EVENT_BATCH: Final = 1000


def system_clock() -> int:
    return time.time_ns() // 1_000_000


def _advisory_key(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big", signed=True)


def _parse_document(text: str | None, code: str = "run-projection-invalid") -> Document:
    try:
        value = json.loads(text) if text is not None else None
    except (TypeError, ValueError, RecursionError):  # a hostile row: nested too deep
        raise JournalIntegrityError(code) from None
    if not isinstance(value, dict) or not isinstance(value.get("runId"), str):
        raise JournalIntegrityError(code)
    return value


def _projection(document: Document) -> RunProjection:
    """A projection read from the database: validated."""
    try:
        return RunProjection.from_document(document)
    except ValueError:
        raise JournalIntegrityError("run-projection-invalid") from None


def _built(document: Document) -> RunProjection:
    """A projection `apply_event` just built from a verified head: not validated again."""
    try:
        return RunProjection.from_trusted_document(document)
    except (KeyError, TypeError):
        raise JournalIntegrityError("run-projection-invalid") from None


def _expiry(now: int, ttl: int) -> int:
    """`now + ttl`, refused past 2**53 - 1 (cadence 1.x, JavaScript, cannot hold it)."""
    expires_at = now + ttl
    if not is_safe_integer(expires_at):
        raise InvalidInputError("invalid-lease-ttl", "the lease would expire past 2**53 - 1 ms")
    return expires_at


def _bool_option(value: object, code: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(code)
    return value


_DELIVERY_FIELDS: Final = frozenset(
    {
        "run_id",
        "runId",
        "gate",
        "revision",
        "receipt_hash",
        "receiptHash",
        "operation_id",
        "operationId",
        "approval_proof",
        "approvalProof",
        "lease",
    }
)


class _Operation(NamedTuple):
    kind: str
    state: str
    outcome_json: str | None
    lease_token: str | None
    lease_expires_at: int | None
    lease_fence: int | None


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
            self._document = _parse_document(self.projection_json)
        return self._document


class ExpiryNeeded(CadenceStoreError):
    """`inspect_operation(expire=False)` found an expired lease: only the primary can
    mark it interrupted (`RunStore` then asks the primary; callers never see it)."""

    default_code = "operation-expiry-needed"


class RunRepository:
    """The journal's rules on a caller's session; one method call reads and writes rows,
    it never commits."""

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
    ) -> RunRepository:
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
        row = sql.one("head_for_update" if lock else "head", run_id=run_id)
        return None if row is None else _RunHead(*row)

    def _require_head(self, sql: Statements, run_id: str, *, lock: bool) -> _RunHead:
        head = self._head(sql, run_id, lock=lock)
        if head is None:
            raise RunNotFoundError("run-not-found")
        return head

    @staticmethod
    def _operation(
        sql: Statements, run_id: str, operation_id: str, *, lock: bool = False
    ) -> _Operation | None:
        row = sql.one(
            "operation_for_update" if lock else "operation",
            run_id=run_id,
            operation_id=operation_id,
        )
        return None if row is None else _Operation(*row)

    def _timed_operation(
        self, sql: Statements, run_id: str, operation_id: str, *, lock: bool
    ) -> tuple[_Operation | None, int | None]:
        """The operation row and the lease time to judge it by: the server's clock, read
        in the same statement (after the row lock), or the caller's clock."""
        if not self._server_clock():
            row = self._operation(sql, run_id, operation_id, lock=lock)
            return row, None if row is None else self._now()
        timed = sql.one(
            "operation_for_update_timed" if lock else "operation_timed",
            run_id=run_id,
            operation_id=operation_id,
        )
        return (None, None) if timed is None else (_Operation(*timed[:-1]), int(timed[-1]))

    # -- receipts ----------------------------------------------------------------------

    def _replay(
        self, sql: Statements, run_id: str, operation_id: str, kind: str
    ) -> RunProjection | None:
        row = self._operation(sql, run_id, operation_id)
        if row is not None and row.kind != kind:
            raise OperationConflictError("operation-id-conflict")
        if row is None or row.state != "committed" or row.outcome_json is None:
            return None
        return _projection(_parse_document(row.outcome_json))

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

    # -- runs --------------------------------------------------------------------------

    @coded(WRITE)
    def start_run(
        self,
        stage: str,
        *,
        operation_id: str,
        change: str | None = None,
        provisional_key: str | None = None,
        provisional_aliases: Iterable[str] | None = None,
    ) -> RunProjection:
        require_operation_id(operation_id)
        require_stage(stage)
        keys = lookup_keys(stage, change, provisional_key, provisional_aliases)
        root_hash = self._require_root()
        sql = self._write_statements()
        scope = f"{root_hash}\x00{stage}\x00"
        self._advisory_locks(sql, [scope + key for key in keys] + [f"{scope}op:{operation_id}"])

        receipts = [
            receipt
            for receipt in sql.all(
                "start_receipts", root_hash=root_hash, stage=stage, operation_id=operation_id
            )
            if receipt[4] is not None  # a run of this root and stage
        ]
        if receipts:
            # (run_id, kind, state, outcome_json, lookup_key)
            replay = next(
                (
                    r
                    for r in receipts
                    if r[1] == START and r[2] == "committed" and r[3] is not None and r[4] in keys
                ),
                None,
            )
            if len(receipts) != 1 or replay is None:
                raise OperationConflictError("operation-id-conflict")
            document = _parse_document(replay[3], "operation-outcome-invalid")
            if document["runId"] != replay[0]:
                raise JournalIntegrityError("operation-outcome-invalid")
            return _projection(document)

        existing: tuple[Any, ...] | None = None
        for key in keys:
            candidate = sql.one("run_by_key", root_hash=root_hash, stage=stage, lookup_key=key)
            if candidate is not None and existing is not None and candidate[0] != existing[0]:
                raise OperationConflictError("run-lookup-conflict")
            existing = existing or candidate
        if existing is not None:
            existing_id, existing_json = existing
            document = _parse_document(existing_json)
            if stage == "abel-design" and document.get("state") in TERMINAL_STATES:
                # a finished design run gives its key up to a new run
                sql.write("rekey_run", run_id=existing_id, lookup_key=f"terminal:{existing_id}")
            else:
                self._record(sql, existing_id, operation_id, START, existing_json)
                return _projection(document)

        run_id = str(uuid.uuid4())
        payload: Document = {"runId": run_id, "rootHash": root_hash, "stage": stage}
        if change is not None:
            payload["change"] = change
        if provisional_key is not None:
            payload["provisionalKey"] = provisional_key
        event_hash = hash_event(1, "run-created", payload, ZERO_EVENT_HASH)
        created = apply_event(None, 1, "run-created", payload, event_hash)
        assert created is not None
        projection_json = js_stringify(created)
        sql.write(
            "insert_run",
            run_id=run_id,
            root_hash=root_hash,
            stage=stage,
            lookup_key=keys[0],
            change_name=change,
            provisional_key=provisional_key,
            state=created["state"],
            sequence=1,
            event_hash=event_hash,
            projection_json=projection_json,
        )
        sql.write(
            "insert_event",
            run_id=run_id,
            sequence=1,
            type="run-created",
            payload_json=js_stringify(payload),
            prior_hash=ZERO_EVENT_HASH,
            event_hash=event_hash,
        )
        self._record(sql, run_id, operation_id, START, projection_json)
        return _built(created)

    @coded(WRITE)
    def bind_change(self, run_id: str, change: str, *, operation_id: str) -> RunProjection:
        require_operation_id(operation_id)
        require_change(change)
        require_run_id(run_id)
        sql = self._write_statements()
        unlocked = self._head(sql, run_id, lock=False)
        if unlocked is not None:
            scope = f"{unlocked.root_hash}\x00{unlocked.stage}\x00"
            self._advisory_locks(sql, [scope + f"change:{change}"])
        replay = self._replay(sql, run_id, operation_id, CHANGE_BOUND)
        if replay is not None:
            return replay
        head = self._require_head(sql, run_id, lock=True)
        current = head.document()
        if current.get("stage") != "abel-design" or not current.get("provisionalKey"):
            raise InvalidTransitionError("change-binding-not-allowed")
        owner = sql.one(
            "owner_of_key",
            root_hash=head.root_hash,
            stage=head.stage,
            lookup_key=f"change:{change}",
        )
        if owner is not None and owner[0] != run_id:
            raise OperationConflictError("change-run-already-exists")
        sql.write("bind_change", run_id=run_id, lookup_key=f"change:{change}", change_name=change)
        document, projection_json = self._append(sql, head, CHANGE_BOUND, {"change": change})
        self._record(sql, run_id, operation_id, CHANGE_BOUND, projection_json)
        return _built(document)

    # -- delivery bindings -------------------------------------------------------------

    def _bind_checked(self, sql: Statements, request: BindDelivery) -> tuple[RunProjection, bool]:
        """Bind one checked request; the flag says whether an event was appended (False:
        a replayed operation id, or a binding already stored with this very receipt)."""
        head = self._head(sql, request.run_id, lock=True)
        if request.lease is not None:
            if request.lease.run_id != request.run_id:
                raise LeaseFencedError("lease-fenced")
            self._assert_live(sql, request.lease)
        replay = self._replay(sql, request.run_id, request.operation_id, DELIVERY_BOUND)
        if replay is not None:
            return replay, False
        proof = request.approval_proof
        existing = sql.one(
            "binding", run_id=request.run_id, gate=request.gate, revision=request.revision
        )
        if head is None:
            raise RunNotFoundError("run-not-found")
        wanted = (
            request.receipt_hash,
            proof.revision if proof else None,
            proof.contract_hash if proof else None,
            proof.record_hash if proof else None,
        )
        if existing is not None:
            if tuple(existing) != wanted:
                raise OperationConflictError("delivery-revision-conflict")
            self._record(
                sql, request.run_id, request.operation_id, DELIVERY_BOUND, head.projection_json
            )
            return _projection(_parse_document(head.projection_json)), False
        sql.write(
            "insert_binding",
            run_id=request.run_id,
            gate=request.gate,
            revision=request.revision,
            receipt_hash=wanted[0],
            approval_revision=wanted[1],
            contract_hash=wanted[2],
            record_hash=wanted[3],
            operation_id=request.operation_id,
        )
        payload: Document = {
            "gate": request.gate,
            "revision": request.revision,
            "receiptHash": request.receipt_hash,
        }
        if proof is not None:
            payload["approvalProof"] = {
                "revision": proof.revision,
                "contractHash": proof.contract_hash,
                "recordHash": proof.record_hash,
            }
        document, projection_json = self._append(sql, head, DELIVERY_BOUND, payload)
        self._record(sql, request.run_id, request.operation_id, DELIVERY_BOUND, projection_json)
        return _built(document), True

    @coded(WRITE)
    def bind_delivery(
        self,
        run_id: str,
        gate: str,
        revision: int,
        receipt_hash: str,
        *,
        operation_id: str,
        approval_proof: ApprovalProof | Mapping[str, Any] | None = None,
        lease: OperationLease | Mapping[str, Any] | None = None,
    ) -> RunProjection:
        request = check_delivery(
            run_id, gate, revision, receipt_hash, operation_id, approval_proof, lease
        )
        projection, _ = self._bind_checked(self._write_statements(), request)
        return projection

    def check_deliveries(self, inputs: object) -> list[BindDelivery]:
        """Validate the inputs of `bind_deliveries_atomically` (cadence 1.x rules)."""
        if isinstance(inputs, str | bytes | Mapping) or not isinstance(inputs, Iterable):
            raise InvalidInputError("delivery-binding-write-invalid")
        requests = []
        for item in inputs:
            if isinstance(item, BindDelivery):
                fields: Mapping[str, Any] = dict(item)
            elif isinstance(item, Mapping):
                fields = item
            else:
                raise InvalidInputError("invalid-delivery-binding")
            if set(fields) - _DELIVERY_FIELDS:
                raise InvalidInputError("invalid-delivery-binding")
            requests.append(
                check_delivery(
                    fields.get("run_id", fields.get("runId")),
                    fields.get("gate"),
                    fields.get("revision"),
                    fields.get("receipt_hash", fields.get("receiptHash")),
                    fields.get("operation_id", fields.get("operationId")),
                    fields.get("approval_proof", fields.get("approvalProof")),
                    fields.get("lease"),
                )
            )
        if not requests:
            raise InvalidInputError("delivery-binding-empty")
        first = requests[0]
        token = first.lease.token if first.lease else None
        if any(
            r.run_id != first.run_id or (r.lease.token if r.lease else None) != token
            for r in requests
        ):
            raise InvalidInputError("delivery-binding-write-invalid")
        return requests

    def bind_deliveries(self, requests: list[BindDelivery]) -> RunProjection:
        """Bind several checked deliveries of one run (see `check_deliveries`)."""
        projection, _ = self.bind_deliveries_once(requests)
        return projection

    @coded(WRITE)
    def bind_deliveries_once(self, requests: list[BindDelivery]) -> tuple[RunProjection, bool]:
        """`bind_deliveries`, and whether any of them appended an event (False: every
        request replayed a receipt or found its binding already stored)."""
        sql = self._write_statements()
        projection: RunProjection | None = None
        appended = False
        for request in requests:
            projection, appended_one = self._bind_checked(sql, request)
            appended = appended or appended_one
        if projection is None:
            raise InvalidInputError("delivery-binding-empty")
        return projection, appended

    # -- transitions -------------------------------------------------------------------

    def transition(
        self,
        run_id: str,
        to: str,
        *,
        operation_id: str,
        code: str | None = None,
        lease: OperationLease | Mapping[str, Any] | None = None,
    ) -> RunProjection:
        projection, _ = self.transition_once(
            run_id, to, operation_id=operation_id, code=code, lease=lease
        )
        return projection

    @coded(WRITE)
    def transition_once(
        self,
        run_id: str,
        to: str,
        *,
        operation_id: str,
        code: str | None = None,
        lease: OperationLease | Mapping[str, Any] | None = None,
    ) -> tuple[RunProjection, bool]:
        """`transition`, and whether it appended (False: a replayed operation id)."""
        require_operation_id(operation_id)
        require_run_id(run_id)
        checked_code = require_transition_code(code)
        checked_lease = coerce_optional_lease(lease)
        sql = self._write_statements()
        head = self._head(sql, run_id, lock=True)
        if checked_lease is not None:
            if checked_lease.run_id != run_id:
                raise LeaseFencedError("lease-fenced")
            self._assert_live(sql, checked_lease)
        replay = self._replay(sql, run_id, operation_id, TRANSITIONED)
        if replay is not None:
            return replay, False
        if head is None:
            raise RunNotFoundError("run-not-found")
        if not isinstance(to, str) or to not in RUN_STATES:
            raise InvalidTransitionError("event-integrity-state-mismatch")
        payload: Document = {"from": head.document().get("state"), "to": to}
        if checked_code is not None:
            payload["code"] = checked_code
        document, projection_json = self._append(sql, head, TRANSITIONED, payload)
        self._record(sql, run_id, operation_id, TRANSITIONED, projection_json)
        return _built(document), True

    # -- leases ------------------------------------------------------------------------

    def _assert_live(self, sql: Statements, lease: OperationLease) -> tuple[_Operation, int]:
        """The locked row of `lease`'s operation and the lease time it was judged at, or
        `lease-fenced`. The token decides which grant is live (no clock involved); the
        lease time decides only whether that grant has expired."""
        row, now = self._timed_operation(sql, lease.run_id, lease.operation_id, lock=True)
        if (
            row is None
            or now is None
            or row.state != "running"
            or row.lease_token != lease.token
            or lease.fence not in (0, row.lease_fence or 0)  # 0: cadence 1.x shape
            or row.lease_expires_at is None
            or row.lease_expires_at < now
        ):
            raise LeaseFencedError("lease-fenced")
        return row, now

    @coded(WRITE)
    def acquire_lease(
        self,
        run_id: str,
        operation_id: str,
        ttl_ms: int,
        *,
        preempt: bool = False,
        exclusive: bool = False,
        lease_token: str | None = None,
    ) -> OperationLease:
        """`lease_token`: the token to grant (default: a fresh one). A live lease already
        granted under it is returned as it is, whatever `preempt` and `exclusive` say:
        `RunStore` passes the same token to every attempt of one call, so an attempt
        re-run after a lost connection finds the lease its first attempt took."""
        require_operation_id(operation_id)
        ttl = require_ttl(ttl_ms)
        _bool_option(preempt, "invalid-lease-option")
        _bool_option(exclusive, "invalid-lease-option")
        require_run_id(run_id)
        sql = self._write_statements()
        if self._server_clock():
            locked = sql.one("head_for_update_timed", run_id=run_id)
            if locked is None:
                raise RunNotFoundError("run-not-found")
            existing, existing_now = self._timed_operation(sql, run_id, operation_id, lock=True)
            # the later reading, after the operation row's lock too, when there is a row
            now = int(locked[-1]) if existing_now is None else existing_now
        else:
            self._require_head(sql, run_id, lock=True)
            now = self._now()
            existing = self._operation(sql, run_id, operation_id, lock=True)
        if existing is not None and existing.kind != LEASE:
            # a journal receipt is never turned into a lease (cadence 1.x overwrote it)
            raise OperationConflictError("operation-id-conflict")
        if (
            lease_token is not None
            and existing is not None
            and existing.state == "running"
            and existing.lease_token == lease_token
            and existing.lease_expires_at is not None
            and existing.lease_expires_at >= now
        ):
            return OperationLease(
                run_id=run_id,
                operation_id=operation_id,
                token=lease_token,
                expires_at=existing.lease_expires_at,
                fence=existing.lease_fence or 0,
            )
        if (
            existing is not None
            and existing.state == "running"
            and existing.lease_token
            and existing.lease_expires_at is not None
            and existing.lease_expires_at >= now
            and not preempt
        ):
            if exclusive:
                raise OperationConflictError("operation-already-running")
            return OperationLease(
                run_id=run_id,
                operation_id=operation_id,
                token=existing.lease_token,
                expires_at=existing.lease_expires_at,
                fence=existing.lease_fence or 0,
            )
        # A new grant: the next fence of this operation (the row keeps the last one through
        # commit, interrupt and expiry, and export/import/copy carry it).
        fence = 1 if existing is None else (existing.lease_fence or 0) + 1
        token = str(uuid.uuid4()) if lease_token is None else lease_token
        lease = OperationLease(
            run_id=run_id,
            operation_id=operation_id,
            token=token,
            expires_at=_expiry(now, ttl),
            fence=fence,
        )
        sql.write(
            "insert_lease" if existing is None else "restart_lease",
            run_id=run_id,
            operation_id=operation_id,
            lease_token=lease.token,
            lease_expires_at=lease.expires_at,
            lease_fence=fence,
        )
        return lease

    @coded(WRITE)
    def renew_lease(self, lease: OperationLease | Mapping[str, Any], ttl_ms: int) -> OperationLease:
        ttl = require_ttl(ttl_ms)
        checked = coerce_lease(lease)
        sql = self._write_statements()
        row, now = self._assert_live(sql, checked)
        expires_at = _expiry(now, ttl)
        sql.write(
            "renew_lease",
            run_id=checked.run_id,
            operation_id=checked.operation_id,
            token=checked.token,
            lease_expires_at=expires_at,
        )
        return checked.model_copy(update={"expires_at": expires_at, "fence": row.lease_fence or 0})

    @coded(WRITE)
    def assert_lease(self, lease: OperationLease | Mapping[str, Any]) -> None:
        self._assert_live(self._write_statements(), coerce_lease(lease))

    def _finish_lease(self, lease: OperationLease, state: str, outcome_json: str | None) -> None:
        sql = self._write_statements()
        self._assert_live(sql, lease)
        changed = sql.write(
            "finish_lease",
            run_id=lease.run_id,
            operation_id=lease.operation_id,
            token=lease.token,
            new_state=state,
            outcome_json=outcome_json,
        )
        if changed != 1:
            raise LeaseFencedError("lease-fenced")

    @coded(WRITE)
    def commit_lease(
        self, lease: OperationLease | Mapping[str, Any], outcome: Mapping[str, Any]
    ) -> dict[str, Any]:
        checked = coerce_lease(lease)
        if not isinstance(outcome, Mapping):
            raise InvalidInputError("operation-outcome-invalid")
        try:
            serialized = js_stringify(outcome)
        except (JsonValueError, RecursionError):
            raise InvalidInputError("operation-outcome-invalid") from None
        if has_lossy_number(outcome):
            # JSON.stringify would write it as null: refused rather than lost
            raise InvalidInputError("operation-outcome-invalid", "a number JSON cannot carry")
        self._finish_lease(checked, "committed", serialized)
        result: dict[str, Any] = json.loads(serialized)
        return result

    @coded(WRITE)
    def interrupt_lease(self, lease: OperationLease | Mapping[str, Any]) -> None:
        self._finish_lease(coerce_lease(lease), "interrupted", None)

    @coded(WRITE)
    def finished_lease(
        self,
        lease: OperationLease | Mapping[str, Any],
        state: str,
        outcome: Mapping[str, Any] | None = None,
    ) -> bool:
        """Whether `lease`'s operation is already finished as `state` ("committed" with
        exactly `outcome`, or "interrupted"): `RunStore` re-runs a commit or an interrupt
        whose acknowledgement was lost, and one already done counts as done. Finishing
        clears the token (as cadence 1.x did), so this cannot tell the caller's own
        finish from an identical one; the recorded result is the same either way."""
        checked = coerce_lease(lease)
        row = self._operation(self._write_statements(), checked.run_id, checked.operation_id)
        if row is None or row.kind != LEASE or row.state != state:
            return False
        if outcome is None:
            return row.outcome_json is None
        try:
            return row.outcome_json == js_stringify(outcome)
        except (JsonValueError, RecursionError, TypeError):
            return False

    @coded(WRITE)
    def inspect_operation(
        self, run_id: str, operation_id: str, *, expire: bool = True
    ) -> OperationStatus | None:
        """`expire=False` (a read on a standby): raise `ExpiryNeeded` instead of marking an
        expired lease interrupted."""
        require_operation_id(operation_id)
        require_run_id(run_id)
        sql = self._write_statements()
        self._require_head(sql, run_id, lock=False)
        row, now = self._timed_operation(sql, run_id, operation_id, lock=False)
        if row is None or now is None:
            return None
        if (
            row.state == "running"
            and row.lease_expires_at is not None
            and row.lease_expires_at < now
        ):
            if not expire:
                raise ExpiryNeeded()
            sql.write("expire_lease", run_id=run_id, operation_id=operation_id, now=now)
            row = self._operation(sql, run_id, operation_id)
            if row is None:
                raise JournalIntegrityError("operation-recovery-invalid")
        if row.state not in ("running", "committed", "interrupted"):
            raise JournalIntegrityError("operation-state-invalid")
        outcome = None
        if row.outcome_json is not None:
            try:
                outcome = json.loads(row.outcome_json)
            except (ValueError, RecursionError):
                outcome = None
            if not isinstance(outcome, dict) or is_nested_too_deep(outcome):
                raise JournalIntegrityError("operation-outcome-invalid")
        return OperationStatus(
            state=row.state,
            outcome=outcome,
            expires_at=row.lease_expires_at,
            fence=row.lease_fence if row.kind == LEASE else None,
        )

    @coded(WRITE)
    def recover_expired_leases(self) -> int:
        sql = self._write_statements()
        if self._server_clock():
            return sql.write("expire_leases_timed")
        return sql.write("expire_leases", now=self._now())

    # -- reading and verifying ---------------------------------------------------------

    @coded(READ)
    def recorded_outcome(self, run_id: str, operation_id: str, kind: str) -> RunProjection | None:
        """The projection a journal operation id (`kind`: its event type) recorded when it
        committed, or None. `RunStore` looks here first when it re-runs a call whose
        connection was lost: a first attempt that committed is replayed before any lease
        check (its lease was live when it committed; it may have expired since)."""
        require_operation_id(operation_id)
        require_run_id(run_id)
        return self._replay(self._read_statements(), run_id, operation_id, kind)

    @coded(READ)
    def status(self, run_id: str) -> RunProjection:
        require_run_id(run_id)
        head = self._require_head(self._read_statements(), run_id, lock=False)
        return _projection(_parse_document(head.projection_json))

    @coded(READ)
    def iter_event_rows(self, run_id: str) -> Iterator[tuple[Any, ...]]:
        """(sequence, type, payload_json, prior_hash, event_hash) in sequence order,
        fetched in pages of EVENT_BATCH (a chain is never loaded whole)."""
        sql = self._read_statements()
        page = sql.all("events_of_run_page", run_id=run_id, limit=EVENT_BATCH)
        while page:
            yield from page
            if len(page) < EVENT_BATCH:
                break
            page = sql.all(
                "events_of_run_after", run_id=run_id, after=page[-1][0], limit=EVENT_BATCH
            )

    @coded(READ)
    def iter_events(self, run_id: str) -> Iterator[RunEvent]:
        require_run_id(run_id)
        self._require_head(self._read_statements(), run_id, lock=False)
        for sequence, type_, payload_json, prior_hash, event_hash in self.iter_event_rows(run_id):
            payload = _event_payload(payload_json, run_id, sequence)
            if is_nested_too_deep(payload):  # it could not be written out again
                raise JournalIntegrityError(
                    "event-integrity-hash-chain",
                    "payload nested too deep",
                    run_id=run_id,
                    sequence=sequence,
                )
            yield RunEvent.model_construct(
                sequence=sequence,
                type=type_,
                payload=payload,
                prior_hash=prior_hash,
                hash=event_hash,
            )

    @coded(READ)
    def list_events(self, run_id: str) -> list[RunEvent]:
        return list(self.iter_events(run_id))

    def _replay_chain(self, run_id: str, receipts: ReceiptVerifier | None = None) -> Document:
        verifier = ChainVerifier()
        waiting = {} if receipts is None else receipts.waiting
        try:
            feed = verifier.feed_json
            for sequence, type_, payload_json, prior_hash, event_hash in self.iter_event_rows(
                run_id
            ):
                feed(sequence, type_, payload_json, event_hash, prior_hash)
                if sequence in waiting:
                    receipts.observe(sequence, verifier.projection)  # type: ignore[union-attr]
            return verifier.result()
        except JournalIntegrityError as error:
            error.run_id = run_id
            if error.sequence is None:
                error.sequence = verifier.count + 1
            raise
        except InvalidTransitionError as error:
            raise JournalIntegrityError(
                error.code, run_id=run_id, sequence=verifier.count + 1
            ) from None

    @coded(READ)
    def rebuild_projection(self, run_id: str) -> RunProjection:
        require_run_id(run_id)
        self._require_head(self._read_statements(), run_id, lock=False)
        return _projection(self._replay_chain(run_id))

    @coded(READ)
    def verify_integrity(self, run_id: str) -> RunProjection:
        """Replay the chain and compare it with everything stored about the run: the
        projection (key order included), the run row's columns, the binding rows and the
        operations rows (each journal receipt must be a projection the chain produced)."""
        require_run_id(run_id)
        sql = self._read_statements()
        row = sql.one("verify_columns", run_id=run_id)
        if row is None:
            raise RunNotFoundError("run-not-found")
        receipts = ReceiptVerifier(run_id)
        for operation in sql.stream("operations_of_run", EVENT_BATCH, run_id=run_id):
            receipts.add(operation)
        rebuilt = self._replay_chain(run_id, receipts)
        columns = dict(zip((name for name, _ in MIRRORED_COLUMNS), row[1:], strict=True))
        difference = stored_difference(
            rebuilt, row[0], columns, sql.all("bindings_of_run", run_id=run_id)
        )
        if difference is not None:
            raise JournalIntegrityError(
                "run-projection-integrity-mismatch",
                f"{difference.field}: expected {difference.expected!r}, "
                f"stored {difference.actual!r}",
                run_id=run_id,
                sequence=difference.sequence,
                expected=difference.expected,
                actual=difference.actual,
            )
        problem = receipts.result(lambda: sql.all("operations_of_run", run_id=run_id))
        if problem is not None:
            raise receipt_error(run_id, problem)
        return _projection(rebuilt)

    @coded(READ)
    def run_ids(self) -> list[str]:
        return [str(row[0]) for row in self._read_statements().all("run_ids")]

    # -- the read side (cadence_store.queries) ------------------------------------------

    @coded(READ)
    def list_runs(
        self,
        *,
        stage: str | Iterable[str] | None = None,
        state: str | Iterable[str] | None = None,
        change: str | None = None,
        limit: int | None = None,
        after: str | None = None,
        root_hash: str | None = None,
    ) -> list[RunProjection]:
        """Stored projections of the runs that match every filter given, in run id order.

        `stage` / `state`: one name or several; `limit`: at most that many; `after`: the
        last run id of the previous page (keyset pagination). Runs of every root hash
        unless `root_hash` is given.
        """
        listing = check_run_listing(
            stage=stage, state=state, change=change, root_hash=root_hash, limit=limit, after=after
        )
        return queries.list_runs(self._read_statements(), listing)

    @coded(READ)
    def run_detail(self, run_id: str) -> RunDetail:
        """The run's projection, binding rows, operations (leases judged by the clock)
        and state timeline."""
        projection = self.status(run_id)
        return queries.run_detail(
            self._read_statements(), projection, self.iter_events(run_id), self._now()
        )

    @coded(READ)
    def counts(self) -> StoreCounts:
        """Rows of runs, events, operations and bindings, and runs per state."""
        return queries.counts(self._read_statements())


def check_delivery(
    run_id: object,
    gate: object,
    revision: object,
    receipt_hash: object,
    operation_id: object,
    approval_proof: object,
    lease: object,
) -> BindDelivery:
    """Validate one delivery binding request, in cadence 1.x's order of checks."""
    checked_operation = require_operation_id(operation_id)
    gate_, revision_, receipt_ = require_delivery(gate, revision, receipt_hash)
    proof = coerce_approval_proof(approval_proof)
    checked_lease = coerce_optional_lease(lease)
    return BindDelivery.model_construct(
        run_id=require_run_id(run_id),
        gate=gate_,
        revision=revision_,
        receipt_hash=receipt_,
        operation_id=checked_operation,
        approval_proof=proof,
        lease=checked_lease,
    )


_decode_json: Final = json.JSONDecoder().decode


def _event_payload(payload_json: Any, run_id: str, sequence: Any) -> Any:
    try:
        return _decode_json(payload_json)
    except (TypeError, ValueError, RecursionError):
        raise JournalIntegrityError(
            "event-integrity-hash-chain", "payload is not JSON", run_id=run_id, sequence=sequence
        ) from None


__all__ = ["Clock", "ExpiryNeeded", "RunRepository", "check_delivery", "system_clock"]
