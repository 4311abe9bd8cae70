"""What the runs list and the feed show, each read in one read snapshot of the store
(`store.snapshot()`, on its `read_bind` when it has one): the data the HTML pages and
their JSON twins share. A run's page is `run_page`'s.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from ..errors import InvalidInputError
from ..journal import RunProjection
from ..journal.feed import FeedItem
from ..journal.views import StoreCounts, check_run_listing
from ..repository import queries
from ..repository.run_repository import RunRepository
from ..storage.failures import READ, database_errors
from ..storage.statements import Statements
from ..store.run_store import RunStore
from .formatting import parse_time_filter

RUNS_PER_PAGE = 50
FEED_ITEMS = 100
HOUR_MS = 3_600_000
COUNTS_MAX_AGE_S = 30.0
LAST_ID = "\U0010ffff"  # sorts after any character a run id has


@dataclass(frozen=True)
class RunFilters:
    """The runs list's filters and keyset cursor, as its query string gives them: `after`
    (the page after that run id) or `before` (the page that ends just before it)."""

    state: str | None = None
    stage: str | None = None
    change: str | None = None
    id_prefix: str | None = None
    updated_after: int | None = None
    updated_before: int | None = None
    after: str | None = None
    before: str | None = None

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> RunFilters:
        """The filters of a request's query string; empty values are no filter."""

        def text(name: str) -> str | None:
            value = query.get(name)
            return value if value else None

        filters = cls(
            state=text("state"),
            stage=text("stage"),
            change=text("change"),
            id_prefix=text("id"),
            updated_after=parse_time_filter(query.get("updated_after"), "updated_after"),
            updated_before=parse_time_filter(query.get("updated_before"), "updated_before"),
            after=text("after"),
            before=text("before"),
        )
        if filters.after is not None and filters.before is not None:
            raise InvalidInputError("invalid-run-cursor", "give after or before, not both")
        return filters

    def query(self, **changes: str | None) -> str:
        """This listing's query string with `changes` (None drops a parameter)."""
        values: dict[str, Any] = {
            "state": self.state,
            "stage": self.stage,
            "change": self.change,
            "id": self.id_prefix,
            "updated_after": self.updated_after,
            "updated_before": self.updated_before,
            "after": self.after,
            "before": self.before,
        }
        values.update(changes)
        return urlencode({key: value for key, value in values.items() if value is not None})

    def page_query(self, *, after: str | None = None, before: str | None = None) -> str:
        """The query string of this listing's page after / before a run id (neither:
        its first page)."""
        return self.query(after=after, before=before)


@dataclass(frozen=True)
class ListedRun:
    """A run as the list shows it: its stored projection and its row's times (None for
    a run cadence 1.x wrote and nothing appended to since)."""

    projection: RunProjection
    created_at: int | None
    updated_at: int | None

    def to_dict(self) -> dict[str, Any]:
        """The projection's JSON with `createdAt` and `updatedAt` (ms)."""
        return {
            **self.projection.to_dict(),
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }


@dataclass(frozen=True)
class RunsPage:
    """One page of the runs list, the cursors of the pages beside it, and the counts."""

    filters: RunFilters
    runs: list[ListedRun]
    next_after: str | None  # `after` of the next page (None: this is the last)
    previous_before: str | None  # `before` of the previous page (None: this is the first)
    counts: StoreCounts
    counted_at: int  # ms: when `counts` were read (they are kept `COUNTS_MAX_AGE_S`)


def _listed(
    sql: Statements, filters: RunFilters, cursor: str | None, *, backwards: bool, limit: int
) -> list[ListedRun]:
    """Up to `limit` runs that match after `cursor` (or before it, newest id first)."""
    prefix = filters.id_prefix
    if prefix:
        # ids with the prefix sort together: start at its edge, or the cursor inside it
        if backwards:
            edge = prefix + LAST_ID
            cursor = edge if cursor is None or cursor > edge else cursor
        else:
            edge = prefix[:-1] + chr(max(ord(prefix[-1]) - 1, 0)) + LAST_ID
            cursor = edge if cursor is None or cursor <= edge else cursor
    listing = check_run_listing(
        state=filters.state,
        stage=filters.stage,
        change=filters.change,
        updated_after=filters.updated_after,
        updated_before=filters.updated_before,
        after=cursor,
        limit=limit,
    )
    found = [ListedRun(*run) for run in queries.listed_runs(sql, listing, backwards=backwards)]
    if prefix:
        return [run for run in found if run.projection.run_id.startswith(prefix)]
    return found


def _page_of_runs(
    sql: Statements, filters: RunFilters
) -> tuple[list[ListedRun], str | None, str | None]:
    """The page's runs in id order, and the cursors of the next and previous pages."""
    backwards = filters.before is not None
    cursor = filters.before if backwards else filters.after
    found = _listed(sql, filters, cursor, backwards=backwards, limit=RUNS_PER_PAGE + 1)
    more = len(found) > RUNS_PER_PAGE
    shown = found[:RUNS_PER_PAGE]
    if backwards:
        shown.reverse()
    if not shown:
        return shown, None, None
    first, last = shown[0].projection.run_id, shown[-1].projection.run_id
    # the way the page came from has more only when a run matches there (one row read)
    if backwards:
        further = _listed(sql, filters, last, backwards=False, limit=1)
        return shown, (last if further else None), (first if more else None)
    if cursor is None:
        return shown, (last if more else None), None
    earlier = _listed(sql, filters, first, backwards=True, limit=1)
    return shown, (last if more else None), (first if earlier else None)


class CountsCache:
    """The store's counts, read again once they are `max_age_s` old: counting every
    event of a large store takes seconds, and the list shows the counts on every page
    (with the time they were read)."""

    def __init__(self, max_age_s: float = COUNTS_MAX_AGE_S) -> None:
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._read: tuple[float, int, StoreCounts] | None = None

    def get(self, runs: RunRepository) -> tuple[StoreCounts, int]:
        """The counts and when they were read (ms), read in `runs` when too old."""
        with self._lock:
            read = self._read
            if read is None or time.monotonic() - read[0] >= self.max_age_s:
                read = (time.monotonic(), int(time.time() * 1000), runs.counts())
                self._read = read
            return read[2], read[1]


def read_runs_page(store: RunStore, filters: RunFilters, counts: CountsCache) -> RunsPage:
    """A page of the runs that match `filters`, with their times and the counts by state."""
    with store.snapshot() as runs:
        sql = runs.transaction.statements(write=False)
        with database_errors(READ):
            found, next_after, previous_before = _page_of_runs(sql, filters)
        store_counts, counted_at = counts.get(runs)
    return RunsPage(
        filters=filters,
        runs=found,
        next_after=next_after,
        previous_before=previous_before,
        counts=store_counts,
        counted_at=counted_at,
    )


def read_feed_page(store: RunStore) -> list[FeedItem]:
    """The newest numbered feed items, newest first (numbering nothing: read-only)."""
    with store.snapshot() as runs:
        return runs.newest_feed(FEED_ITEMS)


def per_hour(times: Iterable[int | None]) -> dict[int, int]:
    """How many of `times` (ms) fall in each hour (ms of the hour's start), in order;
    None is no time."""
    hours = Counter(ms // HOUR_MS * HOUR_MS for ms in times if ms is not None)
    return dict(sorted(hours.items()))


def feed_per_hour(items: list[FeedItem]) -> dict[int, int]:
    """How many of `items` were recorded in each hour (ms of the hour's start)."""
    return per_hour(item.event.recorded_at for item in items)


__all__ = [
    "COUNTS_MAX_AGE_S",
    "CountsCache",
    "ListedRun",
    "RUNS_PER_PAGE",
    "RunFilters",
    "RunsPage",
    "feed_per_hour",
    "per_hour",
    "read_feed_page",
    "read_runs_page",
]
