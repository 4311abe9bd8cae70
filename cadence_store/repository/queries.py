"""The read side: run listings, counts and run details (Cosmic Python's "views").

`RunRepository.list_runs` / `run_detail` / `counts` call these on the repository's
connection; `RunStore` runs each call inside one read snapshot (`engine.read_snapshot`),
so a listing, a detail or the counts never mix two states of the store.

The statements are Core against the models' tables, compiled once and run on the DB-API
cursor by `storage.statements.Statements`, like the repository's own: SQLAlchemy's
`Connection.execute` would begin its own transaction, which on a `configure_engine`
engine is a write lock (BEGIN IMMEDIATE) inside the read snapshot. A listing's statement
depends on which filters it has, so each filter shape is a named statement of its own (a
bounded number: stages x states x four optional filters), values always bound."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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
from ..storage.read_statements import (
    BINDING_ROWS_OF_RUN,
    COUNT_ROWS,
    COUNT_RUNS_BY_STATE,
    OPERATION_ROWS_OF_RUN,
    RUN_TIMES,
    listing_statement,
)
from ..storage.retention_statements import ARCHIVED_COUNT
from ..storage.rows import BindingDetailRow, OperationDetailRow
from ..storage.statements import Statements


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
    return [projection for projection, _, _ in listed_runs(sql, listing)]


def listed_runs(
    sql: Statements, listing: RunListing, *, backwards: bool = False
) -> list[tuple[RunProjection, int | None, int | None]]:
    """The runs that match, each (its stored projection, created_at, updated_at), in run
    id order; `backwards`: those before `listing.after`, in descending order (a keyset
    page back)."""
    statement = listing_statement(listing, backwards=backwards)
    rows = sql.all(statement, **_listing_parameters(listing))
    return [
        (stored_projection(row.projection_json, row.run_id), row.created_at, row.updated_at)
        for row in rows
    ]


def counts(sql: Statements) -> StoreCounts:
    row = sql.one(COUNT_ROWS)
    assert row is not None  # an aggregate always returns its row
    by_state = sql.all(COUNT_RUNS_BY_STATE)
    archived = sql.one(ARCHIVED_COUNT)
    return StoreCounts(
        runs=int(row.runs),
        events=int(row.events),
        operations=int(row.operations),
        bindings=int(row.bindings),
        by_state={state_row.state: int(state_row.runs) for state_row in by_state},
        archived=0 if archived is None else int(archived.archived),
    )


def binding_record(row: BindingDetailRow, run_id: str) -> BindingRecord:
    """A `delivery_bindings` row as shown; `run-projection-integrity-mismatch` for one
    the chain could not have written."""
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


def operation_record(row: OperationDetailRow, run_id: str, now: int) -> OperationRecord:
    """An `operations` row as shown; `now` judges whether its lease is live."""
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
    bindings = sql.all(BINDING_ROWS_OF_RUN, run_id=run_id)
    operation_rows = sql.all(OPERATION_ROWS_OF_RUN, run_id=run_id)
    times = sql.one(RUN_TIMES, run_id=run_id)
    created_at, updated_at = (None, None) if times is None else times
    return RunDetail(
        projection=projection,
        delivery_bindings=tuple(binding_record(row, run_id) for row in bindings),
        operations=tuple(operation_record(row, run_id, now) for row in operation_rows),
        timeline=state_timeline(events_of_run),
        created_at=created_at,
        updated_at=updated_at,
    )


__all__ = [
    "binding_record",
    "counts",
    "list_runs",
    "listed_runs",
    "listing_statement",
    "operation_record",
    "run_detail",
]
