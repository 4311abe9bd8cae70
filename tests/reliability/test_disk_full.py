"""Issue 26: SQLite runs out of room in the middle of a unit of work.

A's transition returns, host row X is added, then B's transition fails with
``SQLITE_FULL`` (the block catches it) and the block adds host row Y. SQLite may roll the
transaction back on its own; a unit of work that then commits the new transaction the next
statement began keeps Y alone. Allowed outcomes (`uow_outcomes.py`): everything
acknowledged (A, X, Y) committed, or a coded error and nothing committed.

Two ways to fill the database:

- a real full disk: the store lives on a small tmpfs, filled up by a filler file while the
  unit of work is open. Skipped with a reason where the machine cannot mount one; under
  ``CI=true`` failing to mount is a failure. The store is used through its own engine and
  through a host engine with a small page cache (so B's pages are spilled to the WAL, and
  fail, inside the call rather than at COMMIT);
- ``PRAGMA max_page_count`` lowered, inside the unit of work, to the pages in use: always
  available.

Each runs through `RunStore.unit_of_work()` and `AsyncRunStore.unit_of_work()`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from support import ROOT_HASH, FakeClock
from uow_outcomes import (
    HOST_OUTBOX,
    Acknowledged,
    create_host_outbox,
    one_of_two_outcomes,
    outbox_row,
)

import cadence_store
from cadence_store import AsyncRunStore, CadenceStoreError, RunStore

TMPFS_SIZE = "1m"
SMALL_PAGE_CACHE = 8  # pages: B's writes spill to the WAL inside the call
B_CODE = "y" * 3000  # a pause code needing overflow pages
B_ATTEMPTS = 2_000  # B's transitions tried until one fails for want of room


def _running_under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1"}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on its own small tmpfs (we are root on the test machines)."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        reason = f"cannot mount a small tmpfs for a full disk: {mounted.stderr.strip()}"
        if _running_under_ci():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill_disk(directory: Path) -> Path:
    """Write a filler file until the file system has no room left."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (65536, 4096, 512, 1):
            block = b"x" * size
            while True:
                try:
                    os.write(fd, block)
                except OSError:
                    break
    finally:
        os.close(fd)
    return filler


def _small_cache_on_connect(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _small_cache(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA cache_size = {SMALL_PAGE_CACHE}")
        cursor.close()


def small_cache_engine(url: str) -> Engine:
    engine = create_engine(url)
    _small_cache_on_connect(engine)
    return engine


def small_cache_async_engine(url: str) -> AsyncEngine:
    engine = create_async_engine(url.replace("sqlite:", "sqlite+aiosqlite:", 1))
    _small_cache_on_connect(engine.sync_engine)
    return engine


class DiskFull:
    """Runs A and B, and the device that leaves no room once the block asks for it."""

    def __init__(self, url: str, directory: Path | None) -> None:
        self.url = url
        self.directory = directory  # None: max_page_count
        self.filler: Path | None = None
        self.db = create_engine(url)
        create_host_outbox(self.db)

    def statement(self) -> str | None:
        """The statement the block runs on its own connection to use up the room."""
        if self.directory is not None:
            self.filler = fill_disk(self.directory)
            return None
        # the pages in use now, this transaction's included: no page may be added
        return "PRAGMA max_page_count = 1"  # SQLite keeps it at least at page_count

    def make_room(self) -> None:
        if self.filler is not None:
            self.filler.unlink()
            self.filler = None

    def close(self) -> None:
        self.make_room()
        self.db.dispose()


WAYS = [
    pytest.param("tmpfs", "store-engine", id="tmpfs"),
    pytest.param("tmpfs", "small-cache-engine", id="tmpfs-small-page-cache"),
    pytest.param("max-page-count", "store-engine", id="max-page-count"),
]


@pytest.fixture
def disk_full(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DiskFull]:
    way: str = request.param
    directory = request.getfixturevalue("small_disk") if way == "tmpfs" else None
    url = f"sqlite:///{directory or tmp_path}/store.sqlite3"
    cadence_store.upgrade(url)
    device = DiskFull(url, directory)
    try:
        yield device
    finally:
        device.close()


def _setup_runs(url: str, clock: FakeClock) -> tuple[str, str]:
    with RunStore(url, root_hash=ROOT_HASH, clock=clock) as store:
        a = store.start_run("abel-implement", change="run-a", operation_id="start-a")
        b = store.start_run("abel-implement", change="run-b", operation_id="start-b")
    return a.run_id, b.run_id


def _check_after(device: DiskFull, clock: FakeClock, run_a: str, run_b: str) -> None:
    with RunStore(device.url, root_hash=ROOT_HASH, clock=clock) as store:
        for run_id in (run_a, run_b):
            store.verify_integrity(run_id)
        store.transition(run_b, "paused", operation_id="after-room")


def _readers(url: str, clock: FakeClock) -> tuple[Any, Any, RunStore]:
    reader = RunStore(url, root_hash=ROOT_HASH, clock=clock)
    return (lambda run_id: reader.status(run_id).sequence), reader.inspect_operation, reader


@pytest.mark.parametrize(("disk_full", "engine_kind"), WAYS, indirect=["disk_full"])
def test_sqlite_full_in_a_unit_of_work_commits_all_or_nothing(
    disk_full: DiskFull, engine_kind: str, clock: FakeClock
) -> None:
    run_a, run_b = _setup_runs(disk_full.url, clock)
    host_engine = small_cache_engine(disk_full.url) if engine_kind != "store-engine" else None
    store = RunStore(host_engine or disk_full.url, root_hash=ROOT_HASH, clock=clock)
    sequence_of, receipt_of, reader = _readers(disk_full.url, clock)
    acknowledged = Acknowledged()
    failures: list[CadenceStoreError] = []
    try:
        with (
            one_of_two_outcomes(disk_full.db, sequence_of, receipt_of, acknowledged),
            store.unit_of_work() as uow,
        ):
            moved = uow.runs.transition(run_a, "paused", operation_id="t-a", code="waiting")
            acknowledged.call(run_a, "t-a", moved.sequence)
            uow.session.execute(HOST_OUTBOX.insert().values(outbox_row(1)))
            acknowledged.host_rows.append(1)
            statement = disk_full.statement()
            if statement is not None:
                uow.session.execute(text(statement))
            for attempt in range(B_ATTEMPTS):
                try:
                    moved = uow.runs.transition(
                        run_b, "paused", operation_id=f"t-b-{attempt}", code=B_CODE
                    )
                except CadenceStoreError as caught:  # the host handles it and goes on
                    failures.append(caught)
                    break
                acknowledged.call(run_b, f"t-b-{attempt}", moved.sequence)
            uow.session.execute(HOST_OUTBOX.insert().values(outbox_row(2)))
            acknowledged.host_rows.append(2)
            disk_full.make_room()  # the commit itself has room: only the block's loss counts
    finally:
        disk_full.make_room()  # a unit of work may refuse the block's next statement
        store.close()
        reader.close()
        if host_engine is not None:
            host_engine.dispose()
    for failure in failures:
        assert failure.code == "run-store-unavailable", failure
    _check_after(disk_full, clock, run_a, run_b)


@pytest.mark.parametrize(("disk_full", "engine_kind"), WAYS, indirect=["disk_full"])
def test_sqlite_full_in_an_async_unit_of_work_commits_all_or_nothing(
    disk_full: DiskFull, engine_kind: str, clock: FakeClock
) -> None:
    run_a, run_b = _setup_runs(disk_full.url, clock)
    sequence_of, receipt_of, reader = _readers(disk_full.url, clock)
    acknowledged = Acknowledged()
    failures: list[CadenceStoreError] = []

    async def block() -> None:
        host_engine = (
            small_cache_async_engine(disk_full.url) if engine_kind != "store-engine" else None
        )
        store = AsyncRunStore(
            host_engine or disk_full.url.replace("sqlite:", "sqlite+aiosqlite:", 1),
            root_hash=ROOT_HASH,
            clock=clock,
        )
        try:
            async with store.unit_of_work() as uow:
                moved = await uow.runs.transition(
                    run_a, "paused", operation_id="t-a", code="waiting"
                )
                acknowledged.call(run_a, "t-a", moved.sequence)
                await uow.session.execute(HOST_OUTBOX.insert().values(outbox_row(1)))
                acknowledged.host_rows.append(1)
                statement = disk_full.statement()
                if statement is not None:
                    await uow.session.execute(text(statement))
                for attempt in range(B_ATTEMPTS):
                    try:
                        moved = await uow.runs.transition(
                            run_b, "paused", operation_id=f"t-b-{attempt}", code=B_CODE
                        )
                    except CadenceStoreError as caught:
                        failures.append(caught)
                        break
                    acknowledged.call(run_b, f"t-b-{attempt}", moved.sequence)
                await uow.session.execute(HOST_OUTBOX.insert().values(outbox_row(2)))
                acknowledged.host_rows.append(2)
                disk_full.make_room()
        finally:
            disk_full.make_room()  # a unit of work may refuse the block's next statement
            await store.aclose()
            if host_engine is not None:
                await host_engine.dispose()

    try:
        with one_of_two_outcomes(disk_full.db, sequence_of, receipt_of, acknowledged):
            asyncio.run(block())
    finally:
        reader.close()
    for failure in failures:
        assert failure.code == "run-store-unavailable", failure
    _check_after(disk_full, clock, run_a, run_b)
