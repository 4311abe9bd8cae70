"""The async API with cadence tables in their own PostgreSQL schema, beside a host's tables
in `public` (the async counterpart of test_pg_schema.py)."""

from __future__ import annotations

import asyncio

import pytest
from integration.test_pg_schema import ROOT, Outbox, _count, host_events, host_metadata, outbox
from sqlalchemy import create_engine, insert
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from cadence_store import (
    AsyncRunRepository,
    AsyncRunStore,
    InvalidInputError,
    SchemaOutOfDateError,
    upgrade_async,
)
from cadence_store.async_store import async_database_url
from cadence_store.storage.schema import head_revision

pytestmark = pytest.mark.postgres


@pytest.fixture
def async_schema_url(pg_database_url: str) -> str:
    engine = create_engine(pg_database_url)
    host_metadata.create_all(engine)  # the host's tables, in public
    engine.dispose()
    url = async_database_url(pg_database_url).render_as_string(hide_password=False)
    assert asyncio.run(upgrade_async(url, schema="cadence")) == head_revision()
    return url


def test_host_rows_of_async_units_of_work_and_writes_land_in_public(
    async_schema_url: str, pg_database_url: str
) -> None:
    async def scenario() -> None:
        async with AsyncRunStore(async_schema_url, root_hash=ROOT, schema="cadence") as store:
            run = await store.start_run("abel-implement", change="c", operation_id="s1")
            async with store.unit_of_work() as uow:
                await uow.runs.transition(run.run_id, "validating-delivery", operation_id="t1")
                uow.session.add(Outbox(message="from a unit of work"))
                await uow.session.execute(insert(host_events).values(id=1, what="host event"))

            async def add_outbox(session: AsyncSession) -> None:
                await session.execute(insert(outbox).values(message="from write="))

            await store.transition_atomically(
                run.run_id, "approval-needed", operation_id="t2", write=add_outbox
            )
            await store.bind_delivery_atomically(
                run.run_id,
                "gate-a",
                1,
                "a" * 64,
                operation_id="b1",
                write=lambda session: session.add(Outbox(message="bind write=")),
            )
            await store.bind_deliveries_atomically(
                [
                    {
                        "run_id": run.run_id,
                        "gate": "gate-b",
                        "revision": 1,
                        "receipt_hash": "b" * 64,
                        "operation_id": "b2",
                    }
                ],
                write=add_outbox,
            )
            # every read comes from the schema's tables
            assert (await store.verify_integrity(run.run_id)).sequence == 5
            streamed = [event async for event in store.iter_events(run.run_id)]
            assert streamed == await store.list_events(run.run_id)
            assert [p.run_id for p in await store.list_runs()] == [run.run_id]
            assert len((await store.run_detail(run.run_id)).delivery_bindings) == 2
            assert (await store.counts()).events == 5

    asyncio.run(scenario())
    assert _count(pg_database_url, "public.outbox") == 4
    assert _count(pg_database_url, "public.events") == 1  # the host's own events table
    assert _count(pg_database_url, "cadence.events") == 5  # the journal
    assert _count(pg_database_url, "cadence.runs") == 1


def test_async_repository_with_schema_in_a_host_async_session(
    async_schema_url: str, pg_database_url: str
) -> None:
    async def scenario() -> None:
        engine = create_async_engine(async_schema_url)
        try:
            async with AsyncSession(engine) as session, session.begin():
                runs = AsyncRunRepository(session, root_hash=ROOT, schema="cadence")
                assert runs.schema == "cadence"
                run = await runs.start_run("abel-implement", change="host", operation_id="s1")
                await runs.transition(run.run_id, "validating-delivery", operation_id="t1")
                session.add(Outbox(message="host row"))
                assert [e.sequence for e in await runs.list_events(run.run_id)] == [1, 2]
            async with AsyncSession(engine) as session, session.begin():
                runs = AsyncRunRepository(session, root_hash=ROOT, schema="cadence")
                await runs.transition(run.run_id, "approval-needed", operation_id="t2")
                session.add(Outbox(message="rolled back"))
                await session.rollback()
            async with AsyncSession(engine) as session:
                verified = await AsyncRunRepository(session, schema="cadence").verify_integrity(
                    run.run_id
                )
                assert verified.sequence == 2
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    assert _count(pg_database_url, "public.outbox") == 1
    assert _count(pg_database_url, "cadence.events") == 2


def test_the_schema_is_needed_checked_and_postgresql_only(
    async_schema_url: str, sqlite_database_url: str
) -> None:
    async def scenario() -> None:
        store = AsyncRunStore(async_schema_url, root_hash=ROOT)  # no schema: public has none
        with pytest.raises(SchemaOutOfDateError) as info:
            await store.status("nope")
        assert "--schema" not in info.value.command
        await store.aclose()
        engine = create_async_engine(async_schema_url)
        try:
            async with AsyncSession(engine) as session:
                with pytest.raises(SchemaOutOfDateError):
                    await AsyncRunRepository(session, root_hash=ROOT).status("nope")
                with pytest.raises(InvalidInputError) as bad:
                    AsyncRunRepository(session, schema="no; way")
                assert bad.value.code == "invalid-schema-name"
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    for bad_schema in ("no; way", "", 7):
        with pytest.raises(InvalidInputError) as info:
            AsyncRunStore(async_schema_url, schema=bad_schema)  # type: ignore[arg-type]
        assert info.value.code == "invalid-schema-name"
    with pytest.raises(InvalidInputError) as info:
        AsyncRunStore(sqlite_database_url, schema="cadence")
    assert info.value.code == "invalid-schema-name"
