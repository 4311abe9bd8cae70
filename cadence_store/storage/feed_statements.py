"""The journal feed's statements: an event's position, numbering, pages, followers.

Where an event's position comes from (`Backend.feed_position_on_insert`, part of the one event
INSERT, `append_statements.INSERT_EVENT`, and of `APPEND_RECORDED`, which writes the same
values):

- SQLite: the next position, `max + 1`, in the INSERT itself. The append holds the write
  lock (BEGIN IMMEDIATE) until it commits, so positions commit in the order they are
  taken, and a reader (WAL) never sees a row before its commit.
- PostgreSQL: none yet (NULL). Positions taken in the appending transactions (a
  sequence) would commit out of order: a follower that read position 7 could later see
  a transaction commit 6, and skip it. So events are numbered after they commit
  (`NUMBER_FEED`), in a transaction that holds one advisory lock (`FEED_LOCK_KEY`) until
  it commits: numbering transactions never overlap, each starts from the highest
  position the last one committed (gap-free from 1), and any snapshot that sees a
  position sees every smaller one. The appending process numbers them just after its
  commit, from its `feed_notifier` thread, before the NOTIFY that wakes followers; a
  reader numbers only what is left (`FEED_UNNUMBERED` says whether it can), so readers
  need no write. The appending call pays nothing for this.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

from sqlalchemy import and_, bindparam, func, literal_column, select, update
from sqlalchemy.sql import ClauseElement, Select

from .backends import Backend
from .models import EVENT_COLUMNS, events, follower_positions
from .positions import highest_position
from .rows import FeedRow, FollowerPositionRow, LockedRow, UnnumberedRow
from .statements import Query, Write

FEED_CHANNEL: Final = "cadence_store_feed"
LISTEN_TO_FEED: Final = "LISTEN cadence_store_feed"  # the channel above, a fixed text
# the numbering transactions' pg_advisory_xact_lock key: hashed like the store's other
# advisory keys (`repository.core._advisory_key`), from a text no run key can be
FEED_LOCK_KEY: Final = int.from_bytes(
    hashlib.sha256(b"cadence_store.feed").digest()[:8], "big", signed=True
)


def _unnumbered() -> Select[Any]:
    return select(literal_column("1")).where(events.c.feed_position.is_(None)).limit(1)


def _unnumbered_and_who_numbers(backend: Backend) -> Select[Any]:
    """One row when some event has no position: whether this role could number it and
    whether this transaction can (`Backend.feed_numbering_rights`)."""
    role_may, here = backend.feed_numbering_rights()
    return (
        select(role_may.label("role_may"), here.label("here"))
        .where(events.c.feed_position.is_(None))
        .limit(1)
    )


def _lock_if_unnumbered() -> Select[Any]:
    """Take the numbering lock, only when some event is still unnumbered (one row then,
    none otherwise: a reader that finds nothing to number takes no lock)."""
    return select(func.pg_advisory_xact_lock(FEED_LOCK_KEY)).select_from(
        _unnumbered().subquery("unnumbered")
    )


def _number_unnumbered() -> ClauseElement:
    """Give every unnumbered event the next positions: a run's events in sequence order,
    whatever their stored times, and the runs by time. Each event is placed at the latest
    `recorded_at` of its run up to it (`run_time`: a store's own appends never go back in
    time, so that is their own time; an imported run's times may decrease), then by run
    id and sequence. On PostgreSQL it runs after `FEED_LOCK_IF_UNNUMBERED` in the same
    transaction, as a statement of its own: its snapshot is then taken after the lock,
    and sees the last numbering."""
    highest = highest_position().scalar_subquery()  # archived runs' leaves too
    timed = (
        select(
            events.c.run_id,
            events.c.sequence,
            func.max(events.c.recorded_at)
            .over(partition_by=events.c.run_id, order_by=events.c.sequence)
            .label("run_time"),
        )
        .where(events.c.feed_position.is_(None))
        .subquery("timed")
    )
    numbered = select(
        timed.c.run_id,
        timed.c.sequence,
        (
            highest
            + func.row_number().over(
                order_by=(timed.c.run_time.asc().nulls_first(), timed.c.run_id, timed.c.sequence)
            )
        ).label("position"),
    ).subquery("numbered")
    return (
        update(events)
        .where(
            and_(
                events.c.run_id == numbered.c.run_id,
                events.c.sequence == numbered.c.sequence,
            )
        )
        .values(feed_position=numbered.c.position)
    )


def _feed_page(*, of_run: bool) -> Select[Any]:
    page = select(events.c.feed_position, events.c.run_id, *EVENT_COLUMNS).where(
        events.c.feed_position > bindparam("after")
    )
    if of_run:
        page = page.where(events.c.run_id == bindparam("run_id"))
    return page.order_by(events.c.feed_position).limit(bindparam("limit"))


def _record_position(backend: Backend, *, forward_only: bool) -> ClauseElement:
    """The follower's position, inserted or replaced; `forward_only`: replaced only by one
    at least as far (0 rows written when it would move back)."""
    statement = backend.upsert_insert(follower_positions).values(
        follower=bindparam("follower"), position=bindparam("position")
    )
    return statement.on_conflict_do_update(
        index_elements=[follower_positions.c.follower],
        set_={"position": statement.excluded.position},
        where=(follower_positions.c.position <= statement.excluded.position)
        if forward_only
        else None,
    )


FEED_UNNUMBERED: Final = Query("feed_unnumbered", _unnumbered_and_who_numbers, UnnumberedRow)
FEED_LOCK_IF_UNNUMBERED: Final = Query(
    "feed_lock_if_unnumbered", lambda _: _lock_if_unnumbered(), LockedRow
)
NUMBER_FEED: Final = Write("number_feed", lambda _: _number_unnumbered())
FEED_PAGE: Final = Query("feed_page", lambda _: _feed_page(of_run=False), FeedRow)
FEED_PAGE_OF_RUN: Final = Query("feed_page_of_run", lambda _: _feed_page(of_run=True), FeedRow)
# the last numbered items, newest first: a reader's window that numbers nothing
NEWEST_FEED: Final = Query(
    "newest_feed",
    lambda _: (
        select(events.c.feed_position, events.c.run_id, *EVENT_COLUMNS)
        .where(events.c.feed_position.is_not(None))
        .order_by(events.c.feed_position.desc())
        .limit(bindparam("limit"))
    ),
    FeedRow,
)
FOLLOWER_POSITION: Final = Query(
    "follower_position",
    lambda _: select(follower_positions.c.position).where(
        follower_positions.c.follower == bindparam("follower")
    ),
    FollowerPositionRow,
)
ADVANCE_POSITION: Final = Write(
    "advance_position", lambda backend: _record_position(backend, forward_only=True)
)
REWIND_POSITION: Final = Write(
    "rewind_position", lambda backend: _record_position(backend, forward_only=False)
)
