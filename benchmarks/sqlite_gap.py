"""The SQLite side by side: `python -m benchmarks.sqlite_gap [--rounds N] [--processes]`.

One durable transition (WAL, `synchronous=FULL`), each system on its own database file in
the same directory, interleaved call by call in a fresh random order every round
(`per_round=1`: this disk's fsync switches between about 0.1 and 2-4 ms for seconds at a
time, and blocks of calls would each land on one mode), medians:

- `floor`: the store's statements hand-written on sqlite3 (`floor.SqliteFloor`), which
  like the store remembers the head its last commit left and skips the head's SELECT;
- `floor_engine`: the same on a connection of a plain SQLAlchemy pool, checked out and
  given back for each call (`floor.SqlitePooledFloor`): the floor of `store_engine`;
- `floor_read_head`: the same, reading the head in every transaction (the store's
  statements before it remembered heads);
- `floor_receipt_first`: the floor of the earlier rounds (reads the receipt, then the
  run; no times);
- `floor_contract`: `floor` doing the contract's own work by the journal's pure
  functions, as the store does it (input rules, JavaScript-exact JSON, the hash, the
  projection's fold, the returned `RunProjection`), with none of the library's layers
  (`floor.SqliteContractFloor`): the bound no layering of the contract goes below;
- `eventsourcing`: eventsourcing's `SQLiteApplicationRecorder` inserting an event of the
  same size (one INSERT); only with `pip install eventsourcing` (the `bench` extra),
  else the column is skipped and the report says so;
- the store as a user opens it: `store_url` (`RunStore(url)`), `store_open`
  (`RunStore.open(root)`, the state root in the same directory) and `store_engine`
  (`RunStore(engine)` on a host's plain `create_engine(url)`);
- `fsync`: a 4 KiB write+fsync of the same disk, to show a slow stretch of the disk;
- `store_url_otel` (`--processes` only): `store_url` with opentelemetry-api importable
  and no provider set, in a process of its own.

The stores run as `pip install cadence-store` installs the library, without the `otel`
extra: run as a program, this re-runs itself with `CADENCE_BENCH_OTEL=absent`, which
hides opentelemetry from this process and from every system's process but
`store_url_otel`'s (`--otel`: as this environment has it).

Two ways to run them: all in this process (the default), or `--processes`, one process
per system, each woken by a pipe for each of its calls. Every call
is timed twice, by the clock and by its thread's CPU time (`time.thread_time`, user and
kernel): `wait` (wall minus CPU, the median of each call's) is the time spent blocked on
the disk. After the timed rounds, an untimed pass counts the WAL frames (pages) each
system's commit writes, from the WAL index header in the `-shm` file (`mxFrame`).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

import sqlalchemy

from cadence_store import RunStore, StateRoot, resolve_state_root

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
from .floor import (
    SqliteContractFloor,
    SqliteFloor,
    SqlitePooledFloor,
    SqliteReceiptFirstFloor,
)
from .no_otel import ABSENT, ENVIRONMENT, opentelemetry_importable, rerun_as_installed

STORES: Final = ("store_url", "store_open", "store_engine")
# `--processes` only (each system its own interpreter): `store_url` with opentelemetry-api
# importable and no provider set, where every other store's process has it hidden
OTEL_STORE: Final = "store_url_otel"
FLOORS: Final[dict[str, Callable[[str], Any]]] = {
    "floor": lambda path: SqliteFloor(path, remember_heads=True),
    "floor_engine": SqlitePooledFloor,
    "floor_read_head": SqliteFloor,
    "floor_receipt_first": SqliteReceiptFirstFloor,
    "floor_contract": SqliteContractFloor,
}
# the floor each way of opening the store is held to: the same work, pool included
FLOOR_OF: Final = {"store_url": "floor", "store_open": "floor", "store_engine": "floor_engine"}
FRAME_SAMPLES: Final = 300
WARM_UP_CALLS: Final = 20  # before timing: imports, statement caches, the first pages


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


@dataclass
class System:
    """One compared system, ready to be called: `call(n)` makes one durable transition."""

    call: Callable[[int], object]
    close: Callable[[], object]
    path: str | None = None  # its database file (WAL frames are counted there)
    check: Callable[[], object] | None = None  # verifies the chain it wrote
    synchronous: Callable[[], int] | None = None


def prepare_database(directory: Path, name: str) -> tuple[str, str]:
    """A store database for `name` with one paused run: its path and the run's id."""
    path = str(directory / f"{name}.sqlite3")
    store = open_store(f"sqlite:///{path}")
    run_id = paused_run(store, name)
    store.close()
    return path, run_id


def _state_root(directory: Path) -> StateRoot:
    consumer = directory / "consumer"
    consumer.mkdir(exist_ok=True)
    return resolve_state_root(consumer, xdg_state_home=str(directory / "state"))


def prepare(directory: Path, names: list[str]) -> dict[str, tuple[str, str]]:
    """Every system's database and run, made before any system opens its own."""
    prepared = {
        name: prepare_database(directory, name)
        for name in names
        if name in FLOORS or name in ("store_url", "store_engine", OTEL_STORE)
    }
    if "store_open" in names:
        root = _state_root(directory)
        store = RunStore.open(root)
        prepared["store_open"] = (root.database_path, paused_run(store, "open"))
        store.close()
    return prepared


def _store_system(store: RunStore, run_id: str, close: Callable[[], object]) -> System:
    return System(
        call=lambda n: store.transition(run_id, "paused", operation_id=f"t-{n}", code="bench"),
        close=close,
        path=str(sqlalchemy.make_url(str(store.engine.url)).database),
        check=lambda: store.verify_integrity(run_id),
    )


def open_system(name: str, directory: Path, path: str = "", run_id: str = "") -> System:
    """Open system `name` on the database `prepare` made for it."""
    if name in FLOORS:
        floor = FLOORS[name](path)

        def check() -> None:
            store = RunStore(f"sqlite:///{path}", root_hash=ROOT_HASH)
            try:
                store.verify_integrity(run_id)
            finally:
                store.close()

        return System(
            call=lambda n: floor.transition(run_id, f"t-{n}", "paused", "bench"),
            close=floor.close,
            path=path,
            check=check,
        )
    if name in ("store_url", OTEL_STORE):
        store = RunStore(f"sqlite:///{path}", root_hash=ROOT_HASH)
        return _store_system(store, run_id, store.close)
    if name == "store_open":
        store = RunStore.open(_state_root(directory))
        return _store_system(store, run_id, store.close)
    if name == "store_engine":
        host_engine = sqlalchemy.create_engine(f"sqlite:///{path}")
        store = RunStore(host_engine, root_hash=ROOT_HASH)

        def close() -> None:
            store.close()
            host_engine.dispose()

        system = _store_system(store, run_id, close)

        def synchronous() -> int:
            with host_engine.connect() as connection:
                return int(connection.exec_driver_sql("PRAGMA synchronous").scalar() or 0)

        system.synchronous = synchronous
        return system
    if name == "eventsourcing":
        recorder = EventsourcingRecorder(str(directory / "eventsourcing.sqlite3"))
        recorder(0)
        return System(
            call=recorder,
            close=recorder.close,
            path=str(directory / "eventsourcing.sqlite3"),
            synchronous=recorder.synchronous,
        )
    assert name == "fsync"
    fsync = FsyncReference(directory)
    return System(call=fsync, close=fsync.close)


def finish(system: System) -> dict[str, Any]:
    """After the timed calls: the WAL frames a commit writes, the `synchronous` setting,
    the written chain verified; then the system is closed."""
    frames = None
    if system.path is not None:
        frames = frames_per_commit(system.path, system.call, 10_000_000)
    synchronous = system.synchronous() if system.synchronous is not None else None
    if system.check is not None:
        system.check()  # every chain written is one the verifier accepts
    system.close()
    return {"frames": frames, "synchronous": synchronous}


def serve_system(name: str, directory: str, path: str, run_id: str, pipe: Any) -> None:
    """A child process's loop (`--processes`): open one system, then for each number
    received make one call and send back its wall and CPU seconds; None ends it."""
    system = open_system(name, Path(directory), path, run_id)
    for n in range(WARM_UP_CALLS):
        system.call(-1 - n)
    pipe.send("ready")
    while (n := pipe.recv()) is not None:
        pipe.send(timed_call(system.call, n))
    pipe.send(finish(system))


def timed_call(call: Callable[[int], object], n: int) -> tuple[float, float]:
    """One call's wall and CPU (this thread's, user and kernel) seconds; the clock's
    interval holds the CPU clock's, so that wall minus CPU is never below zero."""
    started = time.perf_counter()
    cpu = time.thread_time()
    call(n)
    used = time.thread_time() - cpu
    return time.perf_counter() - started, used


def _timed_by_the_child(call: Callable[[int], object], n: int) -> tuple[float, float]:
    """`--processes`: the child process times its own call (`serve_system`)."""
    return cast(tuple[float, float], call(n))


def _in_this_process(
    directory: Path, prepared: dict[str, tuple[str, str]], names: list[str], rounds: int
) -> tuple[dict[str, list[tuple[float, float]]], dict[str, dict[str, Any]]]:
    systems = {name: open_system(name, directory, *prepared.get(name, ("", ""))) for name in names}
    for system in systems.values():
        for n in range(WARM_UP_CALLS):
            system.call(-1 - n)
    settle()
    calls = {name: system.call for name, system in systems.items()}
    samples = interleave(calls, rounds=rounds, per_round=1, measure=timed_call)
    return samples, {name: finish(system) for name, system in systems.items()}


def _in_processes(
    directory: Path, prepared: dict[str, tuple[str, str]], names: list[str], rounds: int
) -> tuple[dict[str, list[tuple[float, float]]], dict[str, dict[str, Any]]]:
    context = multiprocessing.get_context("spawn")
    pipes: dict[str, Any] = {}
    children = []
    inherited = os.environ.get(ENVIRONMENT)
    for name in names:
        parent_end, child_end = context.Pipe()
        path, run_id = prepared.get(name, ("", ""))
        child = context.Process(
            target=serve_system, args=(name, str(directory), path, run_id, child_end)
        )
        # a spawned child starts with this environment: the library as installed without
        # the otel extra, except in the one system that measures it with the API
        if name == OTEL_STORE:
            os.environ.pop(ENVIRONMENT, None)
        else:
            os.environ[ENVIRONMENT] = ABSENT
        try:
            child.start()
        finally:
            if inherited is None:
                os.environ.pop(ENVIRONMENT, None)
            else:
                os.environ[ENVIRONMENT] = inherited
        children.append(child)
        pipes[name] = parent_end
    try:
        for name, pipe in pipes.items():
            if pipe.recv() != "ready":
                raise RuntimeError(f"{name}: its process did not start")
        settle()

        def caller(pipe: Any) -> Callable[[int], tuple[float, float]]:
            def call(n: int) -> tuple[float, float]:
                pipe.send(n)
                measured: tuple[float, float] = pipe.recv()
                return measured

            return call

        samples = interleave(
            {name: caller(pipe) for name, pipe in pipes.items()},
            rounds=rounds,
            per_round=1,
            measure=_timed_by_the_child,
        )
        finished = {}
        for name, pipe in pipes.items():
            pipe.send(None)
            finished[name] = pipe.recv()
    finally:
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
    return samples, finished


def bench_sqlite_gap(workdir: Path, rounds: int, *, processes: bool = False) -> dict[str, Any]:
    """Every system's durable transition, interleaved; medians and ratios."""
    directory = workdir / ("gap-processes" if processes else "gap")
    directory.mkdir(exist_ok=True)
    stores = [*STORES, OTEL_STORE] if processes else list(STORES)
    names = [*FLOORS, *stores, *(["eventsourcing"] if has_eventsourcing() else []), "fsync"]
    prepared = prepare(directory, names)
    run = _in_processes if processes else _in_this_process
    samples, finished = run(directory, prepared, names, rounds)

    def median_of(values: list[float]) -> float:
        return round(median_ms(values), 4)

    medians = {name: median_of([wall for wall, _ in values]) for name, values in samples.items()}
    cpu = {name: median_of([used for _, used in values]) for name, values in samples.items()}
    wait = {
        name: median_of([wall - used for wall, used in values]) for name, values in samples.items()
    }
    recorder = "eventsourcing" in names
    ratios: dict[str, float] = {}
    for name in stores:
        ratios[f"{name}/floor"] = round(medians[name] / medians["floor"], 3)
        if name == "store_engine":
            ratios["store_engine/floor_engine"] = round(medians[name] / medians["floor_engine"], 3)
        if recorder:
            ratios[f"{name}/eventsourcing"] = round(medians[name] / medians["eventsourcing"], 3)
    for name in ("floor_engine", "floor_read_head", "floor_receipt_first", "floor_contract"):
        ratios[f"{name}/floor"] = round(medians[name] / medians["floor"], 3)
    # what the store's layers cost: the contract's own work done by hand is the bound
    ratios["store_url/floor_contract"] = round(medians["store_url"] / medians["floor_contract"], 3)
    if recorder:
        ratios["eventsourcing/floor"] = round(medians["eventsourcing"] / medians["floor"], 3)
        ratios["floor_contract/eventsourcing"] = round(
            medians["floor_contract"] / medians["eventsourcing"], 3
        )
    return {
        "mode": "one process per system" if processes else "one process",
        # whether the stores could record telemetry (`--processes`: only `store_url_otel`)
        "opentelemetry": False if processes else opentelemetry_importable(),
        "median_ms": medians,
        "cpu_ms": cpu,
        "wait_ms": wait,
        "ratios": ratios,
        "wal_frames_per_commit": {
            name: done["frames"] for name, done in finished.items() if done["frames"] is not None
        },
        "synchronous": {
            name: done["synchronous"]
            for name, done in finished.items()
            if done["synchronous"] is not None
        },
        "eventsourcing": recorder,
        "samples": len(samples["floor"]),
    }


def table(result: dict[str, Any]) -> str:
    telemetry = "importable" if result["opentelemetry"] else "not importable"
    lines = [
        f"{result['mode']}, {result['samples']} calls each, opentelemetry {telemetry}"
        + (f" (but in {OTEL_STORE})" if OTEL_STORE in result["median_ms"] else ""),
        "",
        "| system | median ms | CPU ms | wait ms | WAL frames per commit |",
        "|---|---|---|---|---|",
    ]
    for name, value in result["median_ms"].items():
        frames = result["wal_frames_per_commit"].get(name, "")
        lines.append(
            f"| {name} | {value} | {result['cpu_ms'][name]} | {result['wait_ms'][name]} "
            f"| {frames} |"
        )
    if not result["eventsourcing"]:
        lines.append("| eventsourcing | skipped: `pip install eventsourcing` | | | |")
    lines.append("")
    lines.extend(f"- {name}: {ratio}x" for name, ratio in result["ratios"].items())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sqlite_gap")
    parser.add_argument("--rounds", type=int, default=1500)
    parser.add_argument(
        "--processes", action="store_true", help="one process per system, each woken for each call"
    )
    parser.add_argument("--out", default=None, help="write the result as JSON here")
    parser.add_argument(
        "--otel",
        action="store_true",
        help="opentelemetry as installed here (default: hidden, as without the otel extra)",
    )
    args = parser.parse_args(argv)
    if argv is None:
        rerun_as_installed("benchmarks.sqlite_gap", sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="cadence-gap-") as workdir:
        result = bench_sqlite_gap(Path(workdir), args.rounds, processes=args.processes)
    result["machine"] = machine()
    result["pid"] = os.getpid()
    print(table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
