"""Revision cs0005_receipt_sequence: every journal receipt knows the sequence it names.

Verification streams receipts in sequence order through `operations.sequence` (issue 27).
The revision fills the column for adopted cadence 1.x stores from each receipt's own text
(their receipts still verify byte for byte), every write fills it, an old export is given
it on import, a downgrade drops it and an upgrade fills it again. A receipt without it
(a NULL column) or with a wrong one is still judged by its text, as before.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from integration.conftest_migrations import (
    ADOPTABLE,
    adopted_store,
    copy_fixture,
    query,
    sqlite_url,
)
from sqlalchemy import create_engine, text

import cadence_store
from cadence_store import JournalIntegrityError, RunStore, export_store, import_store
from cadence_store.storage.schema import downgrade, head_revision

A = "a" * 64
CLAIMED = re.compile(r'"sequence":(\d{1,16})[,}]')
JOURNAL_KINDS = {"start", "change-bound", "delivery-bound", "state-transitioned"}


def _claimed(outcome: str | None) -> int | None:
    found = CLAIMED.search(outcome) if outcome is not None else None
    return None if found is None else int(found.group(1))


def _assert_located(path: Path) -> int:
    """Every journal receipt's column is the sequence its text names; leases have none.
    Returns the number of receipts."""
    rows = query(path, "SELECT kind, outcome_json, sequence FROM operations")
    receipts = [row for row in rows if row["kind"] in JOURNAL_KINDS]
    assert [row["sequence"] for row in receipts] == [_claimed(r["outcome_json"]) for r in receipts]
    assert None not in {row["sequence"] for row in receipts}
    assert {row["sequence"] for row in rows if row["kind"] == "lease"} <= {None}
    return len(receipts)


@pytest.mark.parametrize("fixture", ADOPTABLE)
def test_an_adopted_cadence_1x_store_gets_every_receipt_located_and_verifies(
    fixture: str, tmp_path: Path
) -> None:
    path = copy_fixture(fixture, tmp_path)
    url = sqlite_url(path)
    before = query(path, "SELECT run_id, operation_id, outcome_json FROM operations")
    assert cadence_store.upgrade(url) == head_revision()
    assert _assert_located(path) > 0
    after = query(path, "SELECT run_id, operation_id, outcome_json FROM operations")
    assert after == before  # the receipts themselves are untouched, byte for byte
    index = query(path, "SELECT name FROM sqlite_master WHERE type = 'index'")
    assert {"name": "ix_operations_run_id_sequence"} in index
    with adopted_store(url, fixture) as store:
        for run_id in store.run_ids():
            store.verify_integrity(run_id)


def test_downgrade_drops_the_column_and_upgrade_fills_it_again(tmp_path: Path) -> None:
    path = copy_fixture("current.sqlite3", tmp_path)
    url = sqlite_url(path)
    cadence_store.upgrade(url)
    with adopted_store(url, "current.sqlite3") as store:
        run = store.start_run("abel-implement", change="after-upgrade", operation_id="new-1")
        store.transition(run.run_id, "validating-delivery", operation_id="new-2")
    located = query(path, "SELECT operation_id, sequence FROM operations ORDER BY operation_id")
    assert downgrade(url, "cs0004_feed") == "cs0004_feed"
    assert "sequence" not in query(path, "SELECT * FROM operations")[0]
    assert cadence_store.upgrade(url) == head_revision()
    again = query(path, "SELECT operation_id, sequence FROM operations ORDER BY operation_id")
    assert again == located
    with adopted_store(url, "current.sqlite3") as store:
        store.verify_integrity(run.run_id)


def _every_kind_of_receipt(store: RunStore) -> str:
    run = store.start_run("abel-design", provisional_key=A, operation_id="start")
    store.start_run("abel-design", provisional_key=A, operation_id="start-again")  # a replay
    store.bind_change(run.run_id, "the-change", operation_id="change")
    store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="bind")
    store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="bind-again")  # no event
    store.transition(run.run_id, "paused", operation_id="pause", code="wait")
    with store.unit_of_work() as uow:
        uow.runs.transition(run.run_id, "discarded", operation_id="discard")
    lease = store.acquire_lease(run.run_id, "a-lease", 60_000)
    store.commit_lease(lease, {"done": True})
    return run.run_id


def test_every_write_locates_its_receipt(store_url: str) -> None:
    with RunStore(store_url, root_hash=A) as store:
        run_id = _every_kind_of_receipt(store)
        store.verify_integrity(run_id)
    engine = create_engine(store_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT operation_id, kind, outcome_json, sequence FROM operations")
            ).all()
    finally:
        engine.dispose()
    located = {row.operation_id: row.sequence for row in rows}
    assert located == {
        "start": 1,
        "start-again": 1,
        "change": 2,
        "bind": 3,
        "bind-again": 3,
        "pause": 4,
        "discard": 5,
        "a-lease": None,
    }
    for row in rows:
        if row.kind != "lease":
            assert row.sequence == _claimed(row.outcome_json)


def _set(url: str, statement: str, **values: object) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text(statement), values)
    finally:
        engine.dispose()


@pytest.mark.parametrize("located", [None, 0, 2, 99])
def test_a_receipt_without_or_with_a_wrong_column_is_judged_by_its_text(
    store_url: str, located: int | None
) -> None:
    with RunStore(store_url, root_hash=A) as store:
        run_id = _every_kind_of_receipt(store)
        _set(
            store_url,
            "UPDATE operations SET sequence = :s WHERE run_id = :r AND operation_id = 'pause'",
            s=located,
            r=run_id,
        )
        store.verify_integrity(run_id)  # the genuine receipt still verifies
        _set(
            store_url,
            "UPDATE operations SET outcome_json = replace(outcome_json, '\"wait\"', '\"x\"')"
            " WHERE run_id = :r AND operation_id = 'pause'",
            r=run_id,
        )
        with pytest.raises(JournalIntegrityError) as raised:
            store.verify_integrity(run_id)  # and its forgery is caught, naming it
        assert raised.value.code == "operation-receipt-mismatch"
        assert raised.value.operation_id == "pause"
        assert raised.value.sequence == 4


def test_an_export_made_before_the_column_imports_with_its_receipts_located(
    tmp_path: Path,
) -> None:
    source, target = sqlite_url(tmp_path / "a.sqlite3"), sqlite_url(tmp_path / "b.sqlite3")
    cadence_store.upgrade(source)
    with RunStore(source, root_hash=A) as store:
        run_id = _every_kind_of_receipt(store)
    exported = io.StringIO()
    export_store(source, exported)
    record = json.loads(exported.getvalue().splitlines()[0])
    assert {row["operation_id"]: row["sequence"] for row in record["operations"]}["bind"] == 3
    for row in record["operations"]:
        del row["sequence"]
    cadence_store.upgrade(target)
    import_store(target, [json.dumps(record)])
    assert _assert_located(tmp_path / "b.sqlite3") == 7
    with RunStore(target) as store:
        store.verify_integrity(run_id)


@pytest.fixture
def store_url(database_url: str) -> str:
    cadence_store.upgrade(database_url)
    return database_url
