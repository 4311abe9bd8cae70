"""The SQLite side by side: `python -m benchmarks.sqlite_gap [--rounds N] [--per-round N]`.

One durable transition (WAL, `synchronous=FULL`), each system on its own database file in
the same directory, all in one process, interleaved call by call in a fresh random order
every round (`common.interleave` with `per_round=1`: this disk's fsync switches between
about 0.1 and 2-4 ms for seconds at a time, and blocks of calls would each land on one
mode), medians:

- `floor`: the store's statements hand-written on sqlite3 (`floor.SqliteFloor`), which
  like the store remembers the head its last commit left and skips the head's SELECT;
- `floor_read_head`: the same, reading the head in every transaction (the store's
  statements before it remembered heads);
- `floor_receipt_first`: the floor of the earlier rounds (reads the receipt, then the
  run; no times);
- `eventsourcing`: eventsourcing's `SQLiteApplicationRecorder` inserting an event of the
  same size (one INSERT); only with `pip install eventsourcing` (the `bench` extra),
  else the column is skipped and the report says so;
- the store as a user opens it: `store_url` (`RunStore(url)`), `store_open`
  (`RunStore.open(root)`, the state root in the same directory) and `store_engine`
  (`RunStore(engine)` on a host's plain `create_engine(url)`);
- `fsync`: a 4 KiB write+fsync of the same disk, to show a slow stretch of the disk.

After the timed rounds, an untimed pass counts the WAL frames (pages) each system's
commit writes, from the WAL index header in the `-shm` file (`mxFrame`).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy

from cadence_store import RunStore, resolve_state_root

from .common import (
    ROOT_HASH,
    FsyncReference,
    interleave,
    machine,
    median_ms,
    open_store,
    paused_run,
    settle,
)
from .floor import SqliteFloor, SqliteReceiptFirstFloor

STORES = ("store_url", "store_open", "store_engine")
FRAME_SAMPLES = 300


class EventsourcingRecorder:
    """eventsourcing's SQLite application recorder, one event of the store's event size
    per call."""

    def __init__(self, path: str) -> None:
        from eventsourcing.persistence import StoredEvent
        from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

        self._stored_event = StoredEvent
        self.datastore = SQLiteDatastore(path, pool_size=1)
        self.recorder = SQLiteApplicationRecorder(self.datastore)
        self.recorder.create_table()
        self.originator = uuid.uuid4()
        self.version = 0
        # the store's event row: its payload, two hashes and its columns, as one JSON
        self.state = json.dumps(
            {
                "sequence": 1,
                "type": "state-transitioned",
                "payload": {"from": "paused", "to": "paused", "code": "bench"},
                "priorHash": "ab" * 32,
                "eventHash": "cd" * 32,
                "recordedAt": 1_796_000_000_000,
            }
        ).encode()

    def synchronous(self) -> int:
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute("PRAGMA synchronous")
            return int(cursor.fetchone()[0])

    def __call__(self, _n: int) -> None:
        self.version += 1
        self.recorder.insert_events(
            [
                self._stored_event(
                    originator_id=self.originator,
                    originator_version=self.version,
                    topic="cadence.bench:StateTransitioned",
                    state=self.state,
                )
            ]
        )

    def close(self) -> None:
        self.datastore.close()


def has_eventsourcing() -> bool:
    try:
        import eventsourcing.sqlite  # noqa: F401
    except ImportError:
        return False
    return True


def wal_frames(database_path: str) -> int:
    """The WAL's committed frame count (`mxFrame` of the WAL index header in `-shm`)."""
    with open(database_path + "-shm", "rb") as shm:
        header = shm.read(20)
    return int(struct.unpack_from("=I", header, 16)[0])


def frames_per_commit(database_path: str, call: Callable[[int], object], start: int) -> float:
    """The median count of WAL frames one call commits (calls that restarted the WAL
    after a checkpoint are left out)."""
    deltas = []
    for n in range(start, start + FRAME_SAMPLES):
        before = wal_frames(database_path)
        call(n)
        after = wal_frames(database_path)
        if after > before:
            deltas.append(after - before)
    deltas.sort()
    return float(deltas[len(deltas) // 2])


def bench_sqlite_gap(workdir: Path, rounds: int, per_round: int) -> dict[str, Any]:
    """Every system's durable transition, interleaved; medians and ratios."""
    directory = workdir / "gap"
    directory.mkdir(exist_ok=True)
    paths: dict[str, str] = {}
    variants: dict[str, Callable[[int], object]] = {}
    closers: list[Callable[[], object]] = []
    checks: list[tuple[RunStore, str]] = []

    def prepared(name: str) -> tuple[str, str]:
        path = str(directory / f"{name}.sqlite3")
        store = open_store(f"sqlite:///{path}")
        run_id = paused_run(store, name)
        store.close()
        paths[name] = path
        return path, run_id

    floors: dict[str, Callable[[str], Any]] = {
        "floor": lambda path: SqliteFloor(path, remember_heads=True),
        "floor_read_head": SqliteFloor,
        "floor_receipt_first": SqliteReceiptFirstFloor,
    }
    for name, make_floor in floors.items():
        path, run_id = prepared(name)
        floor = make_floor(path)
        variants[name] = lambda n, f=floor, r=run_id: f.transition(r, f"t-{n}", "paused", "bench")
        closers.append(floor.close)
        checks.append((RunStore(f"sqlite:///{path}", root_hash=ROOT_HASH), run_id))

    path, _ = prepared("store_url")
    by_url = RunStore(f"sqlite:///{path}", root_hash=ROOT_HASH)
    path, _ = prepared("store_engine")
    host_engine = sqlalchemy.create_engine(f"sqlite:///{path}")
    by_engine = RunStore(host_engine, root_hash=ROOT_HASH)
    consumer = directory / "consumer"
    consumer.mkdir(exist_ok=True)
    root = resolve_state_root(consumer, xdg_state_home=str(directory / "state"))
    by_root = RunStore.open(root)
    paths["store_open"] = root.database_path
    for name, store in (
        ("store_url", by_url),
        ("store_open", by_root),
        ("store_engine", by_engine),
    ):
        run_id = paused_run(store, f"{name}-run")
        variants[name] = lambda n, s=store, r=run_id: s.transition(
            r, "paused", operation_id=f"t-{n}", code="bench"
        )
        closers.append(store.close)
        checks.append((store, run_id))
        paths.setdefault(name, str(sqlalchemy.make_url(str(store.engine.url)).database))
    closers.append(host_engine.dispose)

    recorder: EventsourcingRecorder | None = None
    if has_eventsourcing():
        paths["eventsourcing"] = str(directory / "eventsourcing.sqlite3")
        recorder = EventsourcingRecorder(paths["eventsourcing"])
        recorder(0)
        variants["eventsourcing"] = recorder
        closers.append(recorder.close)
    fsync = FsyncReference(directory)
    variants["fsync"] = fsync
    closers.append(fsync.close)

    settle()
    samples = interleave(variants, rounds=rounds, per_round=per_round)
    frames = {
        name: frames_per_commit(paths[name], call, 10_000_000)
        for name, call in variants.items()
        if name in paths
    }
    synchronous = {
        "eventsourcing": recorder.synchronous() if recorder is not None else None,
        "store_engine": by_engine.engine.connect().exec_driver_sql("PRAGMA synchronous").scalar(),
    }
    for store, run_id in checks:
        store.verify_integrity(run_id)  # every chain written is one the verifier accepts
    for store, _ in checks[: len(floors)]:
        store.close()
    for close in closers:
        close()

    medians = {name: round(median_ms(values), 4) for name, values in samples.items()}
    ratios: dict[str, float] = {}
    for name in STORES:
        ratios[f"{name}/floor"] = round(medians[name] / medians["floor"], 3)
        if recorder is not None:
            ratios[f"{name}/eventsourcing"] = round(medians[name] / medians["eventsourcing"], 3)
    for name in ("floor_read_head", "floor_receipt_first"):
        ratios[f"{name}/floor"] = round(medians[name] / medians["floor"], 3)
    if recorder is not None:
        ratios["eventsourcing/floor"] = round(medians["eventsourcing"] / medians["floor"], 3)
    return {
        "median_ms": medians,
        "ratios": ratios,
        "wal_frames_per_commit": frames,
        "synchronous": synchronous,
        "eventsourcing": recorder is not None,
        "samples": len(samples["floor"]),
    }


def table(result: dict[str, Any]) -> str:
    lines = ["| system | median ms | WAL frames per commit |", "|---|---|---|"]
    for name, value in result["median_ms"].items():
        frames = result["wal_frames_per_commit"].get(name, "")
        lines.append(f"| {name} | {value} | {frames} |")
    if not result["eventsourcing"]:
        lines.append("| eventsourcing | skipped: `pip install eventsourcing` | |")
    lines.append("")
    lines.extend(f"- {name}: {ratio}x" for name, ratio in result["ratios"].items())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sqlite_gap")
    parser.add_argument("--rounds", type=int, default=1500)
    parser.add_argument("--per-round", type=int, default=1)
    parser.add_argument("--out", default=None, help="write the result as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cadence-gap-") as workdir:
        result = bench_sqlite_gap(Path(workdir), args.rounds, args.per_round)
    result["machine"] = machine()
    result["pid"] = os.getpid()
    print(table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
