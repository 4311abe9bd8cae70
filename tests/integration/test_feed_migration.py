"""Revision cs0004_feed: positions for stored events, adopted cadence 1.x stores, downgrade."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from integration.conftest_migrations import (
    ADOPTABLE,
    adopted_store,
    copy_fixture,
    sqlite_url,
)
from sqlalchemy import create_engine, inspect, text
from support import ROOT_HASH, FakeClock

import cadence_store
from cadence_store import RunStore
from cadence_store.storage.schema import downgrade, head_revision


@pytest.mark.parametrize("fixture", ADOPTABLE)
def test_an_adopted_cadence_1x_store_gets_positions_in_write_order(
    fixture: str, tmp_path: Path
) -> None:
    path = copy_fixture(fixture, tmp_path)
    with sqlite3.connect(path) as connection:  # cadence 1.x's own file, before adoption
        written = connection.execute(
            "SELECT run_id, sequence FROM events ORDER BY rowid"
        ).fetchall()
    assert written
    url = sqlite_url(path)
    assert cadence_store.upgrade(url) == head_revision()
    with adopted_store(url, fixture) as store:
        feed = store.read_feed()
        assert [(item.run_id, item.event.sequence) for item in feed] == written
        assert [item.position for item in feed] == sorted({item.position for item in feed})
        assert len(feed) == store.counts().events
        for run_id in store.run_ids():
            store.verify_integrity(run_id)  # byte for byte: only the new column was written
            assert [item.event for item in feed if item.run_id == run_id] == store.list_events(
                run_id
            )


def test_downgrade_drops_the_feed_and_upgrade_numbers_again(database_url: str) -> None:
    cadence_store.upgrade(database_url)
    clock = FakeClock()
    with RunStore(database_url, root_hash=ROOT_HASH, clock=clock) as store:
        runs = []
        for tag in "ab":
            run = store.start_run("abel-design", provisional_key=tag * 64, operation_id=tag)
            runs.append(run.run_id)
            clock.advance(10)
        store.transition(runs[0], "paused", operation_id="pause")
        with store.unit_of_work() as uow:
            uow.runs.record_position("projector", 2)
        before = [(i.run_id, i.event) for i in store.read_feed()]
    assert downgrade(database_url, "cs0003_timestamps") == "cs0003_timestamps"
    engine = create_engine(database_url)
    try:
        inspector = inspect(engine)
        assert "follower_positions" not in inspector.get_table_names()
        assert "feed_position" not in {c["name"] for c in inspector.get_columns("events")}
    finally:
        engine.dispose()
    assert cadence_store.upgrade(database_url) == head_revision()
    with RunStore(database_url, root_hash=ROOT_HASH, clock=clock) as store:
        feed = store.read_feed()
        # SQLite: the rowid (write) order; PostgreSQL: recorded_at, then run, then sequence
        assert [(i.run_id, i.event) for i in feed] == before
        assert [item.position for item in feed] == [1, 2, 3]
        assert store.follower_position("projector") == 0  # the table went with the downgrade
        for run_id in runs:
            store.verify_integrity(run_id)
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            nulls = connection.execute(
                text("SELECT count(*) FROM events WHERE feed_position IS NULL")
            ).scalar_one()
        assert nulls == 0
    finally:
        engine.dispose()
