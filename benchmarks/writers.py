"""Writers at scale: `python -m benchmarks.writers [--quick] [--engines sqlite,postgresql]`.

Each writer is a process of its own (`benchmarks/writers_worker.py`, spawn start method)
with one client: a `RunStore(url)` with its default pool and settings (on PostgreSQL,
server-side prepared statements on direct, off by themselves behind a transaction-mode
pooler), or the hand-written floor of one durable transition (`benchmarks/floor.py`: on
PostgreSQL one psycopg connection, on SQLite one sqlite3 connection). After a warm-up
call and a common barrier, every writer appends durable transitions (`paused` ->
`paused`, a unique operation id each) to its run, one after the other, for the measured
window. Configurations:

* PostgreSQL, direct (a private server, tests/pg_cluster.py, fsync on): 1, 4, 16 and 64
  writers each on its own run, and 16 writers on one run (the store serialises a run's
  appends); store and floor.
* PostgreSQL behind PgBouncer in transaction mode (tests/pg_bouncer.py, `POOL_SIZE`
  server connections): the same writer counts on their own runs; store and floor (the
  floor without prepared statements there: PgBouncer 1.18 keeps none).
* SQLite, one file in WAL mode: 1, 2 and 4 processes each on its own run; store and
  `SqliteFloor`.

Each configuration runs on a fresh database (PgBouncer: one database per variant); in a
round the store and the floor of one configuration run one right after the other, in a
random order. Figures: events/s (acknowledged calls / the measured window's wall time),
p50 and p99 of the acknowledged calls' latency, the store's events/s over the floor's at
the same concurrency, the `run-store-busy` count and other errors. After each run the
database is checked: every run's sequences are 1..n with no gap or duplicate, every
acknowledged operation id has its receipt (`lost` counts those without), and no
transition appended more events than receipts (`doubled`); the store's runs also pass
`verify_integrity`.

On PostgreSQL a store process holds two server connections: its pool's, and its feed
notifier's (which numbers the feed and sends the NOTIFY after commits). 64 writers need
128, more than the private server's `max_connections` of 100 (measured: the notifiers
that find no slot fail and try again on a later commit, hundreds of "too many clients
already" in the server log, and in the end a writer's own first connection refused).
So the server is restarted with `max_connections` 300 (`--max-connections`).

This machine has 2 cores: beyond a few writers the writer processes, the database's
backends (and PgBouncer) share them, so 16 and 64 writers measure a CPU-bound machine;
the ratio to the floor is what such a machine leaves the library.

Prints a table and writes `benchmarks/writers-results.json`.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import statistics
import sys
import tempfile
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import sqlalchemy

from cadence_store import RunStore, upgrade

from .common import (
    HERE,
    ROOT_HASH,
    Engine,
    benchmark_arguments,
    engines_of,
    machine,
    paused_run,
    postgres_server,
    settle,
)
from .writers_worker import write

MAX_CONNECTIONS = 300  # two a store process at 64 writers, and room
POOL_SIZE = 16  # PgBouncer's server connections (default_pool_size)
TARGET_RATIO = 0.9  # PostgreSQL at 16 and 64 writers: store >= 0.9x the floor's events/s
TARGET_WRITERS = (16, 64)


def _setup(url: str, writers: int, shared: bool, tag: str) -> list[str]:
    """The run of each writer (one run for all when `shared`), paused."""
    with RunStore(url, root_hash=ROOT_HASH) as store:
        runs = [paused_run(store, f"{tag}-run-{n}") for n in range(1 if shared else writers)]
    return [runs[0]] * writers if shared else runs


def _launch(
    kind: str, url: str, run_ids: list[str], tag: str, seconds: float
) -> list[dict[str, Any]]:
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(len(run_ids) + 1)
    out = context.Queue()
    processes = [
        context.Process(target=write, args=(kind, url, run_id, n, tag, seconds, start, out))
        for n, run_id in enumerate(run_ids)
    ]
    for process in processes:
        process.start()
    start.wait(600)
    reports = [out.get(timeout=seconds + 600) for _ in processes]
    for process in processes:
        process.join(60)
    return sorted(reports, key=lambda report: report["worker"])


def _check(url: str, reports: list[dict[str, Any]], tag: str, store: bool) -> dict[str, int]:
    """What the database holds of the writers' runs: gaps, lost, doubled, unacknowledged
    commits (calls that failed but committed), integrity failures."""
    acknowledged: dict[str, set[str]] = {}
    for report in reports:
        acknowledged.setdefault(report["run_id"], set()).update(report.get("acknowledged", []))
    figures = Counter(gaps=0, lost=0, doubled=0, committed_unacknowledged=0, integrity=0)
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            for run_id, ids in acknowledged.items():
                count, distinct, low, high = connection.execute(
                    sqlalchemy.text(
                        "SELECT count(*), count(DISTINCT sequence), min(sequence),"
                        " max(sequence) FROM events WHERE run_id = :run"
                    ),
                    {"run": run_id},
                ).one()
                if not (count == distinct == high and low == 1):
                    figures["gaps"] += 1
                receipts = {
                    operation_id
                    for (operation_id,) in connection.execute(
                        sqlalchemy.text(
                            "SELECT operation_id FROM operations"
                            " WHERE run_id = :run AND operation_id LIKE :tag"
                        ),
                        {"run": run_id, "tag": f"{tag}-%"},
                    )
                }
                setup_events = 2  # started, paused
                figures["lost"] += len(ids - receipts)
                figures["committed_unacknowledged"] += len(receipts - ids)
                figures["doubled"] += max(0, count - setup_events - len(receipts))
    finally:
        engine.dispose()
    if store:
        with RunStore(url, root_hash=ROOT_HASH) as checker:
            for run_id in acknowledged:
                try:
                    checker.verify_integrity(run_id)
                except Exception:
                    figures["integrity"] += 1
    return dict(figures)


def _figures(reports: list[dict[str, Any]], checked: dict[str, int]) -> dict[str, Any]:
    failed = [report["failed"] for report in reports if "failed" in report]
    if failed:
        raise SystemExit(f"{len(failed)} writer(s) failed to start:\n{failed[0]}")
    latencies = sorted(ns for report in reports for ns in report["latencies_ns"])
    window_s = (
        max(report["ended_ns"] for report in reports)
        - min(report["began_ns"] for report in reports)
    ) / 1e9
    errors: Counter[str] = Counter()
    for report in reports:
        errors.update(report["errors"])
    busy = errors.pop("run-store-busy", 0)

    def quantile(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] / 1e6

    return {
        "events": len(latencies),
        "window_s": round(window_s, 3),
        "events_per_s": round(len(latencies) / window_s, 1),
        "p50_ms": round(quantile(0.50), 3),
        "p99_ms": round(quantile(0.99), 3),
        "busy": busy,
        "errors": dict(errors),
        **checked,
    }


def _configurations(engines: list[str]) -> list[tuple[str, str, int, bool]]:
    """(engine, path, writers, one shared run)"""
    plan: list[tuple[str, str, int, bool]] = []
    if "postgresql" in engines:
        plan += [("postgresql", "direct", n, False) for n in (1, 4, 16, 64)]
        plan.append(("postgresql", "direct", 16, True))
        plan += [("postgresql", "pgbouncer", n, False) for n in (1, 4, 16, 64)]
    if "sqlite" in engines:
        plan += [("sqlite", "direct", n, False) for n in (1, 2, 4)]
    return plan


def _name(engine: str, path: str, writers: int, shared: bool) -> str:
    return f"{engine}-{path}-{writers}{'-one' if shared else ''}"


def _set_max_connections(server: str, connections: int) -> None:
    from pg_bouncer import restart_server

    admin = sqlalchemy.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f"ALTER SYSTEM SET max_connections = {int(connections)}")
    admin.dispose()
    restart_server(server)


def _floor_kind(engine: str, path: str) -> str:
    if engine == "sqlite":
        return "floor-sqlite"
    return "floor-pg" if path == "direct" else "floor-pg-pooled"


def _median_row(samples: list[dict[str, Any]]) -> dict[str, Any]:
    row = {
        key: round(statistics.median(sample[key] for sample in samples), 3)
        for key in ("events_per_s", "p50_ms", "p99_ms")
    }
    for key in ("events", "busy", "gaps", "lost", "doubled", "committed_unacknowledged"):
        row[key] = sum(sample[key] for sample in samples)
    row["integrity_failures"] = sum(sample["integrity"] for sample in samples)
    errors: Counter[str] = Counter()
    for sample in samples:
        errors.update(sample["errors"])
    row["errors"] = dict(errors)
    row["rounds_events_per_s"] = [sample["events_per_s"] for sample in samples]
    return row


def main() -> None:
    parser = benchmark_arguments(
        "benchmarks.writers", "writers-results.json", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seconds", type=float, default=None, help="the measured window")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument(
        "--max-connections",
        type=int,
        default=MAX_CONNECTIONS,
        help="PostgreSQL's max_connections (0: the private server's 100)",
    )
    parser.add_argument(
        "--only",
        default=None,
        help="the configurations named, e.g. postgresql-direct-64,postgresql-direct-16-one",
    )
    arguments = parser.parse_args()
    seconds = arguments.seconds or (2.0 if arguments.quick else 5.0)
    rounds = arguments.rounds or 1
    engines = engines_of(arguments)
    plan = _configurations(engines)
    if arguments.only:
        wanted = {name.strip() for name in arguments.only.split(",")}
        plan = [entry for entry in plan if _name(*entry) in wanted]
    samples: dict[tuple[str, str, int, bool, str], list[dict[str, Any]]] = {}

    sys.path.insert(0, str(HERE.parent / "tests"))
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="writers-")))
        by_engine: dict[str, Engine] = {}
        bouncers: dict[str, str] = {}  # variant -> its database's URL through PgBouncer
        if "postgresql" in engines:
            from pg_bouncer import pgbouncer_in_front

            server = stack.enter_context(postgres_server())
            if arguments.max_connections:
                _set_max_connections(server, arguments.max_connections)
            by_engine["postgresql"] = Engine("postgresql", workdir, server)
            for variant in ("store", "floor"):
                database = by_engine["postgresql"].fresh_url()
                upgrade(database)
                pool = stack.enter_context(pgbouncer_in_front(database, pool_size=POOL_SIZE))
                bouncers[variant] = pool.url
        if "sqlite" in engines:
            by_engine["sqlite"] = Engine("sqlite", workdir, None)
        for number in range(rounds):
            for engine_name, path, writers, shared in plan:
                engine = by_engine[engine_name]
                order = ["store", "floor"]
                random.shuffle(order)
                for variant in order:
                    tag = f"r{number}-{path}-{writers}{'s' if shared else ''}-{variant}"
                    if path == "pgbouncer":
                        url = bouncers[variant]
                    else:
                        url = engine.fresh_url()
                        upgrade(url)
                    runs = _setup(url, writers, shared, tag)
                    settle(url)
                    kind = "store" if variant == "store" else _floor_kind(engine_name, path)
                    reports = _launch(kind, url, runs, tag, seconds)
                    result = _figures(reports, _check(url, reports, tag, variant == "store"))
                    samples.setdefault((engine_name, path, writers, shared, variant), []).append(
                        result
                    )
                    print(
                        f"  round {number + 1}: {engine_name} {path} {writers}"
                        f"{' on one run' if shared else ''} {variant}: "
                        f"{result['events_per_s']:.1f} events/s, p99 {result['p99_ms']:.2f} ms,"
                        f" busy {result['busy']}, lost {result['lost']},"
                        f" doubled {result['doubled']}",
                        file=sys.stderr,
                        flush=True,
                    )

    table: list[dict[str, Any]] = []
    for engine_name, path, writers, shared in plan:
        store = _median_row(samples[(engine_name, path, writers, shared, "store")])
        floor = _median_row(samples[(engine_name, path, writers, shared, "floor")])
        table.append(
            {
                "engine": engine_name,
                "path": path,
                "writers": writers,
                "runs": "one" if shared else "own",
                "store": store,
                "floor": floor,
                "ratio": round(store["events_per_s"] / floor["events_per_s"], 3),
            }
        )
    targets = [
        {
            "writers": row["writers"],
            "ratio": row["ratio"],
            "target": TARGET_RATIO,
            "met": row["ratio"] >= TARGET_RATIO,
        }
        for row in table
        if row["engine"] == "postgresql"
        and row["path"] == "direct"
        and row["runs"] == "own"
        and row["writers"] in TARGET_WRITERS
    ]

    print(f"writer processes, durable transitions, {rounds} x {seconds:g} s per configuration")
    header = (
        f"{'engine':10} {'path':9} {'writers':>7} {'runs':4} {'store ev/s':>10}"
        f" {'floor ev/s':>10} {'ratio':>6} {'p50 ms':>7} {'p99 ms':>7} {'floor p99':>9}"
        f" {'busy':>5} {'lost':>4} {'doubled':>7}"
    )
    print(header)
    for row in table:
        store, floor = row["store"], row["floor"]
        print(
            f"{row['engine']:10} {row['path']:9} {row['writers']:>7} {row['runs']:4}"
            f" {store['events_per_s']:>10.1f} {floor['events_per_s']:>10.1f}"
            f" {row['ratio']:>6.3f} {store['p50_ms']:>7.2f} {store['p99_ms']:>7.2f}"
            f" {floor['p99_ms']:>9.2f} {store['busy']:>5}"
            f" {store['lost'] + floor['lost']:>4} {store['doubled'] + floor['doubled']:>7}"
        )
        others = {**store["errors"], **{f"floor {k}": v for k, v in floor["errors"].items()}}
        if others:
            print(f"{'':32} errors: {others}")
    for target in targets:
        verdict = "met" if target["met"] else "NOT met"
        print(
            f"target: PostgreSQL {target['writers']} writers, store/floor {target['ratio']:.3f}"
            f" >= {TARGET_RATIO}: {verdict}"
        )
    document = {
        "benchmark": "writers",
        "rounds": rounds,
        "seconds_per_configuration": seconds,
        "pgbouncer_pool_size": POOL_SIZE,
        "postgresql_max_connections": arguments.max_connections or 100,
        "results": table,
        "targets": targets,
        "machine": machine(),
    }
    Path(arguments.out).write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {arguments.out}")


if __name__ == "__main__":
    main()
