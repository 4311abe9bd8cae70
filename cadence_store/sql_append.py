"""The statements of an append: the run's new head, its event, and the call's receipt.

A run's head moves by compare-and-set: the UPDATE names the head the event was computed
from, so a head that moved meanwhile updates nothing and the caller refuses to go on (a
chain is never forked). A journal call's receipt is written with its event: on
PostgreSQL all three writes are one statement (`append_recorded`), one round trip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from sqlalchemy import Update, bindparam, exists, func, insert, literal, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import ClauseElement

from .journal.vocabulary import COMMITTED
from .models import events, operations, runs

RUN_MATCH: Final = runs.c.run_id == bindparam("run_id")
OPERATION_MATCH: Final = (operations.c.run_id == bindparam("run_id")) & (
    operations.c.operation_id == bindparam("operation_id")
)


def upsert_receipt(dialect_name: str) -> ClauseElement:
    dialect_insert = postgresql.insert if dialect_name == "postgresql" else sqlite.insert
    statement = dialect_insert(operations).values(
        run_id=bindparam("run_id"),
        operation_id=bindparam("operation_id"),
        kind=bindparam("kind"),
        state=literal(COMMITTED),
        outcome_json=bindparam("outcome_json"),
    )
    return statement.on_conflict_do_update(
        index_elements=[operations.c.run_id, operations.c.operation_id],
        set_={
            "state": COMMITTED,
            "outcome_json": statement.excluded.outcome_json,
            "lease_token": None,
            "lease_expires_at": None,
        },
    )


def advance_run() -> Update:
    """Move a run's head on, only from the head the new event was computed from (a
    compare-and-set: a head that moved meanwhile updates nothing, and forks nothing)."""
    return (
        update(runs)
        .where(
            RUN_MATCH,
            runs.c.sequence == bindparam("prior_sequence"),
            runs.c.event_hash == bindparam("prior_hash"),
        )
        .values(
            state=bindparam("state"),
            sequence=bindparam("sequence"),
            event_hash=bindparam("event_hash"),
            delivery_revision=bindparam("delivery_revision"),
            projection_json=bindparam("projection_json"),
            terminal_tombstone=bindparam("terminal_tombstone"),
        )
    )


def append_recorded() -> ClauseElement:
    """`advance_unrecorded`, and from the run it advanced the event and the receipt, in
    one statement: the count of runs advanced (0: nothing was written)."""
    advanced = (
        advance_run()
        .where(~exists().where(OPERATION_MATCH))
        .returning(runs.c.run_id)
        .cte("advanced_run")
    )
    appended = insert(events).from_select(
        ["run_id", "sequence", "type", "payload_json", "prior_hash", "event_hash"],
        select(
            advanced.c.run_id,
            bindparam("sequence", type_=events.c.sequence.type),
            bindparam("type", type_=events.c.type.type),
            bindparam("payload_json", type_=events.c.payload_json.type),
            bindparam("prior_hash", type_=events.c.prior_hash.type),
            bindparam("event_hash", type_=events.c.event_hash.type),
        ),
    )
    recorded = insert(operations).from_select(
        ["run_id", "operation_id", "kind", "state", "outcome_json"],
        select(
            advanced.c.run_id,
            bindparam("operation_id", type_=operations.c.operation_id.type),
            bindparam("kind", type_=operations.c.kind.type),
            literal(COMMITTED, type_=operations.c.state.type),
            bindparam("projection_json", type_=operations.c.outcome_json.type),
        ),
    )
    return (
        select(func.count())
        .select_from(advanced)
        .add_cte(appended.cte("appended_event"), recorded.cte("recorded_receipt"))
    )


APPEND_STATEMENTS: Final[dict[str, Callable[[str], ClauseElement]]] = {
    "upsert_receipt": upsert_receipt,
    "insert_event": lambda _: events.insert().values(
        run_id=bindparam("run_id"),
        sequence=bindparam("sequence"),
        type=bindparam("type"),
        payload_json=bindparam("payload_json"),
        prior_hash=bindparam("prior_hash"),
        event_hash=bindparam("event_hash"),
    ),
    "advance_run": lambda _: advance_run(),
    # the same, only while the operation id has no row yet (the receipt is written next)
    "advance_unrecorded": lambda _: advance_run().where(~exists().where(OPERATION_MATCH)),
    # all three writes of a recorded append as one statement (PostgreSQL: one round trip)
    "append_recorded": lambda _: append_recorded(),
    "insert_receipt": lambda _: operations.insert().values(
        run_id=bindparam("run_id"),
        operation_id=bindparam("operation_id"),
        kind=bindparam("kind"),
        # named apart from the run's `state`, bound by the same append
        state=bindparam("receipt_state", COMMITTED),
        outcome_json=bindparam("outcome_json"),
    ),
}
