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

The hot path uses Core statements on the session's connection: the ORM's per-object
bookkeeping was the largest cost of an append (NOTES-engines), and an append only needs
the locked run row, one INSERT and one UPDATE — O(1) in the chain's length.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from .engine import begins_immediate, is_postgresql, is_sqlite
from .errors import (
    InvalidInputError,
    InvalidTransitionError,
    JournalIntegrityError,
    LeaseFencedError,
    OperationConflictError,
    RunNotFoundError,
)
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
    create_event,
    js_stringify,
)
from .journal.canonical import JsonValueError
from .journal.validation import (
    coerce_approval_proof,
    coerce_lease,
    coerce_optional_lease,
    lookup_keys,
    require_change,
    require_delivery,
    require_operation_id,
    require_root_hash,
    require_run_id,
    require_stage,
    require_transition_code,
    require_ttl,
)
from .journal.values import ApprovalProof, BindDelivery
from .models import delivery_bindings, events, operations, runs

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
    except (TypeError, ValueError):
        raise JournalIntegrityError(code) from None
    if not isinstance(value, dict) or not isinstance(value.get("runId"), str):
        raise JournalIntegrityError(code)
    return value


def _projection(document: Document) -> RunProjection:
    try:
        return RunProjection.from_document(document)
    except ValueError:
        raise JournalIntegrityError("run-projection-invalid") from None


def _bool_option(value: object, code: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(code)
    return value


@dataclass(frozen=True, slots=True)
class _RunHead:
    run_id: str
    root_hash: str
    stage: str
    projection_json: str
    sequence: int
    event_hash: str


class RunRepository:
    """The journal's rules on a caller's session; one method call reads and writes rows,
    it never commits."""

    def __init__(
        self,
        session: Session,
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.session = session
        self.root_hash = None if root_hash is None else require_root_hash(root_hash)
        self._clock = clock or system_clock

    # -- connections and locks -------------------------------------------------------

    def _connection(self) -> Connection:
        return self.session.connection()

    def _write_connection(self) -> Connection:
        """The session's connection, in a transaction fit for writing.

        On SQLite a transaction that has not touched the database yet is begun IMMEDIATE
        here (unless the engine already does so), so that a concurrent writer waits
        instead of failing the read-then-write halfway.
        """
        connection = self.session.connection()
        if is_sqlite(connection) and not begins_immediate(connection.engine):
            raw = connection.connection.dbapi_connection
            if raw is not None and not getattr(raw, "in_transaction", True):
                connection.exec_driver_sql("BEGIN IMMEDIATE")
        return connection

    def _now(self) -> int:
        now = self._clock()
        if isinstance(now, bool) or not isinstance(now, int):
            raise InvalidInputError("invalid-clock", "clock() must return int milliseconds")
        return now

    def _require_root(self) -> str:
        if self.root_hash is None:
            raise InvalidInputError("invalid-root-hash")
        return self.root_hash

    @staticmethod
    def _advisory_locks(connection: Connection, keys: Iterable[str]) -> None:
        if is_postgresql(connection):
            for key in sorted(set(keys)):
                connection.execute(select(func.pg_advisory_xact_lock(_advisory_key(key))))

    def _head(self, connection: Connection, run_id: str, *, lock: bool) -> _RunHead | None:
        statement = select(
            runs.c.run_id,
            runs.c.root_hash,
            runs.c.stage,
            runs.c.projection_json,
            runs.c.sequence,
            runs.c.event_hash,
        ).where(runs.c.run_id == run_id)
        if lock:
            statement = statement.with_for_update()
        row = connection.execute(statement).first()
        return None if row is None else _RunHead(*row)

    def _require_head(self, connection: Connection, run_id: str, *, lock: bool) -> _RunHead:
        head = self._head(connection, run_id, lock=lock)
        if head is None:
            raise RunNotFoundError("run-not-found")
        return head

    def _operation(
        self, connection: Connection, run_id: str, operation_id: str, *, lock: bool = False
    ) -> Any:
        statement = select(
            operations.c.kind,
            operations.c.state,
            operations.c.outcome_json,
            operations.c.lease_token,
            operations.c.lease_expires_at,
        ).where(operations.c.run_id == run_id, operations.c.operation_id == operation_id)
        if lock:
            statement = statement.with_for_update()
        return connection.execute(statement).first()

    # -- receipts ----------------------------------------------------------------------

    def _replay(
        self, connection: Connection, run_id: str, operation_id: str, kind: str
    ) -> RunProjection | None:
        row = self._operation(connection, run_id, operation_id)
        if row is not None and row.kind != kind:
            raise OperationConflictError("operation-id-conflict")
        if row is None or row.state != "committed" or row.outcome_json is None:
            return None
        return _projection(_parse_document(row.outcome_json))

    def _record(
        self, connection: Connection, run_id: str, operation_id: str, kind: str, outcome: str
    ) -> None:
        insert = pg_insert if is_postgresql(connection) else sqlite_insert
        statement = insert(operations).values(
            run_id=run_id,
            operation_id=operation_id,
            kind=kind,
            state="committed",
            outcome_json=outcome,
        )
        statement = statement.on_conflict_do_update(
            index_elements=[operations.c.run_id, operations.c.operation_id],
            set_={
                "state": "committed",
                "outcome_json": statement.excluded.outcome_json,
                "lease_token": None,
                "lease_expires_at": None,
            },
        )
        connection.execute(statement)

    # -- the chain ---------------------------------------------------------------------

    def _append(
        self, connection: Connection, head: _RunHead, type_: str, payload: Document
    ) -> tuple[Document, str]:
        """Append one event to a locked run: O(1), the stored projection is the base."""
        current = _parse_document(head.projection_json)
        if current.get("sequence") != head.sequence or current.get("eventHash") != head.event_hash:
            raise JournalIntegrityError(
                "run-projection-integrity-mismatch", run_id=head.run_id, sequence=head.sequence
            )
        event = create_event(head.sequence + 1, type_, payload, head.event_hash)
        document = apply_event(current, event.sequence, type_, event.payload, event.hash)
        assert document is not None
        projection_json = js_stringify(document)
        connection.execute(
            events.insert().values(
                run_id=head.run_id,
                sequence=event.sequence,
                type=type_,
                payload_json=js_stringify(event.payload),
                prior_hash=event.prior_hash,
                event_hash=event.hash,
            )
        )
        connection.execute(
            update(runs)
            .where(runs.c.run_id == head.run_id)
            .values(
                state=document["state"],
                sequence=event.sequence,
                event_hash=event.hash,
                delivery_revision=document.get("deliveryRevision"),
                projection_json=projection_json,
                terminal_tombstone=document.get("terminal"),
            )
        )
        return document, projection_json

    # -- runs --------------------------------------------------------------------------

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
        connection = self._write_connection()
        scope = f"{root_hash}\x00{stage}\x00"
        self._advisory_locks(
            connection, [scope + key for key in keys] + [scope + "op:" + operation_id]
        )

        receipts = connection.execute(
            select(
                operations.c.run_id,
                operations.c.kind,
                operations.c.state,
                operations.c.outcome_json,
                runs.c.lookup_key,
            )
            .join(runs, runs.c.run_id == operations.c.run_id)
            .where(
                runs.c.root_hash == root_hash,
                runs.c.stage == stage,
                operations.c.operation_id == operation_id,
            )
        ).all()
        if receipts:
            replay = next(
                (
                    r
                    for r in receipts
                    if r.kind == START
                    and r.state == "committed"
                    and r.outcome_json is not None
                    and r.lookup_key in keys
                ),
                None,
            )
            if len(receipts) != 1 or replay is None:
                raise OperationConflictError("operation-id-conflict")
            document = _parse_document(replay.outcome_json, "operation-outcome-invalid")
            if document["runId"] != replay.run_id:
                raise JournalIntegrityError("operation-outcome-invalid")
            return _projection(document)

        existing: Any = None
        for key in keys:
            candidate = connection.execute(
                select(runs.c.run_id, runs.c.projection_json).where(
                    runs.c.root_hash == root_hash, runs.c.stage == stage, runs.c.lookup_key == key
                )
            ).first()
            if (
                candidate is not None
                and existing is not None
                and candidate.run_id != existing.run_id
            ):
                raise OperationConflictError("run-lookup-conflict")
            existing = existing or candidate
        if existing is not None:
            document = _parse_document(existing.projection_json)
            if stage == "abel-design" and document.get("state") in TERMINAL_STATES:
                # a finished design run gives its key up to a new run
                connection.execute(
                    update(runs)
                    .where(runs.c.run_id == existing.run_id)
                    .values(lookup_key=f"terminal:{existing.run_id}")
                )
            else:
                self._record(
                    connection, existing.run_id, operation_id, START, existing.projection_json
                )
                return _projection(document)

        run_id = str(uuid.uuid4())
        payload: Document = {"runId": run_id, "rootHash": root_hash, "stage": stage}
        if change is not None:
            payload["change"] = change
        if provisional_key is not None:
            payload["provisionalKey"] = provisional_key
        event = create_event(1, "run-created", payload, ZERO_EVENT_HASH)
        created = apply_event(None, 1, event.type, event.payload, event.hash)
        assert created is not None
        projection_json = js_stringify(created)
        connection.execute(
            runs.insert().values(
                run_id=run_id,
                root_hash=root_hash,
                stage=stage,
                lookup_key=keys[0],
                change_name=change,
                provisional_key=provisional_key,
                state=created["state"],
                sequence=1,
                event_hash=event.hash,
                projection_json=projection_json,
            )
        )
        connection.execute(
            events.insert().values(
                run_id=run_id,
                sequence=1,
                type=event.type,
                payload_json=js_stringify(event.payload),
                prior_hash=event.prior_hash,
                event_hash=event.hash,
            )
        )
        self._record(connection, run_id, operation_id, START, projection_json)
        return _projection(created)

    def bind_change(self, run_id: str, change: str, *, operation_id: str) -> RunProjection:
        require_operation_id(operation_id)
        require_change(change)
        require_run_id(run_id)
        connection = self._write_connection()
        unlocked = self._head(connection, run_id, lock=False)
        if unlocked is not None:
            scope = f"{unlocked.root_hash}\x00{unlocked.stage}\x00"
            self._advisory_locks(connection, [scope + f"change:{change}"])
        replay = self._replay(connection, run_id, operation_id, CHANGE_BOUND)
        if replay is not None:
            return replay
        head = self._require_head(connection, run_id, lock=True)
        current = _parse_document(head.projection_json)
        if current.get("stage") != "abel-design" or not current.get("provisionalKey"):
            raise InvalidTransitionError("change-binding-not-allowed")
        owner = connection.execute(
            select(runs.c.run_id).where(
                runs.c.root_hash == head.root_hash,
                runs.c.stage == head.stage,
                runs.c.lookup_key == f"change:{change}",
            )
        ).first()
        if owner is not None and owner.run_id != run_id:
            raise OperationConflictError("change-run-already-exists")
        connection.execute(
            update(runs)
            .where(runs.c.run_id == run_id)
            .values(lookup_key=f"change:{change}", change_name=change, provisional_key=None)
        )
        _, projection_json = self._append(connection, head, CHANGE_BOUND, {"change": change})
        self._record(connection, run_id, operation_id, CHANGE_BOUND, projection_json)
        return _projection(json.loads(projection_json))

    # -- delivery bindings -------------------------------------------------------------

    def _check_delivery(
        self,
        run_id: object,
        gate: object,
        revision: object,
        receipt_hash: object,
        operation_id: object,
        approval_proof: object,
        lease: object,
    ) -> BindDelivery:
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

    def _bind_checked(self, connection: Connection, request: BindDelivery) -> RunProjection:
        head = self._head(connection, request.run_id, lock=True)
        if request.lease is not None:
            if request.lease.run_id != request.run_id:
                raise LeaseFencedError("lease-fenced")
            self._assert_live(connection, request.lease)
        replay = self._replay(connection, request.run_id, request.operation_id, DELIVERY_BOUND)
        if replay is not None:
            return replay
        proof = request.approval_proof
        existing = connection.execute(
            select(
                delivery_bindings.c.receipt_hash,
                delivery_bindings.c.approval_revision,
                delivery_bindings.c.contract_hash,
                delivery_bindings.c.record_hash,
            ).where(
                delivery_bindings.c.run_id == request.run_id,
                delivery_bindings.c.gate == request.gate,
                delivery_bindings.c.revision == request.revision,
            )
        ).first()
        if head is None:
            raise RunNotFoundError("run-not-found")
        if existing is not None:
            wanted = (
                request.receipt_hash,
                proof.revision if proof else None,
                proof.contract_hash if proof else None,
                proof.record_hash if proof else None,
            )
            if tuple(existing) != wanted:
                raise OperationConflictError("delivery-revision-conflict")
            self._record(
                connection,
                request.run_id,
                request.operation_id,
                DELIVERY_BOUND,
                head.projection_json,
            )
            return _projection(_parse_document(head.projection_json))
        connection.execute(
            delivery_bindings.insert().values(
                run_id=request.run_id,
                gate=request.gate,
                revision=request.revision,
                receipt_hash=request.receipt_hash,
                approval_revision=proof.revision if proof else None,
                contract_hash=proof.contract_hash if proof else None,
                record_hash=proof.record_hash if proof else None,
                operation_id=request.operation_id,
            )
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
        document, projection_json = self._append(connection, head, DELIVERY_BOUND, payload)
        self._record(
            connection, request.run_id, request.operation_id, DELIVERY_BOUND, projection_json
        )
        return _projection(document)

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
        request = self._check_delivery(
            run_id, gate, revision, receipt_hash, operation_id, approval_proof, lease
        )
        return self._bind_checked(self._write_connection(), request)

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
            known = {
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
            if set(fields) - known:
                raise InvalidInputError("invalid-delivery-binding")
            requests.append(
                self._check_delivery(
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
        connection = self._write_connection()
        projection: RunProjection | None = None
        for request in requests:
            projection = self._bind_checked(connection, request)
        if projection is None:
            raise InvalidInputError("delivery-binding-empty")
        return projection

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
        require_operation_id(operation_id)
        require_run_id(run_id)
        checked_code = require_transition_code(code)
        checked_lease = coerce_optional_lease(lease)
        connection = self._write_connection()
        head = self._head(connection, run_id, lock=True)
        if checked_lease is not None:
            if checked_lease.run_id != run_id:
                raise LeaseFencedError("lease-fenced")
            self._assert_live(connection, checked_lease)
        replay = self._replay(connection, run_id, operation_id, TRANSITIONED)
        if replay is not None:
            return replay
        if head is None:
            raise RunNotFoundError("run-not-found")
        current = _parse_document(head.projection_json)
        if not isinstance(to, str) or to not in RUN_STATES:
            raise InvalidTransitionError("event-integrity-state-mismatch")
        payload: Document = {"from": current.get("state"), "to": to}
        if checked_code is not None:
            payload["code"] = checked_code
        document, projection_json = self._append(connection, head, TRANSITIONED, payload)
        self._record(connection, run_id, operation_id, TRANSITIONED, projection_json)
        return _projection(document)

    # -- leases ------------------------------------------------------------------------

    def _assert_live(self, connection: Connection, lease: OperationLease) -> Any:
        row = self._operation(connection, lease.run_id, lease.operation_id, lock=True)
        if (
            row is None
            or row.state != "running"
            or row.lease_token != lease.token
            or row.lease_expires_at is None
            or row.lease_expires_at < self._now()
        ):
            raise LeaseFencedError("lease-fenced")
        return row

    def acquire_lease(
        self,
        run_id: str,
        operation_id: str,
        ttl_ms: int,
        *,
        preempt: bool = False,
        exclusive: bool = False,
    ) -> OperationLease:
        require_operation_id(operation_id)
        ttl = require_ttl(ttl_ms)
        _bool_option(preempt, "invalid-lease-option")
        _bool_option(exclusive, "invalid-lease-option")
        require_run_id(run_id)
        connection = self._write_connection()
        self._require_head(connection, run_id, lock=True)
        now = self._now()
        existing = self._operation(connection, run_id, operation_id, lock=True)
        if existing is not None and existing.kind != LEASE:
            # a journal receipt is never turned into a lease (cadence 1.x overwrote it)
            raise OperationConflictError("operation-id-conflict")
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
            )
        lease = OperationLease(
            run_id=run_id, operation_id=operation_id, token=str(uuid.uuid4()), expires_at=now + ttl
        )
        if existing is None:
            connection.execute(
                operations.insert().values(
                    run_id=run_id,
                    operation_id=operation_id,
                    kind=LEASE,
                    state="running",
                    lease_token=lease.token,
                    lease_expires_at=lease.expires_at,
                )
            )
        else:
            connection.execute(
                update(operations)
                .where(operations.c.run_id == run_id, operations.c.operation_id == operation_id)
                .values(
                    state="running",
                    outcome_json=None,
                    lease_token=lease.token,
                    lease_expires_at=lease.expires_at,
                )
            )
        return lease

    def renew_lease(self, lease: OperationLease | Mapping[str, Any], ttl_ms: int) -> OperationLease:
        ttl = require_ttl(ttl_ms)
        checked = coerce_lease(lease)
        connection = self._write_connection()
        self._assert_live(connection, checked)
        expires_at = self._now() + ttl
        connection.execute(
            update(operations)
            .where(
                operations.c.run_id == checked.run_id,
                operations.c.operation_id == checked.operation_id,
                operations.c.lease_token == checked.token,
            )
            .values(lease_expires_at=expires_at)
        )
        return checked.model_copy(update={"expires_at": expires_at})

    def assert_lease(self, lease: OperationLease | Mapping[str, Any]) -> None:
        self._assert_live(self._write_connection(), coerce_lease(lease))

    def _finish_lease(
        self, connection: Connection, lease: OperationLease, state: str, outcome_json: str | None
    ) -> None:
        self._assert_live(connection, lease)
        result = connection.execute(
            update(operations)
            .where(
                operations.c.run_id == lease.run_id,
                operations.c.operation_id == lease.operation_id,
                operations.c.state == "running",
                operations.c.lease_token == lease.token,
            )
            .values(state=state, outcome_json=outcome_json, lease_token=None, lease_expires_at=None)
        )
        if result.rowcount != 1:
            raise LeaseFencedError("lease-fenced")

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
        self._finish_lease(self._write_connection(), checked, "committed", serialized)
        result: dict[str, Any] = json.loads(serialized)
        return result

    def interrupt_lease(self, lease: OperationLease | Mapping[str, Any]) -> None:
        self._finish_lease(self._write_connection(), coerce_lease(lease), "interrupted", None)

    def inspect_operation(self, run_id: str, operation_id: str) -> OperationStatus | None:
        require_operation_id(operation_id)
        require_run_id(run_id)
        connection = self._write_connection()
        self._require_head(connection, run_id, lock=False)
        row = self._operation(connection, run_id, operation_id)
        if row is None:
            return None
        now = self._now()
        if (
            row.state == "running"
            and row.lease_expires_at is not None
            and row.lease_expires_at < now
        ):
            connection.execute(
                update(operations)
                .where(
                    operations.c.run_id == run_id,
                    operations.c.operation_id == operation_id,
                    operations.c.state == "running",
                    operations.c.lease_expires_at < now,
                )
                .values(state="interrupted", lease_token=None, lease_expires_at=None)
            )
            row = self._operation(connection, run_id, operation_id)
            if row is None:
                raise JournalIntegrityError("operation-recovery-invalid")
        if row.state not in ("running", "committed", "interrupted"):
            raise JournalIntegrityError("operation-state-invalid")
        outcome = None
        if row.outcome_json is not None:
            try:
                outcome = json.loads(row.outcome_json)
            except ValueError:
                outcome = None
            if not isinstance(outcome, dict):
                raise JournalIntegrityError("operation-outcome-invalid")
        return OperationStatus(state=row.state, outcome=outcome, expires_at=row.lease_expires_at)

    def recover_expired_leases(self) -> int:
        connection = self._write_connection()
        result = connection.execute(
            update(operations)
            .where(operations.c.state == "running", operations.c.lease_expires_at < self._now())
            .values(state="interrupted", lease_token=None, lease_expires_at=None)
        )
        return int(result.rowcount)

    # -- reading and verifying ---------------------------------------------------------

    def status(self, run_id: str) -> RunProjection:
        require_run_id(run_id)
        head = self._require_head(self._connection(), run_id, lock=False)
        return _projection(_parse_document(head.projection_json))

    def iter_event_rows(self, run_id: str) -> Iterator[Any]:
        """The run's event rows in sequence order, fetched in batches (never all at once)."""
        connection = self._connection()
        result = connection.execution_options(stream_results=True, yield_per=EVENT_BATCH).execute(
            select(
                events.c.sequence,
                events.c.type,
                events.c.payload_json,
                events.c.prior_hash,
                events.c.event_hash,
            )
            .where(events.c.run_id == run_id)
            .order_by(events.c.sequence)
        )
        try:
            yield from result
        finally:
            result.close()

    def iter_events(self, run_id: str) -> Iterator[RunEvent]:
        require_run_id(run_id)
        self._require_head(self._connection(), run_id, lock=False)
        for row in self.iter_event_rows(run_id):
            payload = _event_payload(row, run_id)
            yield RunEvent.model_construct(
                sequence=row.sequence,
                type=row.type,
                payload=payload,
                prior_hash=row.prior_hash,
                hash=row.event_hash,
            )

    def list_events(self, run_id: str) -> list[RunEvent]:
        return list(self.iter_events(run_id))

    def _replay_chain(self, run_id: str) -> Document:
        verifier = ChainVerifier()
        try:
            for row in self.iter_event_rows(run_id):
                verifier.feed(
                    row.sequence,
                    row.type,
                    _event_payload(row, run_id),
                    row.event_hash,
                    row.prior_hash,
                )
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

    def rebuild_projection(self, run_id: str) -> RunProjection:
        require_run_id(run_id)
        self._require_head(self._connection(), run_id, lock=False)
        return _projection(self._replay_chain(run_id))

    def verify_integrity(self, run_id: str) -> RunProjection:
        """Replay the chain and compare it with the stored projection and run columns."""
        require_run_id(run_id)
        connection = self._connection()
        row = connection.execute(
            select(
                runs.c.projection_json,
                runs.c.state,
                runs.c.sequence,
                runs.c.event_hash,
                runs.c.delivery_revision,
                runs.c.terminal_tombstone,
            ).where(runs.c.run_id == run_id)
        ).first()
        if row is None:
            raise RunNotFoundError("run-not-found")
        rebuilt = self._replay_chain(run_id)
        stored = _parse_document(row.projection_json, "run-projection-integrity-mismatch")
        difference = first_difference(rebuilt, stored)
        columns = {
            "state": rebuilt.get("state"),
            "sequence": rebuilt.get("sequence"),
            "event_hash": rebuilt.get("eventHash"),
            "delivery_revision": rebuilt.get("deliveryRevision"),
            "terminal_tombstone": rebuilt.get("terminal"),
        }
        if difference is None:
            for column, expected in columns.items():
                if getattr(row, column) != expected:
                    difference = (f"runs.{column}", expected, getattr(row, column))
                    break
        if difference is not None:
            field, expected, actual = difference
            raise JournalIntegrityError(
                "run-projection-integrity-mismatch",
                f"{field}: expected {expected!r}, stored {actual!r}",
                run_id=run_id,
                sequence=rebuilt.get("sequence"),
                expected=expected,
                actual=actual,
            )
        return _projection(rebuilt)

    def run_ids(self) -> list[str]:
        return [
            r.run_id
            for r in self._connection().execute(select(runs.c.run_id).order_by(runs.c.run_id))
        ]


def _event_payload(row: Any, run_id: str) -> Any:
    try:
        return json.loads(row.payload_json)
    except (TypeError, ValueError):
        raise JournalIntegrityError(
            "event-integrity-hash-chain",
            "payload is not JSON",
            run_id=run_id,
            sequence=row.sequence,
        ) from None


def first_difference(expected: Document, actual: Document) -> tuple[str, Any, Any] | None:
    """The first field where two projections differ (key order included), or None."""
    if js_stringify(expected) == js_stringify(actual):
        return None
    for key in dict.fromkeys([*expected, *actual]):
        if (
            key not in actual
            or key not in expected
            or js_stringify(expected[key]) != js_stringify(actual[key])
        ):
            return key, expected.get(key), actual.get(key)
    return "(key order)", list(expected), list(actual)


__all__ = ["Clock", "RunRepository", "first_difference", "system_clock"]
