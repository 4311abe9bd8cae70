"""Issue 26: a connection the server closed for ``idle_session_timeout`` (SQLSTATE 57P05).

The store's connections get a short ``idle_session_timeout``; after a call, the test
waits past it (the server ends the idle sessions), then makes the next call. A closed idle
connection is a lost connection: the call is re-run on a new one and succeeds, rather than
failing as "outcome unknown". (The wait only lets the server act; nothing asserts on time.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from support import ROOT_HASH, FakeClock

import cadence_store
from cadence_store import AsyncRunStore, CadenceStoreError, RunStore
from cadence_store.async_store import async_database_url

pytestmark = pytest.mark.postgres

IDLE_TIMEOUT_MS = 300
IDLE_OPTIONS = {"connect_args": {"options": f"-c idle_session_timeout={IDLE_TIMEOUT_MS}"}}
MIN_SERVER_VERSION = 140000  # idle_session_timeout is PostgreSQL 14's


@pytest.fixture
def idle_url(pg_database_url: str) -> str:
    engine = create_engine(pg_database_url)
    try:
        with engine.connect() as connection:
            version = int(connection.execute(text("SHOW server_version_num")).scalar_one())
    finally:
        engine.dispose()
    if version < MIN_SERVER_VERSION:
        pytest.skip(f"PostgreSQL {version} has no idle_session_timeout")
    cadence_store.upgrade(pg_database_url)
    return pg_database_url


@pytest.fixture
def idle_store(idle_url: str, clock: FakeClock) -> Iterator[RunStore]:
    with RunStore(idle_url, root_hash=ROOT_HASH, clock=clock, **IDLE_OPTIONS) as store:
        yield store


def wait_past_the_idle_timeout() -> None:
    time.sleep(3 * IDLE_TIMEOUT_MS / 1000)


CALLS: dict[str, Callable[[RunStore, str], Any]] = {
    "transition": lambda store, run_id: store.transition(run_id, "paused", operation_id="t2"),
    "status": lambda store, run_id: store.status(run_id),
    "list_events": lambda store, run_id: store.list_events(run_id),
    "acquire_lease": lambda store, run_id: store.acquire_lease(run_id, "apply", 60_000),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_a_call_after_an_idle_pause_is_re_run_and_succeeds(idle_store: RunStore, call: str) -> None:
    run = idle_store.start_run("abel-implement", change="idle", operation_id="s1")
    idle_store.transition(run.run_id, "paused", operation_id="t1")
    wait_past_the_idle_timeout()
    CALLS[call](idle_store, run.run_id)  # raises if the closed connection is not re-run
    wait_past_the_idle_timeout()
    # and again, through whatever connection the store kept this time
    assert idle_store.transition(run.run_id, "paused", operation_id="t3").sequence >= 3


def test_units_of_work_after_an_idle_pause_get_live_connections(idle_store: RunStore) -> None:
    """A unit of work cannot re-run its block: its first one after the pause may fail as a
    lost connection (coded, nothing kept), but the store then drops its closed connections,
    so the next one runs."""
    run = idle_store.start_run("abel-implement", change="idle-uow", operation_id="s1")
    idle_store.status(run.run_id)
    wait_past_the_idle_timeout()
    try:
        with idle_store.unit_of_work() as uow:
            uow.runs.transition(run.run_id, "paused", operation_id="t1")
    except CadenceStoreError as lost:
        assert lost.code == "run-store-unavailable", lost
        assert idle_store.status(run.run_id).sequence == 1
    with idle_store.unit_of_work() as uow:
        uow.runs.transition(run.run_id, "paused", operation_id="t1")
    assert idle_store.status(run.run_id).sequence == 2


def test_an_async_call_after_an_idle_pause_is_re_run_and_succeeds(
    idle_url: str, clock: FakeClock
) -> None:
    url = async_database_url(idle_url).render_as_string(hide_password=False)

    async def calls() -> None:
        store = AsyncRunStore(url, root_hash=ROOT_HASH, clock=clock, **IDLE_OPTIONS)
        try:
            run = await store.start_run("abel-implement", change="idle", operation_id="s1")
            await asyncio.sleep(3 * IDLE_TIMEOUT_MS / 1000)
            moved = await store.transition(run.run_id, "paused", operation_id="t1")
            assert moved.sequence == 2
            await asyncio.sleep(3 * IDLE_TIMEOUT_MS / 1000)
            assert (await store.status(run.run_id)).sequence == 2
        finally:
            await store.aclose()

    asyncio.run(calls())
