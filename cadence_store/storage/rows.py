"""One row type per select statement of `sql.STATEMENTS`: its columns, by name.

The repository reads rows through these (`Statements.row(name, RowType, ...)`) instead
of by position; `ROW_TYPES` says which type each statement returns, and a test checks
that each type has as many fields as its statement has columns.
"""

from __future__ import annotations

from typing import Final, NamedTuple


class LockedRow(NamedTuple):
    locked: object


class HeadRow(NamedTuple):
    run_id: str
    root_hash: str
    stage: str
    projection_json: str
    sequence: int
    event_hash: str


class TimedHeadRow(NamedTuple):
    run_id: str
    root_hash: str
    stage: str
    projection_json: str
    sequence: int
    event_hash: str
    now: int  # the database server's clock, read after the row lock


class OperationRow(NamedTuple):
    kind: str
    state: str
    outcome_json: str | None
    lease_token: str | None
    lease_expires_at: int | None
    lease_fence: int | None


class TimedOperationRow(NamedTuple):
    kind: str
    state: str
    outcome_json: str | None
    lease_token: str | None
    lease_expires_at: int | None
    lease_fence: int | None
    now: int  # the database server's clock, read after the row lock


class StartReceiptRow(NamedTuple):
    run_id: str
    kind: str
    state: str
    outcome_json: str | None
    lookup_key: str | None  # None: the run is of another root hash or stage


class RunByKeyRow(NamedTuple):
    run_id: str
    projection_json: str


class KeyOwnerRow(NamedTuple):
    run_id: str


class BindingReceiptRow(NamedTuple):
    receipt_hash: str
    approval_revision: int | None
    contract_hash: str | None
    record_hash: str | None


class VerifyColumnsRow(NamedTuple):
    projection_json: str
    root_hash: str
    stage: str
    change_name: str | None
    provisional_key: str | None
    state: str
    sequence: int
    event_hash: str
    delivery_revision: int | None
    terminal_tombstone: str | None


class BindingOfRunRow(NamedTuple):
    gate: str
    revision: int
    receipt_hash: str
    approval_revision: int | None
    contract_hash: str | None
    record_hash: str | None


class RunIdRow(NamedTuple):
    run_id: str


class OperationOfRunRow(NamedTuple):
    operation_id: str
    kind: str
    state: str
    outcome_json: str | None
    lease_token: str | None
    lease_expires_at: int | None
    lease_fence: int | None


class EventRow(NamedTuple):
    sequence: int
    type: str
    payload_json: str
    prior_hash: str
    event_hash: str
    recorded_at: int | None


class AppendedRow(NamedTuple):
    advanced: int  # runs advanced: 1, or 0 when nothing was written


ROW_TYPES: Final[dict[str, type[tuple[object, ...]]]] = {
    "advisory_lock": LockedRow,
    "append_recorded": AppendedRow,
    "head": HeadRow,
    "head_for_update": HeadRow,
    "head_for_update_timed": TimedHeadRow,
    "operation": OperationRow,
    "operation_for_update": OperationRow,
    "operation_timed": TimedOperationRow,
    "operation_for_update_timed": TimedOperationRow,
    "start_receipts": StartReceiptRow,
    "run_by_key": RunByKeyRow,
    "owner_of_key": KeyOwnerRow,
    "binding": BindingReceiptRow,
    "verify_columns": VerifyColumnsRow,
    "bindings_of_run": BindingOfRunRow,
    "run_ids": RunIdRow,
    "operations_of_run": OperationOfRunRow,
    "events_of_run": EventRow,
    "events_of_run_page": EventRow,
    "events_of_run_after": EventRow,
}
