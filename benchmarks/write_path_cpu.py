"""Where a durable transition's CPU goes: `python -m benchmarks.write_path_cpu [--rounds N]`.

SQLite with `synchronous=OFF`, so that the disk is out and what is left is CPU: the same
transition through each layer, interleaved in random order, 200 calls a round; the table
gives the 25th percentile of the per-round means (the least disturbed rounds).

- `RunStore.transition`: the whole call (failover wrapper, retries, direct write path);
- `direct path`: `DirectWrites.write` alone (kept connection, BEGIN IMMEDIATE, COMMIT);
- `repository`: `RunRepository.transition` on a held DB-API connection, begun by hand;
- `floor`: the hand-written DB-API transaction (`floor.py`), remembering heads as the
  store does (the floor of `benchmarks.sqlite_gap`);
- `floor_read_head`: the same, reading the head in every transaction;
- `in a unit of work`: `uow.runs.transition`, the round's 200 calls in one unit of work
  (what a batched transition costs, its commit shared).

Each step down removes one layer; the differences are that layer's cost.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cadence_store.storage.backends.sqlite as sqlite_backend
from cadence_store.repository.run_repository import RunRepository
from cadence_store.repository.transaction import JournalTransaction
from cadence_store.storage.backends import backend_for
from cadence_store.storage.statements import Statements

from .common import open_store, paused_run
from .floor import SqliteFloor
from .no_otel import rerun_as_installed

CALLS = 200  # a round: this many calls of one variant
UNIT_OF_WORK = "in a unit of work (200 a commit)"


def _without_fsync() -> None:
    set_pragmas = sqlite_backend.set_session_pragmas

    def pragmas(connection: Any, *, wal: bool) -> None:
        set_pragmas(connection, wal=wal)
        connection.execute("PRAGMA synchronous = OFF")

    sqlite_backend.set_session_pragmas = pragmas


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.write_path_cpu")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument(
        "--otel",
        action="store_true",
        help="opentelemetry as installed here (default: hidden, as without the otel extra)",
    )
    args = parser.parse_args(argv)
    if argv is None:
        rerun_as_installed("benchmarks.write_path_cpu", sys.argv[1:])
    _without_fsync()
    path = Path(tempfile.mkdtemp(prefix="cadence-cpu-")) / "cpu.sqlite3"
    store = open_store(f"sqlite:///{path}")
    floor = SqliteFloor(str(path), remember_heads=True)
    floor_read_head = SqliteFloor(str(path))
    for each in (floor, floor_read_head):
        each.db.execute("PRAGMA synchronous = OFF")
    names = ["RunStore.transition", "transactions", "repository", "floor", "floor_read_head"]
    runs = {name: paused_run(store, f"layer-{index}") for index, name in enumerate(names)}
    held = store.engine.raw_connection()
    raw = held.dbapi_connection

    def repository(run_id: str, operation_id: str) -> None:
        statements = Statements.on_dbapi(store.engine.dialect, raw)
        backend_for(store.engine).begin_write_on_driver(raw)  # as the store's direct path
        transaction = JournalTransaction.on_pooled(
            backend_for(store.engine.dialect), raw, statements, None
        )
        RunRepository(transaction, root_hash=store.root_hash).transition(
            run_id, "paused", operation_id=operation_id, code="x"
        )
        raw.commit()

    transactions = store.transactions
    variants = {
        "RunStore.transition": lambda r, op: store.transition(
            r, "paused", operation_id=op, code="x"
        ),
        "transactions": lambda r, op: transactions.write(
            lambda repo: repo.transition(r, "paused", operation_id=op, code="x")
        ),
        "repository": repository,
        "floor": lambda r, op: floor.transition(r, op, "paused", "x"),
        "floor_read_head": lambda r, op: floor_read_head.transition(r, op, "paused", "x"),
    }

    def one_by_one(call: Any) -> Any:
        def calls(run_id: str, operation_ids: list[str]) -> None:
            for operation_id in operation_ids:
                call(run_id, operation_id)

        return calls

    def in_a_unit_of_work(run_id: str, operation_ids: list[str]) -> None:
        with store.unit_of_work() as uow:
            for operation_id in operation_ids:
                uow.runs.transition(run_id, "paused", operation_id=operation_id, code="x")

    rounds = {name: one_by_one(call) for name, call in variants.items()}
    rounds[UNIT_OF_WORK] = in_a_unit_of_work
    runs[UNIT_OF_WORK] = paused_run(store, "layer-unit-of-work")
    means: dict[str, list[float]] = {name: [] for name in rounds}
    counter = 0
    for _ in range(args.rounds):
        order = list(rounds)
        random.shuffle(order)
        for name in order:
            operation_ids = [f"op-{counter + index}" for index in range(CALLS)]
            counter += CALLS
            started = time.perf_counter()
            rounds[name](runs[name], operation_ids)
            means[name].append((time.perf_counter() - started) / CALLS * 1e6)
    held.close()
    floor.close()
    floor_read_head.close()
    store.close()
    floor_us = statistics.quantiles(means["floor"], n=4)[0]
    print("| layer | µs per call (p25 of round means) | above the floor |")
    print("|---|---|---|")
    for name in [*names, UNIT_OF_WORK]:
        value = statistics.quantiles(means[name], n=4)[0]
        print(f"| {name} | {value:.1f} | {value - floor_us:+.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
