"""`RunStore(..., read_bind=...)`: reads on the read engine (a standby), writes and the
reads of a unit of work on the primary.

Both engines point at the same database here; which one served a call is told by the
connections each engine's pool handed out (a pool event, not a mock). A real standby is
read in tests/reliability/test_failover.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, event
from support import ROOT_HASH, FakeClock

from cadence_store import RunStore


class Counted:
    """An engine and how many connections its pool has handed out."""

    def __init__(self, url: str) -> None:
        self.engine: Engine = create_engine(url)
        self.checkouts = 0
        event.listen(self.engine, "checkout", self._checked_out)

    def _checked_out(self, *_: object) -> None:
        # the feed's notifier connects through a copy of this pool (its listeners too)
        if threading.current_thread().name != "cadence-store-feed-notifier":
            self.checkouts += 1

    def taken(self) -> int:
        taken, self.checkouts = self.checkouts, 0
        return taken


@pytest.fixture
def engines(store_url: str) -> Iterator[tuple[Counted, Counted]]:
    primary, standby = Counted(store_url), Counted(store_url)
    yield primary, standby
    primary.engine.dispose()
    standby.engine.dispose()


@pytest.fixture
def split_store(
    engines: tuple[Counted, Counted], clock: FakeClock
) -> Iterator[tuple[RunStore, Counted, Counted]]:
    primary, standby = engines
    store = RunStore(primary.engine, root_hash=ROOT_HASH, clock=clock, read_bind=standby.engine)
    primary.taken()
    yield store, primary, standby
    store.close()


def test_reads_go_to_the_read_engine(split_store: tuple[RunStore, Counted, Counted]) -> None:
    store, primary, standby = split_store
    run = store.start_run("abel-implement", change="c1", operation_id="start-1")
    store.acquire_lease(run.run_id, "work-1", ttl_ms=60_000)
    assert (primary.taken(), standby.taken()) == (2, 0)

    assert store.status(run.run_id) == run
    assert [event.type for event in store.list_events(run.run_id)] == ["run-created"]
    assert [event.sequence for event in store.iter_events(run.run_id)] == [1]
    assert store.verify_integrity(run.run_id) == run
    assert store.rebuild_projection(run.run_id) == run
    assert store.run_ids() == [run.run_id]
    status = store.inspect_operation(run.run_id, "work-1")
    assert status is not None and status.state == "running"
    assert store.inspect_operation(run.run_id, "nothing-here") is None
    assert primary.taken() == 0
    assert standby.taken() == 8


def test_writes_and_unit_of_work_reads_go_to_the_primary(
    split_store: tuple[RunStore, Counted, Counted],
) -> None:
    store, primary, standby = split_store
    run = store.start_run("abel-implement", change="c1", operation_id="start-1")
    store.transition(run.run_id, "paused", operation_id="pause-1")
    lease = store.acquire_lease(run.run_id, "work-1", ttl_ms=60_000)
    store.renew_lease(lease, 60_000)
    store.assert_lease(lease)
    store.recover_expired_leases()
    with store.unit_of_work() as uow:
        assert uow.runs.status(run.run_id).state == "paused"
        assert len(uow.runs.list_events(run.run_id)) == 2
    assert (primary.taken(), standby.taken()) == (7, 0)


def test_inspecting_an_expired_lease_expires_it_on_the_primary(
    split_store: tuple[RunStore, Counted, Counted], clock: FakeClock
) -> None:
    store, primary, standby = split_store
    run = store.start_run("abel-implement", change="c1", operation_id="start-1")
    store.acquire_lease(run.run_id, "work-1", ttl_ms=1_000)
    primary.taken()
    clock.advance(5_000)
    status = store.inspect_operation(run.run_id, "work-1")
    assert status is not None and status.state == "interrupted"
    # the standby saw it had to be written; the primary wrote it
    assert (primary.taken(), standby.taken()) == (1, 1)
    again = store.inspect_operation(run.run_id, "work-1")
    assert again == status
    assert (primary.taken(), standby.taken()) == (0, 1)


def test_a_read_bind_url_is_the_stores_own(store_url: str, clock: FakeClock) -> None:
    with RunStore(store_url, root_hash=ROOT_HASH, clock=clock, read_bind=store_url) as store:
        run = store.start_run("abel-implement", change="c1", operation_id="start-1")
        assert store.status(run.run_id) == run
        read_engine = store._read_engine
        assert read_engine is not None and read_engine is not store.engine
    assert read_engine.pool.checkedout() == 0
