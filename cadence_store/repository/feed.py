"""The journal feed on a transaction: pages in feed order, numbering, followers' positions.

`record_position` is how a host makes its processing exactly-once: it writes the
follower's position in the same transaction as the host's own rows (a read model, an
outbox), so both commit or neither does, and a follower that crashed in between sees
the item again from the position that did commit.
"""

from __future__ import annotations

from ..errors import OperationConflictError
from ..journal import RunEvent
from ..journal.documents import event_payload
from ..journal.feed import (
    FEED_POSITION_BACKWARDS,
    FeedItem,
    require_feed_limit,
    require_feed_position,
    require_follower,
)
from ..journal.validation import is_storable, require_bool, require_run_id_text
from ..storage.failures import READ, coded
from ..storage.feed_statements import (
    ADVANCE_POSITION,
    FEED_LOCK_IF_UNNUMBERED,
    FEED_PAGE,
    FEED_PAGE_OF_RUN,
    FEED_UNNUMBERED,
    FOLLOWER_POSITION,
    NUMBER_FEED,
    REWIND_POSITION,
)
from ..storage.rows import FeedRow, UnnumberedRow
from .core import EVENT_BATCH, RepositoryCore, journal_write


class RunFeed(RepositoryCore):
    """The feed calls of `RunRepository`."""

    @coded(READ)
    def read_feed(
        self, *, after: int = 0, limit: int | None = None, run_id: str | None = None
    ) -> list[FeedItem]:
        """Committed events with a position above `after`, in feed order (`limit` of them
        at most; `run_id`: that run's only).

        Positions are given after commit (PostgreSQL: by the appending process's feed
        notifier, `storage.feed_notifier`; SQLite: by the append itself), so a reader
        needs no write. Events still without one (an import, a writer that died between
        its commit and its numbering) are numbered first (`number_feed`) when this
        transaction can (read-write, READ COMMITTED, a role that may update the events):
        the feed's numbering lock is then held until it ends, so such a transaction
        should end soon. Otherwise they come later, after what is returned, once
        numbered: a read-only role, a standby, a REPEATABLE READ transaction read what
        is numbered."""
        after = require_feed_position(after)
        limit = require_feed_limit(limit)
        if run_id is not None and not is_storable(require_run_id_text(run_id)):
            return []  # no run can have this id
        unnumbered = self.feed_unnumbered()
        if unnumbered is not None and unnumbered.numbers_here:
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
    def feed_unnumbered(self) -> UnnumberedRow | None:
        """None when every event has a feed position; else who may number them."""
        return self._read_statements().one(FEED_UNNUMBERED)

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
    def record_position(self, follower: str, position: int, *, rewind: bool = False) -> None:
        """Record that `follower` has applied every item up to `position`, in this
        transaction (with the host's rows: both commit, or neither).

        A position below the one recorded is refused (`feed-position-backwards`, nothing
        written): the follower would apply those items again. `rewind=True` moves it back
        on purpose (a read model rebuilt from an earlier point)."""
        require_follower(follower)
        require_feed_position(position)
        require_bool(rewind, "invalid-rewind")
        statement = REWIND_POSITION if rewind else ADVANCE_POSITION
        if not self._write_statements().write(statement, follower=follower, position=position):
            raise OperationConflictError(
                FEED_POSITION_BACKWARDS,
                f"{follower!r} has recorded a later position; rewind=True moves it back",
            )


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
