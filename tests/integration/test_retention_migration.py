"""Revision cs0008_retention: three new owned tables on both engines; a downgrade drops
them while no run is archived, and refuses (changing nothing) once one is: its kept
leaves would leave gaps in the feed that the tree could no longer read."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect
from support import ROOT_HASH, FakeClock

import cadence_store
from cadence_store import CadenceStoreError, RunStore, generate_signer_key
from cadence_store.storage.schema import current_revision, downgrade, head_revision

BEFORE = "cs0007_checkpoints"
NEW_TABLES = {"kept_leaves", "archived_runs", "archived_operations"}
KEY = generate_signer_key("example.com/retained")


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _revision(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return current_revision(connection)
    finally:
        engine.dispose()


def test_the_revision_adds_the_tables_and_a_downgrade_drops_them_until_a_run_is_archived(
    database_url: str, tmp_path: Path
) -> None:
    assert cadence_store.upgrade(database_url) == head_revision()
    assert _tables(database_url) >= NEW_TABLES
    assert downgrade(database_url, BEFORE) == BEFORE
    assert not NEW_TABLES & _tables(database_url)
    assert cadence_store.upgrade(database_url) == head_revision()
    clock = FakeClock()
    with RunStore(database_url, root_hash=ROOT_HASH, clock=clock) as store:
        run = store.start_run("abel-implement", change="old", operation_id="s-1")
        store.transition(run.run_id, "discarded", operation_id="t-1")
        clock.advance(1000)
        store.archive(finished_before_ms=clock(), to=tmp_path / "a.archive", key=KEY)
    with pytest.raises(CadenceStoreError):
        downgrade(database_url, BEFORE)
    assert _revision(database_url) == head_revision()
    assert _tables(database_url) >= NEW_TABLES
