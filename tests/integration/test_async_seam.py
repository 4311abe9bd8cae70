"""`AsyncRunStore` is `RunStore` behind coroutines, on the engine configuration it is given.

Each option of the sync store is honoured by the async one: `failover_timeout_s` (a call
whose connection is cut is re-run once, with the same operation id), `read_bind`,
`connect_args` (a host `AsyncEngine`'s, or the store's own), a host `AsyncEngine` with its
connect listener and pool, and `AsyncRunStore.open(root)`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import stat
from pathlib import Path
from typing import Any

import pytest
from fault_proxy import FaultProxy, fault_proxy, unix_socket_of
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.pool import StaticPool
from support import ROOT_HASH, FakeClock

from cadence_store import (
    AsyncRunStore,
    InvalidInputError,
    RunStore,
    resolve_state_root,
    upgrade,
)
from cadence_store.async_store import async_database_url


def _async(url: str) -> str:
    return async_database_url(url).render_as_string(hide_password=False)


@pytest.fixture
def upgraded(database_url: str) -> str:
    upgrade(database_url)
    return database_url


def _count(url: str, sql: str, **params: Any) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text(sql), params).scalar_one())
    finally:
        engine.dispose()


def test_the_options_of_run_store_are_taken(upgraded: str) -> None:
    async def main() -> None:
        async with AsyncRunStore(
            _async(upgraded),
            root_hash=ROOT_HASH,
            failover_timeout_s=5,
            read_bind=_async(upgraded),
            pool_size=3,
        ) as store:
            run = await store.start_run("abel-implement", change="opts", operation_id="s")
            assert (await store.status(run.run_id)).run_id == run.run_id

    asyncio.run(main())


def test_a_bad_option_is_coded_before_any_engine_exists(upgraded: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        AsyncRunStore(_async(upgraded), failover_timeout_s=-1)
    assert caught.value.code == "invalid-failover-timeout"


def test_a_host_async_engine_is_used_as_it_is(upgraded: str) -> None:
    """Its connect listener fires for the store's own calls, its pool serves them, and
    nothing of it is disposed by the store."""
    seen: list[object] = []

    async def main() -> None:
        engine = create_async_engine(_async(upgraded), poolclass=StaticPool)
        event.listen(engine.sync_engine, "connect", lambda dbapi, _record: seen.append(dbapi))
        store = AsyncRunStore(engine, root_hash=ROOT_HASH)
        run = await store.start_run("abel-implement", change="host", operation_id="s")
        await store.transition(run.run_id, "paused", operation_id="p")
        async with store.unit_of_work() as uow:
            await uow.runs.transition(run.run_id, "running", operation_id="r")
        assert (await store.verify_integrity(run.run_id)).sequence == 3
        await store.aclose()
        assert len(seen) == 1  # one static connection, made through the host's pool
        async with engine.connect() as connection:  # the host's engine still works
            assert (await connection.exec_driver_sql("SELECT 1")).scalar_one() == 1
        await engine.dispose()

    asyncio.run(main())


@pytest.mark.postgres
@pytest.mark.parametrize("bind", ["url", "engine"])
def test_connect_args_reach_every_connection_the_store_uses(
    pg_database_url: str, bind: str
) -> None:
    """`prepare_threshold=None`: no server-side prepared statement, even after a statement
    ran far past psycopg's default threshold (5) on one connection."""
    import psycopg

    upgrade(pg_database_url)
    url = _async(pg_database_url)
    options: dict[str, Any] = {"connect_args": {"prepare_threshold": None}}
    prepared: list[int] = []

    async def count_prepared(session: AsyncSession) -> None:
        found = await session.execute(text("SELECT count(*) FROM pg_prepared_statements"))
        prepared.append(int(found.scalar_one()))

    async def main() -> None:
        engine = create_async_engine(url, **options) if bind == "engine" else None
        store = (
            AsyncRunStore(engine, root_hash=ROOT_HASH)
            if engine is not None
            else AsyncRunStore(url, root_hash=ROOT_HASH, **options)
        )
        async with store:
            run = await store.start_run("abel-implement", change="p", operation_id="s")
            for step in range(12):
                await store.transition(
                    run.run_id, "paused" if step % 2 == 0 else "running", operation_id=f"t{step}"
                )
            for step in range(12, 24):
                await store.transition_atomically(
                    run.run_id,
                    "paused" if step % 2 == 0 else "running",
                    operation_id=f"t{step}",
                    write=count_prepared,
                )
            drivers = [o for o in gc.get_objects() if isinstance(o, psycopg.BaseConnection)]
            database = make_url(url).database
            live = [c for c in drivers if not c.closed and c.info.dbname == database]
            assert live and all(c.prepare_threshold is None for c in live)
        if engine is not None:
            await engine.dispose()

    asyncio.run(main())
    assert prepared and set(prepared) == {0}


@pytest.mark.postgres
def test_a_cut_connection_during_an_async_call_is_re_run_once_with_the_same_operation_id(
    pg_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    upgrade(pg_database_url)
    with fault_proxy(unix_socket_of(pg_database_url)) as proxy:
        proxied = (
            make_url(pg_database_url)
            .set(host="127.0.0.1", port=proxy.port, query={})
            .render_as_string(hide_password=False)
        )
        caplog.set_level(logging.WARNING, logger="cadence_store")
        _cut_and_re_run(proxied, proxy)
        reruns = [r for r in caplog.records if r.name.startswith("cadence_store.store.failover")]
        assert len(reruns) == 1, [r.getMessage() for r in reruns]
    events = _count(pg_database_url, "SELECT count(*) FROM events")
    receipts = _count(
        pg_database_url, "SELECT count(*) FROM operations WHERE operation_id = 'pause-1'"
    )
    assert (events, receipts) == (2, 1)


def _cut_and_re_run(url: str, proxy: FaultProxy) -> None:
    async def main() -> None:
        async with AsyncRunStore(_async(url), root_hash=ROOT_HASH, failover_timeout_s=10) as store:
            run = await store.start_run("abel-implement", change="cut", operation_id="start-1")
            proxy.cut()  # the pooled connection is now dead
            moved = await store.transition(run.run_id, "paused", operation_id="pause-1")
            assert moved.state == "paused" and moved.sequence == 2

    asyncio.run(main())


def test_open_is_run_store_open(tmp_path: Path) -> None:
    consumer = tmp_path / "consumer"
    consumer.mkdir()
    root = resolve_state_root(consumer, xdg_state_home=str(tmp_path / "state"))

    async def main() -> str:
        store = await AsyncRunStore.open(root, clock=FakeClock())
        async with store:
            assert store.root_hash == root.consumer_root_hash
            run = await store.start_run("abel-implement", change="open", operation_id="s")
            async with store.unit_of_work() as uow:
                await uow.runs.transition(run.run_id, "paused", operation_id="p")
            return run.run_id

    run_id = asyncio.run(main())
    mode = stat.S_IMODE(Path(root.database_path).stat().st_mode)
    assert mode == 0o600
    with RunStore.open(root) as store:
        assert store.verify_integrity(run_id).sequence == 2


def test_the_testing_plugin_gives_an_async_store(
    async_cadence_store: AsyncRunStore, cadence_store_async_url: str
) -> None:
    assert "+aiosqlite" in cadence_store_async_url

    async def main() -> int:
        run = await async_cadence_store.start_run(
            "abel-implement", change="plugin", operation_id="s"
        )
        return (await async_cadence_store.verify_integrity(run.run_id)).sequence

    assert asyncio.run(main()) == 1
