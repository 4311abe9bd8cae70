"""The read side's statements: counts, a run's binding and operation rows, and the run
listings (one statement per filter shape, built from its name on first use)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from sqlalchemy import bindparam, func, select
from sqlalchemy.sql import ClauseElement, ColumnElement

from ..journal.views import RunListing
from .models import delivery_bindings, events, operations, runs


def _count(table: Any) -> Any:
    return select(func.count()).select_from(table).scalar_subquery()


READ_STATEMENTS: Final[dict[str, Callable[[str], ClauseElement]]] = {
    "run_times": lambda _: select(runs.c.created_at, runs.c.updated_at).where(
        runs.c.run_id == bindparam("run_id")
    ),
    "count_rows": lambda _: select(
        _count(runs), _count(events), _count(operations), _count(delivery_bindings)
    ),
    "count_runs_by_state": lambda _: (
        select(runs.c.state, func.count()).group_by(runs.c.state).order_by(runs.c.state)
    ),
    "binding_rows_of_run": lambda _: (
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
    # the lease token itself is never read here, only whether there is one
    "operation_rows_of_run": lambda _: (
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
}


def _one_of(column: ColumnElement[str], name: str, count: int) -> ColumnElement[bool]:
    if count == 1:
        return column == bindparam(f"{name}_0")
    return column.in_([bindparam(f"{name}_{i}") for i in range(count)])


LISTING: Final = "list_runs"


def listing_statement(listing: RunListing) -> str:
    """The name of the statement for this listing's filter shape (`listing_of` builds it)."""
    return (
        f"{LISTING}:{len(listing.stages)}:{len(listing.states)}:{int(listing.change is not None)}"
        f":{int(listing.root_hash is not None)}:{int(listing.after is not None)}"
        f":{int(listing.limit is not None)}:{int(listing.updated_after is not None)}"
        f":{int(listing.updated_before is not None)}"
    )


def listing_of(name: str) -> ClauseElement:
    """The statement `listing_statement` named: the runs of one filter shape, in order."""
    prefix, stages, states, change, root, after, limit, since, until = name.split(":")
    assert prefix == LISTING
    statement = select(runs.c.run_id, runs.c.projection_json)
    if int(stages):
        statement = statement.where(_one_of(runs.c.stage, "stage", int(stages)))
    if int(states):
        statement = statement.where(_one_of(runs.c.state, "state", int(states)))
    if int(change):
        statement = statement.where(runs.c.change_name == bindparam("change"))
    if int(root):
        statement = statement.where(runs.c.root_hash == bindparam("root_hash"))
    if int(after):
        statement = statement.where(runs.c.run_id > bindparam("after"))
    # a run without times (cadence 1.x's, never appended to since) matches neither
    if int(since):
        statement = statement.where(runs.c.updated_at > bindparam("updated_after"))
    if int(until):
        statement = statement.where(runs.c.updated_at < bindparam("updated_before"))
    # keyset pagination: run ids in the engine's order, resumed after the last one seen
    statement = statement.order_by(runs.c.run_id)
    if int(limit):
        statement = statement.limit(bindparam("limit"))
    return statement


__all__ = ["LISTING", "READ_STATEMENTS", "listing_of", "listing_statement"]
