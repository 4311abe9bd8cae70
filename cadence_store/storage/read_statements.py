"""The read side's statements: counts, a run's binding and operation rows and times, and
the run listings (one statement per filter shape, made on first use)."""

from __future__ import annotations

import functools
from typing import Any, Final

from sqlalchemy import bindparam, func, select
from sqlalchemy.sql import ClauseElement, ColumnElement

from ..journal.views import RunListing
from ..journal.vocabulary import KIND_LEASE
from .backends import Backend
from .models import EVENT_COLUMNS, delivery_bindings, events, operations, runs
from .rows import (
    BindingDetailRow,
    CountRow,
    CountsRow,
    EventRow,
    ListedRunRow,
    OperationDetailRow,
    RunTimesRow,
    StateCountRow,
)
from .statements import Query


def _count(table: Any) -> Any:
    return select(func.count()).select_from(table).scalar_subquery()


RUN_TIMES: Final = Query(
    "run_times",
    lambda _: select(runs.c.created_at, runs.c.updated_at).where(
        runs.c.run_id == bindparam("run_id")
    ),
    RunTimesRow,
)
COUNT_ROWS: Final = Query(
    "count_rows",
    lambda _: select(_count(runs), _count(events), _count(operations), _count(delivery_bindings)),
    CountsRow,
)
COUNT_RUNS_BY_STATE: Final = Query(
    "count_runs_by_state",
    lambda _: select(runs.c.state, func.count()).group_by(runs.c.state).order_by(runs.c.state),
    StateCountRow,
)
BINDING_ROWS_OF_RUN: Final = Query(
    "binding_rows_of_run",
    lambda _: (
        select(
            delivery_bindings.c.gate,
            delivery_bindings.c.revision,
            delivery_bindings.c.receipt_hash,
            delivery_bindings.c.operation_id,
            delivery_bindings.c.approval_revision,
            delivery_bindings.c.contract_hash,
            delivery_bindings.c.record_hash,
        )
        .where(delivery_bindings.c.run_id == bindparam("run_id"))
        .order_by(delivery_bindings.c.revision, delivery_bindings.c.gate)
    ),
    BindingDetailRow,
)


# the lease token itself is never read here, only whether there is one
def _operation_rows() -> Any:
    return (
        select(
            operations.c.operation_id,
            operations.c.kind,
            operations.c.state,
            operations.c.outcome_json,
            operations.c.lease_token.is_not(None),
            operations.c.lease_expires_at,
            operations.c.lease_fence,
        )
        .where(operations.c.run_id == bindparam("run_id"))
        .order_by(operations.c.operation_id)
    )


OPERATION_ROWS_OF_RUN: Final = Query(
    "operation_rows_of_run", lambda _: _operation_rows(), OperationDetailRow
)

# -- a run's page in the web view: one page of its events, its leases and the first of
# its receipts, read through the primary keys (never the whole chain or every receipt)
LEASE_ROWS_OF_RUN: Final = Query(
    "lease_rows_of_run",
    lambda _: _operation_rows().where(operations.c.kind == KIND_LEASE),
    OperationDetailRow,
)
# keyset pages of a run's receipts by operation id: the `limit` after `after`, in order,
# and the `limit` before `before`, last first (the caller turns them round)
RECEIPT_ROWS_OF_RUN_AFTER: Final = Query(
    "receipt_rows_of_run_after",
    lambda _: (
        _operation_rows()
        .where(operations.c.kind != KIND_LEASE, operations.c.operation_id > bindparam("after"))
        .limit(bindparam("limit"))
    ),
    OperationDetailRow,
)
RECEIPT_ROWS_OF_RUN_BEFORE: Final = Query(
    "receipt_rows_of_run_before",
    lambda _: (
        _operation_rows()
        .where(operations.c.kind != KIND_LEASE, operations.c.operation_id < bindparam("before"))
        .order_by(None)
        .order_by(operations.c.operation_id.desc())
        .limit(bindparam("limit"))
    ),
    OperationDetailRow,
)
# every operation row of the run, counted in an index alone (its receipts are these but
# its leases, which the page reads anyway)
OPERATION_COUNT_OF_RUN: Final = Query(
    "operation_count_of_run",
    lambda _: select(func.count()).where(operations.c.run_id == bindparam("run_id")),
    CountRow,
)
# keyset pages of a run's events by sequence: the `limit` after `after`, in order, and the
# `limit` before `before`, newest first (the caller turns them round)
EVENTS_OF_RUN_AFTER: Final = Query(
    "events_of_run_after",
    lambda _: (
        select(*EVENT_COLUMNS)
        .where(events.c.run_id == bindparam("run_id"), events.c.sequence > bindparam("after"))
        .order_by(events.c.sequence)
        .limit(bindparam("limit"))
    ),
    EventRow,
)
EVENTS_OF_RUN_BEFORE: Final = Query(
    "events_of_run_before",
    lambda _: (
        select(*EVENT_COLUMNS)
        .where(events.c.run_id == bindparam("run_id"), events.c.sequence < bindparam("before"))
        .order_by(events.c.sequence.desc())
        .limit(bindparam("limit"))
    ),
    EventRow,
)


def _one_of(column: ColumnElement[str], name: str, count: int) -> ColumnElement[bool]:
    if count == 1:
        return column == bindparam(f"{name}_0")
    return column.in_([bindparam(f"{name}_{i}") for i in range(count)])


def listing_statement(listing: RunListing, *, backwards: bool = False) -> Query[ListedRunRow]:
    """The statement of this listing's filter shape: the runs that match, in order;
    `backwards`: those before `after` (the cursor), newest id first."""
    return _listing(
        backwards,
        len(listing.stages),
        len(listing.states),
        *(
            value is not None
            for value in (
                listing.change,
                listing.root_hash,
                listing.after,
                listing.limit,
                listing.updated_after,
                listing.updated_before,
            )
        ),
    )


# one statement per filter shape (a bounded number: stages x states x six optional
# filters), made on first use and kept, so that each is compiled once
@functools.cache
def _listing(
    backwards: bool,
    stages: int,
    states: int,
    change: bool,
    root: bool,
    after: bool,
    limit: bool,
    since: bool,
    until: bool,
) -> Query[ListedRunRow]:
    def build(_backend: Backend) -> ClauseElement:
        statement = select(
            runs.c.run_id, runs.c.projection_json, runs.c.created_at, runs.c.updated_at
        )
        if stages:
            statement = statement.where(_one_of(runs.c.stage, "stage", stages))
        if states:
            statement = statement.where(_one_of(runs.c.state, "state", states))
        if change:
            statement = statement.where(runs.c.change_name == bindparam("change"))
        if root:
            statement = statement.where(runs.c.root_hash == bindparam("root_hash"))
        if after:
            cursor: Any = bindparam("after")
            statement = statement.where(
                runs.c.run_id < cursor if backwards else runs.c.run_id > cursor
            )
        # a run without times (cadence 1.x's, never appended to since) matches neither
        if since:
            statement = statement.where(runs.c.updated_at > bindparam("updated_after"))
        if until:
            statement = statement.where(runs.c.updated_at < bindparam("updated_before"))
        # keyset pagination: run ids in the engine's order, resumed after the last one seen
        statement = statement.order_by(runs.c.run_id.desc() if backwards else runs.c.run_id)
        if limit:
            statement = statement.limit(bindparam("limit"))
        return statement

    return Query("list_runs_backwards" if backwards else "list_runs", build, ListedRunRow)
