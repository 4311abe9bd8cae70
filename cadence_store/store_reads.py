"""`RunStore`'s reads: each call reads one snapshot, on `read_bind` when given."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import TypeVar

from .journal import RunEvent, RunProjection
from .journal.views import RunDetail, StoreCounts
from .repository import RunRepository

T = TypeVar("T")


class StoreReads:
    """The read methods of `RunStore` (which provides `_read` and `_reading`)."""

    def _read(self, work: Callable[[RunRepository], T]) -> T:
        raise NotImplementedError

    def _reading(self) -> AbstractContextManager[RunRepository]:
        raise NotImplementedError

    def status(self, run_id: str) -> RunProjection:
        """The run's stored projection (no replay); `run-not-found` if there is none."""
        return self._read(lambda runs: runs.status(run_id))

    def list_events(self, run_id: str) -> list[RunEvent]:
        """The run's events in sequence order (`iter_events` streams them instead)."""
        return self._read(lambda runs: runs.list_events(run_id))

    def iter_events(self, run_id: str) -> Iterator[RunEvent]:
        """The run's events, streamed in batches."""
        with self._reading() as runs:
            yield from runs.iter_events(run_id)

    def rebuild_projection(self, run_id: str) -> RunProjection:
        """Replay the run's events and return the projection they produce (without comparing
        it with the stored one: that is `verify_integrity`)."""
        return self._read(lambda runs: runs.rebuild_projection(run_id))

    def verify_integrity(self, run_id: str) -> RunProjection:
        """Check the run's hash chain, its stored projection, run columns, bindings and
        receipts against a replay; returns the projection or raises
        `JournalIntegrityError` naming the first bad sequence and what differs."""
        return self._read(lambda runs: runs.verify_integrity(run_id))

    def run_ids(self) -> list[str]:
        """Every run id in the store, sorted."""
        return self._read(lambda runs: runs.run_ids())

    # -- the read side: each call reads one snapshot -------------------------------------

    def list_runs(
        self,
        *,
        stage: str | Iterable[str] | None = None,
        state: str | Iterable[str] | None = None,
        change: str | None = None,
        limit: int | None = None,
        after: str | None = None,
        root_hash: str | None = None,
    ) -> list[RunProjection]:
        """Stored projections of the matching runs in run id order (see
        `RunRepository.list_runs`); page with `limit` and `after=page[-1].run_id`."""
        return self._read(
            lambda runs: runs.list_runs(
                stage=stage,
                state=state,
                change=change,
                limit=limit,
                after=after,
                root_hash=root_hash,
            )
        )

    def run_detail(self, run_id: str) -> RunDetail:
        """Projection, delivery binding rows, operations and state timeline of one run."""
        return self._read(lambda runs: runs.run_detail(run_id))

    def counts(self) -> StoreCounts:
        """Rows of runs, events, operations and bindings, and runs per state."""
        return self._read(lambda runs: runs.counts())


__all__ = ["StoreReads"]
