"""Retention's statements: the finished runs an archive takes, the rows it keeps of them
(`kept_leaves`, `archived_runs`, `archived_operations`) and the deletes of their rows.

What an archive keeps is copied by `INSERT ... SELECT` from the rows it is about to
delete, in the same transaction, so nothing of a run crosses the wire twice and the
kept leaf is the deleted event's own."""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import BigInteger, and_, bindparam, delete, func, literal_column, select, union_all
from sqlalchemy.sql import ColumnElement

from ..journal.states import TERMINAL_STATES
from .models import (
    archived_operations,
    archived_runs,
    delivery_bindings,
    events,
    kept_leaves,
    operations,
    runs,
)
from .rows import (
    ArchivableRunRow,
    ArchivedCountRow,
    ArchivedRunIdRow,
    EventPositionRow,
    LeafRow,
    RunScopeRow,
)
from .statements import Query, Write

# the terminal states written into the statement (a fixed vocabulary, no quotes)
_TERMINAL: Final[list[Any]] = [literal_column(f"'{state}'") for state in sorted(TERMINAL_STATES)]
_RUN: Final = runs.c.run_id == bindparam("run_id")
# when a run's last event was recorded: its own stamp, else (an event cadence 1.x wrote,
# whose `recorded_at` is NULL) the run row's `updated_at`; NULL for both: never archived
_LAST_EVENT_AT: Final[ColumnElement[Any]] = func.coalesce(events.c.recorded_at, runs.c.updated_at)

# finished runs whose last event is older than `before`, after `after` in run id order
ARCHIVABLE_PAGE: Final = Query(
    "archivable_page",
    lambda _: (
        select(runs.c.run_id, runs.c.sequence, runs.c.event_hash, _LAST_EVENT_AT)
        .select_from(
            runs.join(
                events,
                and_(events.c.run_id == runs.c.run_id, events.c.sequence == runs.c.sequence),
            )
        )
        .where(
            and_(
                runs.c.state.in_(_TERMINAL),
                bindparam("before") > _LAST_EVENT_AT,
                runs.c.run_id > bindparam("after"),
            )
        )
        .order_by(runs.c.run_id)
        .limit(bindparam("limit"))
    ),
    ArchivableRunRow,
)
# a run's events' feed positions, in sequence order (its leaves' places in the tree)
EVENT_POSITIONS: Final = Query(
    "event_positions",
    lambda _: (
        select(events.c.sequence, events.c.feed_position)
        .where(events.c.run_id == bindparam("run_id"))
        .order_by(events.c.sequence)
    ),
    EventPositionRow,
)
# what a run's lookup-key advisory lock is taken on
RUN_SCOPE: Final = Query(
    "run_scope",
    lambda _: select(runs.c.run_id, runs.c.root_hash, runs.c.stage, runs.c.lookup_key).where(_RUN),
    RunScopeRow,
)
# the run's head as an archive wrote it, locked: the run is deleted only if it is still
# the finished run the archive holds (no event appended since)
ARCHIVED_HEAD_FOR_UPDATE: Final = Query(
    "archived_head_for_update",
    lambda _: (
        select(runs.c.run_id, runs.c.sequence, runs.c.event_hash, runs.c.updated_at)
        .where(
            and_(
                _RUN,
                runs.c.sequence == bindparam("sequence"),
                runs.c.event_hash == bindparam("event_hash"),
                runs.c.state.in_(_TERMINAL),
            )
        )
        .with_for_update()
    ),
    ArchivableRunRow,
)
KEEP_LEAVES: Final = Write(
    "keep_leaves",
    lambda _: kept_leaves.insert().from_select(
        ["feed_position", "run_id", "sequence", "event_hash"],
        select(events.c.feed_position, events.c.run_id, events.c.sequence, events.c.event_hash)
        .where(events.c.run_id == bindparam("run_id"))
        .order_by(events.c.sequence),
    ),
)
KEEP_RUN: Final = Write(
    "keep_run",
    lambda _: archived_runs.insert().from_select(
        [
            "run_id",
            "root_hash",
            "stage",
            "lookup_key",
            "state",
            "archived_at",
            "last_event_at",
            "event_count",
            "event_hash",
        ],
        select(
            runs.c.run_id,
            runs.c.root_hash,
            runs.c.stage,
            runs.c.lookup_key,
            runs.c.state,
            bindparam("archived_at", type_=BigInteger),
            bindparam("last_event_at", type_=BigInteger),
            runs.c.sequence,
            runs.c.event_hash,
        ).where(_RUN),
    ),
)
KEEP_OPERATIONS: Final = Write(
    "keep_operations",
    lambda _: archived_operations.insert().from_select(
        ["run_id", "operation_id"],
        select(operations.c.run_id, operations.c.operation_id).where(
            operations.c.run_id == bindparam("run_id")
        ),
    ),
)
DELETE_BINDINGS: Final = Write(
    "delete_bindings",
    lambda _: delete(delivery_bindings).where(delivery_bindings.c.run_id == bindparam("run_id")),
)
DELETE_OPERATIONS: Final = Write(
    "delete_operations",
    lambda _: delete(operations).where(operations.c.run_id == bindparam("run_id")),
)
DELETE_EVENTS: Final = Write(
    "delete_events",
    lambda _: delete(events).where(events.c.run_id == bindparam("run_id")),
)
DELETE_RUN: Final = Write("delete_run", lambda _: delete(runs).where(_RUN))

# the not-found path: whether an archive deleted the run
ARCHIVED_RUN: Final = Query(
    "archived_run",
    lambda _: select(archived_runs.c.run_id).where(archived_runs.c.run_id == bindparam("run_id")),
    ArchivedRunIdRow,
)
# a fresh start's check: an archived run of this root and stage that recorded the
# operation id, or that holds the lookup key (None: a stage whose finished runs give
# their key up), each an indexed read
_OF_SCOPE: Final = and_(
    archived_runs.c.root_hash == bindparam("root_hash"),
    archived_runs.c.stage == bindparam("stage"),
)
ARCHIVED_START: Final = Query(
    "archived_start",
    lambda _: union_all(
        select(archived_operations.c.run_id)
        .join(archived_runs, archived_runs.c.run_id == archived_operations.c.run_id)
        .where(and_(archived_operations.c.operation_id == bindparam("operation_id"), _OF_SCOPE)),
        select(archived_runs.c.run_id).where(
            and_(_OF_SCOPE, archived_runs.c.lookup_key == bindparam("lookup_key"))
        ),
    ).limit(1),
    ArchivedRunIdRow,
)
# the kept leaves after position `after`, in position order (a page of `limit`)
KEPT_LEAF_PAGE: Final = Query(
    "kept_leaf_page",
    lambda _: (
        select(
            kept_leaves.c.feed_position,
            kept_leaves.c.run_id,
            kept_leaves.c.sequence,
            kept_leaves.c.event_hash,
        )
        .where(kept_leaves.c.feed_position > bindparam("after"))
        .order_by(kept_leaves.c.feed_position)
        .limit(bindparam("limit"))
    ),
    LeafRow,
)
ARCHIVED_COUNT: Final = Query(
    "archived_count",
    lambda _: select(func.count()).select_from(archived_runs),
    ArchivedCountRow,
)
