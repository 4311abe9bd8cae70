"""Issue 26: a host savepoint (``session.begin_nested()``) inside a unit of work.

Rolling a savepoint back undoes its rows; the journal must follow it, never keep a head
the database no longer has:

- after the rollback (the savepoint held a host row and a journal call), the next call
  on the same run goes on from the head before the savepoint (not
  ``run-projection-integrity-mismatch`` on a healthy store), and the commit keeps
  exactly the work outside the savepoint;
- a journal call made right after ``begin_nested()``, before any statement of the
  session, is inside the savepoint too: its rollback undoes it (or the unit of work
  refuses with a coded error and keeps nothing).

Through `RunStore.unit_of_work()`, `AsyncRunStore.unit_of_work()` and a `RunRepository` in
a host `Session`, on both engines.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session
from support import ROOT_HASH, FakeClock
from uow_outcomes import HOST_OUTBOX, assert_refused_commit, host_outbox_ids, outbox_engine

import cadence_store
from cadence_store import AsyncRunStore, CadenceStoreError, RunRepository, RunStore
from cadence_store.async_store import async_database_url

# the call after the rollback: one that appends from the head the unit of work keeps
BINDING = ("gate-a", 1, "a" * 64)


@pytest.fixture
def savepoint_url(database_url: str) -> str:
    cadence_store.upgrade(database_url)
    return database_url


@pytest.fixture
def db(savepoint_url: str) -> Iterator[Engine]:
    with outbox_engine(savepoint_url) as engine:
        yield engine


@pytest.fixture
def store(savepoint_url: str, db: Engine, clock: FakeClock) -> Iterator[RunStore]:
    with RunStore(savepoint_url, root_hash=ROOT_HASH, clock=clock) as run_store:
        yield run_store


def _receipts(store: RunStore, run_id: str, *operation_ids: str) -> dict[str, bool]:
    return {op: store.inspect_operation(run_id, op) is not None for op in operation_ids}


def _assert_outside_work_kept(store: RunStore, db: Engine, run_id: str) -> None:
    """t1 and t3 (outside the savepoint) committed, t2 (rolled back with it) not, and the
    binding t3 made is the only one."""
    assert store.verify_integrity(run_id).sequence == 3
    assert _receipts(store, run_id, "t1", "t2", "t3") == {"t1": True, "t2": False, "t3": True}
    assert host_outbox_ids(db) == [1]
    assert [b.revision for b in store.status(run_id).delivery_bindings] == [1]


def test_a_rolled_back_savepoint_takes_the_journal_head_back_in_a_unit_of_work(
    store: RunStore, db: Engine
) -> None:
    run = store.start_run("abel-implement", change="savepoint", operation_id="s1")
    with store.unit_of_work() as uow:
        uow.session.execute(HOST_OUTBOX.insert().values(id=1, message="kept"))
        assert uow.runs.transition(run.run_id, "paused", operation_id="t1").sequence == 2
        savepoint = uow.session.begin_nested()
        uow.session.execute(HOST_OUTBOX.insert().values(id=2, message="undone"))
        assert uow.runs.transition(run.run_id, "paused", operation_id="t2").sequence == 3
        savepoint.rollback()
        # the healthy store is at sequence 2 again: the next call goes on from there
        assert uow.runs.bind_delivery(run.run_id, *BINDING, operation_id="t3").sequence == 3
    _assert_outside_work_kept(store, db, run.run_id)


def test_a_rolled_back_savepoint_takes_the_journal_head_back_in_an_async_unit_of_work(
    store: RunStore, db: Engine, savepoint_url: str, clock: FakeClock
) -> None:
    run = store.start_run("abel-implement", change="savepoint", operation_id="s1")
    url = async_database_url(savepoint_url).render_as_string(hide_password=False)

    async def block() -> None:
        async_store = AsyncRunStore(url, root_hash=ROOT_HASH, clock=clock)
        try:
            async with async_store.unit_of_work() as uow:
                await uow.session.execute(HOST_OUTBOX.insert().values(id=1, message="kept"))
                moved = await uow.runs.transition(run.run_id, "paused", operation_id="t1")
                assert moved.sequence == 2
                savepoint = await uow.session.begin_nested()
                await uow.session.execute(HOST_OUTBOX.insert().values(id=2, message="undone"))
                moved = await uow.runs.transition(run.run_id, "paused", operation_id="t2")
                assert moved.sequence == 3
                await savepoint.rollback()
                moved = await uow.runs.bind_delivery(run.run_id, *BINDING, operation_id="t3")
                assert moved.sequence == 3
        finally:
            await async_store.aclose()

    asyncio.run(block())
    _assert_outside_work_kept(store, db, run.run_id)


def test_a_rolled_back_savepoint_takes_the_journal_back_in_a_host_session(
    store: RunStore, db: Engine, clock: FakeClock
) -> None:
    run = store.start_run("abel-implement", change="savepoint", operation_id="s1")
    with Session(db) as session, session.begin():
        runs = RunRepository(session, root_hash=ROOT_HASH, clock=clock)
        session.execute(HOST_OUTBOX.insert().values(id=1, message="kept"))
        assert runs.transition(run.run_id, "paused", operation_id="t1").sequence == 2
        savepoint = session.begin_nested()
        session.execute(HOST_OUTBOX.insert().values(id=2, message="undone"))
        assert runs.transition(run.run_id, "paused", operation_id="t2").sequence == 3
        savepoint.rollback()
        assert runs.bind_delivery(run.run_id, *BINDING, operation_id="t3").sequence == 3
    _assert_outside_work_kept(store, db, run.run_id)


def _assert_savepoint_call_undone(
    store: RunStore, run_id: str, refused: CadenceStoreError | None
) -> None:
    if refused is not None:  # the unit of work would not commit: nothing of it is kept
        assert_refused_commit(refused)
        assert store.verify_integrity(run_id).sequence == 1
        assert _receipts(store, run_id, "t1", "t2") == {"t1": False, "t2": False}
        return
    # t1 was rolled back with its savepoint; t2, after it, went on from sequence 1
    assert store.verify_integrity(run_id).sequence == 2
    assert _receipts(store, run_id, "t1", "t2") == {"t1": False, "t2": True}


def test_a_journal_call_first_in_a_savepoint_is_undone_with_it(store: RunStore, db: Engine) -> None:
    run = store.start_run("abel-implement", change="savepoint-first", operation_id="s1")
    refused: CadenceStoreError | None = None
    try:
        with store.unit_of_work() as uow:
            savepoint = uow.session.begin_nested()  # no statement of the session yet
            uow.runs.transition(run.run_id, "paused", operation_id="t1")
            savepoint.rollback()
            uow.runs.transition(run.run_id, "paused", operation_id="t2")
    except CadenceStoreError as error:
        refused = error
    _assert_savepoint_call_undone(store, run.run_id, refused)


def test_a_journal_call_first_in_a_savepoint_is_undone_with_it_async(
    store: RunStore, savepoint_url: str, clock: FakeClock
) -> None:
    run = store.start_run("abel-implement", change="savepoint-first", operation_id="s1")
    url = async_database_url(savepoint_url).render_as_string(hide_password=False)
    refused: list[CadenceStoreError] = []

    async def block() -> None:
        async_store = AsyncRunStore(url, root_hash=ROOT_HASH, clock=clock)
        try:
            async with async_store.unit_of_work() as uow:
                savepoint = await uow.session.begin_nested()
                await uow.runs.transition(run.run_id, "paused", operation_id="t1")
                await savepoint.rollback()
                await uow.runs.transition(run.run_id, "paused", operation_id="t2")
        except CadenceStoreError as error:
            refused.append(error)
        finally:
            await async_store.aclose()

    asyncio.run(block())
    _assert_savepoint_call_undone(store, run.run_id, refused[0] if refused else None)
