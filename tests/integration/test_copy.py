"""`copy_store`: a cadence 1.x store copied SQLite -> PostgreSQL -> SQLite, byte for byte."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select, update

from cadence_store import OperationConflictError, RunStore, SchemaOutOfDateError, upgrade
from cadence_store.errors import JournalIntegrityError
from cadence_store.storage.models import delivery_bindings, events, operations, runs
from cadence_store.transfer import Progress, copy_store, export_store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cadence-1x"
RUN = "fec8a140-7996-4634-a993-25c77fa10153"


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    data = json.loads((FIXTURES / "manifest.json").read_text(encoding="utf-8"))
    store: dict[str, Any] = next(s for s in data["stores"] if s["file"] == "current.sqlite3")
    return store


@pytest.fixture
def source_url(tmp_path: Path) -> str:
    target = tmp_path / "current.sqlite3"
    shutil.copyfile(FIXTURES / "current.sqlite3", target)
    url = f"sqlite:///{target}"
    upgrade(url)
    return url


def fresh_sqlite(tmp_path: Path, name: str) -> str:
    url = f"sqlite:///{tmp_path}/{name}.sqlite3"
    upgrade(url)
    return url


def rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return {
                table.name: sorted(tuple(row) for row in connection.execute(select(table)))
                for table in (runs, events, operations, delivery_bindings)
            }
    finally:
        engine.dispose()


def assert_matches_manifest(url: str, manifest: dict[str, Any]) -> None:
    with RunStore(url, root_hash=manifest["consumerRootHash"]) as store:
        assert sorted(store.run_ids()) == sorted(r["runId"] for r in manifest["runs"])
        for run in manifest["runs"]:
            status = store.status(run["runId"])
            assert list(status.document().items()) == list(run["status"].items()), run["label"]
            assert [e.to_dict() for e in store.list_events(run["runId"])] == run["events"]
            store.verify_integrity(run["runId"])
    stored_ops = {(r[0], r[1]): r for r in rows(url)["operations"]}
    for operation in manifest["operations"]:
        key = (operation["run_id"], operation["operation_id"])
        # cadence 1.x's columns, plus the fence the adoption gave each lease
        adopted = {**operation, "lease_fence": 1 if operation["kind"] == "lease" else None}
        assert stored_ops[key] == tuple(adopted[c.name] for c in operations.c), key
    assert len(stored_ops) == len(manifest["operations"])


def test_copy_sqlite_to_postgresql_and_back(
    source_url: str, pg_database_url: str, tmp_path: Path, manifest: dict[str, Any]
) -> None:
    upgrade(pg_database_url)
    reports: list[Progress] = []
    report = copy_store(source_url, pg_database_url, batch_size=3, progress=reports.append)
    assert report.runs_written == 8 and report.events_written == 25 and report.runs_skipped == 0
    assert [p.done for p in reports if p.phase == "check"] == [3, 6, 8]
    # the copy advances per run, not per batch
    assert [p.done for p in reports if p.phase == "copy"] == list(range(9))
    assert_matches_manifest(pg_database_url, manifest)
    assert rows(pg_database_url) == rows(source_url)

    back = fresh_sqlite(tmp_path, "back")
    engine = create_engine(pg_database_url)  # an Engine works as well as a URL
    try:
        report = copy_store(engine, back)
    finally:
        engine.dispose()
    assert report.runs_written == 8
    assert_matches_manifest(back, manifest)
    assert rows(back) == rows(source_url)

    # re-running either copy is a no-op
    before = rows(pg_database_url)
    again = copy_store(source_url, pg_database_url)
    assert again.runs_written == 0 and again.runs_skipped == 8 and again.events_written == 0
    assert rows(pg_database_url) == before
    assert copy_store(pg_database_url, back).runs_written == 0


def test_export_reports_progress_per_run(source_url: str) -> None:
    reports: list[Progress] = []
    report = export_store(source_url, io.StringIO(), batch_size=3, progress=reports.append)
    assert [(p.phase, p.done, p.total) for p in reports] == [
        ("export", done, 8) for done in range(1, 9)
    ]
    assert [p.run_id for p in reports] == report.written


def test_copy_refuses_a_different_run_under_the_same_id(
    source_url: str, pg_database_url: str, tmp_path: Path
) -> None:
    upgrade(pg_database_url)
    copy_store(source_url, pg_database_url)
    engine = create_engine(pg_database_url)
    try:
        # the destination's run RUN now differs: drop its last event and rewind its head
        with engine.begin() as connection:
            outcome = connection.execute(
                select(operations.c.outcome_json).where(
                    operations.c.run_id == RUN, operations.c.operation_id == "design-alpha-t2"
                )
            ).scalar_one()
            projection = json.loads(outcome)
            connection.execute(
                events.delete().where(events.c.run_id == RUN, events.c.sequence == 5)
            )
            # with the receipt of that event (a receipt must name a sequence on the chain)
            connection.execute(
                operations.delete().where(
                    operations.c.run_id == RUN, operations.c.operation_id == "design-alpha-t3"
                )
            )
            connection.execute(
                update(runs)
                .where(runs.c.run_id == RUN)
                .values(
                    state=projection["state"],
                    sequence=4,
                    event_hash=projection["eventHash"],
                    projection_json=outcome,
                )
            )
            # and one other run of the source is missing at the destination
            connection.execute(runs.delete().where(runs.c.run_id.like("6464%")))
    finally:
        engine.dispose()
    with RunStore(pg_database_url) as store:
        store.verify_integrity(RUN)  # a consistent run, just not the source's
    before = rows(pg_database_url)
    with pytest.raises(OperationConflictError) as raised:
        copy_store(source_url, pg_database_url, batch_size=2)
    assert raised.value.code == "run-id-conflict"
    assert RUN in str(raised.value.detail)
    assert rows(pg_database_url) == before  # the missing run was not written either


def test_copy_refuses_a_corrupt_source_and_an_outdated_destination(
    source_url: str, tmp_path: Path
) -> None:
    outdated = f"sqlite:///{tmp_path}/outdated.sqlite3"
    create_engine(outdated).connect().close()
    with pytest.raises(SchemaOutOfDateError) as raised:
        copy_store(source_url, outdated)
    assert "cadence-store upgrade" in raised.value.command

    engine = create_engine(source_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                update(events)
                .where(events.c.run_id == RUN, events.c.sequence == 2)
                .values(payload_json='{"change":"tampered"}')
            )
    finally:
        engine.dispose()
    destination = fresh_sqlite(tmp_path, "dest")
    with pytest.raises(JournalIntegrityError) as corrupt:
        copy_store(source_url, destination)
    assert corrupt.value.run_id == RUN and corrupt.value.sequence == 2
    assert rows(destination)["runs"] == []
