"""The feed read by a PostgreSQL role that may only read (SELECT on the tables, USAGE on
the schema): every way in reads what the writers numbered, and writes nothing.

Positions are given by the appending process's notifier after each commit; `rejected`-
style checks take their "before" once it has numbered (`support.table_snapshot`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import aclosing

import pytest
from pg_roles import login_role
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session
from support import ROOT_HASH, table_snapshot

from cadence_store import AsyncRunStore, FeedItem, RunRepository, RunStore
from cadence_store.async_store import async_database_url
from cadence_store.storage.feed_notifier import flush_notifiers

pytestmark = pytest.mark.postgres


@pytest.fixture
def reader_url(pg_database_url: str) -> Iterator[str]:
    """The URL of a role with SELECT and USAGE only, on an upgraded store."""
    import cadence_store

    cadence_store.upgrade(pg_database_url)
    with login_role(pg_database_url, "feed_reader", "SELECT") as url:
        yield url


@pytest.fixture
def writer(pg_database_url: str, reader_url: str) -> Iterator[RunStore]:
    store = RunStore(pg_database_url, root_hash=ROOT_HASH)
    try:
        yield store
    finally:
        store.close()


def _appended(writer: RunStore, tag: str) -> list[tuple[str, int]]:
    run = writer.start_run("abel-design", provisional_key=tag * 64, operation_id=f"s-{tag}")
    writer.transition(run.run_id, "paused", operation_id=f"p-{tag}", code="p")
    return [(run.run_id, 1), (run.run_id, 2)]


def _keys(items: list[FeedItem]) -> list[tuple[str, int]]:
    return [(item.run_id, item.event.sequence) for item in items]


def test_a_select_only_role_reads_the_feed_every_way_in(writer, reader_url, pg_database_url):
    keys = _appended(writer, "a")
    flush_notifiers()  # the writer's notifier has numbered its commits
    owner = create_engine(pg_database_url)
    before = table_snapshot(owner)
    with RunStore(reader_url, root_hash=ROOT_HASH) as reader:
        assert _keys(reader.read_feed()) == keys
        with reader.unit_of_work() as uow:
            assert _keys(uow.runs.read_feed(after=1)) == keys[1:]
        assert reader.follower_position("projector") == 0
    host: Engine = create_engine(reader_url)
    with Session(host) as session, session.begin():
        assert _keys(RunRepository(session, root_hash=ROOT_HASH).read_feed()) == keys
    host.dispose()

    async def read_async() -> list[tuple[str, int]]:
        async with AsyncRunStore(reader_url, root_hash=ROOT_HASH) as store:
            return _keys(await store.read_feed())

    assert asyncio.run(read_async()) == keys
    assert table_snapshot(owner) == before  # the readers wrote nothing
    owner.dispose()


def test_a_select_only_role_follows_the_feed(writer, reader_url):
    first = _appended(writer, "a")
    with RunStore(reader_url, root_hash=ROOT_HASH) as reader:
        items = reader.follow(stop=threading.Event(), poll_s=0.01)
        assert _keys([next(items), next(items)]) == first
        second = _appended(writer, "b")  # committed while the reader waits
        assert _keys([next(items), next(items)]) == second
        items.close()


@pytest.mark.parametrize("bind", ["url", "async-engine"])
def test_a_select_only_role_follows_the_feed_async(writer, reader_url, bind):
    first = _appended(writer, "a")

    second: list[tuple[str, int]] = []

    async def follow() -> list[tuple[str, int]]:
        engine = None if bind == "url" else create_async_engine(async_database_url(reader_url))
        seen: list[tuple[str, int]] = []
        async with AsyncRunStore(engine or reader_url, root_hash=ROOT_HASH) as reader:
            follower = reader.follow(follower="projector", stop=threading.Event(), poll_s=0.01)
            async with aclosing(follower) as items:
                async for item in items:
                    seen.append((item.run_id, item.event.sequence))
                    if len(seen) == 2:  # then committed while the reader waits
                        second.extend(await asyncio.to_thread(_appended, writer, "b"))
                    if len(seen) == 4:
                        break
        if engine is not None:
            await engine.dispose()
        return seen

    assert asyncio.run(follow()) == first + second


def test_a_repeatable_read_consumer_reads_what_is_numbered_without_busy(writer, pg_database_url):
    """A host transaction at REPEATABLE READ whose snapshot holds an event that another
    transaction numbers meanwhile: it reads what its snapshot has numbered (numbering
    there would fail to serialize, `run-store-busy`)."""
    from cadence_store.storage.feed_statements import FEED_LOCK_KEY

    first = _appended(writer, "a")
    flush_notifiers()
    owner = create_engine(pg_database_url)
    with owner.connect() as blocker:
        blocker.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": FEED_LOCK_KEY})
        _appended(writer, "b")  # committed; its numbering waits for the lock
        consumer = Session(owner.execution_options(isolation_level="REPEATABLE READ"))
        consumer.begin()
        consumer.execute(text("SELECT 1"))  # its snapshot: "b" committed, unnumbered
        blocker.commit()
    writer.read_feed()  # "b" numbered by now, after the consumer's snapshot
    flush_notifiers()
    try:
        items = RunRepository(consumer, root_hash=ROOT_HASH).read_feed()
        assert _keys(items) == first
    finally:
        consumer.rollback()
        consumer.close()
        owner.dispose()
