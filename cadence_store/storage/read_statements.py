"""The read side's statements: counts, a run's binding and operation rows and times, and
the run listings (one statement per filter shape, made on first use)."""

from __future__ import annotations

import functools
from typing import Any, Final

from sqlalchemy import bindparam, func, select
from sqlalchemy.sql import ClauseElement, ColumnElement

from ..journal.views import RunListing
from .models import delivery_bindings, events, operations, runs
from .rows import (
    BindingDetailRow,
    CountsRow,
    OperationDetailRow,
    RunProjectionRow,
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
OPERATION_ROWS_OF_RUN: Final = Query(
    "operation_rows_of_run",
    lambda _: (
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
    ),
    OperationDetailRow,
)


def _one_of(column: ColumnElement[str], name: str, count: int) -> ColumnElement[bool]:
    if count == 1:
        return column == bindparam(f"{name}_0")
    return column.in_([bindparam(f"{name}_{i}") for i in range(count)])


def listing_statement(listing: RunListing) -> Query[RunProjectionRow]:
    """The statement of this listing's filter shape: the runs that match, in order."""
    return _listing(
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
    stages: int,
    states: int,
    change: bool,
    root: bool,
    after: bool,
    limit: bool,
    since: bool,
    until: bool,
) -> Query[RunProjectionRow]:
    def build(_dialect_name: str) -> ClauseElement:
        statement = select(runs.c.run_id, runs.c.projection_json)
        if stages:
            statement = statement.where(_one_of(runs.c.stage, "stage", stages))
        if states:
            statement = statement.where(_one_of(runs.c.state, "state", states))
        if change:
            statement = statement.where(runs.c.change_name == bindparam("change"))
        if root:
            statement = statement.where(runs.c.root_hash == bindparam("root_hash"))
        if after:
            statement = statement.where(runs.c.run_id > bindparam("after"))
        # a run without times (cadence 1.x's, never appended to since) matches neither
        if since:
            statement = statement.where(runs.c.updated_at > bindparam("updated_after"))
        if until:
            statement = statement.where(runs.c.updated_at < bindparam("updated_before"))
        # keyset pagination: run ids in the engine's order, resumed after the last one seen
        statement = statement.order_by(runs.c.run_id)
        if limit:
            statement = statement.limit(bindparam("limit"))
        return statement

    return Query("list_runs", build, RunProjectionRow)
