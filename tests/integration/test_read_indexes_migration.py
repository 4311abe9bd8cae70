"""Revision cs0009_read_indexes: five indexes on `runs` and `operations`, on both engines;
the downgrade drops them and leaves every row as it was, and the store at the revision
before refuses to open until upgraded (the shape check names the indexes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest
from sqlalchemy import Engine, create_engine, inspect
from support import ROOT_HASH, FakeClock, table_snapshot

import cadence_store
from cadence_store import RunStore, SchemaOutOfDateError
from cadence_store.storage.schema import downgrade

BEFORE = "cs0008_retention"  # the revision before this one
T = TypeVar("T")
NEW_INDEXES = {
    "ix_operations_lease_expires_at",
    "ix_runs_change_name",
    "ix_runs_state_run_id",
    "ix_runs_stage_run_id",
    "ix_runs_root_hash_run_id",
}


def _read(url: str, read: Callable[[Engine], T]) -> T:
    engine = create_engine(url)
    try:
        return read(engine)
    finally:
        engine.dispose()


def _indexes(url: str) -> set[str]:
    def names(engine: Engine) -> set[str]:
        found = inspect(engine)
        return {
            str(index["name"])
            for table in ("runs", "operations")
            for index in found.get_indexes(table)
        }

    return _read(url, names)


def test_the_revision_adds_the_indexes_and_its_downgrade_drops_them(database_url: str) -> None:
    assert cadence_store.upgrade(database_url, BEFORE) == BEFORE
    assert not NEW_INDEXES & _indexes(database_url)
    with pytest.raises(SchemaOutOfDateError):
        RunStore(database_url, root_hash=ROOT_HASH).close()
    cadence_store.upgrade(database_url)
    assert _indexes(database_url) >= NEW_INDEXES
    with RunStore(database_url, root_hash=ROOT_HASH, clock=FakeClock()) as store:
        run = store.start_run("abel-implement", change="indexed", operation_id="s-1")
        store.transition(run.run_id, "paused", operation_id="t-1")
        lease = store.acquire_lease(run.run_id, "l-1", 60_000)
        assert [r.run_id for r in store.list_runs(change="indexed")] == [run.run_id]
        assert [r.run_id for r in store.list_runs(state="paused")] == [run.run_id]
    rows = _read(database_url, table_snapshot)
    assert downgrade(database_url, BEFORE) == BEFORE
    assert not NEW_INDEXES & _indexes(database_url)
    assert _read(database_url, table_snapshot) == rows
    cadence_store.upgrade(database_url)
    with RunStore(database_url, root_hash=ROOT_HASH, clock=FakeClock()) as store:
        store.interrupt_lease(lease)
        assert store.verify_integrity(run.run_id).sequence >= 2
