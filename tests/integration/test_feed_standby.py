"""The feed read and followed on a streaming standby (tests/pg_replication.py): through a
store made on the standby's URL, and through a store's `read_bind`. The standby takes no
write and no LISTEN; its follower polls for replayed WAL."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest
from pg_cluster import pg_available
from pg_replication import ReplicatedPair, replicated_pair
from support import ROOT_HASH

import cadence_store
from cadence_store import AsyncRunStore, FeedItem, RunStore

pytestmark = [pytest.mark.postgres, pytest.mark.campaign]


@pytest.fixture(scope="module")
def pair() -> Iterator[ReplicatedPair]:
    ok, reason = pg_available()
    if not ok:
        if os.environ.get("CI", "").strip().lower() in {"true", "1"}:
            pytest.fail(f"PostgreSQL is required under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    with replicated_pair() as running:
        cadence_store.upgrade(running.primary.url())
        yield running


def _appended(writer: RunStore, tag: str) -> list[tuple[str, int]]:
    run = writer.start_run("abel-design", provisional_key=tag * 64, operation_id=f"s-{tag}")
    writer.transition(run.run_id, "paused", operation_id=f"p-{tag}", code="p")
    return [(run.run_id, 1), (run.run_id, 2)]


def _keys(items: list[FeedItem]) -> list[tuple[str, int]]:
    return [(item.run_id, item.event.sequence) for item in items]


def test_a_store_on_the_standby_reads_and_follows_the_feed(pair: ReplicatedPair):
    with RunStore(pair.primary.url(), root_hash=ROOT_HASH) as writer:
        first = _appended(writer, "a")
        with RunStore(pair.standby.url(), root_hash=ROOT_HASH) as reader:
            items = reader.follow(stop=threading.Event(), poll_s=0.01)
            seen = [(item.run_id, item.event.sequence) for item in (next(items), next(items))]
            assert seen == first
            second = _appended(writer, "b")  # replayed while the standby's follower waits
            seen = [(item.run_id, item.event.sequence) for item in (next(items), next(items))]
            assert seen == second
            items.close()
            assert [(i.run_id, i.event.sequence) for i in reader.read_feed()] == first + second


def test_read_bind_on_the_standby_serves_read_feed(pair: ReplicatedPair):
    import asyncio

    with RunStore(pair.primary.url(), root_hash=ROOT_HASH, read_bind=pair.standby.url()) as store:
        appended = _appended(store, "c")
        deadline = time.monotonic() + 30  # numbered after the commit, then replayed
        while (keys := _keys(store.read_feed()))[-2:] != appended:
            assert time.monotonic() < deadline, keys
            time.sleep(0.01)
        items = store.follow(stop=threading.Event(), poll_s=0.01)
        assert [(item.run_id, item.event.sequence) for item in (next(items), next(items))] == (
            keys[:2]
        )
        items.close()

    async def read() -> int:
        async with AsyncRunStore(pair.standby.url(), root_hash=ROOT_HASH) as reader:
            return len(await reader.read_feed())

    assert asyncio.run(read()) == len(keys)
