"""Revision cs0003_timestamps: adopted cadence 1.x stores, downgrade, export and copy."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest
from integration.conftest_migrations import (
    ADOPTABLE,
    copy_fixture,
    sqlite_url,
    store_entry,
    table_rows,
)
from support import FakeClock

import cadence_store
from cadence_store import RunStore, copy_store, export_store, import_store
from cadence_store.storage.schema import downgrade, head_revision

TIMES = {"runs": ("created_at", "updated_at"), "events": ("recorded_at",)}


def rows_without_times(path: Path, table: str, *keys: str) -> list[dict[str, object]]:
    return [
        {k: v for k, v in row.items() if k not in TIMES.get(table, ())}
        for row in table_rows(path, table, *keys)
    ]


@pytest.mark.parametrize("fixture", ADOPTABLE)
def test_an_adopted_cadence_1x_store_verifies_and_has_no_times(
    fixture: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = copy_fixture(fixture, tmp_path)
    url = sqlite_url(path)
    entry = store_entry(fixture)
    caplog.set_level(logging.INFO, logger="cadence_store")
    assert cadence_store.upgrade(url) == head_revision() == "cs0003_timestamps"
    steps = [r.getMessage() for r in caplog.records if r.name == "cadence_store.storage.schema"]
    assert any("adopting the cadence 1.x store" in line for line in steps), steps
    assert any("to cs0003_timestamps" in line for line in steps), steps

    with RunStore(url, root_hash=entry["consumerRootHash"], clock=FakeClock()) as store:
        run_ids = store.run_ids()
        assert run_ids
        for run_id in run_ids:
            store.verify_integrity(run_id)  # byte for byte, as before the revision
            assert {event.recorded_at for event in store.list_events(run_id)} == {None}
            detail = store.run_detail(run_id)
            assert (detail.created_at, detail.updated_at) == (None, None)
            assert {step.recorded_at for step in detail.timeline} <= {None}
        assert store.list_runs(updated_after=0) == []  # no time, no match


def test_downgrade_and_upgrade_again_lose_no_row(tmp_path: Path) -> None:
    path = copy_fixture("current.sqlite3", tmp_path)
    url = sqlite_url(path)
    entry = store_entry("current.sqlite3")
    cadence_store.upgrade(url)
    clock = FakeClock()
    with RunStore(url, root_hash=entry["consumerRootHash"], clock=clock) as store:
        run = store.start_run("abel-implement", change="after-upgrade", operation_id="new-1")
    before = {
        table: rows_without_times(path, table, *keys)
        for table, keys in (("runs", ("run_id",)), ("events", ("run_id", "sequence")))
    }
    assert downgrade(url, "cs0002_lease_fence") == "cs0002_lease_fence"
    assert "recorded_at" not in table_rows(path, "events")[0]
    assert cadence_store.upgrade(url) == head_revision()
    after = {
        table: rows_without_times(path, table, *keys)
        for table, keys in (
            ("runs", ("run_id",)),
            ("events", ("run_id", "sequence")),
        )
    }
    assert after == before
    with RunStore(url, root_hash=entry["consumerRootHash"], clock=clock) as store:
        store.verify_integrity(run.run_id)
        # the times of the downgraded revision are gone (NULL): unknown, not guessed
        assert store.list_events(run.run_id)[0].recorded_at is None


def _store_with_times(url: str, clock: FakeClock) -> tuple[str, list[int | None]]:
    cadence_store.upgrade(url)
    with RunStore(url, root_hash="ab" * 32, clock=clock) as store:
        run = store.start_run("abel-implement", change="moved", operation_id="start-1")
        clock.advance(250)
        store.transition(run.run_id, "validating-delivery", operation_id="move-1")
        return run.run_id, [event.recorded_at for event in store.list_events(run.run_id)]


def test_export_import_keeps_the_times(tmp_path: Path) -> None:
    clock = FakeClock()
    source, target = sqlite_url(tmp_path / "a.sqlite3"), sqlite_url(tmp_path / "b.sqlite3")
    run_id, times = _store_with_times(source, clock)
    exported = io.StringIO()
    export_store(source, exported)
    record = json.loads(exported.getvalue().splitlines()[0])
    assert [row["recorded_at"] for row in record["events"]] == times
    cadence_store.upgrade(target)
    import_store(target, exported.getvalue().splitlines())
    with RunStore(target) as store:
        assert [event.recorded_at for event in store.list_events(run_id)] == times
        detail = store.run_detail(run_id)
        assert (detail.created_at, detail.updated_at) == (times[0], times[-1])


def test_an_export_made_before_the_times_imports_with_none(tmp_path: Path) -> None:
    clock = FakeClock()
    source, target = sqlite_url(tmp_path / "a.sqlite3"), sqlite_url(tmp_path / "b.sqlite3")
    run_id, _times = _store_with_times(source, clock)
    exported = io.StringIO()
    export_store(source, exported)
    record = json.loads(exported.getvalue().splitlines()[0])
    for name in ("created_at", "updated_at"):
        del record["run"][name]
    for row in record["events"]:
        del row["recorded_at"]
    cadence_store.upgrade(target)
    import_store(target, [json.dumps(record)])
    with RunStore(target) as store:
        assert {event.recorded_at for event in store.list_events(run_id)} == {None}
        store.verify_integrity(run_id)


@pytest.mark.postgres
def test_copy_from_sqlite_to_postgresql_keeps_the_times(
    tmp_path: Path, pg_database_url: str
) -> None:
    clock = FakeClock()
    source = sqlite_url(tmp_path / "a.sqlite3")
    run_id, times = _store_with_times(source, clock)
    cadence_store.upgrade(pg_database_url)
    copy_store(source, pg_database_url)
    with RunStore(pg_database_url) as store:
        assert [event.recorded_at for event in store.list_events(run_id)] == times
        detail = store.run_detail(run_id)
        assert (detail.created_at, detail.updated_at) == (times[0], times[-1])
        store.verify_integrity(run_id)
