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
        return self._read(lambda runs: runs.status(run_id))

    def list_events(self, run_id: str) -> list[RunEvent]:
        return self._read(lambda runs: runs.list_events(run_id))

    def iter_events(self, run_id: str) -> Iterator[RunEvent]:
        """The run's events, streamed in batches."""
        with self._reading() as runs:
            yield from runs.iter_events(run_id)

    def rebuild_projection(self, run_id: str) -> RunProjection:
        return self._read(lambda runs: runs.rebuild_projection(run_id))

    def verify_integrity(self, run_id: str) -> RunProjection:
        return self._read(lambda runs: runs.verify_integrity(run_id))

    def run_ids(self) -> list[str]:
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
        updated_after: int | None = None,
        updated_before: int | None = None,
    ) -> list[RunProjection]:
        """Stored projections of the matching runs in run id order (see
        `RunRepository.list_runs`); page with `limit` and `after=page[-1].run_id`;
        `updated_after` / `updated_before`: last appended to after / before (ms)."""
        return self._read(
            lambda runs: runs.list_runs(
                stage=stage,
                state=state,
                change=change,
                limit=limit,
                after=after,
                root_hash=root_hash,
                updated_after=updated_after,
                updated_before=updated_before,
            )
        )

    def run_detail(self, run_id: str) -> RunDetail:
        """Projection, delivery binding rows, operations and state timeline of one run."""
        return self._read(lambda runs: runs.run_detail(run_id))

    def counts(self) -> StoreCounts:
        """Rows of runs, events, operations and bindings, and runs per state."""
        return self._read(lambda runs: runs.counts())


__all__ = ["StoreReads"]
