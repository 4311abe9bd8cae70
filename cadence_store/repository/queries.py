"""The read side: run listings, counts and run details (Cosmic Python's "views").

`RunRepository.list_runs` / `run_detail` / `counts` call these on the repository's
connection; `RunStore` runs each call inside one read snapshot (`engine.read_snapshot`),
so a listing, a detail or the counts never mix two states of the store.

The statements are Core against the models' tables, compiled once and run on the DB-API
cursor by `sql.Statements`, like the repository's own: SQLAlchemy's `Connection.execute`
would begin its own transaction, which on a `configure_engine` engine is a write lock
(BEGIN IMMEDIATE) inside the read snapshot. A listing's statement depends on which
filters it has, so each filter shape is a named statement of its own (a bounded number:
stages x states x four optional filters), values always bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from pydantic import ValidationError

from ..errors import JournalIntegrityError
from ..journal import RunEvent, RunProjection
from ..journal.values import ApprovalProof
from ..journal.views import (
    BindingRecord,
    OperationRecord,
    RunDetail,
    RunListing,
    StoreCounts,
    lease_standing,
    state_timeline,
    stored_outcome,
    stored_projection,
)
from ..journal.vocabulary import OPERATION_STATE_NAMES, OperationKind, OperationState
from ..storage.read_statements import listing_statement
from ..storage.statements import Statements


class _CountsRow(NamedTuple):
    runs: int
    events: int
    operations: int
    bindings: int


class _StateCountRow(NamedTuple):
    state: str
    runs: int


class _ListedRunRow(NamedTuple):
    run_id: str
    projection_json: str


class _BindingRow(NamedTuple):
    gate: str
    revision: int
    receipt_hash: str
    operation_id: str
    approval_revision: int | None
    contract_hash: str | None
    record_hash: str | None


class _OperationRow(NamedTuple):
    operation_id: str
    kind: str
    state: str
    outcome_json: str | None
    has_lease_token: bool | int  # SQLite answers 0 or 1
    lease_expires_at: int | None
    lease_fence: int | None


def _listing_parameters(listing: RunListing) -> dict[str, Any]:
    parameters: dict[str, Any] = {}
    for name, values in (("stage", listing.stages), ("state", listing.states)):
        parameters.update({f"{name}_{i}": value for i, value in enumerate(values)})
    optional = {
        "change": listing.change,
        "root_hash": listing.root_hash,
        "after": listing.after,
        "limit": listing.limit,
        "updated_after": listing.updated_after,
        "updated_before": listing.updated_before,
    }
    parameters.update({key: value for key, value in optional.items() if value is not None})
    return parameters


def list_runs(sql: Statements, listing: RunListing) -> list[RunProjection]:
    """The stored projections of the runs that match, in run id order."""
    rows = sql.all(listing_statement(listing), **_listing_parameters(listing))
    listed = [_ListedRunRow(*row) for row in rows]
    return [stored_projection(row.projection_json, row.run_id) for row in listed]


def counts(sql: Statements) -> StoreCounts:
    totals = sql.one("count_rows")
    assert totals is not None  # an aggregate always returns its row
    row = _CountsRow(*totals)
    by_state = [_StateCountRow(*state_row) for state_row in sql.all("count_runs_by_state")]
    return StoreCounts(
        runs=int(row.runs),
        events=int(row.events),
        operations=int(row.operations),
        bindings=int(row.bindings),
        by_state={state_row.state: int(state_row.runs) for state_row in by_state},
    )


def _binding(row: _BindingRow, run_id: str) -> BindingRecord:
    try:
        proof = None
        if row.approval_revision is not None:
            proof = ApprovalProof(
                revision=row.approval_revision,
                contract_hash=row.contract_hash,
                record_hash=row.record_hash,
            )
        return BindingRecord(
            gate=row.gate,
            revision=row.revision,
            receipt_hash=row.receipt_hash,
            operation_id=row.operation_id,
            approval_proof=proof,
        )
    except ValidationError:
        # what `verify_integrity` reports for binding rows the chain does not explain
        raise JournalIntegrityError("run-projection-integrity-mismatch", run_id=run_id) from None


def _operation(row: _OperationRow, run_id: str, now: int) -> OperationRecord:
    if row.state not in OPERATION_STATE_NAMES:
        raise JournalIntegrityError("operation-state-invalid", run_id=run_id)
    return OperationRecord(
        operation_id=row.operation_id,
        kind=row.kind,
        state=OperationState(row.state),
        lease=lease_standing(row.state, bool(row.has_lease_token), row.lease_expires_at, now),
        expires_at=row.lease_expires_at,
        fence=row.lease_fence if row.kind == OperationKind.LEASE else None,
        outcome=stored_outcome(row.outcome_json, run_id),
    )


def run_detail(
    sql: Statements, projection: RunProjection, events_of_run: Iterable[RunEvent], now: int
) -> RunDetail:
    """A run's detail around its (already read) projection; `now` judges lease liveness."""
    run_id = projection.run_id
    bindings = [_BindingRow(*row) for row in sql.all("binding_rows_of_run", run_id=run_id)]
    operation_rows = [
        _OperationRow(*row) for row in sql.all("operation_rows_of_run", run_id=run_id)
    ]
    times = sql.one("run_times", run_id=run_id)
    created_at, updated_at = (None, None) if times is None else times
    return RunDetail(
        projection=projection,
        delivery_bindings=tuple(_binding(row, run_id) for row in bindings),
        operations=tuple(_operation(row, run_id, now) for row in operation_rows),
        timeline=state_timeline(events_of_run),
        created_at=created_at,
        updated_at=updated_at,
    )


__all__ = ["counts", "list_runs", "listing_statement", "run_detail"]
