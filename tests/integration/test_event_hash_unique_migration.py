"""Revision cs0006_event_hash_unique: the events table without `UNIQUE (run_id, event_hash)`.

The index was read by nothing and cost every append a random leaf (issue 27). SQLite
rebuilds the table: every row, rowid and feed position kept, STRICT kept, the key, the
foreign key and the feed index as before; adopted cadence 1.x stores still verify byte for
byte. A downgrade puts the constraint back on both engines.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from integration.conftest_migrations import (
    ADOPTABLE,
    adopted_store,
    copy_fixture,
    query,
    sqlite_url,
)
from sqlalchemy import create_engine, inspect
from support import FakeClock

import cadence_store
from cadence_store import RunStore
from cadence_store.storage.schema import downgrade, head_revision

BEFORE = "cs0005_receipt_sequence"
EVENT_ROWS = "SELECT rowid, * FROM events ORDER BY rowid"


def _event_hash_uniques(url: str) -> list[dict[str, object]]:
    engine = create_engine(url)
    try:
        return [
            unique
            for unique in inspect(engine).get_unique_constraints("events")
            if unique["column_names"] == ["run_id", "event_hash"]
        ]
    finally:
        engine.dispose()


def _sqlite_events_ddl(path: Path) -> str:
    (row,) = query(path, "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'events'")
    return str(row["sql"])


@pytest.mark.parametrize("fixture", ADOPTABLE)
def test_an_adopted_store_loses_the_unique_and_keeps_every_event(
    fixture: str, tmp_path: Path
) -> None:
    path = copy_fixture(fixture, tmp_path)
    url = sqlite_url(path)
    assert cadence_store.upgrade(url, BEFORE) == BEFORE
    assert _event_hash_uniques(url) != []
    before = query(path, EVENT_ROWS)
    assert before  # a store with events
    assert cadence_store.upgrade(url) == head_revision()
    assert query(path, EVENT_ROWS) == before  # rows, rowids and feed positions, byte for byte
    assert _event_hash_uniques(url) == []
    ddl = _sqlite_events_ddl(path)
    assert ddl.rstrip().endswith("STRICT")
    assert "ON DELETE CASCADE" in ddl
    indexes = query(path, "SELECT name FROM sqlite_master WHERE tbl_name = 'events'")
    assert {"name": "ix_events_feed_position"} in indexes
    with adopted_store(url, fixture) as store:
        for run_id in store.run_ids():
            store.verify_integrity(run_id)
        run = store.start_run("abel-implement", change="after-cs0006", operation_id="new-1")
        store.transition(run.run_id, "validating-delivery", operation_id="new-2")
        store.verify_integrity(run.run_id)


def test_downgrade_puts_the_unique_back_and_upgrade_drops_it(database_url: str) -> None:
    assert cadence_store.upgrade(database_url) == head_revision()
    assert _event_hash_uniques(database_url) == []
    with RunStore(database_url, root_hash="a" * 64, clock=FakeClock()) as store:
        run = store.start_run("abel-design", provisional_key="b" * 64, operation_id="start")
        store.transition(run.run_id, "paused", operation_id="pause")
    assert downgrade(database_url, BEFORE) == BEFORE
    assert len(_event_hash_uniques(database_url)) == 1
    assert cadence_store.upgrade(database_url) == head_revision()
    assert _event_hash_uniques(database_url) == []
    with RunStore(database_url, root_hash="a" * 64, clock=FakeClock()) as store:
        store.transition(run.run_id, "paused", operation_id="pause-again")
        assert store.verify_integrity(run.run_id).sequence == 3  # the chain, appended after
