"""Helpers of the archive-file tests: a small store with finished and active runs, an
archive of some of its runs written from the store's own rows, checkpoint and inclusion
proofs (the format's writer functions, as `RunStore.archive` writes them), and the ways a
file can be damaged."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from cadence_store import RunStore
from cadence_store.journal.note_keys import SignerKey, generate_signer_key
from cadence_store.storage.feed_notifier import flush_notifiers
from cadence_store.testing import FakeClock
from cadence_store.transfer import read_record
from cadence_store.transfer.archive_file import (
    ArchivedLeaf,
    header_line,
    run_line,
    trailer_line,
)

ORIGIN = "cadence.test/archive"
FINISHED_BEFORE_MS = 1_800_000_000_000
CREATED_AT_MS = 1_800_000_100_000


@dataclass
class ArchivedStore:
    """A store, the signer that signed its checkpoint, the archive of its finished runs
    and the checkpoint note the archive's proofs lead to."""

    url: str
    signer: SignerKey
    archive: Path
    note: str
    archived: list[str]
    active: list[str]
    # (run id, sequence) -> feed position of every event before the archive deleted any
    positions: dict[tuple[str, int], int | None] = field(default_factory=dict)

    @property
    def vkey(self) -> str:
        return self.signer.verifier().encode()

    def lines(self) -> list[str]:
        return self.archive.read_text(encoding="utf-8").splitlines(keepends=True)

    def write_lines(self, lines: list[str]) -> None:
        self.archive.write_text("".join(lines), encoding="utf-8")


def seed_runs(
    store: RunStore, prefix: str, finished: int, active: int
) -> tuple[list[str], list[str]]:
    """`finished` completed runs (with a delivery binding and a receipt each) and `active`
    paused ones; returns their ids."""
    done, open_ = [], []
    for i in range(finished + active):
        run = store.start_run(
            "abel-implement", change=f"{prefix}-{i}", operation_id=f"{prefix}-start-{i}"
        )
        store.transition(run.run_id, "paused", operation_id=f"{prefix}-pause-{i}")
        if i < finished:
            store.transition(run.run_id, "completed", operation_id=f"{prefix}-done-{i}")
            done.append(run.run_id)
        else:
            open_.append(run.run_id)
    flush_notifiers()
    return done, open_


def archive_lines(store: RunStore, run_ids: list[str], signer: SignerKey) -> tuple[str, list[str]]:
    """A fresh signed checkpoint of the store and the archive lines of `run_ids` against
    it: header, one run line each (with every event's inclusion proof), trailer."""
    signed = store.checkpoint(signer, origin=ORIGIN)
    lines = [header_line(signed.note, signed.size, FINISHED_BEFORE_MS, CREATED_AT_MS)]
    events = 0
    for run_id in run_ids:
        with store.engine.connect() as connection:
            record = read_record(connection, run_id)
        assert record is not None
        leaves = [
            ArchivedLeaf.from_proof(
                store.inclusion_proof(run_id, event["sequence"], size=signed.size)
            )
            for event in record["events"]
        ]
        lines.append(run_line(record, leaves))
        events += len(leaves)
    lines.append(trailer_line(len(run_ids), events))
    return signed.note, lines


def archived_store(
    url: str, directory: Path, *, finished: int = 3, active: int = 1
) -> ArchivedStore:
    """A store at `url` with finished and active runs, and an archive of the finished ones
    in `directory` (the runs stay in the store: only the file is under test here)."""
    signer = generate_signer_key(ORIGIN)
    with RunStore(url, root_hash="cd" * 32) as store:
        done, open_ = seed_runs(store, "arch", finished, active)
        note, lines = archive_lines(store, done, signer)
    archive = directory / "runs.archive"
    archive.write_text("".join(lines), encoding="utf-8")
    return ArchivedStore(url, signer, archive, note, done, open_)


def change_payload_byte(line: str) -> str:
    """The run line with one byte of its first event's payload text changed (a digit of
    the change name in it), everything else as it was."""
    start = line.index('"payload_json":"')
    at = line.index("arch-", start) + len("arch-")
    digit = line[at]
    assert digit.isdigit()
    return line[:at] + str((int(digit) + 1) % 10) + line[at + 1 :]


def swap_first_proofs(line: str) -> str:
    """The run line with its first two leaves' proof hashes swapped."""
    value: dict[str, Any] = json.loads(line)
    first, second = value["leaves"][0], value["leaves"][1]
    first["hashes"], second["hashes"] = second["hashes"], first["hashes"]
    return json.dumps(value, separators=(",", ":")) + "\n"


def archived_by_store(url: str, directory: Path) -> ArchivedStore:
    """A store whose finished runs `RunStore.archive` archived (the file written, the runs
    deleted, their leaves kept); `positions` holds every event's feed position before."""
    signer = generate_signer_key(ORIGIN)
    clock = FakeClock()
    with RunStore(url, root_hash="cd" * 32, clock=clock) as store:
        done, open_ = seed_runs(store, "arch", 3, 1)
        positions = feed_positions(url)
        clock.advance(1000)
        report = store.archive(
            finished_before_ms=clock(), to=directory / "runs.archive", key=signer
        )
    assert report.runs_archived == len(done)
    return ArchivedStore(
        url, signer, Path(report.path), report.checkpoint.note, done, open_, positions
    )


def feed_positions(url: str) -> dict[tuple[str, int], int | None]:
    """(run id, sequence) -> feed position of every event in the store."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT run_id, sequence, feed_position FROM events"))
            return {(row[0], row[1]): row[2] for row in rows}
    finally:
        engine.dispose()


def retention_rows(url: str) -> dict[str, int]:
    """How many rows each retention table holds."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return {
                table: connection.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one()
                for table in ("kept_leaves", "archived_runs", "archived_operations")
            }
    finally:
        engine.dispose()
