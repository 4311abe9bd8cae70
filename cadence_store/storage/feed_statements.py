"""The journal feed's statements: an event's position, numbering, pages, followers.

Where an event's position comes from (`feed_position_on_insert`, part of the one event
INSERT, `append_statements.INSERT_EVENT`, and of `APPEND_RECORDED`, which writes the same
values):

- SQLite: the next position, `max + 1`, in the INSERT itself. The append holds the write
  lock (BEGIN IMMEDIATE) until it commits, so positions commit in the order they are
  taken, and a reader (WAL) never sees a row before its commit.
- PostgreSQL: none yet (NULL). Positions taken in the appending transactions (a
  sequence) would commit out of order: a follower that read position 7 could later see
  a transaction commit 6, and skip it. So events are numbered after they commit, by
  whoever reads the feed (`NUMBER_FEED`), in a transaction that holds one advisory lock
  (`FEED_LOCK_KEY`) until it commits: numbering transactions never overlap, each starts
  from the highest position the last one committed, and any snapshot that sees a
  position sees every smaller one. The appender pays nothing for this; its commit
  wakes followers through `feed_notifier` (a NOTIFY sent after it).
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    and_,
    bindparam,
    cast,
    func,
    literal_column,
    null,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import ClauseElement, ColumnElement, Select

from .models import EVENT_COLUMNS, events, follower_positions
from .rows import FeedRow, FollowerPositionRow, FoundRow, LockedRow
from .statements import Query, Write

FEED_CHANNEL: Final = "cadence_store_feed"
LISTEN_TO_FEED: Final = "LISTEN cadence_store_feed"  # the channel above, a fixed text
# the numbering transactions' pg_advisory_xact_lock key: hashed like the store's other
# advisory keys (`repository.core._advisory_key`), from a text no run key can be
FEED_LOCK_KEY: Final = int.from_bytes(
    hashlib.sha256(b"cadence_store.feed").digest()[:8], "big", signed=True
)


def feed_position_on_insert(dialect_name: str) -> ColumnElement[int | None]:
    """The value an appended event's `feed_position` gets in its INSERT (see above)."""
    if dialect_name == "postgresql":
        return cast(null(), BigInteger)
    # the numbers written into the statement: no value to pick for them on every append
    return select(
        func.coalesce(func.max(events.c.feed_position), literal_column("0")) + literal_column("1")
    ).scalar_subquery()


def _unnumbered() -> Select[Any]:
    return select(literal_column("1")).where(events.c.feed_position.is_(None)).limit(1)


def _lock_if_unnumbered() -> Select[Any]:
    """Take the numbering lock, only when some event is still unnumbered (one row then,
    none otherwise: a reader that finds nothing to number takes no lock)."""
    return select(func.pg_advisory_xact_lock(FEED_LOCK_KEY)).select_from(
        _unnumbered().subquery("unnumbered")
    )


def _number_unnumbered() -> ClauseElement:
    """Give every unnumbered event the next positions, oldest first: `recorded_at` (which
    never decreases along a run), then run id and sequence (a run's events always in
    order). On PostgreSQL it runs after `FEED_LOCK_IF_UNNUMBERED` in the same
    transaction, as a statement of its own: its snapshot is then taken after the lock,
    and sees the last numbering."""
    highest = select(func.coalesce(func.max(events.c.feed_position), 0)).scalar_subquery()
    numbered = (
        select(
            events.c.run_id,
            events.c.sequence,
            (
                highest
                + func.row_number().over(
                    order_by=(
                        events.c.recorded_at.asc().nulls_first(),
                        events.c.run_id,
                        events.c.sequence,
                    )
                )
            ).label("position"),
        )
        .where(events.c.feed_position.is_(None))
        .subquery("numbered")
    )
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


def _record_position(dialect_name: str) -> ClauseElement:
    dialect_insert = postgresql.insert if dialect_name == "postgresql" else sqlite.insert
    statement = dialect_insert(follower_positions).values(
        follower=bindparam("follower"), position=bindparam("position")
    )
    return statement.on_conflict_do_update(
        index_elements=[follower_positions.c.follower],
        set_={"position": statement.excluded.position},
    )


FEED_UNNUMBERED: Final = Query("feed_unnumbered", lambda _: _unnumbered(), FoundRow)
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
RECORD_POSITION: Final = Write("record_position", _record_position)
