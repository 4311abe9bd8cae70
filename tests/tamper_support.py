"""Helpers of the tamper-evidence tests: a small store to attack, the attacks an owner of
the database can make with plain SQL (each leaves every chain verifying where it can), and
the independent Go checker (tests/independent/tlogcheck).

The attacks recompute what they rewrite with the library's own pure functions
(`cadence_store.journal`), exactly as the store would, so that the plain `verify` finds
nothing and only a checkpoint kept outside the database shows what happened.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, text

from cadence_store import RunStore
from cadence_store.journal.canonical import js_stringify
from cadence_store.journal.projection import event_after, reduce_documents
from cadence_store.journal.verification import MIRRORED_COLUMNS

ORIGIN = "cadence.test/tamper"
TLOGCHECK_SOURCE = Path(__file__).resolve().parent / "independent" / "tlogcheck"

# The runs of the small store, each a list of (state, code) transitions after its start;
# a delivery binding follows the first transition of every run.
PATHS: dict[str, list[tuple[str, str | None]]] = {
    "long": [
        ("validating-delivery", None),
        ("ready", None),
        ("queued", None),
        ("running", None),
        ("paused", "operator-pause"),
        ("paused", "still-paused"),
    ],
    "middle": [("validating-delivery", None), ("ready", None), ("queued", None)],
    "short": [("validating-delivery", None), ("ready", None)],
    "last": [("validating-delivery", None), ("ready", None), ("queued", None)],
}


def _running_under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1"}


# -- building the store ------------------------------------------------------------------


def start_runs(store: RunStore) -> dict[str, str]:
    """One run per entry of `PATHS` (started, not advanced): name -> run id."""
    ids = {}
    for name in PATHS:
        run = store.start_run("abel-implement", change=f"tamper-{name}", operation_id=f"{name}-0")
        ids[name] = run.run_id
    return ids


def advance(store: RunStore, ids: dict[str, str], steps: range) -> None:
    """Take the runs through steps `steps` of their paths, interleaved (run by run within a
    step), so that each run's events are spread over the feed."""
    for step in steps:
        for name, path in PATHS.items():
            if step >= len(path):
                continue
            state, code = path[step]
            store.transition(ids[name], state, operation_id=f"{name}-t{step}", code=code)
            if step == 0:
                store.bind_delivery(ids[name], "gate-a", 1, "a" * 64, operation_id=f"{name}-bind")


# -- reading and rewriting rows ----------------------------------------------------------


@dataclass(frozen=True)
class StoredEvent:
    run_id: str
    sequence: int
    type: str
    payload: dict[str, Any]
    prior_hash: str
    event_hash: str
    feed_position: int | None

    def document(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "type": self.type,
            "payload": self.payload,
            "hash": self.event_hash,
            "priorHash": self.prior_hash,
        }


def run_events(connection: Connection, run_id: str) -> list[StoredEvent]:
    rows = connection.execute(
        text(
            "SELECT run_id, sequence, type, payload_json, prior_hash, event_hash, feed_position"
            " FROM events WHERE run_id = :run ORDER BY sequence"
        ),
        {"run": run_id},
    )
    return [StoredEvent(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], r[6]) for r in rows.all()]


def feed_order(connection: Connection) -> list[tuple[str, int, int]]:
    """(run id, sequence, position) of every numbered event, in position order."""
    rows = connection.execute(
        text(
            "SELECT run_id, sequence, feed_position FROM events"
            " WHERE feed_position IS NOT NULL ORDER BY feed_position"
        )
    )
    return [(r[0], r[1], r[2]) for r in rows.all()]


def restore_projection(connection: Connection, run_id: str) -> None:
    """Make the run's row and its journal receipts agree with the events it holds now, as
    the store would have written them: the projection replayed from the chain, the run
    columns that mirror it, each receipt the projection at its sequence; receipts that name
    an event no longer there are deleted."""
    events = run_events(connection, run_id)
    documents = [event.document() for event in events]
    head = reduce_documents(documents)
    columns = {column: head.get(key) for column, key in MIRRORED_COLUMNS}
    assignments = ", ".join(f"{column} = :{column}" for column in columns)
    connection.execute(
        text(f"UPDATE runs SET {assignments}, projection_json = :projection WHERE run_id = :run"),
        {**columns, "projection": js_stringify(head), "run": run_id},
    )
    connection.execute(
        text("DELETE FROM operations WHERE run_id = :run AND kind <> 'lease' AND sequence > :head"),
        {"run": run_id, "head": len(events)},
    )
    receipts = connection.execute(
        text(
            "SELECT operation_id, sequence FROM operations"
            " WHERE run_id = :run AND kind <> 'lease' AND sequence IS NOT NULL"
        ),
        {"run": run_id},
    ).all()
    for operation_id, sequence in receipts:
        projection = reduce_documents(documents[:sequence])
        connection.execute(
            text(
                "UPDATE operations SET outcome_json = :outcome"
                " WHERE run_id = :run AND operation_id = :operation"
            ),
            {"outcome": js_stringify(projection), "run": run_id, "operation": operation_id},
        )


def rewrite_history(
    connection: Connection, run_id: str, from_sequence: int, payload_change: dict[str, Any]
) -> None:
    """Rewrite the run from event `from_sequence` on: that event's payload updated with
    `payload_change`, every later event re-linked, each hash and the projection computed by
    `cadence_store.journal.projection.event_after`, the append's own rule."""
    events = run_events(connection, run_id)
    kept = [event.document() for event in events[: from_sequence - 1]]
    projection = reduce_documents(kept)
    prior_hash = events[from_sequence - 2].event_hash
    for event in events[from_sequence - 1 :]:
        payload = dict(event.payload)
        if event.sequence == from_sequence:
            payload.update(payload_change)
        payload_json, event_hash, projection, _ = event_after(
            projection, run_id, event.sequence, event.type, payload, prior_hash
        )
        connection.execute(
            text(
                "UPDATE events SET payload_json = :payload, prior_hash = :prior,"
                " event_hash = :hash WHERE run_id = :run AND sequence = :sequence"
            ),
            {
                "payload": payload_json,
                "prior": prior_hash,
                "hash": event_hash,
                "run": run_id,
                "sequence": event.sequence,
            },
        )
        prior_hash = event_hash
    restore_projection(connection, run_id)


def delete_newest_event(connection: Connection, run_id: str) -> StoredEvent:
    """Delete the run's newest event and set its row back to the event before."""
    newest = run_events(connection, run_id)[-1]
    connection.execute(
        text("DELETE FROM events WHERE run_id = :run AND sequence = :sequence"),
        {"run": run_id, "sequence": newest.sequence},
    )
    restore_projection(connection, run_id)
    return newest


def delete_run(connection: Connection, run_id: str) -> None:
    """Delete a whole run: its events, operations, delivery bindings and row."""
    for table in ("events", "operations", "delivery_bindings", "runs"):
        connection.execute(text(f"DELETE FROM {table} WHERE run_id = :run"), {"run": run_id})


def swap_feed_positions(
    connection: Connection, first: tuple[str, int], second: tuple[str, int]
) -> None:
    """Swap two events' feed positions (the column is unique: through a free value)."""
    positions = {}
    for run_id, sequence in (first, second):
        positions[(run_id, sequence)] = connection.execute(
            text("SELECT feed_position FROM events WHERE run_id = :run AND sequence = :sequence"),
            {"run": run_id, "sequence": sequence},
        ).scalar_one()
    moves = [(first, -1), (second, positions[first]), (first, positions[second])]
    for (run_id, sequence), position in moves:
        connection.execute(
            text(
                "UPDATE events SET feed_position = :position"
                " WHERE run_id = :run AND sequence = :sequence"
            ),
            {"position": position, "run": run_id, "sequence": sequence},
        )


def edit_payload(connection: Connection, run_id: str, sequence: int) -> None:
    """Change one event's payload in place, leaving its hashes as they were."""
    connection.execute(
        text(
            "UPDATE events SET payload_json = replace(payload_json, 'queued', 'qveued')"
            " WHERE run_id = :run AND sequence = :sequence"
        ),
        {"run": run_id, "sequence": sequence},
    )


def flip_signature_byte(note: str, byte: int = 10) -> str:
    """The note with one byte of its (first) signature flipped, the key id left alone."""
    text_part, _, signature_line = note.rstrip("\n").rpartition("\n")
    prefix, _, encoded = signature_line.rpartition(" ")
    raw = bytearray(base64.b64decode(encoded))
    raw[4 + byte] ^= 0x01  # past the 4-byte key id: the Ed25519 signature itself
    return f"{text_part}\n{prefix} {base64.b64encode(bytes(raw)).decode('ascii')}\n"


# -- the independent checker -------------------------------------------------------------


def build_tlogcheck(directory: Path) -> Path:
    """Build the Go checker into `directory` (once a session); skip without Go, except
    under CI, where a missing Go is a failure."""
    go = shutil.which("go")
    if go is None:
        if _running_under_ci():
            pytest.fail("Go is required under CI (.ci/run installs golang-go)", pytrace=False)
        pytest.skip("no Go toolchain: the independent checker cannot be built")
    binary = directory / "tlogcheck"
    environment = {
        **os.environ,
        "GOFLAGS": "-mod=mod",
        "GOPROXY": "off",  # the standard library only: nothing to download
        "GOCACHE": str(directory / "gocache"),
        "GOPATH": str(directory / "gopath"),
        "CGO_ENABLED": "0",
    }
    subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=TLOGCHECK_SOURCE,
        env=environment,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return binary


def tlogcheck(
    binary: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def encode_hashes(hashes: Sequence[bytes]) -> list[str]:
    return [base64.b64encode(h).decode("ascii") for h in hashes]
