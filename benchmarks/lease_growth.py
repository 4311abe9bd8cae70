"""Growth after a million transitions with leases: `python -m benchmarks.lease_growth`.

A worker's cycle, as `RunStore` callers make it: `acquire_lease` (a new operation),
`transition` under that lease, `commit_lease`. The cycles go round 1,000 runs, 100 cycles
per unit of work (`--quick`: 100,000 cycles). After every quarter the store's tables and
indexes are measured by name (`scale_storage`); on PostgreSQL also the live and dead row
versions and the autovacuum runs of each table (`pg_stat_user_tables`), then a `VACUUM`
(`common.settle`), then another tenth of the cycles, to see whether the space it frees
is reused.
SQLite: the file's pages and its free list (SQLite updates rows in place; nothing to
vacuum but pages freed by deletes).

What grows by design: `events` (one per transition) and `operations` (two per cycle:
the lease's operation and the transition's; they are the operation-id records). What
must not grow: `runs` (1,000 rows, each updated once per cycle) beyond its live rows and
the dead versions autovacuum has not yet reclaimed. Prints a table and writes
`benchmarks/lease-growth-results.json`. Sizes are not timings: a loaded machine measures
them as well as an idle one.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy

from cadence_store import RunStore, upgrade

from .common import (
    ROOT_HASH,
    Engine,
    benchmark_arguments,
    engines_of,
    machine,
    postgres_server,
    settle,
)
from .scale_storage import postgres_storage, sqlite_table_sizes, storage_summary

RUNS = 1_000
CYCLES_PER_UNIT = 100
TTL_MS = 60_000
STEP_MS = 1_000
TRACKED = ("runs", "events", "operations")


class Worker:
    """Drives lease cycles round the runs, on a clock that moves a second per call."""

    def __init__(self, url: str) -> None:
        self.now = 1_600_000_000_000
        self.store = RunStore(url, root_hash=ROOT_HASH, clock=self.tick)
        self.cycles = 0
        self.run_ids: list[str] = []
        with self.store.unit_of_work() as uow:
            for index in range(RUNS):
                run = uow.runs.start_run(
                    "abel-implement", change=f"growth-{index}", operation_id=f"start-{index}"
                )
                self.run_ids.append(run.run_id)

    def tick(self) -> int:
        self.now += STEP_MS
        return self.now

    def cycle(self, count: int) -> None:
        done = 0
        while done < count:
            with self.store.unit_of_work() as uow:
                for _ in range(min(CYCLES_PER_UNIT, count - done)):
                    number = self.cycles
                    run_id = self.run_ids[number % RUNS]
                    lease = uow.runs.acquire_lease(run_id, f"lease-{number}", TTL_MS)
                    uow.runs.transition(
                        run_id, "paused", operation_id=f"pause-{number}", code="w", lease=lease
                    )
                    uow.runs.commit_lease(lease, {"cycle": number})
                    self.cycles += 1
                    done += 1

    def close(self) -> None:
        self.store.close()


def _tracked_bytes(summary: dict[str, Any]) -> dict[str, int]:
    """Each tracked table's bytes, its indexes' included."""
    tables = summary["tables"]
    return {
        name: int(tables[name]["bytes"]) + int(sum(tables[name]["indexes"].values()))
        for name in TRACKED
        if name in tables
    }


def _sqlite_sample(url: str) -> dict[str, Any]:
    path = sqlalchemy.make_url(url).database or ""
    with sqlite3.connect(path) as connection:
        (events,) = connection.execute("SELECT COUNT(*) FROM events").fetchone()
        summary = storage_summary(sqlite_table_sizes(connection), int(events))
        (pages,) = connection.execute("PRAGMA page_count").fetchone()
        (free,) = connection.execute("PRAGMA freelist_count").fetchone()
        (page_size,) = connection.execute("PRAGMA page_size").fetchone()
    return {
        "bytes": _tracked_bytes(summary),
        "store_bytes_per_event": summary["store_bytes_per_event"],
        "file_bytes": int(pages) * int(page_size),
        "free_pages": int(free),
    }


def _postgres_sample(url: str) -> dict[str, Any]:
    summary = postgres_storage(url)["cadence_store"]
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.exec_driver_sql(
                "SELECT relname, n_live_tup, n_dead_tup, autovacuum_count, n_tup_upd,"
                " n_tup_hot_upd FROM pg_stat_user_tables WHERE relname IN ('runs', 'operations')"
            ).all()
    finally:
        engine.dispose()
    return {
        "bytes": _tracked_bytes(summary),
        "store_bytes_per_event": summary["store_bytes_per_event"],
        "row_versions": {
            str(name): {
                "live": int(live),
                "dead": int(dead),
                "autovacuums": int(autovacuums),
                "updates": int(updates),
                "hot_updates": int(hot),
            }
            for name, live, dead, autovacuums, updates, hot in rows
        },
    }


def measure(engine: Engine, cycles: int) -> list[dict[str, Any]]:
    """The samples of one engine: after the starts, each quarter, a VACUUM, a tenth more."""
    url = engine.fresh_url()
    upgrade(url)
    postgres = engine.name == "postgresql"
    sample = _postgres_sample if postgres else _sqlite_sample
    worker = Worker(url)
    samples: list[dict[str, Any]] = []
    started = time.monotonic()

    def record(stage: str) -> None:
        elapsed_s = round(time.monotonic() - started, 1)
        samples.append({"stage": stage, "cycles": worker.cycles, "elapsed_s": elapsed_s})
        samples[-1].update(sample(url))
        print(f"  {engine.name}: {stage}, {elapsed_s} s", file=sys.stderr)

    try:
        record("1,000 runs started")
        for _ in range(4):
            worker.cycle(cycles // 4)
            record(f"{worker.cycles:,} cycles")
        if postgres:
            settle(url)  # VACUUM ANALYZE
            record("after VACUUM")
        worker.cycle(cycles // 10)
        record(f"{worker.cycles:,} cycles")
    finally:
        worker.close()
    return samples


def _print(engine: str, samples: list[dict[str, Any]]) -> None:
    print(f"\n{engine}: bytes of each table with its indexes (MB), bytes per event")
    print(f"{'stage':<22}{'runs':>10}{'events':>10}{'operations':>12}{'B/event':>10}  dead runs")
    for sample in samples:
        sizes = {name: sample["bytes"].get(name, 0) / 1e6 for name in TRACKED}
        dead = sample.get("row_versions", {}).get("runs", {}).get("dead", "")
        print(
            f"{sample['stage']:<22}{sizes['runs']:>10.2f}{sizes['events']:>10.1f}"
            f"{sizes['operations']:>12.1f}{sample['store_bytes_per_event']:>10.1f}  {dead}"
        )


def main() -> None:
    parser = benchmark_arguments(
        "benchmarks.lease_growth", "lease-growth-results.json", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--cycles", type=int, default=None)
    arguments = parser.parse_args()
    cycles = arguments.cycles or (100_000 if arguments.quick else 1_000_000)
    results: dict[str, Any] = {"machine": machine(), "cycles": cycles, "runs": RUNS, "engines": {}}
    with tempfile.TemporaryDirectory(prefix="lease-growth-") as workdir:
        for name in engines_of(arguments):
            if name == "postgresql":
                with postgres_server() as server:
                    samples = measure(Engine(name, Path(workdir), server), cycles)
            else:
                samples = measure(Engine(name, Path(workdir), None), cycles)
            results["engines"][name] = samples
            _print(name, samples)
    Path(arguments.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {arguments.out}")


if __name__ == "__main__":
    main()
