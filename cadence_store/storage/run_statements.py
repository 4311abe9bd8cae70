"""The statements of a run's head, its operations and leases, its bindings and its
verification: each a typed `Query` (with its row type) or a `Write`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final

from sqlalchemy import and_, bindparam, case, func, literal, literal_column, null, select, update
from sqlalchemy.sql import ClauseElement, Select

from ..journal.verification import BINDING_COLUMNS
from ..journal.vocabulary import (
    COMMITTED,
    INTERRUPTED,
    JOURNAL_RECEIPT_KIND_VALUES,
    KIND_LEASE,
    RUNNING,
)
from .append_statements import OPERATION_MATCH, RUN_MATCH
from .backends import Backend
from .backends.postgresql import server_time_ms
from .models import EVENT_COLUMNS, delivery_bindings, events, operations, runs
from .rows import (
    BindingOfRunRow,
    BindingReceiptRow,
    EventRow,
    HeadRow,
    KeyOwnerRow,
    LocatedReceiptRow,
    LockedRow,
    LockedRunTimeRow,
    OperationOfRunRow,
    OperationRow,
    RunIdRow,
    RunProjectionRow,
    StartReceiptRow,
    VerifyColumnsRow,
    with_server_time,
)
from .statements import Query, Row, Write, bound

_RUN = RUN_MATCH
_OPERATION = OPERATION_MATCH
_HEAD_COLUMNS = (
    runs.c.run_id,
    runs.c.root_hash,
    runs.c.stage,
    runs.c.projection_json,
    runs.c.sequence,
    runs.c.event_hash,
)
# a run by its lookup key, unique per root hash and stage
_RUN_BY_KEY = (
    runs.c.root_hash == bindparam("root_hash"),
    runs.c.stage == bindparam("stage"),
    runs.c.lookup_key == bindparam("lookup_key"),
)
_LEASE_GRANT = ("lease_token", "lease_expires_at", "lease_fence")
# the journal's receipt kinds written into the statement (a fixed vocabulary, no quotes)
_RECEIPT_KINDS: Final[list[Any]] = [
    literal_column(f"'{kind}'") for kind in sorted(JOURNAL_RECEIPT_KIND_VALUES)
]
_OPERATION_COLUMNS = (
    operations.c.kind,
    operations.c.state,
    operations.c.outcome_json,
    operations.c.lease_token,
    operations.c.lease_expires_at,
    operations.c.lease_fence,
)


def _timed(locked: ClauseElement) -> ClauseElement:
    """`locked`'s columns plus the server time, read after the row lock is granted.

    In a plain `SELECT ..., clock_timestamp() ... FOR UPDATE` PostgreSQL computes the
    select list below the lock, before waiting for it (measured: a second stale after a
    one-second wait); selected from a FOR UPDATE subquery, it is computed afterwards."""
    assert isinstance(locked, Select)
    inner = locked.subquery()
    return select(*inner.c, server_time_ms())


# A run's events in order (streamed in batches, see `Statements.stream`).
def _events_of_run() -> Select[Any]:
    return (
        select(*EVENT_COLUMNS)
        .where(events.c.run_id == bindparam("run_id"))
        .order_by(events.c.sequence)
    )


ADVISORY_LOCK: Final = Query(
    "advisory_lock", lambda _: select(func.pg_advisory_xact_lock(bindparam("key"))), LockedRow
)
EVENTS_OF_RUN: Final = Query("events_of_run", lambda _: _events_of_run(), EventRow)
# A chain's first `limit` events: a short chain is one round trip on a plain cursor (a
# server-side cursor on PostgreSQL costs four).
EVENTS_OF_RUN_PAGE: Final = Query(
    "events_of_run_page", lambda _: _events_of_run().limit(bindparam("limit")), EventRow
)
# The rest of a long chain in one statement, streamed (`Statements.raw_pages`): PostgreSQL
# sorts it at most once. Keyset pages of a run whose table has no statistics yet (a fresh
# import or adoption, before autovacuum's ANALYZE) were each a sort of every later event:
# a 50,000-event chain cost 50 of them (measured: 0.65 s of server time).
EVENTS_OF_RUN_REST: Final = Query(
    "events_of_run_rest",
    lambda _: _events_of_run().where(events.c.sequence > bindparam("after")),
    EventRow,
)
HEAD: Final = Query("head", lambda _: select(*_HEAD_COLUMNS).where(_RUN), HeadRow)
HEAD_FOR_UPDATE: Final = Query(
    "head_for_update", lambda _: select(*_HEAD_COLUMNS).where(_RUN).with_for_update(), HeadRow
)
OPERATION: Final = Query(
    "operation", lambda _: select(*_OPERATION_COLUMNS).where(_OPERATION), OperationRow
)
OPERATION_FOR_UPDATE: Final = Query(
    "operation_for_update",
    lambda _: select(*_OPERATION_COLUMNS).where(_OPERATION).with_for_update(),
    OperationRow,
)
# the same rows with the lease time of the database server's clock (PostgreSQL without
# an explicit clock), so that it costs no extra round trip
HEAD_FOR_UPDATE_TIMED: Final = Query(
    "head_for_update_timed",
    lambda _: _timed(select(runs.c.run_id).where(_RUN).with_for_update()),
    LockedRunTimeRow,
)
OPERATION_TIMED: Final = Query(
    "operation_timed",
    lambda _: _timed(select(*_OPERATION_COLUMNS).where(_OPERATION)),
    with_server_time,
)
OPERATION_FOR_UPDATE_TIMED: Final = Query(
    "operation_for_update_timed",
    lambda _: _timed(select(*_OPERATION_COLUMNS).where(_OPERATION).with_for_update()),
    with_server_time,
)
# Receipts of an operation id, driven by the operation-id index: the run's lookup key
# comes from a correlated lookup by primary key, NULL for runs of another root or stage
# (the caller drops those). With the root and stage in a WHERE/EXISTS instead, the
# planners drive the query from the runs of that root and stage — a scan that made
# start_run slower as runs accumulated (PostgreSQL: 2 ms at 100 runs, 13 ms at 10,000).
START_RECEIPTS: Final = Query(
    "start_receipts",
    lambda _: select(
        operations.c.run_id,
        operations.c.kind,
        operations.c.state,
        operations.c.outcome_json,
        select(runs.c.lookup_key)
        .where(
            runs.c.run_id == operations.c.run_id,
            runs.c.root_hash == bindparam("root_hash"),
            runs.c.stage == bindparam("stage"),
        )
        .scalar_subquery(),
    ).where(operations.c.operation_id == bindparam("operation_id")),
    StartReceiptRow,
)
RUN_BY_KEY: Final = Query(
    "run_by_key",
    lambda _: select(runs.c.run_id, runs.c.projection_json).where(*_RUN_BY_KEY),
    RunProjectionRow,
)
REKEY_RUN: Final = Write(
    "rekey_run", lambda _: update(runs).where(_RUN).values(lookup_key=bindparam("lookup_key"))
)
BIND_CHANGE: Final = Write(
    "bind_change",
    lambda _: (
        update(runs)
        .where(_RUN)
        .values(
            lookup_key=bindparam("lookup_key"),
            change_name=bindparam("change_name"),
            provisional_key=None,
        )
    ),
)
BINDING: Final = Query(
    "binding",
    lambda _: select(
        delivery_bindings.c.receipt_hash,
        delivery_bindings.c.approval_revision,
        delivery_bindings.c.contract_hash,
        delivery_bindings.c.record_hash,
    ).where(
        delivery_bindings.c.run_id == bindparam("run_id"),
        delivery_bindings.c.gate == bindparam("gate"),
        delivery_bindings.c.revision == bindparam("revision"),
    ),
    BindingReceiptRow,
)
INSERT_BINDING: Final = Write(
    "insert_binding",
    lambda _: delivery_bindings.insert().values(bound("run_id", *BINDING_COLUMNS, "operation_id")),
)
INSERT_LEASE: Final = Write(
    "insert_lease",
    lambda _: operations.insert().values(
        kind=literal(KIND_LEASE),
        state=literal(RUNNING),
        **bound("run_id", "operation_id", *_LEASE_GRANT),
    ),
)
RESTART_LEASE: Final = Write(
    "restart_lease",
    lambda _: (
        update(operations)
        .where(_OPERATION)
        .values(state=RUNNING, outcome_json=None, **bound(*_LEASE_GRANT))
    ),
)
RENEW_LEASE: Final = Write(
    "renew_lease",
    lambda _: (
        update(operations)
        .where(_OPERATION, operations.c.lease_token == bindparam("token"))
        .values(lease_expires_at=bindparam("lease_expires_at"))
    ),
)
FINISH_LEASE: Final = Write(
    "finish_lease",
    lambda _: (
        update(operations)
        .where(
            _OPERATION,
            operations.c.state == RUNNING,
            operations.c.lease_token == bindparam("token"),
        )
        .values(
            state=bindparam("new_state"),
            outcome_json=bindparam("outcome_json"),
            lease_token=None,
            lease_expires_at=None,
        )
    ),
)
EXPIRE_LEASE: Final = Write(
    "expire_lease",
    lambda _: (
        update(operations)
        .where(
            _OPERATION,
            operations.c.state == RUNNING,
            operations.c.lease_expires_at < bindparam("now"),
        )
        .values(state=INTERRUPTED, lease_token=None, lease_expires_at=None)
    ),
)
EXPIRE_LEASES: Final = Write(
    "expire_leases",
    lambda _: (
        update(operations)
        .where(operations.c.state == RUNNING, operations.c.lease_expires_at < bindparam("now"))
        .values(state=INTERRUPTED, lease_token=None, lease_expires_at=None)
    ),
)
# every row is judged at the server's time when it is reached (and re-judged after
# waiting for a holder's row lock, so a lease renewed meanwhile stays live)
EXPIRE_LEASES_TIMED: Final = Write(
    "expire_leases_timed",
    lambda _: (
        update(operations)
        .where(operations.c.state == RUNNING, operations.c.lease_expires_at < server_time_ms())
        .values(state=INTERRUPTED, lease_token=None, lease_expires_at=None)
    ),
)
OWNER_OF_KEY: Final = Query(
    "owner_of_key",
    lambda _: select(runs.c.run_id).where(*_RUN_BY_KEY),
    KeyOwnerRow,
)
VERIFY_COLUMNS: Final = Query(
    "verify_columns",
    lambda _: select(
        runs.c.projection_json,
        runs.c.root_hash,
        runs.c.stage,
        runs.c.change_name,
        runs.c.provisional_key,
        runs.c.state,
        runs.c.sequence,
        runs.c.event_hash,
        runs.c.delivery_revision,
        runs.c.terminal_tombstone,
    ).where(_RUN),
    VerifyColumnsRow,
)
BINDINGS_OF_RUN: Final = Query(
    "bindings_of_run",
    lambda _: select(
        delivery_bindings.c.gate,
        delivery_bindings.c.revision,
        delivery_bindings.c.receipt_hash,
        delivery_bindings.c.approval_revision,
        delivery_bindings.c.contract_hash,
        delivery_bindings.c.record_hash,
    ).where(delivery_bindings.c.run_id == bindparam("run_id")),
    BindingOfRunRow,
)


# one statement per shape (all run ids, or a keyset page), made on first use and kept, as
# `read_statements.listing_statement` keeps the listings'
@functools.cache
def run_ids_statement(after: bool, limit: bool) -> Query[RunIdRow]:
    """Run ids in the engine's order: all of them, or those after `after` (the last id of
    the previous page), `limit` at most."""

    def build(_backend: Backend) -> ClauseElement:
        statement = select(runs.c.run_id)
        if after:
            statement = statement.where(runs.c.run_id > bindparam("after"))
        statement = statement.order_by(runs.c.run_id)
        return statement.limit(bindparam("limit")) if limit else statement

    name = "run_ids" + ("_after" if after else "") + ("_page" if limit else "")
    return Query(name, build, RunIdRow)


# receipts and leases of a run, checked against its chain by verify_integrity
OPERATIONS_OF_RUN: Final = Query(
    "operations_of_run",
    lambda _: (
        select(operations.c.operation_id, *_OPERATION_COLUMNS)
        .where(operations.c.run_id == bindparam("run_id"))
        .order_by(operations.c.operation_id)
    ),
    OperationOfRunRow,
)
# verify_integrity's two reads of them: every row the (run_id, sequence) index locates, in
# chain order, compared as the replay passes their sequence, with NULL for `other_shape`
# when it has a journal receipt's (kind, committed, no lease; else the row is read again
# and checked as an operations row, never compared)...
_SHAPED_RECEIPT: Final = and_(
    operations.c.kind.in_(_RECEIPT_KINDS),
    operations.c.state == literal_column(f"'{COMMITTED}'"),
    operations.c.lease_token.is_(None),
    operations.c.lease_expires_at.is_(None),
    operations.c.lease_fence.is_(None),
)


def _located_receipts_of_run() -> Select[Any]:
    return (
        select(
            operations.c.sequence,
            operations.c.operation_id,
            operations.c.outcome_json,
            case((_SHAPED_RECEIPT, null()), else_=literal_column("1")).label("other_shape"),
        )
        .where(operations.c.run_id == bindparam("run_id"), operations.c.sequence.is_not(None))
        .order_by(operations.c.sequence)
    )


def _query_and_page(
    name: str, select_of: Callable[[], Select[Any]], row: Callable[..., Row]
) -> tuple[Query[Row], Query[Row]]:
    """A query, and its first `limit` rows (`_page`) on a plain cursor: a short run's
    rows in one round trip (`RunReads._verify_integrity`)."""
    return (
        Query(name, lambda _: select_of(), row),
        Query(f"{name}_page", lambda _: select_of().limit(bindparam("limit")), row),
    )


LOCATED_RECEIPTS_OF_RUN, LOCATED_RECEIPTS_OF_RUN_PAGE = _query_and_page(
    "located_receipts_of_run", _located_receipts_of_run, LocatedReceiptRow
)


# ...and the rows it does not locate (a NULL sequence: leases, receipts whose text names
# none; few, found by the same index, each checked as an operations row)
def _unlocated_operations_of_run() -> Select[Any]:
    return (
        select(operations.c.operation_id, *_OPERATION_COLUMNS)
        .where(operations.c.run_id == bindparam("run_id"), operations.c.sequence.is_(None))
        # by an expression: an ordered walk of the primary key would read every row of
        # the run; these few are sorted (the same order, the column's collation)
        .order_by(operations.c.operation_id.concat(literal_column("''")))
    )


UNLOCATED_OPERATIONS_OF_RUN, UNLOCATED_OPERATIONS_OF_RUN_PAGE = _query_and_page(
    "unlocated_operations_of_run", _unlocated_operations_of_run, OperationOfRunRow
)
