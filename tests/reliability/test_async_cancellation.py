"""Issue 26: async units of work on SQLite cancelled at random points leak nothing.

``async with store.unit_of_work()`` blocks (journal calls and host rows) are cancelled at
random moments (``asyncio.wait_for`` with tiny timeouts, ``task.cancel()`` after a random
number of loop turns). Afterwards, once ``aclose()`` returned:

- no file descriptor of this process points at the database file (or its -wal, -shm,
  -journal);
- nothing was logged at ERROR (no traceback of a connection given back mid-statement);
- every run still verifies, and each cancelled block kept all of itself or nothing.

The garbage collector is off during the campaign, so that a connection nobody closed is
still open when the descriptors are counted (not closed, or not, by a collection that
happened to run). No thread may print a traceback either (a connection's worker thread
outliving the event loop). The default suite cancels the issue's 500 blocks, ``--slow``
5,000.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import random
import threading
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from support import ROOT_HASH, FakeClock
from uow_outcomes import HOST_OUTBOX, create_host_outbox

import cadence_store
from cadence_store import AsyncRunStore, RunStore

BLOCKS = [
    pytest.param(500, id="500-blocks"),
    pytest.param(5_000, id="5000-blocks", marks=pytest.mark.slow),
]
SEED = 26


def descriptors_on(database: Path) -> list[str]:
    """This process's open descriptors on the database file and its companions."""
    names = {str(database), *(f"{database}{suffix}" for suffix in ("-wal", "-shm", "-journal"))}
    found = []
    for entry in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{entry}")
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
        if target in names:
            found.append(f"{entry} -> {target}")
    return found


async def one_block(store: AsyncRunStore, run_id: str, number: int) -> None:
    async with store.unit_of_work() as uow:
        await uow.runs.transition(run_id, "paused", operation_id=f"a-{number}", code="one")
        await uow.session.execute(HOST_OUTBOX.insert().values(id=number, message=f"b-{number}"))
        await asyncio.sleep(0)
        await uow.runs.transition(run_id, "paused", operation_id=f"c-{number}", code="two")


async def cancel_at_random(
    store: AsyncRunStore, run_id: str, number: int, chance: random.Random
) -> None:
    if chance.random() < 0.5:
        try:
            await asyncio.wait_for(one_block(store, run_id, number), chance.uniform(0, 0.004))
        except TimeoutError:
            pass
        return
    task = asyncio.ensure_future(one_block(store, run_id, number))
    for _ in range(chance.randrange(0, 12)):
        await asyncio.sleep(0)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


@pytest.mark.parametrize("blocks", BLOCKS)
def test_cancelled_async_units_of_work_leave_no_descriptor_and_log_no_error(
    tmp_path: Path,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    blocks: int,
) -> None:
    database = (tmp_path / "store.sqlite3").resolve()
    url = f"sqlite:///{database}"
    cadence_store.upgrade(url)
    setup = create_engine(url)
    create_host_outbox(setup)
    setup.dispose()
    with RunStore(url, root_hash=ROOT_HASH, clock=clock) as sync_store:
        run_id = sync_store.start_run("abel-implement", change="cancel", operation_id="s1").run_id
    assert descriptors_on(database) == []
    chance = random.Random(SEED)
    caplog.set_level(logging.WARNING)
    thread_failures: list[str] = []  # a traceback printed by a connection's thread
    monkeypatch.setattr(
        threading, "excepthook", lambda args: thread_failures.append(repr(args.exc_value))
    )

    async def campaign() -> None:
        store = AsyncRunStore(f"sqlite+aiosqlite:///{database}", root_hash=ROOT_HASH, clock=clock)
        try:
            for number in range(1, blocks + 1):
                await cancel_at_random(store, run_id, number, chance)
            # the store still works after all of that
            await store.transition(run_id, "paused", operation_id="after", code="done")
        finally:
            await store.aclose()

    # A connection left to the garbage collector is closed whenever a collection happens
    # to run; with collections off, each one that was not closed is still open afterwards.
    gc.disable()
    try:
        asyncio.run(campaign())
        left_open = descriptors_on(database)
    finally:
        gc.enable()
    gc.collect()  # what was left to the garbage collector is cleaned up (and logged) now
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    problems = []
    if left_open:
        problems.append(f"{len(left_open)} descriptors left on the database: {left_open}")
    if errors:
        problems.append(f"{len(errors)} records logged at ERROR, first: {errors[0].getMessage()}")
    if thread_failures:
        problems.append(f"{len(thread_failures)} thread tracebacks, first: {thread_failures[0]}")
    assert not problems, "; ".join(problems)
    _check_all_or_nothing(url, clock, run_id, blocks)


def _check_all_or_nothing(url: str, clock: FakeClock, run_id: str, blocks: int) -> None:
    db = create_engine(url)
    try:
        with db.connect() as connection:
            host_rows = set(connection.execute(select(HOST_OUTBOX.c.id)).scalars())
        with RunStore(db, root_hash=ROOT_HASH, clock=clock) as store:
            store.verify_integrity(run_id)
            for number in range(1, blocks + 1):
                kept = [
                    store.inspect_operation(run_id, f"a-{number}") is not None,
                    number in host_rows,
                    store.inspect_operation(run_id, f"c-{number}") is not None,
                ]
                assert kept in ([True] * 3, [False] * 3), (number, kept)
    finally:
        db.dispose()
