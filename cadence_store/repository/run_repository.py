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

The hot path runs Core statements, compiled once (`storage/statements.py`), on the
DB-API cursor of the session's connection: the ORM's and SQLAlchemy's per-call work was
the largest cost of an append (NOTES-engines), and an append only needs the locked run
row, one INSERT and one UPDATE — O(1) in the chain's length.

One job per module: `core` (the transaction, clock, locks, the chain's append), `leases`,
`bindings` (delivery bindings), `reading` (reads and verification), `feed`; this module
keeps the runs, their changes and transitions. Input rules are in `journal.validation`,
stored JSON is decoded by `journal.documents`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import (
    InvalidTransitionError,
    JournalIntegrityError,
    OperationConflictError,
    RunNotFoundError,
)
from ..journal import (
    RUN_STATES,
    TERMINAL_STATES,
    ZERO_EVENT_HASH,
    OperationLease,
    RunProjection,
    apply_event,
    hash_event,
    js_stringify,
)
from ..journal.documents import (
    Document,
    built_projection,
    parse_document,
    projection_of,
)
from ..journal.run_ids import new_run_id
from ..journal.validation import (
    check_delivery,
    lookup_keys,
    require_change,
    require_operation_id,
    require_run_id,
    require_stage,
    require_transition_input,
)
from ..journal.vocabulary import (
    CHANGE_BOUND,
    COMMITTED,
    DELIVERY_BOUND,
    INTERRUPTED,
    RUN_CREATED,
)
from ..journal.vocabulary import DESIGN_STAGE as DESIGN
from ..storage.append_statements import INSERT_EVENT, INSERT_RUN
from ..storage.rows import RunProjectionRow
from ..storage.run_statements import (
    BIND_CHANGE,
    OWNER_OF_KEY,
    REKEY_RUN,
    RUN_BY_KEY,
    START_RECEIPTS,
)
from ..storage.statements import Statements
from ..telemetry import instrument
from .batches import TransitionBatches
from .bindings import DeliveryBindings
from .core import (
    EVENT_BATCH,
    EVENT_REFUSED,
    LEASE,
    START,
    TRANSITIONED,
    Clock,
    ExpiryNeeded,
    RepositoryCore,
    journal_write,
    system_clock,
    transition_payload,
)
from .feed import RunFeed
from .leases import LeaseRules, fenced
from .reading import RunReading
from .transaction import RunHead


@instrument
class RunRepository(TransitionBatches, DeliveryBindings, LeaseRules, RunReading, RunFeed):
    """The journal's rules on a caller's session; one method call reads and writes rows,
    it never commits."""

    # -- runs --------------------------------------------------------------------------

    @journal_write
    def start_run(
        self,
        stage: str,
        *,
        operation_id: str,
        change: str | None = None,
        provisional_key: str | None = None,
        provisional_aliases: Iterable[str] | None = None,
    ) -> RunProjection:
        """Start a run of `stage` (`abel-design` or `abel-implement`) and return its projection.

        The run is found again by its `change`, or by its `provisional_key` (and
        `provisional_aliases`) for a design run without a change yet: a second start with
        the same key returns that run. The same `operation_id` replays the recorded run.
        Needs a root hash (`invalid-root-hash` otherwise)."""
        require_operation_id(operation_id)
        require_stage(stage)
        keys = lookup_keys(stage, change, provisional_key, provisional_aliases)
        primary_key, *_aliases = keys  # a new run row holds the first; all are looked up
        root_hash = self._require_root()
        sql = self._write_statements()
        scope = f"{root_hash}\x00{stage}\x00"
        self._advisory_locks(sql, [scope + key for key in keys] + [f"{scope}op:{operation_id}"])

        receipts = [
            receipt
            for receipt in sql.all(
                START_RECEIPTS,
                root_hash=root_hash,
                stage=stage,
                operation_id=operation_id,
            )
            if receipt.lookup_key is not None  # a run of this root and stage
        ]
        if receipts:
            replay = next(
                (
                    r
                    for r in receipts
                    if r.kind == START
                    and r.state == COMMITTED
                    and r.outcome_json is not None
                    and r.lookup_key in keys
                ),
                None,
            )
            if len(receipts) != 1 or replay is None:
                raise OperationConflictError("operation-id-conflict")
            document = parse_document(replay.outcome_json, "operation-outcome-invalid")
            if document["runId"] != replay.run_id:
                raise JournalIntegrityError("operation-outcome-invalid")
            return projection_of(document)

        existing: RunProjectionRow | None = None
        for key in keys:
            candidate = sql.one(RUN_BY_KEY, root_hash=root_hash, stage=stage, lookup_key=key)
            if (
                candidate is not None
                and existing is not None
                and candidate.run_id != existing.run_id
            ):
                raise OperationConflictError("run-lookup-conflict")
            existing = existing or candidate
        if existing is not None:
            existing_id, existing_json = existing.run_id, existing.projection_json
            document = parse_document(existing_json)
            if stage == DESIGN and document.get("state") in TERMINAL_STATES:
                # a finished design run gives its key up to a new run
                sql.write(REKEY_RUN, run_id=existing_id, lookup_key=f"terminal:{existing_id}")
            else:
                self._record(
                    sql, existing_id, operation_id, START, existing_json, document.get("sequence")
                )
                return projection_of(document)

        run_id = new_run_id()
        payload: Document = {"runId": run_id, "rootHash": root_hash, "stage": stage}
        if change is not None:
            payload["change"] = change
        if provisional_key is not None:
            payload["provisionalKey"] = provisional_key
        event_hash = hash_event(1, RUN_CREATED, payload, ZERO_EVENT_HASH)
        created = apply_event(None, 1, RUN_CREATED, payload, event_hash)
        assert created is not None
        projection_json = js_stringify(created)
        # the run row and its first event, from one set of values (as an append's are)
        first = {
            "run_id": run_id,
            "root_hash": root_hash,
            "stage": stage,
            "lookup_key": primary_key,
            "change_name": change,
            "provisional_key": provisional_key,
            "state": created["state"],
            "sequence": 1,
            "type": RUN_CREATED,
            "payload_json": js_stringify(payload),
            "prior_hash": ZERO_EVENT_HASH,
            "event_hash": event_hash,
            "projection_json": projection_json,
            "now": self._append_now(),
        }
        sql.write(INSERT_RUN, **first)
        sql.write(INSERT_EVENT, **first)
        self.transaction.note_append()
        self._record(sql, run_id, operation_id, START, projection_json, 1)
        return built_projection(created)

    @journal_write
    def bind_change(self, run_id: str, change: str, *, operation_id: str) -> RunProjection:
        """Give the design run `run_id` its `change` (a `change-bound` event); returns the
        projection. A run that cannot take a change (an implement run, or one that has a
        change) is refused with `change-binding-not-allowed`."""
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
        if current.get("stage") != DESIGN or not current.get("provisionalKey"):
            raise InvalidTransitionError("change-binding-not-allowed")
        owner = sql.one(
            OWNER_OF_KEY,
            root_hash=head.root_hash,
            stage=head.stage,
            lookup_key=f"change:{change}",
        )
        if owner is not None and owner.run_id != run_id:
            raise OperationConflictError("change-run-already-exists")
        sql.write(BIND_CHANGE, run_id=run_id, lookup_key=f"change:{change}", change_name=change)
        document, projection_json = self._append(sql, head, CHANGE_BOUND, {"change": change})
        self._record(sql, run_id, operation_id, CHANGE_BOUND, projection_json, document["sequence"])
        return built_projection(document)

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
        """Move the run to state `to` (a `state-transitioned` event); returns the projection.

        `code` is the pause code recorded with `paused`. An illegal move raises
        `invalid-run-transition:FROM:TO`, an unknown state `event-integrity-state-mismatch`
        (see the transition table). The same `operation_id` replays the recorded outcome.
        `lease`: refused with `lease-fenced` unless it is the operation's live lease."""
        projection, _ = self.transition_once(
            run_id, to, operation_id=operation_id, code=code, lease=lease
        )
        return projection

    @journal_write
    def transition_once(
        self,
        run_id: str,
        to: str,
        *,
        operation_id: str,
        code: str | None = None,
        lease: OperationLease | Mapping[str, Any] | None = None,
    ) -> tuple[RunProjection, bool]:
        """`transition`, and whether it appended a new event: `(projection, appended)`.

        `appended` is False when the operation id was already recorded (a retried
        request): the recorded projection comes back and nothing is written. This is how
        a host `Session` (or `AsyncRunRepository` in an `AsyncSession`) knows whether to
        add its own rows, exactly once per event::

            run, appended = runs.transition_once(run_id, "paused", operation_id=request_id)
            if appended:
                session.add(AuditRow(run_id=run_id, request_id=request_id))
        """
        _, _, checked_code, checked_lease = require_transition_input(
            run_id, operation_id, code, lease
        )
        transaction = self.transaction
        sql = transaction.statements(write=True)
        to_a_state = isinstance(to, str) and to in RUN_STATES
        if to_a_state and checked_lease is None:
            # After the head this store's last commit left the run at, without reading
            # the row: the write names that whole head, and lands only if the row still
            # holds it and the operation id has no receipt.
            projection = self._transition_after(
                sql, transaction.known_head(run_id), to, checked_code, operation_id, known=True
            )
            if projection is not None:
                return projection, True
        head = self._head(sql, run_id, lock=True)
        if checked_lease is not None:
            if checked_lease.run_id != run_id:
                raise fenced(checked_lease, f"it is a lease of another run than {run_id}")
            self._assert_live(sql, checked_lease)
        if to_a_state:
            # The common case, in one write that also checks the receipt: it writes
            # nothing when the operation id has a row already.
            projection = self._transition_after(sql, head, to, checked_code, operation_id)
            if projection is not None:
                return projection, True
        replay = self._replay(sql, run_id, operation_id, TRANSITIONED)
        if replay is not None:
            return replay, False
        if head is None:
            raise RunNotFoundError("run-not-found")
        if not isinstance(to, str) or to not in RUN_STATES:
            raise InvalidTransitionError("event-integrity-state-mismatch")
        # No committed receipt: an uncommitted row of this operation id, or a head that
        # moved. From the stored head, with the receipt upserted (or the error raised).
        self._forget_head(run_id)
        head = self._require_head(sql, run_id, lock=True)
        payload = transition_payload(head.document(), to, checked_code)
        document, projection_json = self._append(sql, head, TRANSITIONED, payload)
        self._record(sql, run_id, operation_id, TRANSITIONED, projection_json, document["sequence"])
        return built_projection(document), True

    def _transition_after(
        self,
        sql: Statements,
        head: RunHead | None,
        to: str,
        code: str | None,
        operation_id: str,
        *,
        known: bool = False,
    ) -> RunProjection | None:
        """The transition to `to` appended after `head` with the committed receipt of
        `operation_id` (`_append_event`; `known`: a remembered head), as the run's
        projection after it. None when there is no head, nothing was written, or the head
        does not allow the event: what follows decides (a replay first)."""
        if head is None:
            return None
        current = head.document()
        try:
            appended = self._append_event(
                sql,
                head,
                current,
                TRANSITIONED,
                transition_payload(current, to, code),
                operation_id=operation_id,
                known=known,
            )
        except EVENT_REFUSED:
            return None
        if appended is None:
            return None
        document, _ = appended
        return built_projection(document)


__all__ = [
    "CHANGE_BOUND",
    "COMMITTED",
    "DELIVERY_BOUND",
    "EVENT_BATCH",
    "INTERRUPTED",
    "LEASE",
    "START",
    "TRANSITIONED",
    "Clock",
    "ExpiryNeeded",
    "RepositoryCore",
    "RunRepository",
    "check_delivery",
    "system_clock",
]
