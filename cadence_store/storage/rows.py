"""The row types of the select statements: their columns, by name.

Each `Query` names its row type, and `Statements` returns its rows as that type, so the
layers above read rows by name, never by position; a test checks that each type has as
many fields as its statement has columns.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class LockedRow(NamedTuple):
    locked: object


class HeadRow(NamedTuple):
    run_id: str
    root_hash: str
    stage: str
    projection_json: str
    sequence: int
    event_hash: str


class LockedRunTimeRow(NamedTuple):
    run_id: str
    now: int  # the database server's clock, read after the row lock


class OperationRow(NamedTuple):
    kind: str
    state: str
    outcome_json: str | None
    lease_token: str | None
    lease_expires_at: int | None
    lease_fence: int | None


class BatchReceiptRow(NamedTuple):
    """A receipt as a batch of appends reads it (its pair, and what decides a replay)."""

    run_id: str
    operation_id: str
    kind: str
    state: str
    outcome_json: str | None


def with_server_time(*columns: Any) -> tuple[OperationRow, int]:
    """An operation row, and the database server's clock read after its row lock (the
    statement's last column)."""
    return OperationRow(*columns[:-1]), int(columns[-1])


class StartReceiptRow(NamedTuple):
    run_id: str
    kind: str
    state: str
    outcome_json: str | None
    lookup_key: str | None  # None: the run is of another root hash or stage


class RunProjectionRow(NamedTuple):
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


class LocatedReceiptRow(NamedTuple):
    sequence: int
    operation_id: str
    outcome_json: str | None
    other_shape: int | None  # NULL: a journal receipt's row (committed, no lease)


class EventRow(NamedTuple):
    sequence: int
    type: str
    payload_json: str
    prior_hash: str
    event_hash: str
    recorded_at: int | None


class AppendedRow(NamedTuple):
    advanced: int  # runs advanced: 1, or 0 when nothing was written


class CountsRow(NamedTuple):
    runs: int
    events: int
    operations: int
    bindings: int


class StateCountRow(NamedTuple):
    state: str
    runs: int


class BindingDetailRow(NamedTuple):
    gate: str
    revision: int
    receipt_hash: str
    operation_id: str
    approval_revision: int | None
    contract_hash: str | None
    record_hash: str | None


class OperationDetailRow(NamedTuple):
    operation_id: str
    kind: str
    state: str
    outcome_json: str | None
    has_lease_token: bool | int  # SQLite answers 0 or 1
    lease_expires_at: int | None
    lease_fence: int | None


class RunTimesRow(NamedTuple):
    created_at: int | None
    updated_at: int | None


class ListedRunRow(NamedTuple):
    run_id: str
    projection_json: str
    created_at: int | None
    updated_at: int | None


class CountRow(NamedTuple):
    rows: int


class UnnumberedRow(NamedTuple):
    """An event without a feed position exists; who may give it one (`FEED_UNNUMBERED`)."""

    role_may_number: bool  # the role may update positions, on a server that takes writes
    numbers_here: bool  # and this transaction can: read-write, READ COMMITTED


class FeedRow(NamedTuple):
    position: int
    run_id: str
    sequence: int
    type: str
    payload_json: str
    prior_hash: str
    event_hash: str
    recorded_at: int | None


class FollowerPositionRow(NamedTuple):
    position: int


class LeafRow(NamedTuple):
    """A feed item as a tree leaf: its position and the three fields of its leaf data."""

    position: int
    run_id: str
    sequence: int
    event_hash: str


class TreeTileRow(NamedTuple):
    tile_level: int
    tile_index: int
    width: int
    hashes: bytes


class CheckpointRow(NamedTuple):
    checkpoint_id: int
    tree_size: int
    origin: str
    root_hash: str
    note: str
    recorded_at: int


class TreeSizeRow(NamedTuple):
    tree_size: int  # the highest feed position numbered (0: none)


class EventPlaceRow(NamedTuple):
    position: int | None
    event_hash: str


class NewestSequenceRow(NamedTuple):
    sequence: int


class ArchivableRunRow(NamedTuple):
    """A finished run an archive may take: its head, and when its last event was
    recorded (the run row's `updated_at` for an event cadence 1.x wrote)."""

    run_id: str
    sequence: int
    event_hash: str
    last_event_at: int | None


class ArchivedRunIdRow(NamedTuple):
    run_id: str


class ArchivedCountRow(NamedTuple):
    archived: int


class EventPositionRow(NamedTuple):
    sequence: int
    position: int | None


class RunScopeRow(NamedTuple):
    run_id: str
    root_hash: str
    stage: str
    lookup_key: str
