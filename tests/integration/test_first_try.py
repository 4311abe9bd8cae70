"""A `RunStore` write's first try is the retry loop's first turn (`retries.call_with_retries`;
on SQLite and a host's engine no watchdog bounds it); when it fails, the loop goes on at
the step the failure calls for. A host's engine is the way to that path
on both engines, so these tests go through one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, func, select
from support import ROOT_HASH

import cadence_store.store.retries as retries_module
from cadence_store import RunStore, StoreBusyError, upgrade
from cadence_store.storage.models import events, runs


def _events_of(engine: Engine, run_id: str) -> int:
    with engine.connect() as connection:
        query = select(func.count()).select_from(events).where(events.c.run_id == run_id)
        return int(connection.execute(query).scalar_one())


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits between a call's tries, recorded instead of slept."""
    waited: list[float] = []
    monkeypatch.setattr(retries_module, "pause", waited.append)
    return waited


@pytest.mark.postgres
def test_a_race_lost_on_the_first_try_is_retried_whole_and_applied_once(
    pg_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    upgrade(pg_database_url)
    # a host's engine whose lock waits end at once: the first try loses its race
    host = create_engine(pg_database_url, connect_args={"options": "-c lock_timeout=50"})
    other = create_engine(pg_database_url)
    store = RunStore(host, root_hash=ROOT_HASH)
    try:
        run = store.start_run("abel-implement", change="race", operation_id="s1")
        waited: list[float] = []
        with other.connect() as holder:
            holder.execute(
                select(runs.c.run_id).where(runs.c.run_id == run.run_id).with_for_update()
            )

            def pause(seconds: float) -> None:
                waited.append(seconds)
                holder.rollback()  # the other transaction ends: the next try finds the row free

            monkeypatch.setattr(retries_module, "pause", pause)
            moved = store.transition(run.run_id, "paused", operation_id="t1", code="wait")
        assert len(waited) == 1 and 0 <= waited[0] <= 0.004  # the first retry's jitter
        assert (moved.state, moved.sequence) == ("paused", 2)
        # the same operation id replays, and one event was written
        assert store.transition(run.run_id, "paused", operation_id="t1", code="wait") == moved
        assert _events_of(other, run.run_id) == 2
    finally:
        store.close()
        host.dispose()
        other.dispose()


def test_a_locked_sqlite_database_on_the_first_try_is_busy_and_writes_nothing(
    tmp_path: Path, pauses: list[float]
) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    upgrade(url)
    host = create_engine(url, connect_args={"timeout": 0.05})  # SQLite's own wait, short
    other = create_engine(url)
    store = RunStore(host, root_hash=ROOT_HASH)
    try:
        run = store.start_run("abel-implement", change="locked", operation_id="s1")
        with other.connect() as holder:
            holder.exec_driver_sql("BEGIN IMMEDIATE")
            with pytest.raises(StoreBusyError) as info:
                store.transition(run.run_id, "paused", operation_id="t1")
            holder.rollback()
        assert info.value.code == "run-store-busy"
        assert pauses == []  # SQLite waited in its busy handler; the store retries no lock
        assert _events_of(other, run.run_id) == 1
        # the same operation id goes through once the lock is free, once
        assert store.transition(run.run_id, "paused", operation_id="t1").sequence == 2
        assert store.transition(run.run_id, "paused", operation_id="t1").sequence == 2
        assert _events_of(other, run.run_id) == 2
    finally:
        store.close()
        host.dispose()
        other.dispose()


@pytest.fixture
def host_store(tmp_path: Path) -> Iterator[tuple[RunStore, Engine]]:
    url = f"sqlite:///{tmp_path / 'host.sqlite3'}"
    upgrade(url)
    host = create_engine(url)
    store = RunStore(host, root_hash=ROOT_HASH)
    try:
        yield store, host
    finally:
        store.close()
        host.dispose()


def test_a_host_connection_keeps_the_stores_statements_for_its_life(
    host_store: tuple[RunStore, Engine],
) -> None:
    """Made once per pooled connection, in the pool's `info` for it; a connection the
    pool replaces gets new ones, and the store writes through it as before."""
    store, host = host_store
    run = store.start_run("abel-implement", change="kept", operation_id="s1")
    kept = _kept_statements(host)
    assert len(kept) == 1  # one connection served both calls
    store.transition(run.run_id, "paused", operation_id="t1")
    assert _kept_statements(host) == kept
    with host.connect() as connection:
        connection.invalidate()  # the pool replaces this connection
    assert store.transition(run.run_id, "paused", operation_id="t2").sequence == 3
    assert _kept_statements(host) and _kept_statements(host) != kept
    assert store.verify_integrity(run.run_id).sequence == 3


def _kept_statements(engine: Engine) -> list[object]:
    """The store's statements kept on each idle pooled connection of `engine`."""
    found = []
    with engine.connect() as connection:
        info = connection.connection.info
        found.extend(value for key, value in info.items() if "cadence_store" in str(key))
    return found
