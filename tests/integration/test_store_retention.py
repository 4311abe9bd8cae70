"""Retention, on both engines: `RunStore.archive` writes finished runs older than a bound
to a durable archive file, then deletes them keeping their leaves; an archived run (and
each of its operation ids) answers `run-archived` through every entry point (``store``
runs once per entry point: tests/integration/conftest.py); the tree and its checkpoints
still verify after."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text
from support import ROOT_HASH, FakeClock

from cadence_store import (
    ArchiveInvalidError,
    AsyncRunStore,
    CheckpointError,
    InvalidInputError,
    RunArchivedError,
    RunNotFoundError,
    RunStore,
    generate_signer_key,
)
from cadence_store.async_store import async_database_url
from cadence_store.journal import merkle
from cadence_store.journal.archives import ArchiveProgress
from cadence_store.journal.notes import verify_checkpoint
from cadence_store.storage.feed_notifier import flush_notifiers
from cadence_store.store import retention

KEY = generate_signer_key("example.com/retention")
VKEY = KEY.verifier()
DAY = 86_400_000


def finished(store: Any, prefix: str, count: int, to: str = "discarded") -> list[str]:
    """`count` runs moved to the terminal state `to` (two events each)."""
    ids = []
    for i in range(count):
        run = store.start_run(
            "abel-implement", change=f"{prefix}-{i}", operation_id=f"{prefix}-s{i}"
        )
        store.transition(run.run_id, to, operation_id=f"{prefix}-t{i}")
        ids.append(run.run_id)
    return ids


def counts(db: Engine) -> dict[str, int]:
    with db.connect() as connection:
        return {
            table: int(connection.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one())
            for table in (
                "runs",
                "events",
                "operations",
                "kept_leaves",
                "archived_runs",
                "archived_operations",
            )
        }


def archive_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.run_store_only
def test_archive_writes_old_finished_runs_and_deletes_them(
    store: RunStore, clock: FakeClock, db: Engine, tmp_path: Path
) -> None:
    old = finished(store, "old", 3)
    clock.advance(DAY)
    bound = clock()
    recent = finished(store, "new", 2)
    active = store.start_run("abel-implement", change="active", operation_id="act").run_id
    path = tmp_path / "runs.archive"
    report = store.archive(finished_before_ms=bound, to=path, key=KEY)
    assert (report.runs_written, report.events_written) == (3, 6)
    assert (report.runs_archived, report.events_archived, report.kept) == (3, 6, 0)
    assert report.path == str(path) and not report.resumed
    assert not (tmp_path / "runs.archive.partial").exists()
    lines = archive_lines(path)
    assert lines[0]["archive"] == "cadence-store-archive/1"
    assert lines[0]["checkpoint"] == report.checkpoint.note
    assert lines[0]["treeSize"] == report.checkpoint.size == 11
    assert lines[0]["finishedBeforeMs"] == bound
    assert lines[-1] == {"end": {"runs": 3, "events": 6}}
    assert sorted(line["run"]["run_id"] for line in lines[1:-1]) == sorted(old)
    # each leaf's proof leads to the checkpoint's root
    checkpoint = verify_checkpoint(report.checkpoint.note, VKEY)
    for line in lines[1:-1]:
        run_id = line["run"]["run_id"]
        for event, leaf in zip(line["events"], line["leaves"], strict=True):
            leaf_hash = merkle.feed_leaf_hash(run_id, event["sequence"], event["event_hash"])
            hashes = [bytes.fromhex(h) for h in leaf["hashes"]]
            merkle.verify_inclusion(
                leaf_hash, leaf["leafIndex"], checkpoint.size, hashes, checkpoint.root_hash
            )
    assert counts(db) == {
        "runs": 3,
        "events": 5,
        "operations": 5,
        "kept_leaves": 6,
        "archived_runs": 3,
        "archived_operations": 6,
    }
    for run_id in [*recent, active]:
        store.status(run_id)  # untouched
    assert store.counts().archived == 3
    assert {run.run_id for run in store.list_runs()} == {*recent, active}


@pytest.mark.run_store_only
def test_the_tree_and_its_checkpoints_verify_after_an_archive(
    store: RunStore, clock: FakeClock, db: Engine, tmp_path: Path
) -> None:
    first = finished(store, "a", 2)
    before = store.checkpoint(KEY)
    finished(store, "b", 2)  # the newest positions are archived too
    clock.advance(DAY)
    report = store.archive(finished_before_ms=clock(), to=tmp_path / "a.archive", key=KEY)
    assert store.counts().runs == 0 and report.runs_archived == 4
    same = store.checkpoint(KEY)  # every leaf kept: the same tree
    assert (same.size, same.root_hash) == (8, report.checkpoint.root_hash)
    run = store.start_run("abel-implement", change="later", operation_id="later")
    after = store.checkpoint(KEY)
    assert after.size == 9  # a new position, never one an archived event held
    flush_notifiers()
    with db.connect() as connection:
        position = connection.execute(
            text("SELECT feed_position FROM events WHERE run_id = :r"), {"r": run.run_id}
        ).scalar_one()
    assert position == 9
    for checkpoint in (before, report.checkpoint, same, after):
        verified = store.verify_checkpoint(checkpoint.note, VKEY)
        assert verified.tree_size == 9 and verified.runs_verified == 1
    proof = store.inclusion_proof(run.run_id)
    root = bytes.fromhex(after.root_hash)
    merkle.verify_inclusion(proof.leaf_hash, proof.leaf_index, 9, list(proof.hashes), root)
    with pytest.raises(RunArchivedError):
        store.inclusion_proof(first[0])  # its proof is in the archive file
    consistency = store.consistency_proof(before.size, after.size)
    merkle.verify_consistency(
        before.size, 9, bytes.fromhex(before.root_hash), root, list(consistency.hashes)
    )


@pytest.mark.run_store_only
def test_a_kept_leaf_altered_is_found_by_verification(
    store: RunStore, clock: FakeClock, db: Engine, tmp_path: Path
) -> None:
    finished(store, "a", 2)
    clock.advance(DAY)
    report = store.archive(finished_before_ms=clock(), to=tmp_path / "a.archive", key=KEY)
    with db.begin() as connection:
        connection.execute(
            text("UPDATE kept_leaves SET event_hash = :h WHERE feed_position = 2"), {"h": "0" * 64}
        )
    with pytest.raises(CheckpointError) as raised:
        store.verify_checkpoint(report.checkpoint.note, VKEY)
    assert raised.value.code == "checkpoint-mismatch"


def test_an_archived_run_answers_run_archived_naming_it(
    store: Any, run_store: RunStore, clock: FakeClock, tmp_path: Path
) -> None:
    run_id = finished(run_store, "gone", 1, to="discarded")[0]
    design = run_store.start_run(
        "abel-design", provisional_key="ab" * 32, operation_id="design-start"
    ).run_id
    run_store.transition(design, "discarded", operation_id="design-end")
    lease = run_store.acquire_lease(run_id, "lease-op", ttl_ms=10 * DAY)
    clock.advance(DAY)
    kept = finished(run_store, "kept", 1)[0]
    run_store.archive(finished_before_ms=clock(), to=tmp_path / "x.archive", key=KEY)
    calls = {
        "status": lambda: store.status(run_id),
        "list_events": lambda: store.list_events(run_id),
        "run_detail": lambda: store.run_detail(run_id),
        "verify_integrity": lambda: store.verify_integrity(run_id),
        "transition": lambda: store.transition(run_id, "paused", operation_id="new-t"),
        "transition replayed": lambda: store.transition(
            run_id, "discarded", operation_id="gone-t0"
        ),
        "acquire_lease": lambda: store.acquire_lease(run_id, "lease-1", ttl_ms=1000),
        "inspect_operation": lambda: store.inspect_operation(run_id, "gone-t0"),
        "bind_delivery": lambda: store.bind_delivery(
            run_id, "gate-a", 1, "a" * 64, operation_id="bind-1"
        ),
        "renew_lease": lambda: store.renew_lease(lease, 1000),
        "assert_lease": lambda: store.assert_lease(lease),
        "commit_lease": lambda: store.commit_lease(lease, {"done": True}),
        "interrupt_lease": lambda: store.interrupt_lease(lease),
        "bind_change": lambda: store.bind_change(design, "late", operation_id="bind-c"),
        "start_run replayed": lambda: store.start_run(
            "abel-implement", change="gone-0", operation_id="gone-s0"
        ),
        "start_run under its key": lambda: store.start_run(
            "abel-implement", change="gone-0", operation_id="another-start"
        ),
        "design start replayed": lambda: store.start_run(
            "abel-design", provisional_key="ab" * 32, operation_id="design-start"
        ),
    }
    for name, call in calls.items():
        with pytest.raises(RunArchivedError) as raised:
            call()
        assert raised.value.code == "run-archived", name
        assert not raised.value.retryable
        assert raised.value.run_id in (run_id, design), name
        assert raised.value.run_id in str(raised.value), name
        assert isinstance(raised.value, RunNotFoundError)  # code written before still copes
    # a finished design run gives its key up: a new one may take it, archived or not
    again = store.start_run("abel-design", provisional_key="ab" * 32, operation_id="design-2")
    assert again.run_id != design
    with pytest.raises(RunNotFoundError) as missing:
        store.status("r-" + "0" * 26)
    assert missing.value.code == "run-not-found"
    store.status(kept)  # a run still in the store answers as before


@pytest.mark.run_store_only
def test_an_archive_interrupted_after_its_file_is_finished_by_running_it_again(
    store: RunStore, clock: FakeClock, db: Engine, tmp_path: Path
) -> None:
    ids = finished(store, "a", 3)
    clock.advance(DAY)
    path = tmp_path / "a.archive"
    first = store.archive(finished_before_ms=clock(), to=path, key=KEY, batch=1)
    assert first.runs_archived == 3
    # the same file again: every run is archived already, nothing else is touched
    later = finished(store, "b", 1)
    clock.advance(DAY)
    again = store.archive(finished_before_ms=clock(), to=path, key=KEY)
    assert again.resumed and (again.runs_archived, again.already_archived) == (0, 3)
    assert again.checkpoint.note == first.checkpoint.note
    store.status(later[0])  # not in the file: untouched
    # an interrupted archive: the file is durable, the runs not yet deleted
    with db.begin() as connection:
        for table in ("archived_operations", "archived_runs", "kept_leaves"):
            connection.execute(text(f"DELETE FROM {table}"))
    restore_runs(db, path)
    for run_id in ids:
        store.status(run_id)
    resumed = store.archive(finished_before_ms=0, to=path, key=KEY, batch=2)
    assert resumed.resumed and (resumed.runs_archived, resumed.events_archived) == (3, 6)
    for run_id in ids:
        with pytest.raises(RunArchivedError):
            store.status(run_id)
    store.verify_checkpoint(first.checkpoint.note, VKEY)


def restore_runs(db: Engine, path: Path) -> None:
    """Put an archive's runs back as they were (the rows its deletion removed)."""
    tables = {
        "run": "runs",
        "events": "events",
        "operations": "operations",
        "deliveryBindings": "delivery_bindings",
    }
    lines = archive_lines(path)[1:-1]
    with db.begin() as connection:
        for line in lines:
            positions = {leaf["sequence"]: leaf["leafIndex"] + 1 for leaf in line["leaves"]}
            for key, table in tables.items():
                rows = [line[key]] if key == "run" else line[key]
                for row in rows:
                    if key == "events":
                        row = {**row, "feed_position": positions[row["sequence"]]}
                    names = ", ".join(row)
                    values = ", ".join(f":{name}" for name in row)
                    connection.execute(
                        text(f"INSERT INTO {table} ({names}) VALUES ({values})"), row
                    )


@pytest.mark.run_store_only
def test_a_run_that_changed_after_the_file_was_written_is_left_whole(
    store: RunStore, clock: FakeClock, db: Engine, tmp_path: Path
) -> None:
    ids = finished(store, "a", 2)
    clock.advance(DAY)
    path = tmp_path / "a.archive"
    store.archive(finished_before_ms=clock(), to=path, key=KEY)
    with db.begin() as connection:
        for table in ("archived_operations", "archived_runs", "kept_leaves"):
            connection.execute(text(f"DELETE FROM {table}"))
    restore_runs(db, path)
    # a receipt the file does not hold (a lease granted after it was written)
    store.acquire_lease(ids[0], "late-lease", ttl_ms=1000)
    report = store.archive(finished_before_ms=0, to=path, key=KEY)
    assert (report.runs_archived, report.kept) == (1, 1)
    store.status(ids[0])  # left whole
    with pytest.raises(RunArchivedError):
        store.status(ids[1])


@pytest.mark.run_store_only
def test_an_altered_or_foreign_archive_file_deletes_nothing(
    store: RunStore, clock: FakeClock, db: Engine, tmp_path: Path
) -> None:
    finished(store, "a", 2)
    clock.advance(DAY)
    path = tmp_path / "a.archive"
    store.archive(finished_before_ms=clock(), to=path, key=KEY)
    with db.begin() as connection:
        for table in ("archived_operations", "archived_runs", "kept_leaves"):
            connection.execute(text(f"DELETE FROM {table}"))
    restore_runs(db, path)
    before = counts(db)
    original = path.read_text(encoding="utf-8")
    lines = original.splitlines(keepends=True)
    altered = {
        "truncated": "".join(lines[:-1]),
        "a payload byte": original.replace(
            '\\"to\\":\\"discarded\\"', '\\"to\\":\\"discardeD\\"', 1
        ),
        "not an archive": "{}\n",
    }
    for name, content in altered.items():
        assert content != original, name
        path.write_text(content, encoding="utf-8")
        with pytest.raises(ArchiveInvalidError):
            store.archive(finished_before_ms=0, to=path, key=KEY)
        assert counts(db) == before, name
    path.write_text(original, encoding="utf-8")
    other = generate_signer_key("example.com/other")
    with pytest.raises(CheckpointError):
        store.archive(finished_before_ms=0, to=path, key=other)
    assert counts(db) == before


def test_bad_archive_arguments_are_refused(run_store: RunStore, tmp_path: Path) -> None:
    for arguments in (
        {"finished_before_ms": "soon", "to": tmp_path / "x"},
        {"finished_before_ms": True, "to": tmp_path / "x"},
        {"finished_before_ms": 1, "to": tmp_path / "x", "batch": 0},
        {"finished_before_ms": 1, "to": 5},
    ):
        with pytest.raises(InvalidInputError) as raised:
            run_store.archive(key=KEY, **arguments)
        assert raised.value.code == "invalid-archive-request"
    assert not list(tmp_path.glob("x*"))
    assert run_store.counts().archived == 0


def test_the_async_store_archives_and_answers_run_archived(store_url: str, tmp_path: Path) -> None:
    url = async_database_url(store_url).render_as_string(hide_password=False)
    clock = FakeClock()

    async def scenario() -> tuple[Any, str]:
        async with AsyncRunStore(url, root_hash=ROOT_HASH, clock=clock) as store:
            run = await store.start_run("abel-implement", change="a", operation_id="s-1")
            await store.transition(run.run_id, "rejected", operation_id="t-1")
            clock.advance(DAY)
            report = await store.archive(
                finished_before_ms=clock(), to=tmp_path / "async.archive", key=KEY
            )
            try:
                await store.status(run.run_id)
            except RunArchivedError as error:
                return report, error.code
            return report, "found"

    report, code = asyncio.run(scenario())
    assert (report.runs_archived, report.events_archived, code) == (1, 2, "run-archived")


@pytest.mark.run_store_only
def test_every_proof_of_an_archive_over_several_tiles_leads_to_its_root(
    store: RunStore, clock: FakeClock, tmp_path: Path
) -> None:
    with store.unit_of_work() as uow:  # 600 leaves: three tiles of leaves, a level above
        for i in range(300):
            run = uow.runs.start_run("abel-implement", change=f"m-{i}", operation_id=f"m-{i}")
            uow.runs.transition(run.run_id, "rejected", operation_id=f"r-{i}")
    store.checkpoint(KEY)  # a stored tree to extend, not one built by the archive
    clock.advance(DAY)
    path = tmp_path / "big.archive"
    report = store.archive(finished_before_ms=clock(), to=path, key=KEY, batch=128)
    assert (report.runs_archived, report.checkpoint.size) == (300, 600)
    checkpoint = verify_checkpoint(report.checkpoint.note, VKEY)
    indices = set()
    for line in archive_lines(path)[1:-1]:
        run_id = line["run"]["run_id"]
        for event, leaf in zip(line["events"], line["leaves"], strict=True):
            leaf_hash = merkle.feed_leaf_hash(run_id, event["sequence"], event["event_hash"])
            hashes = [bytes.fromhex(h) for h in leaf["hashes"]]
            merkle.verify_inclusion(leaf_hash, leaf["leafIndex"], 600, hashes, checkpoint.root_hash)
            indices.add(leaf["leafIndex"])
    assert indices == set(range(600))


@pytest.mark.run_store_only
def test_a_deleting_transaction_ends_when_its_time_is_used_up(
    store: RunStore, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    finished(store, "a", 5)
    clock.advance(DAY)
    monkeypatch.setattr(retention, "DELETE_BUDGET_S", 0.0)  # one run, then the budget is out
    steps: list[ArchiveProgress] = []
    report = store.archive(
        finished_before_ms=clock(), to=tmp_path / "a.archive", key=KEY, progress=steps.append
    )
    assert report.runs_archived == 5
    deletes = [step.done for step in steps if step.phase == "delete"]
    assert deletes == [1, 2, 3, 4, 5]  # five transactions, though the batch is 1,000
    assert [step.done for step in steps if step.phase == "archive"] == [1, 2, 3, 4, 5]
