"""Transitions sent as one batch: `RunRepository.transition_many`.

A `transition` call cannot return before the database has answered it: whether its
operation id is recorded already (a replay) decides what it writes, so each call costs a
round trip on PostgreSQL. A batch knows all its operation ids at once and asks once: it
locks its runs' rows (in run id order, `core.py`'s lock order) and reads every
receipt, in one round trip on PostgreSQL (pipeline mode). It then decides each request in
order, in memory, as `transition_once` would decide it in the same transaction. Only then
is anything written: the runs' heads, each by compare-and-set from the head it was locked
at to its last new one, then the events, then the receipts, each written at once
(`storage/batch_statements.py`: one statement on PostgreSQL, `executemany` on SQLite). A
request that would fail fails the whole call before any row of it is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import (
    InvalidTransitionError,
    JournalIntegrityError,
    OperationConflictError,
)
from ..journal import RUN_STATES, RunProjection
from ..journal.documents import built_projection, stored_projection
from ..journal.validation import CheckedTransition, check_transitions
from ..journal.values import Transition
from ..journal.vocabulary import COMMITTED
from ..storage.batch_statements import (
    ADVANCE_RUNS,
    INSERT_EVENTS,
    INSERT_RECEIPTS,
    PAIR_FIELDS,
    RECEIPTS_OF_BATCH,
)
from ..storage.rows import BatchReceiptRow
from ..storage.run_statements import HEAD_FOR_UPDATE
from ..storage.statements import Statements, json_rows
from .archived import missing_run
from .core import TRANSITIONED, JournalAccess, NextEvent, transition_payload
from .transaction import RunHead

_Receipt = tuple[str, str]  # (run id, operation id)


@dataclass(slots=True)
class _RunPlan:
    """What a batch appends to one run: the head it locked, and the events after it
    (each with its operation id; `last` the newest)."""

    locked: RunHead
    last: NextEvent
    events: list[tuple[NextEvent, str]] = field(default_factory=list)


class TransitionBatches:
    """`RunRepository`'s batches of transitions (no lease: a fenced transition is a call
    of its own), in `access`'s transaction."""

    __slots__ = ("_access",)

    def __init__(self, access: JournalAccess) -> None:
        self._access = access

    def transition_many_once(
        self, requests: Iterable[Transition | Mapping[str, Any]]
    ) -> list[tuple[RunProjection, bool]]:
        """Lock and read once, decide each request in memory, then write the plans (see
        the module's docstring)."""
        checked = check_transitions(requests)
        if not checked:
            return []
        sql = self._access.write_statements()
        heads, receipts = self._lock_and_read(sql, checked)
        plans: dict[str, _RunPlan] = {}
        upserts: set[_Receipt] = set()
        results = [self._decide(request, heads, receipts, plans, upserts) for request in checked]
        if plans:
            self._write_plans(sql, plans, upserts)
        return results

    def _lock_and_read(
        self, sql: Statements, requests: list[CheckedTransition]
    ) -> tuple[dict[str, RunHead | None], dict[_Receipt, BatchReceiptRow | None]]:
        """The runs' heads (locked, in run id order; kept ones as this transaction left
        them) and the requests' receipts, read after the locks: one round trip."""
        transaction = self._access.transaction
        heads: dict[str, RunHead | None] = {}
        unlocked = []
        for run_id in sorted({request.run_id for request in requests}):
            kept = transaction.kept_head(run_id)
            if kept is None:
                unlocked.append(run_id)
            else:
                heads[run_id] = kept
        pairs = dict.fromkeys((request.run_id, request.operation_id) for request in requests)
        wanted = [dict(zip(PAIR_FIELDS, pair, strict=True)) for pair in pairs]
        *locked, found = sql.raw_rows_of_each(
            [
                *((HEAD_FOR_UPDATE, {"run_id": run_id}) for run_id in unlocked),
                (RECEIPTS_OF_BATCH, {"rows": json_rows(wanted, PAIR_FIELDS)}),
            ]
        )
        for run_id, rows in zip(unlocked, locked, strict=True):
            row = next((HEAD_FOR_UPDATE.row(*columns) for columns in rows), None)
            heads[run_id] = self._access.head_of(run_id, row, keep=True)
        stored = {}
        for columns in found:
            receipt = RECEIPTS_OF_BATCH.row(*columns)
            stored[receipt.run_id, receipt.operation_id] = receipt
        receipts = {pair: stored.get(pair) for pair in pairs}
        return heads, receipts

    def _decide(
        self,
        request: CheckedTransition,
        heads: dict[str, RunHead | None],
        receipts: dict[_Receipt, BatchReceiptRow | None],
        plans: dict[str, _RunPlan],
        upserts: set[_Receipt],
    ) -> tuple[RunProjection, bool]:
        """One request, in `transition_once`'s order: the receipt (a replay, or an
        operation id of another kind), the run, the state, the move."""
        run_id, to, operation_id = request.run_id, request.to, request.operation_id
        pair = (run_id, operation_id)
        receipt = receipts[pair]
        if receipt is not None:
            if receipt.kind != TRANSITIONED:
                raise OperationConflictError("operation-id-conflict")
            if receipt.state == COMMITTED and receipt.outcome_json is not None:
                return stored_projection(receipt.outcome_json), False
        head = heads[run_id]
        if head is None:
            raise missing_run(self._access.write_statements(), run_id)
        if not isinstance(to, str) or to not in RUN_STATES:
            raise InvalidTransitionError("event-integrity-state-mismatch")
        event = NextEvent.after(
            head, TRANSITIONED, transition_payload(head.document(), to, request.code)
        )
        plan = plans.get(run_id)
        if plan is None:
            plan = plans[run_id] = _RunPlan(head, event)
        plan.events.append((event, operation_id))
        plan.last = event
        heads[run_id] = event.next_head()
        if receipt is not None:
            upserts.add(pair)  # a row of this operation id, not committed (an older writer's)
        # a later request of the same operation id replays this one
        receipts[pair] = BatchReceiptRow(
            run_id, operation_id, TRANSITIONED, COMMITTED, event.projection_json
        )
        return built_projection(event.document), True

    def _write_plans(
        self, sql: Statements, plans: dict[str, _RunPlan], upserts: set[_Receipt]
    ) -> None:
        """Each run's head moved from the head it was locked at to its last one, then
        every event and receipt of the batch."""
        now = self._access.append_now()
        advances = []
        for plan in plans.values():
            advance = plan.last.parameters()
            advance["prior_sequence"] = plan.locked.sequence
            advance["prior_hash"] = plan.locked.event_hash
            advance["now"] = now
            advances.append(advance)
        if sql.write_rows(ADVANCE_RUNS, advances) != len(advances):
            # a run row is not the head this transaction locked: writing would fork it
            locked = next(iter(plans.values())).locked
            raise JournalIntegrityError(
                "run-projection-integrity-mismatch",
                run_id=locked.run_id,
                sequence=locked.sequence,
            )
        appended = [pair for plan in plans.values() for pair in plan.events]
        sql.write_rows(INSERT_EVENTS, [event.parameters() for event, _ in appended])
        inserted = []
        for event, operation_id in appended:
            run_id, sequence = event.head.run_id, event.head.sequence + 1
            if (run_id, operation_id) in upserts:
                self._access.record(
                    sql, run_id, operation_id, TRANSITIONED, event.projection_json, sequence
                )
            else:
                inserted.append(
                    {
                        "run_id": run_id,
                        "operation_id": operation_id,
                        "kind": TRANSITIONED,
                        "outcome_json": event.projection_json,
                        "sequence": sequence,
                    }
                )
        sql.write_rows(INSERT_RECEIPTS, inserted)
        transaction = self._access.transaction
        transaction.note_append(count=len(appended))
        for plan in plans.values():
            transaction.keep_head(plan.last.next_head())
