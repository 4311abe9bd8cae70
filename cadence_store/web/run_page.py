"""What a run's page shows, read in one read snapshot: the run, one keyset page of its
events (`EVENTS_PER_PAGE`, oldest first, by sequence), the state changes among them, its
leases and one keyset page of its receipts (`receipt_pages`), and the whole chain's
verification.

A long run is never sent whole: the page reads its events through the primary key from
the cursor (`?after=S`: those after sequence S; `?before=S`: the page that ends just
before S), and folds the chain into states only up to the page's last event, reading just
the columns that fold needs. Verification is the store's own `verify_integrity` of every
event and receipt, on every request (a tampered chain shows broken on the next one).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from ..errors import InvalidInputError
from ..journal import RunEvent
from ..journal.documents import event_payload
from ..journal.views import RunDetail, state_path
from ..repository.core import system_clock
from ..repository.queries import binding_record, operation_record
from ..storage.failures import READ, database_errors
from ..storage.read_statements import (
    BINDING_ROWS_OF_RUN,
    EVENTS_OF_RUN_AFTER,
    EVENTS_OF_RUN_BEFORE,
    LEASE_ROWS_OF_RUN,
    OPERATION_COUNT_OF_RUN,
    RUN_TIMES,
)
from ..storage.rows import BindingDetailRow, EventRow, OperationDetailRow
from ..store.run_store import RunStore
from .chain_view import Verification, verified_chain
from .checkpoints import CoveringCheckpoint, covering_checkpoint
from .receipt_pages import OperationCursor, ReceiptWindow

EVENTS_PER_PAGE = 200
CURSOR_DIGITS = 18  # a sequence is a safe integer: longer is no cursor
_LONG_NUMBER = re.compile(r"[0-9]{16}")
_UNPARSED: Any = object()
_PARSED_KEPT = 256  # distinct payload texts a fold remembers


@dataclass(frozen=True)
class EventCursor:
    """Where a run's page of events starts: after a sequence, or just before one (at
    most one of them; neither: the first page)."""

    after: int | None = None
    before: int | None = None

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> EventCursor:
        """The cursor of a request's `after` / `before` parameters."""
        after = _sequence_of(query.get("after"), "after")
        before = _sequence_of(query.get("before"), "before")
        if after is not None and before is not None:
            raise InvalidInputError("invalid-event-cursor", "give after or before, not both")
        return cls(after=after, before=before)

    def query(self) -> dict[str, int]:
        """The cursor as query parameters (empty: the first page)."""
        if self.before is not None:
            return {"before": self.before}
        return {} if self.after is None else {"after": self.after}

    def check(self, events: int) -> None:
        """Refuse a cursor outside a run of `events` events (no page starts there)."""
        if self.after is not None and self.after >= events:
            raise InvalidInputError(
                "invalid-event-cursor", f"after is below the run's last sequence, {events}"
            )
        if self.before is not None and not 2 <= self.before <= events + 1:
            raise InvalidInputError(
                "invalid-event-cursor", f"before is from 2 to {events + 1} in this run"
            )


def _sequence_of(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > CURSOR_DIGITS:
        raise InvalidInputError("invalid-event-cursor", f"{name} is an event's sequence number")
    return int(value)


@dataclass(frozen=True)
class EventWindow:
    """The page's events: the sequences of its first and last (0, 0 when it has none)
    among the run's `events`, and the cursors of the pages beside it."""

    first: int
    last: int
    events: int
    size: int = EVENTS_PER_PAGE

    @property
    def previous_before(self) -> int | None:
        """`before` of the page before this one (None: this is the first)."""
        return self.first if self.first > 1 else None

    @property
    def next_after(self) -> int | None:
        """`after` of the page after this one (None: this is the last)."""
        return self.last if 0 < self.last < self.events else None

    def to_dict(self) -> dict[str, Any]:
        """The JSON twin's `eventPage`: the window and its neighbours' query strings."""
        before, after = self.previous_before, self.next_after
        return {
            "size": self.size,
            "first": self.first,
            "last": self.last,
            "events": self.events,
            "previous": None if before is None else f"before={before}",
            "next": None if after is None else f"after={after}",
        }


@dataclass(frozen=True)
class RunPage:
    """One run: its detail (operations: its leases and the page's receipts; timeline: the
    state changes among the page's events), one page of events, one of receipts, the
    verification of the whole chain and the state changes per hour of the whole run."""

    detail: RunDetail
    events: list[RunEvent]
    window: EventWindow
    receipt_window: ReceiptWindow
    verification: Verification
    checkpoint: CoveringCheckpoint | None
    cursor: EventCursor = field(default_factory=EventCursor)
    events_per_hour: dict[int, int] = field(default_factory=dict)

    def receipts_query(self, **operations_cursor: str) -> str:
        """The query string of a page of receipts beside this one, on this page of events."""
        return urlencode({**self.cursor.query(), **operations_cursor})


def _event(row: tuple[Any, ...], run_id: str) -> RunEvent:
    found = EventRow(*row)
    return RunEvent.model_construct(
        sequence=found.sequence,
        type=found.type,
        payload=event_payload(found.payload_json, run_id, found.sequence),
        prior_hash=found.prior_hash,
        hash=found.event_hash,
        recorded_at=found.recorded_at,
    )


def read_run_page(
    store: RunStore,
    run_id: str,
    cursor: EventCursor | None = None,
    operations: OperationCursor | None = None,
) -> RunPage:
    """A run's page from `cursor` (default: its first events), with its leases and the
    page of receipts from `operations` (default: its first receipts)."""
    cursor = cursor or EventCursor()
    operations = operations or OperationCursor()
    clock = store.clock or system_clock
    with store.snapshot() as runs:
        projection = runs.status(run_id)  # run-not-found, before any other read
        cursor.check(projection.sequence)
        sql = runs.transaction.statements(write=False)
        one_run = {"run_id": run_id}
        page_of_events = {**one_run, "limit": EVENTS_PER_PAGE}
        events_read: tuple[Any, Mapping[str, Any]] = (
            (EVENTS_OF_RUN_BEFORE, {**page_of_events, "before": cursor.before})
            if cursor.before is not None
            else (EVENTS_OF_RUN_AFTER, {**page_of_events, "after": cursor.after or 0})
        )
        with database_errors(READ):
            # one round trip on PostgreSQL (pipelined), each through an index
            times, bindings, event_rows, leases, receipt_rows, [(operations_count,)] = (
                sql.raw_rows_of_each(
                    [
                        (RUN_TIMES, one_run),
                        (BINDING_ROWS_OF_RUN, one_run),
                        events_read,
                        (LEASE_ROWS_OF_RUN, one_run),
                        operations.page_read(run_id),
                        (OPERATION_COUNT_OF_RUN, one_run),
                    ]
                )
            )
            if cursor.before is not None:
                event_rows.reverse()
            events = [_event(row, run_id) for row in event_rows]
            first = events[0].sequence if events else 0
            last = events[-1].sequence if events else 0
            receipt_rows, more = operations.shown(receipt_rows)
            ids = [OperationDetailRow(*row).operation_id for row in receipt_rows]
            # whether receipts lie on the side of the page its cursor came from
            beside = operations.beside_read(run_id, ids[0], ids[-1]) if ids else None
            found_beside = beside is not None and bool(sql.raw_rows(beside[0], **beside[1]))
        chain = verified_chain(runs, run_id, projection.sequence)
        checkpoint = covering_checkpoint(runs, run_id)
    # read backwards: `more` lies before the page; forwards (or the first page): after it
    backwards = operations.before is not None
    more_before, more_after = (more, found_beside) if backwards else (found_beside, more)
    now = clock()
    shown_rows = leases + receipt_rows
    detail = RunDetail(
        projection=projection,
        delivery_bindings=tuple(binding_record(BindingDetailRow(*row), run_id) for row in bindings),
        operations=tuple(
            operation_record(OperationDetailRow(*row), run_id, now) for row in shown_rows
        ),
        timeline=state_path(chain.fold_fields(last), since=first - 1),
        created_at=times[0][0] if times else None,
        updated_at=times[0][1] if times else None,
    )
    return RunPage(
        detail=detail,
        events=events,
        window=EventWindow(first=first, last=last, events=projection.sequence),
        receipt_window=ReceiptWindow(
            first=ids[0] if ids else None,
            last=ids[-1] if ids else None,
            receipts=int(operations_count) - len(leases),
            more_before=more_before,
            more_after=more_after,
        ),
        verification=chain.verification,
        checkpoint=checkpoint,
        cursor=cursor,
        events_per_hour=chain.state_changes_per_hour(),
    )


__all__ = [
    "EVENTS_PER_PAGE",
    "EventCursor",
    "EventWindow",
    "RunPage",
    "read_run_page",
]
