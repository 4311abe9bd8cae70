"""Restoring an archive file (`import_store`, `cadence-store import`) on both engines: in
the store that archived the runs they come back at their feed positions, no longer
archived, with every checkpoint still verifying; a run whose leaves differ from the ones
the store kept is refused and nothing is written; into another store the runs are
imported like an export's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from archive_support import (
    ArchivedStore,
    archived_by_store,
    change_payload_byte,
    feed_positions,
    retention_rows,
)
from click.testing import CliRunner
from sqlalchemy import Engine, text
from support import table_snapshot
from tamper_support import rewrite_history

from cadence_store import RunStore, upgrade
from cadence_store.cli import main
from cadence_store.errors import (
    ArchiveInvalidError,
    CheckpointError,
    JournalIntegrityError,
    RunArchivedError,
)
from cadence_store.transfer import TransferReport, import_store, read_record
from cadence_store.transfer.archive_file import verify_archive
from cadence_store.transfer.restore import checked_archive_runs, restore_run

NONE_ARCHIVED = {"kept_leaves": 0, "archived_runs": 0, "archived_operations": 0}


@pytest.fixture
def archived(store_url: str, tmp_path: Path) -> ArchivedStore:
    """A store whose finished runs were archived: the file written, the runs deleted."""
    return archived_by_store(store_url, tmp_path)


def test_the_archive_restores_its_runs_at_their_positions(archived: ArchivedStore) -> None:
    """The file `RunStore.archive` wrote verifies with the note and key alone; importing
    it brings the runs back where they were, answering again instead of `run-archived`,
    their operation ids replaying, the tree and its checkpoint unchanged."""
    url, first = archived.url, archived.archived[0]
    assert retention_rows(url) == {"kept_leaves": 9, "archived_runs": 3, "archived_operations": 9}
    offline = verify_archive(archived.lines(), archived.note, archived.vkey)
    assert offline.ok and (offline.runs, offline.events) == (3, 9), offline.failure
    with RunStore(url) as store:
        with pytest.raises(RunArchivedError):
            store.status(first)
        before = store.verify_checkpoint(archived.note, archived.vkey)
    with archived.archive.open(encoding="utf-8", newline="") as handle:
        report = import_store(url, handle)
    assert sorted(report.written) == sorted(archived.archived) and report.events_written == 9
    assert feed_positions(url) == archived.positions
    assert retention_rows(url) == NONE_ARCHIVED
    with RunStore(url, root_hash="cd" * 32) as store:
        after = store.verify_checkpoint(archived.note, archived.vkey)
        assert (after.size, after.root_hash) == (before.size, before.root_hash)
        assert (after.runs_verified, after.events_verified) == (4, 11)
        for run_id in archived.archived:
            assert store.status(run_id).state == "completed"
            store.verify_integrity(run_id)
        replayed = store.start_run("abel-implement", change="arch-0", operation_id="arch-start-0")
        assert replayed.run_id == first
        assert store.checkpoint(archived.signer).size == after.size  # the tree did not move
    again = import_store(url, archived.lines())
    assert again.runs_written == 0 and sorted(again.skipped) == sorted(archived.archived)


def test_the_import_command_restores_an_archive(archived: ArchivedStore) -> None:
    result = CliRunner().invoke(
        main, ["import", str(archived.archive), "--url", archived.url], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert "imported 3 run(s), 9 event(s)" in result.stdout
    assert feed_positions(archived.url) == archived.positions


@pytest.mark.parametrize("change", ["event-hash", "position", "missing-leaf", "no-leaf"])
def test_a_run_whose_leaves_differ_from_the_kept_ones_is_refused(
    archived: ArchivedStore, db: Engine, change: str
) -> None:
    url, run_id = archived.url, archived.archived[1]
    where = {"run": run_id}
    statement = {
        "event-hash": "UPDATE kept_leaves SET event_hash = 'ff'"
        " WHERE run_id = :run AND sequence = 2",
        "position": "UPDATE kept_leaves SET feed_position = feed_position + 1000"
        " WHERE run_id = :run AND sequence = 3",
        "missing-leaf": "DELETE FROM kept_leaves WHERE run_id = :run AND sequence = 3",
        "no-leaf": "DELETE FROM kept_leaves WHERE run_id = :run",
    }[change]
    with db.begin() as connection:
        connection.execute(text(statement), where)
    before = table_snapshot(db)
    with pytest.raises(CheckpointError) as caught:
        import_store(url, archived.lines())
    assert caught.value.code == "checkpoint-mismatch" and caught.value.run_id == run_id
    assert table_snapshot(db) == before  # nothing restored, not even the other runs
    with RunStore(url) as store:
        assert not set(archived.archived) & set(store.run_ids())


@pytest.mark.parametrize("column", ["lookup_key", "updated_at", "archived-row"])
def test_a_run_whose_row_differs_from_the_archived_one_is_refused(
    archived: ArchivedStore, db: Engine, column: str
) -> None:
    """The columns no hash covers (a lookup key, a time) are checked against what the store
    kept of the run when it archived it."""
    lines = archived.lines()
    value = json.loads(lines[2])
    run_id = value["run"]["run_id"]
    if column == "archived-row":
        with db.begin() as connection:
            connection.execute(
                text("UPDATE archived_runs SET state = 'rejected' WHERE run_id = :run"),
                {"run": run_id},
            )
    elif column == "lookup_key":
        value["run"]["lookup_key"] = "change:arch-9"
    else:
        value["run"]["updated_at"] += 1
        value["events"][-1]["recorded_at"] = None  # the run row's time stands for the event's
    lines[2] = json.dumps(value, separators=(",", ":")) + "\n"
    before = table_snapshot(db)
    with pytest.raises(CheckpointError) as caught:
        import_store(archived.url, lines)
    assert caught.value.code == "checkpoint-mismatch" and caught.value.run_id == run_id
    assert "runs." in str(caught.value)
    assert table_snapshot(db) == before


def test_an_altered_run_in_the_archive_is_refused(archived: ArchivedStore, tmp_path: Path) -> None:
    lines = archived.lines()
    changed = [*lines[:2], change_payload_byte(lines[2]), *lines[3:]]
    with pytest.raises(JournalIntegrityError) as caught:
        import_store(archived.url, changed)
    assert caught.value.code == "event-integrity-hash-chain"
    # rewritten with its chain recomputed (in a scratch store): its proofs fail instead
    scratch = f"sqlite:///{tmp_path}/scratch.sqlite3"
    upgrade(scratch)
    import_store(scratch, lines)
    run_id = archived.archived[0]
    with RunStore(scratch) as store:
        with store.engine.begin() as connection:
            rewrite_history(connection, run_id, 2, {"code": "rewritten-pause"})
        with store.engine.connect() as connection:
            record = read_record(connection, run_id)
    assert record is not None
    leaves = json.loads(lines[1])["leaves"]
    rewritten = [lines[0], json.dumps({**record, "leaves": leaves}) + "\n", *lines[2:]]
    with pytest.raises(CheckpointError) as mismatch:
        import_store(archived.url, rewritten)
    assert mismatch.value.code == "checkpoint-mismatch" and mismatch.value.run_id == run_id
    assert retention_rows(archived.url)["archived_runs"] == 3


@pytest.mark.parametrize("cut", ["trailer", "run-line"])
def test_a_truncated_archive_restores_nothing(
    archived: ArchivedStore, db: Engine, cut: str
) -> None:
    lines = archived.lines()
    kept = lines[:-1] if cut == "trailer" else [*lines[:1], *lines[2:]]
    before = table_snapshot(db)
    with pytest.raises(ArchiveInvalidError):
        import_store(archived.url, kept)
    assert table_snapshot(db) == before


def test_an_archive_imports_into_another_store_numbered_there(
    archived: ArchivedStore, tmp_path: Path
) -> None:
    other = f"sqlite:///{tmp_path}/other.sqlite3"
    upgrade(other)
    report = import_store(other, archived.lines())
    assert report.runs_written == 3
    with RunStore(other) as store:
        for run_id in archived.archived:
            store.verify_integrity(run_id)
        signed = store.checkpoint(archived.signer)
    assert signed.size == 9  # its own feed: the three runs' events, numbered from 1
    assert retention_rows(other) == NONE_ARCHIVED


def test_a_restore_interrupted_between_runs_finishes_when_run_again(
    archived: ArchivedStore, db: Engine
) -> None:
    """Each run is restored in its own transaction: a restore that stopped after some
    runs (here: one run restored alone) is finished by importing the file again."""
    first = next(item for _, item in checked_archive_runs(archived.lines()))
    with RunStore(archived.url) as store:
        restore_run(store.engine, first, TransferReport(), 200)
    assert retention_rows(archived.url) == {
        "kept_leaves": 6,
        "archived_runs": 2,
        "archived_operations": 6,
    }
    report = import_store(archived.url, archived.lines())
    assert report.skipped == [first.run_id] and len(report.written) == 2
    assert feed_positions(archived.url) == archived.positions
    assert retention_rows(archived.url) == NONE_ARCHIVED
