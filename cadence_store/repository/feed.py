"""The journal feed on a transaction: pages in feed order, numbering, followers' positions.

`record_position` is how a host makes its processing exactly-once: it writes the
follower's position in the same transaction as the host's own rows (a read model, an
outbox), so both commit or neither does, and a follower that crashed in between sees
the item again from the position that did commit.
"""

from __future__ import annotations

from ..errors import OperationConflictError
from ..journal.documents import event_payload
from ..journal.feed import (
    FEED_POSITION_BACKWARDS,
    FeedItem,
    require_feed_limit,
    require_feed_position,
    require_follower,
    stored_feed_item,
)
from ..journal.validation import is_storable, require_bool, require_run_id_text
from ..journal.values import event_fields
from ..storage.failures import WRITE, database_errors
from ..storage.feed_statements import (
    ADVANCE_POSITION,
    FEED_LOCK_IF_UNNUMBERED,
    FEED_PAGE,
    FEED_PAGE_OF_RUN,
    FEED_UNNUMBERED,
    FOLLOWER_POSITION,
    NEWEST_FEED,
    NUMBER_FEED,
    REWIND_POSITION,
)
from ..storage.rows import FeedRow, UnnumberedRow
from .core import EVENT_BATCH, JournalAccess


class RunFeed:
    """The feed calls of `RunRepository`, in `access`'s transaction."""

    __slots__ = ("_access",)

    def __init__(self, access: JournalAccess) -> None:
        self._access = access

    def read_feed(self, after: int, limit: int | None, run_id: str | None) -> list[FeedItem]:
        """`read_feed_rows`, each row as its `FeedItem`."""
        return list(map(feed_item, self.read_feed_rows(after, limit, run_id)))

    def read_feed_rows(self, after: int, limit: int | None, run_id: str | None) -> list[FeedRow]:
        """Pages of `EVENT_BATCH` in feed order, after numbering what has no position yet
        where this transaction may (on write statements then: the numbering takes its
        lock); otherwise what is numbered."""
        after = require_feed_position(after)
        limit = require_feed_limit(limit)
        if run_id is not None and not is_storable(require_run_id_text(run_id)):
            return []  # no run can have this id
        unnumbered = self.feed_unnumbered()
        if unnumbered is not None and unnumbered.numbers_here:
            with database_errors(WRITE):  # a write inside this read, coded as one
                self.number_feed()
            sql = self._access.write_statements()
        else:
            sql = self._access.read_statements()
        found: list[FeedRow] = []
        while True:
            wanted = EVENT_BATCH if limit is None else min(EVENT_BATCH, limit - len(found))
            if run_id is None:
                rows = sql.all(FEED_PAGE, after=after, limit=wanted)
            else:
                rows = sql.all(FEED_PAGE_OF_RUN, after=after, limit=wanted, run_id=run_id)
            found.extend(rows)
            if len(rows) < wanted or (limit is not None and len(found) >= limit):
                return found
            after = max(row.position for row in rows)  # the page's last

    def newest_feed(self, limit: int) -> list[FeedItem]:
        """The `limit` newest numbered feed items, newest first (numbers nothing)."""
        rows = self._access.read_statements().all(NEWEST_FEED, limit=require_feed_limit(limit))
        return list(map(feed_item, rows))

    def feed_unnumbered(self) -> UnnumberedRow | None:
        """None when every event has a feed position; else who may number them."""
        return self._access.read_statements().one(FEED_UNNUMBERED)

    def number_feed(self) -> int:
        """Give the events committed without a position theirs (PostgreSQL; on SQLite an
        append numbers its event itself, and only an import leaves some to number):
        the count numbered. The numbering lock is held until this transaction commits,
        so commit it soon (see `storage.feed_statements`)."""
        sql = self._access.write_statements()
        if (
            self._access.transaction.profile.feed_numbered_by_readers
            and sql.one(FEED_LOCK_IF_UNNUMBERED) is None
        ):
            return 0  # nothing to number: no lock taken
        return sql.write(NUMBER_FEED)

    def follower_position(self, follower: str) -> int:
        """The position `follower` recorded last (`record_position`), 0 if none."""
        require_follower(follower)
        row = self._access.read_statements().one(FOLLOWER_POSITION, follower=follower)
        return 0 if row is None else int(row.position)

    def record_position(self, follower: str, position: int, rewind: bool) -> None:
        """Record `follower`'s position; a lower one only with `rewind`."""
        require_follower(follower)
        require_feed_position(position)
        require_bool(rewind, "invalid-rewind")
        statement = REWIND_POSITION if rewind else ADVANCE_POSITION
        sql = self._access.write_statements()
        if not sql.write(statement, follower=follower, position=position):
            raise OperationConflictError(
                FEED_POSITION_BACKWARDS,
                f"{follower!r} has recorded a later position; rewind=True moves it back",
            )


def feed_item(row: FeedRow) -> FeedItem:
    """A feed row as its `FeedItem` (the payload decoded, the values validated)."""
    payload = event_payload(row.payload_json, row.run_id, row.sequence)
    event = event_fields(
        row.sequence, row.type, payload, row.prior_hash, row.event_hash, row.recorded_at
    )
    return stored_feed_item(row.position, row.run_id, event)
