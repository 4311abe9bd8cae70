"""What each page shows, each read in one read snapshot of the store (`store.snapshot()`,
on its `read_bind` when it has one): the data the HTML pages and their JSON twins share.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any
from urllib.parse import urlencode

from ..errors import InvalidInputError, JournalIntegrityError
from ..journal import RunEvent, RunProjection
from ..journal.feed import FeedItem
from ..journal.views import OperationRecord, RunDetail, StoreCounts
from ..journal.vocabulary import OperationKind
from ..repository.run_repository import RunRepository
from ..store.run_store import RunStore
from .checkpoints import CoveringCheckpoint, covering_checkpoint
from .formatting import parse_time_filter

RUNS_PER_PAGE = 50
EVENTS_PER_PAGE = 1000
FEED_ITEMS = 100
HOUR_MS = 3_600_000
COUNTS_MAX_AGE_S = 30.0
RECEIPTS_SHOWN = 100  # a run's page lists its leases and this many receipts (JSON: all)


@dataclass(frozen=True)
class RunFilters:
    """The runs list's filters and cursor, as its query string gives them."""

    state: str | None = None
    stage: str | None = None
    change: str | None = None
    id_prefix: str | None = None
    updated_after: int | None = None
    updated_before: int | None = None
    after: str | None = None  # the last run id of the page before (keyset)
    back: str | None = None  # the cursor of the page before, for its "previous" link

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> RunFilters:
        """The filters of a request's query string; empty values are no filter."""

        def text(name: str) -> str | None:
            value = query.get(name)
            return value if value else None

        return cls(
            state=text("state"),
            stage=text("stage"),
            change=text("change"),
            id_prefix=text("id"),
            updated_after=parse_time_filter(query.get("updated_after"), "updated_after"),
            updated_before=parse_time_filter(query.get("updated_before"), "updated_before"),
            after=text("after"),
            back=query.get("back"),  # "" : the page before is the first
        )

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
            "back": self.back,
        }
        values.update(changes)
        return urlencode({key: value for key, value in values.items() if value is not None})


@dataclass(frozen=True)
class RunsPage:
    """One page of the runs list, the cursor of the next one, and the store's counts."""

    filters: RunFilters
    runs: list[RunProjection]
    next_after: str | None
    counts: StoreCounts
    counted_at: int  # ms: when `counts` were read (they are kept `COUNTS_MAX_AGE_S`)


@dataclass(frozen=True)
class Verification:
    """The chain's verification, computed for this page: intact, or the code and the
    sequence where it broke."""

    intact: bool
    code: str | None = None
    sequence: int | None = None


@dataclass(frozen=True)
class RunPage:
    """One run: its detail, one page of its events, the verification and the state
    changes per hour of the whole run."""

    detail: RunDetail
    events: list[RunEvent]
    event_page: int
    event_pages: int
    verification: Verification
    checkpoint: CoveringCheckpoint | None
    events_per_hour: dict[int, int] = field(default_factory=dict)

    @property
    def operations_shown(self) -> list[OperationRecord]:
        """Every lease, and the first `RECEIPTS_SHOWN` idempotency receipts (a receipt
        per call: a long run has thousands, each holding a projection)."""
        operations = self.detail.operations
        leases = [op for op in operations if op.kind == OperationKind.LEASE]
        receipts = [op for op in operations if op.kind != OperationKind.LEASE]
        return leases + receipts[:RECEIPTS_SHOWN]

    @property
    def operations_left_out(self) -> int:
        """How many receipts `operations_shown` leaves to the JSON twin."""
        return len(self.detail.operations) - len(self.operations_shown)


def _page_of_runs(runs: RunRepository, filters: RunFilters) -> tuple[list[RunProjection], bool]:
    listing: dict[str, Any] = {
        "state": filters.state,
        "stage": filters.stage,
        "change": filters.change,
        "updated_after": filters.updated_after,
        "updated_before": filters.updated_before,
    }
    prefix = filters.id_prefix
    if not prefix:
        found = runs.list_runs(**listing, after=filters.after, limit=RUNS_PER_PAGE + 1)
        return found[:RUNS_PER_PAGE], len(found) > RUNS_PER_PAGE
    # ids with the prefix sort together, from the prefix itself: start just below it
    floor = prefix[:-1] + chr(max(ord(prefix[-1]) - 1, 0)) + "\U0010ffff"
    after = filters.after if filters.after is not None and filters.after > floor else floor
    found = runs.list_runs(**listing, after=after, limit=RUNS_PER_PAGE + 1)
    matching = [run for run in found if run.run_id.startswith(prefix)]
    return matching[:RUNS_PER_PAGE], len(matching) > RUNS_PER_PAGE


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
    """A page of the runs that match `filters`, with the counts by state."""
    with store.snapshot() as runs:
        found, more = _page_of_runs(runs, filters)
        store_counts, counted_at = counts.get(runs)
    return RunsPage(
        filters=filters,
        runs=found,
        next_after=found[-1].run_id if more and found else None,
        counts=store_counts,
        counted_at=counted_at,
    )


def verification_of(runs: RunRepository, run_id: str) -> Verification:
    """`verify_integrity` of the run as a result to show (a broken chain is not an error
    of the page)."""
    try:
        runs.verify_integrity(run_id)
    except JournalIntegrityError as error:
        return Verification(intact=False, code=error.code, sequence=error.sequence)
    return Verification(intact=True)


def event_page_number(value: str | None) -> int:
    """The `events` query parameter: a page number from 1."""
    if value is None or value == "":
        return 1
    if not value.isdigit() or int(value) < 1:
        raise InvalidInputError("invalid-event-page", "events is a page number from 1")
    return int(value)


def read_run_page(store: RunStore, run_id: str, event_page: int = 1) -> RunPage:
    """A run's page: its detail, the `event_page`th thousand of its events, the chain's
    verification, the checkpoint covering it (when there is one)."""
    first = (event_page - 1) * EVENTS_PER_PAGE
    with store.snapshot() as runs:
        detail = runs.run_detail(run_id)
        pages = max(1, -(-detail.projection.sequence // EVENTS_PER_PAGE))
        if event_page > pages:
            raise InvalidInputError("invalid-event-page", f"the run has {pages} pages of events")
        # the events stream in sequence order: read up to the page's last, keep the page
        shown = list(islice(runs.iter_events(run_id), first, first + EVENTS_PER_PAGE))
        verification = verification_of(runs, run_id)
        checkpoint = covering_checkpoint(runs, run_id)
    # the chart counts the events that set the state (the timeline has them all, with
    # their times), without reading every event a second time
    per_hour = Counter(
        entry.recorded_at // HOUR_MS * HOUR_MS
        for entry in detail.timeline
        if entry.recorded_at is not None
    )
    return RunPage(
        detail=detail,
        events=shown,
        event_page=event_page,
        event_pages=pages,
        verification=verification,
        checkpoint=checkpoint,
        events_per_hour=dict(sorted(per_hour.items())),
    )


def read_feed_page(store: RunStore) -> list[FeedItem]:
    """The newest numbered feed items, newest first (numbering nothing: read-only)."""
    with store.snapshot() as runs:
        return runs.newest_feed(FEED_ITEMS)


def feed_per_hour(items: list[FeedItem]) -> dict[int, int]:
    """How many of `items` were recorded in each hour (ms of the hour's start)."""
    hours = Counter(
        item.event.recorded_at // HOUR_MS * HOUR_MS
        for item in items
        if item.event.recorded_at is not None
    )
    return dict(sorted(hours.items()))


__all__ = [
    "COUNTS_MAX_AGE_S",
    "EVENTS_PER_PAGE",
    "CountsCache",
    "RUNS_PER_PAGE",
    "RunFilters",
    "RunPage",
    "RunsPage",
    "Verification",
    "event_page_number",
    "feed_per_hour",
    "read_feed_page",
    "read_run_page",
    "read_runs_page",
]
