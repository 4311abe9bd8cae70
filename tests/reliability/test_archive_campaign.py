"""kill -9 during `RunStore.archive`, at random points (issue 42): before its checkpoint,
while it writes the file, after the file is durable, between its deleting transactions.

After every kill, every run is either whole in the store (its chain verifies, every row
there) or archived: its rows gone, its leaves kept, and the run in an archive file that
exists (never only in a ``.partial`` one); no run is half deleted; the tree still
verifies against a fresh checkpoint. Running the archive again with the same file
finishes it. At least 20 kills per engine; ``--slow`` runs 60.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import sys
import time
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # the spawned children import `archive_workers` by this name
    sys.path.insert(0, _HERE)

import archive_workers  # noqa: E402

import cadence_store  # noqa: E402
from cadence_store import RunArchivedError, RunStore, generate_signer_key  # noqa: E402
from cadence_store.store.checkpoints import verify_kept_leaves  # noqa: E402

pytestmark = pytest.mark.campaign  # child processes killed one by one: the campaign step

KEY = generate_signer_key("example.com/campaign")
PROCESS_TIMEOUT_S = 120
RUNS_PER_ROUND = 12
BATCH = 2


def _progress(path: Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    steps = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 3:
            steps.append((parts[0], int(parts[1])))
    return steps


def _reached(steps: list[tuple[str, int]], target: tuple[str, int]) -> bool:
    phase, done = target
    return any(step == phase and count >= done for step, count in steps) or (
        ("finished", 0) in steps
    )


def _archive_child(url: str, to: Path, before: int, progress: Path) -> BaseProcess:
    context = multiprocessing.get_context("spawn")
    child = context.Process(
        target=archive_workers.archive,
        args=(url, str(to), KEY.encode(), before, BATCH, str(progress)),
    )
    child.start()
    return child


def _grow(store: RunStore, round_: int, expected: dict[str, int]) -> None:
    """A round's finished runs (two to four events, some with a lease receipt) and one
    active run, which no archive may take."""
    for i in range(RUNS_PER_ROUND):
        run = store.start_run(
            "abel-implement", change=f"r{round_}-{i}", operation_id=f"r{round_}-s{i}"
        )
        events = 1
        if i % 3 == 0:
            store.transition(run.run_id, "paused", operation_id=f"r{round_}-p{i}")
            events += 1
        if i % 4 == 0:
            store.acquire_lease(run.run_id, f"r{round_}-l{i}", ttl_ms=60_000)
        to = "rejected" if i % 2 else "discarded"
        if i % 3 == 0:
            to = "discarded"  # from paused
        store.transition(run.run_id, to, operation_id=f"r{round_}-t{i}")
        expected[run.run_id] = events + 1
    store.start_run("abel-implement", change=f"r{round_}-live", operation_id=f"r{round_}-live")


def _archived_in_files(directory: Path) -> set[str]:
    """The run ids of every archive file that exists (never a .partial one)."""
    held = set()
    for path in directory.glob("*.archive"):
        for line in path.read_text(encoding="utf-8").splitlines()[1:-1]:
            held.add(json.loads(line)["run"]["run_id"])
    return held


def _rows(db: Engine) -> dict[str, tuple[int, int, int, int, int]]:
    """Per run id: (runs row, events, operations, kept leaves, archived_runs row)."""
    tables = ("runs", "events", "operations", "kept_leaves", "archived_runs")
    found: dict[str, list[int]] = {}
    with db.connect() as connection:
        for index, table in enumerate(tables):
            query = f"SELECT run_id, COUNT(*) FROM {table} GROUP BY run_id"
            for run_id, count in connection.execute(text(query)):
                found.setdefault(run_id, [0] * len(tables))[index] = int(count)
    return {run_id: (a, b, c, d, e) for run_id, (a, b, c, d, e) in found.items()}


def _check(store: RunStore, db: Engine, directory: Path, expected: dict[str, int]) -> int:
    """Every run whole in the store or archived in a file that exists; none half
    deleted; the tree verifies. The number archived."""
    rows = _rows(db)
    held = _archived_in_files(directory)
    archived = 0
    for run_id, events in expected.items():
        run_row, event_rows, operation_rows, kept, archived_row = rows[run_id]
        try:
            store.status(run_id)
        except RunArchivedError:
            assert run_id in held, f"{run_id} is archived but in no archive file"
            assert (run_row, event_rows, operation_rows) == (0, 0, 0), run_id
            assert (kept, archived_row) == (events, 1), f"{run_id} is half deleted"
            archived += 1
            continue
        assert (run_row, event_rows, kept, archived_row) == (1, events, 0, 0), run_id
        assert operation_rows >= events - 1, run_id
        assert store.verify_integrity(run_id).sequence == events
    signed = store.checkpoint(KEY)
    assert store.verify_checkpoint(signed.note, KEY.verifier()).tree_size == signed.size
    assert verify_kept_leaves(store.transactions) == sum(
        expected[run_id] for run_id, row in rows.items() if run_id in expected and row[4]
    )
    return archived


def _campaign(url: str, tmp_path: Path, kills_wanted: int, seed: int) -> None:
    cadence_store.upgrade(url)
    chooser = random.Random(seed)
    expected: dict[str, int] = {}
    db = create_engine(url)
    kills = resumed = round_ = 0
    try:
        with RunStore(url, root_hash=archive_workers.ROOT_HASH) as store:
            while kills < kills_wanted:
                _grow(store, round_, expected)
                before = int(time.time() * 1000) + 1
                to = tmp_path / f"round-{round_}.archive"
                progress = tmp_path / f"round-{round_}.progress"
                deletes = -(-RUNS_PER_ROUND // BATCH)
                target = chooser.choice(
                    [("ready", 0)]
                    + [("archive", n) for n in range(1, RUNS_PER_ROUND + 1)]
                    + [("delete", BATCH * n) for n in range(1, deletes)]
                )
                child = _archive_child(url, to, before, progress)
                deadline = time.monotonic() + PROCESS_TIMEOUT_S
                while not _reached(_progress(progress), target):
                    assert child.is_alive(), "the archive child died before its kill"
                    assert time.monotonic() < deadline, "the archive child stalled"
                    time.sleep(0.001)
                time.sleep(chooser.uniform(0, 0.02))
                if child.is_alive():
                    assert child.pid is not None
                    os.kill(child.pid, signal.SIGKILL)
                    kills += 1
                child.join(PROCESS_TIMEOUT_S)
                _check(store, db, tmp_path, expected)
                if to.exists():  # the file was durable: running it again finishes it
                    report = store.archive(finished_before_ms=before, to=to, key=KEY)
                    assert report.resumed and report.kept == 0
                    resumed += 1
                _check(store, db, tmp_path, expected)
                round_ += 1
            # a last archive takes every finished run left
            final = store.archive(
                finished_before_ms=int(time.time() * 1000) + 1,
                to=tmp_path / "final.archive",
                key=KEY,
            )
            archived = _check(store, db, tmp_path, expected)
            assert archived == len(expected), final
    finally:
        db.dispose()
    print(
        f"archive campaign: {kills} kills over {round_} rounds, {resumed} finished by a "
        f"re-run, {len(expected)} runs archived, 0 lost, 0 half deleted"
    )


@pytest.mark.parametrize(
    "kills", [pytest.param(20, id="20-kills"), pytest.param(60, id="60", marks=pytest.mark.slow)]
)
def test_kill_9_during_archive_loses_no_run_and_half_deletes_none(
    database_url: str, tmp_path: Path, kills: int
) -> None:
    _campaign(database_url, tmp_path, kills, seed=kills)
