"""What checkpoints cost on a large store: `python -m benchmarks.checkpoint`.

On a store of 1,000,000 events (built by bulk SQL: one run of 1,000 events made by the
library, cloned run by run with `INSERT ... SELECT`; each clone's events are valid feed
rows, numbered on from the last) on SQLite and PostgreSQL, it times:

- the first `checkpoint` (the whole tree built from the events);
- `checkpoint` after 1,000 and after 10,000 new events (only those are read and hashed);
- `inclusion_proof` (what `cadence-store prove` prints) of an event in the middle of the
  feed and of the newest, after each checkpoint.

The clones' chains do not verify (their events name the template's run id), so
`verify_checkpoint`, which also verifies every chain, is not timed here: its chain part
is `benchmarks.verify`'s.

Each call's statements and the rows it fetched are counted on the store's own engine: a
cursor event listener counts the statements, and the driver's cursor class (a subclass
counting what each fetch returns) the rows. Prints a table and writes
`benchmarks/checkpoint-results.json`. The append path is measured apart, main against
this tree side by side (`python -m benchmarks.sqlite_gap`, docs/performance.md):
`--write-path BEFORE AFTER` runs it in each tree in its own process, alternated in a
fresh random order each pair, and records the ratio of the two trees' `store_url / floor`
medians (the floor, hand-written SQL on the same disk in the same process, takes the
disk's moods out), and of `RunStore.transition`'s µs without fsync
(`benchmarks.write_path_cpu`: CPU alone), under `write_path` in the same JSON.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy
from sqlalchemy import create_engine, event, text

from cadence_store import RunStore
from cadence_store.journal.note_keys import generate_signer_key
from cadence_store.storage.feed_notifier import flush_notifiers

from .common import (
    ROOT_HASH,
    benchmark_arguments,
    engines_of,
    grow,
    machine,
    open_store,
    paused_run,
    postgres_server,
    settle,
)

TEMPLATE_EVENTS = 1_000  # the run every clone copies
CLONE_BASE = 10_000_000  # clone i is run `c{CLONE_BASE + i}`
CHUNK = 100  # clones (100,000 events) per transaction
ORIGIN = "bench.cadence-store/checkpoint"


class Counter:
    """Statements executed and rows fetched on one engine's connections."""

    def __init__(self) -> None:
        self.statements = 0
        self.rows = 0

    def reset(self) -> None:
        self.statements = 0
        self.rows = 0


COUNTER = Counter()


class CountingSqliteCursor(sqlite3.Cursor):
    def fetchone(self) -> Any:
        row = super().fetchone()
        COUNTER.rows += row is not None
        return row

    def fetchmany(self, size: int = 1) -> list[Any]:
        rows = super().fetchmany(size)
        COUNTER.rows += len(rows)
        return rows

    def fetchall(self) -> list[Any]:
        rows = super().fetchall()
        COUNTER.rows += len(rows)
        return rows


class CountingSqliteConnection(sqlite3.Connection):
    def cursor(self, factory: Any = CountingSqliteCursor) -> Any:
        return super().cursor(factory)


def _psycopg_cursor_classes() -> tuple[type, type]:
    import psycopg

    class Counting:
        def fetchone(self) -> Any:
            row = super().fetchone()  # type: ignore[misc]
            COUNTER.rows += row is not None
            return row

        def fetchmany(self, size: int = 0) -> list[Any]:
            rows = super().fetchmany(size)  # type: ignore[misc]
            COUNTER.rows += len(rows)
            return rows

        def fetchall(self) -> list[Any]:
            rows = super().fetchall()  # type: ignore[misc]
            COUNTER.rows += len(rows)
            return rows

    class Cursor(Counting, psycopg.Cursor):  # type: ignore[misc]
        pass

    class ServerCursor(Counting, psycopg.ServerCursor):  # type: ignore[misc]
        pass

    return Cursor, ServerCursor


def counted_engine(url: str) -> sqlalchemy.Engine:
    """An engine whose statements and fetched rows go to `COUNTER`."""
    if sqlalchemy.make_url(url).get_backend_name() == "sqlite":
        engine = create_engine(url, connect_args={"factory": CountingSqliteConnection})
    else:
        cursor, server_cursor = _psycopg_cursor_classes()
        engine = create_engine(url)

        @event.listens_for(engine, "connect")
        def _cursor_classes(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.cursor_factory = cursor
            dbapi_connection.server_cursor_factory = server_cursor

    @event.listens_for(engine, "after_cursor_execute")
    def _count(*_args: Any) -> None:
        COUNTER.statements += 1

    return engine


def measured(call: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    COUNTER.reset()
    started = time.perf_counter()
    value = call()
    elapsed = time.perf_counter() - started
    return value, {
        "ms": round(elapsed * 1000, 1),
        "statements": COUNTER.statements,
        "rows_read": COUNTER.rows,
    }


# -- building the store ------------------------------------------------------------------


def _series(dialect: str, first: int, count: int) -> str:
    if dialect == "postgresql":
        return f"SELECT generate_series({first}, {first + count - 1}) AS i"
    last = first + count - 1
    return (
        f"WITH RECURSIVE s(i) AS (SELECT {first} UNION ALL SELECT i + 1 FROM s"
        f" WHERE i < {last}) SELECT i FROM s"
    )


def build(url: str, events: int) -> str:
    """A store of `events` events (a multiple of `TEMPLATE_EVENTS`); the template's id."""
    store = open_store(url)
    try:
        template = paused_run(store, "checkpoint-template")
        grow(store, template, TEMPLATE_EVENTS - 2, "template")
        flush_notifiers()
    finally:
        store.close()
    engine = create_engine(url)
    dialect = engine.dialect.name
    new_id = f"('c' || ({CLONE_BASE} + s.i))"
    clones = events // TEMPLATE_EVENTS - 1
    with engine.begin() as connection:  # the template's events first, in sequence order
        connection.execute(
            text("UPDATE events SET feed_position = sequence WHERE run_id = :r"), {"r": template}
        )
    for first in range(0, clones, CHUNK):
        count = min(CHUNK, clones - first)
        series = _series(dialect, first, count)
        with engine.begin() as connection:
            connection.execute(
                text(f"""
                INSERT INTO runs (run_id, root_hash, stage, lookup_key, change_name,
                    provisional_key, state, sequence, event_hash, delivery_revision,
                    projection_json, terminal_tombstone, created_at, updated_at)
                SELECT {new_id}, r.root_hash, r.stage, {new_id}, r.change_name, NULL,
                    r.state, r.sequence, r.event_hash, r.delivery_revision,
                    replace(r.projection_json, r.run_id, {new_id}), r.terminal_tombstone,
                    r.created_at, r.updated_at
                FROM ({series}) AS s CROSS JOIN runs r WHERE r.run_id = :template"""),
                {"template": template},
            )
            connection.execute(
                text(f"""
                INSERT INTO events (run_id, sequence, type, payload_json, prior_hash,
                    event_hash, recorded_at, feed_position)
                SELECT {new_id}, e.sequence, e.type, e.payload_json, e.prior_hash,
                    e.event_hash, e.recorded_at,
                    {TEMPLATE_EVENTS} * (s.i + 1) + e.sequence
                FROM ({series}) AS s CROSS JOIN events e WHERE e.run_id = :template"""),
                {"template": template},
            )
        print(f"  {(first + count + 1) * TEMPLATE_EVENTS:,} events", file=sys.stderr, flush=True)
    with engine.begin() as connection:
        connection.execute(text("ANALYZE"))
    engine.dispose()
    return template


@contextmanager
def store_url(engine: str, workdir: Path) -> Iterator[str]:
    if engine == "sqlite":
        yield f"sqlite:///{workdir}/checkpoint.sqlite3"
        return
    with postgres_server() as url:
        yield url


# -- measuring ---------------------------------------------------------------------------


def measure(url: str, events: int) -> dict[str, Any]:
    started = time.monotonic()
    template = build(url, events)
    built_s = round(time.monotonic() - started, 1)
    settle(url)
    key = generate_signer_key(ORIGIN)
    engine = counted_engine(url)
    store = RunStore(engine, root_hash=ROOT_HASH)
    middle = f"c{CLONE_BASE + events // TEMPLATE_EVENTS // 2}"
    result: dict[str, Any] = {"events": events, "build_s": built_s, "steps": {}}
    try:
        signed, result["steps"]["first checkpoint"] = measured(lambda: store.checkpoint(key))
        assert signed.size == events, (signed.size, events)
        for added in (1_000, 10_000):
            grow(store, template, added, f"added-{added}")
            flush_notifiers()
            settle(url)
            signed, cost = measured(lambda: store.checkpoint(key))
            result["steps"][f"checkpoint after {added:,} new events"] = cost
            size = signed.size
            _, cost = measured(lambda: store.inclusion_proof(middle, 500))
            result["steps"][f"prove, middle of {size:,}"] = cost
            _, cost = measured(lambda: store.inclusion_proof(template))
            result["steps"][f"prove, newest of {size:,}"] = cost
    finally:
        store.close()
        engine.dispose()
    return result


def table(results: dict[str, Any]) -> str:
    engines = list(results["engines"])
    lines = [
        f"checkpoints on a store of {results['events']:,} events",
        "",
        "| step | "
        + " | ".join(f"{e} ms | {e} statements | {e} rows read" for e in engines)
        + " |",
        "|---|" + "---|---|---|" * len(engines),
    ]
    steps = list(next(iter(results["engines"].values()))["steps"])
    for step in steps:
        cells = []
        for engine in engines:
            cost = results["engines"][engine]["steps"][step]
            cells += [f"{cost['ms']:,}", f"{cost['statements']:,}", f"{cost['rows_read']:,}"]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_path(before: Path, after: Path, pairs: int, rounds: int) -> dict[str, Any]:
    """`benchmarks.sqlite_gap` in each tree, `pairs` times, alternated."""
    found: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="cadence-write-path-") as workdir:
        for pair in range(pairs):
            order = [("before", before), ("after", after)]
            random.shuffle(order)
            for name, tree in order:
                out = Path(workdir) / f"{name}-{pair}.json"
                environment = {
                    **os.environ,
                    "PYTHONPATH": str(tree),
                    "PYTHONDONTWRITEBYTECODE": "1",
                }
                subprocess.run(
                    [sys.executable, "-m", "benchmarks.sqlite_gap", "--rounds", str(rounds),
                     "--out", str(out)],
                    cwd=tree, env=environment, check=True, stdout=subprocess.DEVNULL,
                )  # fmt: skip
                run = json.loads(out.read_text(encoding="utf-8"))
                found[name].append(
                    {
                        "store_url_ms": run["median_ms"]["store_url"],
                        "floor_ms": run["median_ms"]["floor"],
                        "store_url_cpu_ms": run["cpu_ms"]["store_url"],
                        "store_url_over_floor": run["ratios"]["store_url/floor"],
                    }
                )
                cpu = subprocess.run(
                    [sys.executable, "-m", "benchmarks.write_path_cpu", "--rounds", "30"],
                    cwd=tree, env=environment, check=True, capture_output=True, text=True,
                )  # fmt: skip
                found[name][-1].update(_layer_microseconds(cpu.stdout))
                print(f"  write path, {name} {pair + 1}: {found[name][-1]}", file=sys.stderr)

    def median(name: str, key: str) -> float:
        return statistics.median(run[key] for run in found[name])

    return {
        "before": str(before),
        "after": str(after),
        "pairs": pairs,
        "rounds": rounds,
        "runs": found,
        "store_url_over_floor": {n: median(n, "store_url_over_floor") for n in found},
        "ratio_after_before": round(
            median("after", "store_url_over_floor") / median("before", "store_url_over_floor"), 4
        ),
        "cpu_ratio_after_before": round(
            median("after", "store_url_cpu_ms") / median("before", "store_url_cpu_ms"), 4
        ),
        "no_fsync_transition_ratio_after_before": round(
            median("after", "transition_us") / median("before", "transition_us"), 4
        ),
    }


def _layer_microseconds(table_text: str) -> dict[str, float]:
    """`RunStore.transition` and the floor's µs from `benchmarks.write_path_cpu`'s table
    (SQLite without fsync: CPU alone)."""
    found = {}
    for line in table_text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] in {"RunStore.transition", "floor"}:
            key = "transition_us" if cells[0] == "RunStore.transition" else "floor_us"
            found[key] = float(cells[1])
    return found


def main() -> None:
    parser = benchmark_arguments(
        "benchmarks.checkpoint", "checkpoint-results.json", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument(
        "--write-path",
        nargs=2,
        type=Path,
        metavar=("BEFORE", "AFTER"),
        help="only the append path: benchmarks.sqlite_gap in two trees, side by side",
    )
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=600)
    arguments = parser.parse_args()
    out = Path(arguments.out)
    if arguments.write_path:
        results = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
        before, after = arguments.write_path
        results["write_path"] = write_path(before, after, arguments.pairs, arguments.rounds)
        print(json.dumps(results["write_path"], indent=2))
        out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        return
    events = 20_000 if arguments.quick else arguments.events
    events -= events % TEMPLATE_EVENTS
    results: dict[str, Any] = {"events": events, "machine": machine(), "engines": {}}
    for engine in engines_of(arguments):
        with (
            tempfile.TemporaryDirectory(prefix="cadence-checkpoint-") as workdir,
            store_url(engine, Path(workdir)) as url,
        ):
            print(f"{engine}: building {events:,} events", file=sys.stderr, flush=True)
            results["engines"][engine] = measure(url, events)
        print(json.dumps(results["engines"][engine], indent=2), file=sys.stderr)
    print(table(results))
    if out.exists():  # keep the write path's figures
        results = json.loads(out.read_text(encoding="utf-8")) | results
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
