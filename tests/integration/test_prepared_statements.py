"""Server-side prepared statements: on by default, off behind a pooler (`pg_prepare`).

- direct to PostgreSQL, a store's engine prepares its statements (`pg_prepared_statements`
  of its session fills after a few calls), sync and async;
- a `prepare_threshold` of the caller's (`connect_args` or the URL) is honoured;
- behind PgBouncer in transaction mode with two server connections, several stores with
  default settings make hundreds of mixed calls (starts, transitions, leases, reads; sync
  and async) and not one fails: the engine found the pooler and prepares nothing, which
  it says once in a WARNING;
- and should the check miss the pooler (made to here), the first lost statement (26000,
  42P05) switches the engines off, once each, and its transaction is tried again: still
  not one call fails, and nothing is doubled.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator

import pytest
from pg_bouncer import pgbouncer_available, pgbouncer_in_front
from sqlalchemy import Engine, text
from support import ROOT_HASH

import cadence_store
from cadence_store import AsyncRunStore, RunStore
from cadence_store.async_store.engine import create_async_store_engine
from cadence_store.storage import pg_prepare
from cadence_store.storage.engine import create_store_engine
from cadence_store.storage.pg_prepare import PREPARE_THRESHOLD

pytestmark = pytest.mark.postgres

POLICY_LOGGER = "cadence_store.storage.pg_prepare"


@pytest.fixture(scope="module")
def pg_url(pg_module_database_url: str) -> str:
    cadence_store.upgrade(pg_module_database_url)
    return pg_module_database_url


@pytest.fixture(scope="module")
def bouncer_url(pg_url: str) -> Iterator[str]:
    ok, reason = pgbouncer_available()
    if not ok:
        if os.environ.get("CI", "").strip().lower() in {"true", "1"}:
            pytest.fail(f"required under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    with pgbouncer_in_front(pg_url, pool_size=2) as pooler:
        yield pooler.url


def _threshold(engine: Engine) -> object:
    try:
        with engine.connect() as connection:
            return connection.connection.dbapi_connection.prepare_threshold  # type: ignore[union-attr]
    finally:
        engine.dispose()


def _prepared_on_session(store: RunStore) -> list[str]:
    with store.engine.connect() as connection:
        rows = connection.execute(text("SELECT statement FROM pg_prepared_statements"))
        return [str(row[0]) for row in rows]


def _some_calls(store: RunStore, tag: str) -> None:
    run = store.start_run("abel-implement", change=tag, operation_id=f"{tag}-s")
    for step in range(4):
        store.transition(run.run_id, "paused", operation_id=f"{tag}-t{step}")
        store.status(run.run_id)
        store.list_events(run.run_id)


def test_a_store_prepares_its_statements_direct(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A pool of one connection, so the session asked is the one that ran the calls."""
    with (
        caplog.at_level(logging.WARNING, POLICY_LOGGER),
        RunStore(pg_url, root_hash=ROOT_HASH, pool_size=1, max_overflow=0) as store,
    ):
        _some_calls(store, "direct")
        prepared = _prepared_on_session(store)
    assert any("events" in statement for statement in prepared), prepared
    assert not caplog.records  # no pooler, nothing said
    assert _threshold(create_store_engine(pg_url)) == PREPARE_THRESHOLD


def test_an_async_store_prepares_its_statements_direct(pg_url: str) -> None:
    async def main() -> list[str]:
        engine = create_async_store_engine(pg_url, pool_size=1, max_overflow=0)
        try:
            async with AsyncRunStore(engine, root_hash=ROOT_HASH) as store:
                run = await store.start_run("abel-implement", change="a", operation_id="a-s")
                for step in range(4):
                    await store.transition(run.run_id, "paused", operation_id=f"a-t{step}")
                    await store.status(run.run_id)
            async with engine.connect() as connection:
                found = await connection.execute(
                    text("SELECT statement FROM pg_prepared_statements")
                )
                return [str(row[0]) for row in found]
        finally:
            await engine.dispose()

    prepared = asyncio.run(main())
    assert any("events" in statement for statement in prepared), prepared


def test_a_callers_prepare_threshold_is_honoured(pg_url: str) -> None:
    assert _threshold(create_store_engine(f"{pg_url}&prepare_threshold=7")) == 7
    assert _threshold(create_store_engine(f"{pg_url}&prepare_threshold=none")) is None
    explicit = create_store_engine(pg_url, connect_args={"prepare_threshold": 3})
    assert _threshold(explicit) == 3
    opted_out = RunStore(
        pg_url,
        root_hash=ROOT_HASH,
        pool_size=1,
        max_overflow=0,
        connect_args={"prepare_threshold": None},
    )
    with opted_out as store:
        _some_calls(store, "opted-out")
        assert _prepared_on_session(store) == []


def _mixed_calls(stores: list[RunStore], rounds: int, tag: str = "pb") -> int:
    """Starts, transitions, a lease's acquire, renew and commit, and reads, the stores
    taking turns (each call may land on either server connection). The calls made."""
    calls = 0
    runs = []
    for number, store in enumerate(stores):
        runs.append(
            store.start_run(
                "abel-implement", change=f"{tag}-{number}", operation_id=f"{tag}-{number}"
            )
        )
        calls += 1
    for number in range(rounds):
        index = number % len(stores)
        store, run_id = stores[index], runs[index].run_id
        store.transition(run_id, "paused", operation_id=f"{tag}-{index}-t{number}")
        store.status(run_id)
        store.list_events(run_id)
        store.list_runs(state="paused")
        store.inspect_operation(run_id, f"{tag}-{index}-t{number}")
        calls += 5
        if number % 5 == 0:
            lease = store.acquire_lease(run_id, f"{tag}-l{number}", 60_000)
            store.renew_lease(lease, 60_000)
            store.commit_lease(lease, {"n": number})
            calls += 3
    for store, run in zip(stores, runs, strict=True):
        store.verify_integrity(run.run_id)
        calls += 1
    return calls


def test_behind_a_transaction_pooler_no_call_fails_by_default(
    bouncer_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, POLICY_LOGGER):
        stores = [RunStore(bouncer_url, root_hash=ROOT_HASH) for _ in range(3)]
        try:
            calls = _mixed_calls(stores, 60)
        finally:
            for store in stores:
                store.close()
    assert calls > 300
    said = [record for record in caplog.records if record.name == POLICY_LOGGER]
    assert len(said) == len(stores)  # once per engine (each store made its own)
    assert all("prepare_threshold" in record.getMessage() for record in said)
    assert all(_threshold(create_store_engine(bouncer_url)) is None for _ in range(2))


def test_behind_a_transaction_pooler_no_async_call_fails_by_default(bouncer_url: str) -> None:
    async def take_turns() -> int:
        stores = [AsyncRunStore(bouncer_url, root_hash=ROOT_HASH) for _ in range(3)]
        calls = 0
        try:
            runs = [
                await s.start_run("abel-implement", change=f"apb-{n}", operation_id=f"apb-{n}")
                for n, s in enumerate(stores)
            ]
            for number in range(40):
                index = number % 3
                store, run_id = stores[index], runs[index].run_id
                await store.transition(run_id, "paused", operation_id=f"apb-{index}-t{number}")
                await store.status(run_id)
                await store.list_events(run_id)
                await store.list_runs(state="paused")
                calls += 4
                if number % 5 == 0:
                    lease = await store.acquire_lease(run_id, f"apb-l{number}", 60_000)
                    await store.commit_lease(lease, {"n": number})
                    calls += 2
        finally:
            for store in stores:
                await store.aclose()
        return calls

    assert asyncio.run(take_turns()) > 150


def test_a_pooler_the_check_misses_fails_no_call(
    bouncer_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pooler that would pass the check (the server's own process id forwarded): the
    engines prepare until a statement is lost, then switch off, all at once, and the
    transaction is tried again."""
    monkeypatch.setattr(pg_prepare, "behind_pooler", lambda _connection: (False, "missed"))
    with caplog.at_level(logging.WARNING, POLICY_LOGGER):
        stores = [RunStore(bouncer_url, root_hash=ROOT_HASH) for _ in range(3)]
        try:
            calls = _mixed_calls(stores, 30, tag="missed")
            for store in stores:
                raw = store.engine.raw_connection()
                try:
                    assert raw.driver_connection.prepare_threshold is None  # type: ignore[union-attr]
                finally:
                    raw.close()
        finally:
            for store in stores:
                store.close()
    assert calls > 150
    said = [r.getMessage() for r in caplog.records if r.name == POLICY_LOGGER]
    assert len(said) == 1, said  # every engine that prepared is switched off at once
    assert "a prepared statement was lost" in said[0] and "prepare_threshold" in said[0]
