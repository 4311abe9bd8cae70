"""A store's `close` (and `aclose`) leaves no feed connection or thread behind.

Each cycle opens a store on a URL, appends (which starts the PostgreSQL notifier's thread
and connection), reads or follows the feed, and closes the store. Right after the cycles
the process has the threads it had before them, and the database the backends, once the
server has ended those whose client hung up (a server backend exits on its own time,
well within `SETTLE_S`; the notifier kept its connection `IDLE_S` = 5 s before `close`
ended it).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import aclosing

import pytest
from sqlalchemy import Connection, create_engine, text
from support import ROOT_HASH

from cadence_store import AsyncRunStore, RunStore

CYCLES = 12
SETTLE_S = 2.0


@pytest.fixture
def backends(store_url: str) -> Iterator[Callable[[], int]]:
    """``backends()``: this database's server connections other than the counting one
    (always 0 on SQLite, which has none)."""
    if not store_url.startswith("postgresql"):
        yield lambda: 0
        return
    engine = create_engine(store_url, pool_size=1, max_overflow=0)
    connection: Connection = engine.connect().execution_options(isolation_level="AUTOCOMMIT")

    def count() -> int:
        # a backend that exits leaves the view at once; the row count is taken afresh
        connection.execute(text("SELECT pg_stat_clear_snapshot()"))
        return int(
            connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar_one()
        )

    try:
        yield count
    finally:
        connection.close()
        engine.dispose()


def _settled(backends: Callable[[], int], expected: int) -> int:
    """The backend count once it is `expected`, or when `SETTLE_S` has passed."""
    deadline = time.monotonic() + SETTLE_S
    while (count := backends()) != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return count


def _threads_started_since(before: set[threading.Thread]) -> list[str]:
    """The threads alive now that were not before: a thread an earlier test left, which
    may end meanwhile, is not this test's."""
    return sorted(thread.name for thread in set(threading.enumerate()) - before)


def test_close_releases_the_notifier_and_the_followers_connections(store_url, backends):
    connections, threads = backends(), set(threading.enumerate())
    for cycle in range(CYCLES):
        store = RunStore(store_url, root_hash=ROOT_HASH)
        store.start_run("abel-design", provisional_key=f"{cycle:064x}", operation_id=f"s{cycle}")
        if cycle % 2:
            assert store.read_feed()[-1].event.type == "run-created"
        else:
            items = store.follow(stop=threading.Event(), poll_s=0.01)
            assert next(items).position == 1
            items.close()
        store.close()
    assert _threads_started_since(threads) == []
    assert _settled(backends, connections) == connections


def test_aclose_releases_the_notifier_and_the_followers_connections(store_url, backends):
    async def cycles() -> None:
        for cycle in range(CYCLES):
            store = AsyncRunStore(store_url, root_hash=ROOT_HASH)
            await store.start_run(
                "abel-design", provisional_key=f"{cycle:064x}", operation_id=f"s{cycle}"
            )
            async with aclosing(store.follow(stop=threading.Event(), poll_s=0.01)) as items:
                async for item in items:
                    assert item.position == 1
                    break
            await store.aclose()

    connections, threads = backends(), set(threading.enumerate())
    asyncio.run(cycles())  # its default executor's threads end with the loop
    assert _threads_started_since(threads) == []
    assert _settled(backends, connections) == connections
