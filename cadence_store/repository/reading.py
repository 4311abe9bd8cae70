"""Reading and verifying runs: status, events, replay, integrity, and the read side
(`cadence_store.repository.queries`) for host sessions."""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import closing
from itertools import chain
from typing import Any

from ..errors import InvalidTransitionError, JournalIntegrityError
from ..journal import ChainVerifier, RunEvent, RunProjection
from ..journal.documents import Document, event_payload, projection_of, stored_projection
from ..journal.receipts import LocatedReceipts, ReceiptVerifier, receipt_error
from ..journal.replay import replay_rows
from ..journal.validation import require_operation_id, require_run_id
from ..journal.values import event_fields, stored_event
from ..journal.verification import MIRRORED_COLUMNS, stored_difference
from ..journal.views import RunDetail, StoreCounts, check_run_listing, check_run_page
from ..storage.rows import EventRow, OperationOfRunRow
from ..storage.run_statements import (
    BINDINGS_OF_RUN,
    EVENTS_OF_RUN_PAGE,
    EVENTS_OF_RUN_REST,
    LOCATED_RECEIPTS_OF_RUN,
    LOCATED_RECEIPTS_OF_RUN_PAGE,
    OPERATION,
    OPERATIONS_OF_RUN,
    UNLOCATED_OPERATIONS_OF_RUN,
    UNLOCATED_OPERATIONS_OF_RUN_PAGE,
    VERIFY_COLUMNS,
    run_ids_statement,
)
from ..storage.statements import Query, Statements
from . import queries
from .archived import missing_run
from .core import EVENT_BATCH, JournalAccess

logger = logging.getLogger(__name__)


def _whole_pages(
    sql: Statements, first: list[tuple[Any, ...]], query: Query[Any], run_id: str
) -> Generator[list[tuple[Any, ...]]]:
    """The pages of `query`, whose first `EVENT_BATCH` rows were read already (`first`):
    that page alone when it is shorter, else `query` again from its start, streamed
    (its order may have ties, so no keyset could resume it)."""
    if len(first) < EVENT_BATCH:
        if first:
            yield first
        return
    yield from sql.raw_pages(query, EVENT_BATCH, run_id=run_id)


# what a caller of `verify_integrity` may be handed: each page of the chain's event rows
# as the replay reads it (`iter_event_rows`' columns), before the replay checks them
EventPageObserver = Callable[[list[tuple[Any, ...]]], object]


def _observed(
    pages: Generator[list[tuple[Any, ...]]], observe: EventPageObserver
) -> Generator[list[tuple[Any, ...]]]:
    with closing(pages):
        for page in pages:
            observe(page)
            yield page


def _whole(
    sql: Statements, first: list[tuple[Any, ...]], query: Query[Any], run_id: str
) -> Iterator[tuple[Any, ...]]:
    with closing(_whole_pages(sql, first, query, run_id)) as pages:
        for page in pages:
            yield from page


class RunReads:
    """The reading and verifying calls of `RunRepository`, in `access`'s transaction."""

    __slots__ = ("_access",)

    def __init__(self, access: JournalAccess) -> None:
        self._access = access

    def recorded_outcome(self, run_id: str, operation_id: str, kind: str) -> RunProjection | None:
        """The projection a journal operation id (`kind`: its event type) recorded when it
        committed, or None. `RunStore` looks here first when it re-runs a call whose
        connection was lost: a first attempt that committed is replayed before any lease
        check (its lease was live when it committed; it may have expired since)."""
        require_operation_id(operation_id)
        require_run_id(run_id)
        return self._access.replay(self._access.read_statements(), run_id, operation_id, kind)

    def status(self, run_id: str) -> RunProjection:
        """The run's stored projection (no replay); `run-not-found` if there is none."""
        require_run_id(run_id)
        head = self._access.require_head(self._access.read_statements(), run_id, lock=False)
        return stored_projection(head.projection_json)

    def iter_event_rows(self, run_id: str) -> Iterator[tuple[Any, ...]]:
        """(sequence, type, payload_json, prior_hash, event_hash, recorded_at) in order,
        fetched in pages of EVENT_BATCH (a chain is never loaded whole). Plain tuples:
        an `EventRow` per row would cost verification time."""
        with closing(self._event_pages(run_id)) as pages:
            for page in pages:
                yield from page

    def _event_pages(
        self, run_id: str, first: list[tuple[Any, ...]] | None = None
    ) -> Generator[list[tuple[Any, ...]]]:
        """`iter_event_rows`' pages (a replay iterates them in C, no generator step per
        event): the first a plain query (`first`, when the caller read it already), the
        rest of a long chain one streamed statement (`EVENTS_OF_RUN_REST`); close it to
        end that statement early."""
        sql = self._access.read_statements()
        page = (
            sql.raw_rows(EVENTS_OF_RUN_PAGE, run_id=run_id, limit=EVENT_BATCH)
            if first is None
            else first
        )
        if not page:
            return
        yield page  # a short chain: one round trip
        if len(page) == EVENT_BATCH:
            after = EventRow(*page[-1]).sequence
            yield from sql.raw_pages(EVENTS_OF_RUN_REST, EVENT_BATCH, run_id=run_id, after=after)

    def iter_events(self, run_id: str) -> Iterator[RunEvent]:
        """The run's events in sequence order, read in batches."""
        require_run_id(run_id)
        self._access.require_head(self._access.read_statements(), run_id, lock=False)
        for sequence, type_, payload_json, *hashes_and_time in self.iter_event_rows(run_id):
            payload = event_payload(payload_json, run_id, sequence)
            yield stored_event(event_fields(sequence, type_, payload, *hashes_and_time))

    def list_events(self, run_id: str) -> list[RunEvent]:
        """The run's events in sequence order (`iter_events` streams them instead)."""
        return list(self.iter_events(run_id))

    def _replay_chain(
        self,
        run_id: str,
        receipts: ReceiptVerifier | None = None,
        located: LocatedReceipts | None = None,
        first_events: list[tuple[Any, ...]] | None = None,
        observe: EventPageObserver | None = None,
    ) -> Document:
        verifier = ChainVerifier()
        pages = self._event_pages(run_id, first_events)
        if observe is not None:
            pages = _observed(pages, observe)
        try:
            rows = chain.from_iterable(pages)
            decrease = replay_rows(verifier, rows, receipts, located)
            if decrease is not None and receipts is not None:
                # times are outside the hash: reported, never a verification failure
                logger.warning(
                    "cadence-store: run %s: recorded_at decreases at sequence %d "
                    "(%d ms, after %d ms); the chain itself verifies",
                    run_id,
                    *decrease,
                )
            return verifier.result()
        except JournalIntegrityError as error:
            error.run_id = run_id
            if error.sequence is None:
                error.sequence = verifier.count + 1
            raise
        except InvalidTransitionError as error:
            raise JournalIntegrityError(
                error.code, run_id=run_id, sequence=verifier.count + 1
            ) from None
        finally:
            pages.close()  # a replay stopped early: its streaming cursor, now

    def rebuild_projection(self, run_id: str) -> RunProjection:
        """Replay the run's events and return the projection they produce (without comparing
        it with the stored one: that is `verify_integrity`)."""
        require_run_id(run_id)
        self._access.require_head(self._access.read_statements(), run_id, lock=False)
        return projection_of(self._replay_chain(run_id))

    def verify_integrity(
        self, run_id: str, observe: EventPageObserver | None = None
    ) -> RunProjection:
        """Replay the chain and compare it with everything stored about the run: the
        projection (key order included), the run row's columns, the binding rows and the
        operations rows (each journal receipt must be a projection the chain produced).
        `observe` is handed each page of event rows the replay reads (a caller that
        shows the chain too reads it once; a chain that verifies was handed whole)."""
        try:
            projection = self._verify_integrity(run_id, observe)
        except JournalIntegrityError as error:
            logger.warning(
                "cadence-store: run %s fails verification: %s (sequence %s)",
                run_id,
                error.code,
                error.sequence,
            )
            raise
        logger.debug("cadence-store: run %s verifies (%d events)", run_id, projection.sequence)
        return projection

    def _verify_integrity(self, run_id: str, observe: EventPageObserver | None) -> RunProjection:
        require_run_id(run_id)
        sql = self._access.read_statements()
        # the first page of each read, sent together (one round trip on PostgreSQL: a
        # short run verifies in one, where its reads one by one cost five); a page that
        # came back full is read again whole, streamed
        page = {"run_id": run_id, "limit": EVENT_BATCH}
        columns_rows, unlocated, located_page, first_events, binding_rows = sql.raw_rows_of_each(
            (
                (VERIFY_COLUMNS, page),
                (UNLOCATED_OPERATIONS_OF_RUN_PAGE, page),
                (LOCATED_RECEIPTS_OF_RUN_PAGE, page),
                (EVENTS_OF_RUN_PAGE, page),
                (BINDINGS_OF_RUN, page),
            )
        )
        row = next((VERIFY_COLUMNS.row(*found) for found in columns_rows), None)
        if row is None:
            raise missing_run(sql, run_id)
        # receipts are streamed in chain order beside the events (nothing kept per
        # receipt); the few rows it does not locate are checked first, and those it
        # locates without a receipt's shape (never written so) after it
        receipts = ReceiptVerifier(run_id)
        for operation in _whole(sql, unlocated, UNLOCATED_OPERATIONS_OF_RUN, run_id):
            receipts.add(operation)
        stream = _whole_pages(sql, located_page, LOCATED_RECEIPTS_OF_RUN, run_id)
        try:
            located = LocatedReceipts(chain.from_iterable(stream))
            rebuilt = self._replay_chain(run_id, receipts, located, first_events, observe)
            located_fault = located.finish()
        finally:
            stream.close()
        for operation_id in located.other_shapes:
            other = sql.one(OPERATION, run_id=run_id, operation_id=operation_id)
            if other is not None:  # None: deleted since (then it holds nothing to check)
                receipts.add_out_of_order((operation_id, *other))
        columns = {name: getattr(row, name) for name, _ in MIRRORED_COLUMNS}
        difference = stored_difference(rebuilt, row.projection_json, columns, binding_rows)
        if difference is not None:
            raise difference.error("run-projection-integrity-mismatch", run_id)

        def operations() -> list[OperationOfRunRow]:
            return sql.all(OPERATIONS_OF_RUN, run_id=run_id)

        problem = receipts.problem or located_fault or receipts.result(operations)
        if problem is None and located.elsewhere:
            # receipts stored at another sequence than their text names (never written
            # so): judged at the one they name, in a second pass
            elsewhere = ReceiptVerifier(run_id)
            for _, _, text in located.elsewhere:
                elsewhere.expect(text)
            self._replay_chain(run_id, elsewhere)
            problem = elsewhere.result(operations)
        if problem is not None:
            raise receipt_error(run_id, problem)
        return projection_of(rebuilt)

    def run_ids(self, after: str | None, limit: int | None) -> list[str]:
        """The run ids after `after`, `limit` at most, sorted (a keyset page; all of them
        when both are None)."""
        limit, after = check_run_page(limit=limit, after=after)
        parameters = {
            key: value for key, value in (("after", after), ("limit", limit)) if value is not None
        }
        statement = run_ids_statement(after is not None, limit is not None)
        return [
            str(row.run_id) for row in self._access.read_statements().all(statement, **parameters)
        ]

    # -- the read side (cadence_store.repository.queries) ------------------------------------------

    def list_runs(
        self,
        stage: str | Iterable[str] | None,
        state: str | Iterable[str] | None,
        change: str | None,
        limit: int | None,
        after: str | None,
        root_hash: str | None,
        updated_after: int | None,
        updated_before: int | None,
    ) -> list[RunProjection]:
        """The listing's statement (one per filter shape) on the read statements."""
        listing = check_run_listing(
            stage=stage,
            state=state,
            change=change,
            root_hash=root_hash,
            limit=limit,
            after=after,
            updated_after=updated_after,
            updated_before=updated_before,
        )
        return queries.list_runs(self._access.read_statements(), listing)

    def run_detail(self, run_id: str) -> RunDetail:
        """The run's projection, binding rows, operations (leases judged by the clock)
        and state timeline."""
        projection = self.status(run_id)
        return queries.run_detail(
            self._access.read_statements(), projection, self.iter_events(run_id), self._access.now()
        )

    def counts(self) -> StoreCounts:
        """Rows of runs, events, operations and bindings, and runs per state."""
        return queries.counts(self._access.read_statements())
