"""The statements of an append: the run's new head, its event, and the call's receipt.

A run's head moves by compare-and-set: the UPDATE names the head the event was computed
from, so a head that moved meanwhile updates nothing and the caller refuses to go on (a
chain is never forked). A journal call's receipt is written with its event: on
PostgreSQL all three writes are one statement (`append_recorded`), one round trip.

Each append records its time in the same statements: the run's `updated_at` and the
event's `recorded_at` (`append_time`), never part of a hash or of `projection_json`.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import (
    BigInteger,
    Insert,
    Update,
    bindparam,
    exists,
    func,
    insert,
    literal,
    literal_column,
    select,
    update,
)
from sqlalchemy.sql import ClauseElement, ColumnElement

from ..journal.vocabulary import COMMITTED
from .backends import POSTGRESQL, Backend
from .models import events, operations, runs
from .rows import AppendedRow
from .statements import Query, Write, bound

RUN_MATCH: Final = runs.c.run_id == bindparam("run_id")
OPERATION_MATCH: Final = (operations.c.run_id == bindparam("run_id")) & (
    operations.c.operation_id == bindparam("operation_id")
)
# A head remembered from an earlier transaction (not read under this one's lock): the row
# must still hold the very projection the event was computed from, not only its sequence
# and event hash.
KNOWN_PROJECTION: Final = runs.c.projection_json == bindparam("prior_projection_json")
# the run's columns an append sets from its new head (an advance, one or a batch's)
ADVANCED_COLUMNS: Final = (
    "state",
    "sequence",
    "event_hash",
    "delivery_revision",
    "projection_json",
    "terminal_tombstone",
)


def upsert_receipt(backend: Backend) -> ClauseElement:
    statement = backend.upsert_insert(operations).values(
        run_id=bindparam("run_id"),
        operation_id=bindparam("operation_id"),
        kind=bindparam("kind"),
        state=literal(COMMITTED),
        outcome_json=bindparam("outcome_json"),
        sequence=bindparam("sequence"),
    )
    return statement.on_conflict_do_update(
        index_elements=[operations.c.run_id, operations.c.operation_id],
        set_={
            "state": COMMITTED,
            "outcome_json": statement.excluded.outcome_json,
            "lease_token": None,
            "lease_expires_at": None,
            "sequence": statement.excluded.sequence,
        },
    )


def append_time(backend: Backend, now: ColumnElement[int] | None = None) -> ColumnElement[int]:
    """The time an append records: `now` (by default the bound `now`: the store's clock,
    milliseconds), or, on PostgreSQL when it is NULL, the server's clock read by the
    statement itself (`Backend.append_time`)."""
    if now is None:
        now = bindparam("now", type_=BigInteger)
    return backend.append_time(now)


def not_before(
    backend: Backend, previous: ColumnElement[int | None], now: ColumnElement[int] | None = None
) -> ColumnElement[int]:
    """`append_time`, or `previous` if that is later.

    A run's times never decrease along its chain, even when the clock steps back (an NTP
    correction, a failover to a server whose clock lags, another client's `clock=`):
    readers page and filter by them (`updated_after=`), and "recorded later" must keep
    meaning "appended later" within a run. So an event is stamped no earlier than the
    run's `updated_at`, which is the last event's stamp."""
    return backend.later_of(append_time(backend, now), previous)


def run_updated_at() -> ColumnElement[int | None]:
    """The run's `updated_at`, read in an event's INSERT after the run row was written."""
    return select(runs.c.updated_at).where(RUN_MATCH).scalar_subquery()


def insert_run(backend: Backend) -> Insert:
    """A new run row, created and updated at one `append_time` (computed once)."""
    moment = select(append_time(backend).label("now")).subquery("moment")
    columns = [
        "run_id",
        "root_hash",
        "stage",
        "lookup_key",
        "change_name",
        "provisional_key",
        "state",
        "sequence",
        "event_hash",
        "projection_json",
    ]
    return insert(runs).from_select(
        [*columns, "created_at", "updated_at"],
        select(
            *(bindparam(name, type_=runs.c[name].type) for name in columns),
            moment.c.now,
            moment.c.now,
        ),
    )


def advance_run(backend: Backend) -> Update:
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
            updated_at=not_before(backend, runs.c.updated_at),
            **bound(*ADVANCED_COLUMNS),
        )
    )


def append_recorded(backend: Backend = POSTGRESQL, *, known: bool = False) -> ClauseElement:
    """`advance_unrecorded`, and from the run it advanced the event and the receipt, in
    one statement (`Backend.one_statement_append`): the count of runs advanced (0:
    nothing was written). `known`: from a remembered head (`KNOWN_PROJECTION`)."""
    advance = advance_run(backend).where(~exists().where(OPERATION_MATCH))
    if known:
        advance = advance.where(KNOWN_PROJECTION)
    advanced = advance.returning(runs.c.run_id, runs.c.updated_at).cte("advanced_run")
    appended = insert(events).from_select(
        [
            "run_id",
            "sequence",
            "type",
            "payload_json",
            "prior_hash",
            "event_hash",
            "recorded_at",
            "feed_position",
        ],
        select(
            advanced.c.run_id,
            bindparam("sequence", type_=events.c.sequence.type),
            bindparam("type", type_=events.c.type.type),
            bindparam("payload_json", type_=events.c.payload_json.type),
            bindparam("prior_hash", type_=events.c.prior_hash.type),
            bindparam("event_hash", type_=events.c.event_hash.type),
            advanced.c.updated_at,
            backend.feed_position_on_insert(),  # INSERT_EVENT's value
        ),
    )
    recorded = insert(operations).from_select(
        ["run_id", "operation_id", "kind", "state", "outcome_json", "sequence"],
        select(
            advanced.c.run_id,
            bindparam("operation_id", type_=operations.c.operation_id.type),
            bindparam("kind", type_=operations.c.kind.type),
            literal(COMMITTED, type_=operations.c.state.type),
            bindparam("projection_json", type_=operations.c.outcome_json.type),
            bindparam("sequence", type_=operations.c.sequence.type),
        ),
    )
    return (
        select(func.count())
        .select_from(advanced)
        .add_cte(appended.cte("appended_event"), recorded.cte("recorded_receipt"))
    )


UPSERT_RECEIPT: Final = Write("upsert_receipt", upsert_receipt)
INSERT_EVENT: Final = Write(
    "insert_event",
    lambda backend: events.insert().values(
        **bound("run_id", "sequence", "type", "payload_json", "prior_hash", "event_hash"),
        # written right after its run row: the time that row was stamped with
        recorded_at=run_updated_at(),
        # its place in the journal feed (SQLite; PostgreSQL: given after commit)
        feed_position=backend.feed_position_on_insert(),
    ),
)
INSERT_RUN: Final = Write("insert_run", insert_run)
ADVANCE_RUN: Final = Write("advance_run", advance_run)
# the same, only while the operation id has no row yet (the receipt is written next)
ADVANCE_UNRECORDED: Final = Write(
    "advance_unrecorded",
    lambda backend: advance_run(backend).where(~exists().where(OPERATION_MATCH)),
)
# `ADVANCE_UNRECORDED` from a remembered head
ADVANCE_KNOWN: Final = Write(
    "advance_known",
    lambda backend: advance_run(backend).where(KNOWN_PROJECTION, ~exists().where(OPERATION_MATCH)),
)
# all three writes of a recorded append as one statement (PostgreSQL: one round trip)
APPEND_RECORDED: Final = Query("append_recorded", append_recorded, AppendedRow)
APPEND_RECORDED_KNOWN: Final = Query(
    "append_recorded_known", lambda backend: append_recorded(backend, known=True), AppendedRow
)
INSERT_RECEIPT: Final = Write(
    "insert_receipt",
    lambda _: operations.insert().values(
        # written into the statement: no value to pick for it on every append
        state=literal_column(f"'{COMMITTED}'", operations.c.state.type),
        **bound("run_id", "operation_id", "kind", "outcome_json", "sequence"),
    ),
)
