"""The journal feed on a transaction: pages in feed order, numbering, followers' positions.

`record_position` is how a host makes its processing exactly-once: it writes the
follower's position in the same transaction as the host's own rows (a read model, an
outbox), so both commit or neither does, and a follower that crashed in between sees
the item again from the position that did commit.
"""

from __future__ import annotations

from ..journal import RunEvent
from ..journal.documents import event_payload
from ..journal.feed import (
    FeedItem,
    require_feed_limit,
    require_feed_position,
    require_follower,
)
from ..journal.validation import is_storable, require_run_id_text
from ..storage.failures import READ, coded
from ..storage.feed_statements import (
    FEED_LOCK_IF_UNNUMBERED,
    FEED_PAGE,
    FEED_PAGE_OF_RUN,
    FEED_UNNUMBERED,
    FOLLOWER_POSITION,
    NEWEST_FEED,
    NUMBER_FEED,
    RECORD_POSITION,
)
from ..storage.rows import FeedRow
from .core import EVENT_BATCH, RepositoryCore, journal_write


class RunFeed(RepositoryCore):
    """The feed calls of `RunRepository`."""

    @coded(READ)
    def read_feed(
        self, *, after: int = 0, limit: int | None = None, run_id: str | None = None
    ) -> list[FeedItem]:
        """Committed events with a position above `after`, in feed order (`limit` of them
        at most; `run_id`: that run's only).

        Events committed without a position yet (on PostgreSQL every event, until its
        transaction has committed; on SQLite imported ones) are numbered first
        (`number_feed`), in this transaction: on PostgreSQL the feed's numbering lock is
        then held until it ends, so a host transaction that reads the feed should end
        soon."""
        after = require_feed_position(after)
        limit = require_feed_limit(limit)
        if run_id is not None and not is_storable(require_run_id_text(run_id)):
            return []  # no run can have this id
        if self.transaction.profile.feed_numbered_by_readers or self.feed_unnumbered():
            self.number_feed()
            sql = self._write_statements()
        else:
            sql = self._read_statements()
        items: list[FeedItem] = []
        while True:
            wanted = EVENT_BATCH if limit is None else min(EVENT_BATCH, limit - len(items))
            if run_id is None:
                rows = sql.all(FEED_PAGE, after=after, limit=wanted)
            else:
                rows = sql.all(FEED_PAGE_OF_RUN, after=after, limit=wanted, run_id=run_id)
            items.extend(_item(row) for row in rows)
            if len(rows) < wanted or (limit is not None and len(items) >= limit):
                return items
            after = max(row.position for row in rows)  # the page's last

    @coded(READ)
    def newest_feed(self, limit: int) -> list[FeedItem]:
        """The `limit` newest numbered feed items, newest first. It numbers nothing, so it
        writes nothing (a read snapshot, a standby): items still waiting for their
        position (PostgreSQL, until a reader numbers them) are not among them yet."""
        rows = self._read_statements().all(NEWEST_FEED, limit=require_feed_limit(limit))
        return [_item(row) for row in rows]

    @coded(READ)
    def feed_unnumbered(self) -> bool:
        """Whether some event has no feed position yet."""
        return self._read_statements().one(FEED_UNNUMBERED) is not None

    @journal_write
    def number_feed(self) -> int:
        """Give the events committed without a position theirs (PostgreSQL; on SQLite an
        append numbers its event itself, and only an import leaves some to number):
        the count numbered. The numbering lock is held until this transaction commits,
        so commit it soon (see `storage.feed_statements`)."""
        sql = self._write_statements()
        if (
            self.transaction.profile.feed_numbered_by_readers
            and sql.one(FEED_LOCK_IF_UNNUMBERED) is None
        ):
            return 0  # nothing to number: no lock taken
        return sql.write(NUMBER_FEED)

    @coded(READ)
    def follower_position(self, follower: str) -> int:
        """The position `follower` recorded last (`record_position`), 0 if none."""
        require_follower(follower)
        row = self._read_statements().one(FOLLOWER_POSITION, follower=follower)
        return 0 if row is None else int(row.position)

    @journal_write
    def record_position(self, follower: str, position: int) -> None:
        """Record that `follower` has applied every item up to `position`, in this
        transaction (with the host's rows: both commit, or neither)."""
        require_follower(follower)
        require_feed_position(position)
        self._write_statements().write(RECORD_POSITION, follower=follower, position=position)


def _item(row: FeedRow) -> FeedItem:
    return FeedItem.model_construct(
        position=row.position,
        run_id=row.run_id,
        event=RunEvent.model_construct(
            sequence=row.sequence,
            type=row.type,
            payload=event_payload(row.payload_json, row.run_id, row.sequence),
            prior_hash=row.prior_hash,
            hash=row.event_hash,
            recorded_at=row.recorded_at,
        ),
    )
