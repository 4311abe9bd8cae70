"""The web view's render times: `python -m benchmarks.web [--runs N] [--engines ...]`.

Renders `/`, each filter, a deep page of the runs list (and the page before it, by
keyset), and a 5,000-event run's first and last pages of events through the ASGI app in
process (Starlette's TestClient: the server's work, no network; the heap frozen after
start-up as `cadence-store serve` freezes it), and prints p50/p95 per page and engine;
also times `verify_integrity` of the 5,000-event run alone (every page of a run
verifies its whole chain). Writes `benchmarks/web-results.json`.

The store: a few runs written by the library (one per state, and the 5,000-event run),
then cloned in bulk by SQL to `--runs` runs of about ten events each (ids `b1...`). The
clones' hashes are their template's, so only the real runs verify; the list pages read
the clones' rows as any other. A SQLite store is cached under `--cache` by size; the
PostgreSQL one is built again in a throwaway cluster each time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from .common import HERE, grow, machine, open_store, postgres_server

warnings.filterwarnings("ignore", message=".*httpx.*")  # the TestClient's notice

from starlette.testclient import TestClient  # noqa: E402

from cadence_store import RunStore  # noqa: E402
from cadence_store.web import create_app  # noqa: E402
from cadence_store.web.process import freeze_startup_heap  # noqa: E402

RESULTS = HERE / "web-results.json"
CLONE_BASE = 10_000_000  # clone i is run `b{CLONE_BASE + i}`: fixed width, sorted by i
CHUNK = 100_000
LONG_RUN_EVENTS = 5_000
# templates: (final state, transitions after the start); ten events a run on average
PATHS = [
    ("created", []),
    ("validating-delivery", ["validating-delivery"]),
    ("ready", ["validating-delivery", "ready"]),
    ("queued", ["validating-delivery", "ready", "queued"]),
    ("running", ["validating-delivery", "ready", "queued", "running"]),
    ("paused", ["validating-delivery", "ready", "queued", "running"] + ["paused"] * 40),
]


def _templates(store: RunStore) -> list[str]:
    ids = []
    for number, (_, path) in enumerate(PATHS):
        run = store.start_run(
            "abel-implement", change=f"template-{number}", operation_id=f"t{number}"
        )
        for step, state in enumerate(path):
            store.transition(
                run.run_id,
                state,
                operation_id=f"t{number}-{step}",
                code="p" if state == "paused" else None,
            )
        ids.append(run.run_id)
    return ids


def _series(dialect: str, first: int, count: int) -> str:
    if dialect == "postgresql":
        return f"SELECT generate_series({first}, {first + count - 1}) AS i"
    return f"WITH RECURSIVE s(i) AS (SELECT {first} UNION ALL SELECT i + 1 FROM s WHERE i < {first + count - 1}) SELECT i FROM s"


def _clone(url: str, templates: list[str], runs: int) -> None:
    """`runs` clones of the templates (clone i of template i % len), by INSERT ... SELECT."""
    engine = create_engine(url)
    dialect = engine.dialect.name
    with engine.begin() as connection:
        connection.execute(
            text("CREATE TEMPORARY TABLE IF NOT EXISTS web_templates (k INTEGER, run_id TEXT)")
            if dialect == "sqlite"
            else text("CREATE TABLE IF NOT EXISTS web_templates (k INTEGER, run_id TEXT)")
        )
        connection.execute(text("DELETE FROM web_templates"))
        for k, run_id in enumerate(templates):
            connection.execute(
                text("INSERT INTO web_templates VALUES (:k, :r)"), {"k": k, "r": run_id}
            )
    kinds = len(templates)
    new_id = f"('b' || ({CLONE_BASE} + s.i))"
    for first in range(0, runs, CHUNK):
        count = min(CHUNK, runs - first)
        series = _series(dialect, first, count)
        with engine.begin() as connection:
            if dialect == "sqlite":
                connection.execute(
                    text(
                        "CREATE TEMPORARY TABLE IF NOT EXISTS web_templates (k INTEGER, run_id TEXT)"
                    )
                )
                connection.execute(text("DELETE FROM web_templates"))
                for k, run_id in enumerate(templates):
                    connection.execute(
                        text("INSERT INTO web_templates VALUES (:k, :r)"), {"k": k, "r": run_id}
                    )
            connection.execute(
                text(f"""
                INSERT INTO runs (run_id, root_hash, stage, lookup_key, change_name, provisional_key,
                    state, sequence, event_hash, delivery_revision, projection_json,
                    terminal_tombstone, created_at, updated_at)
                SELECT {new_id}, r.root_hash, r.stage, {new_id}, 'change-' || (s.i % 1000),
                    NULL, r.state, r.sequence, r.event_hash, r.delivery_revision,
                    replace(replace(r.projection_json, r.run_id, {new_id}), r.change_name,
                        'change-' || (s.i % 1000)),
                    r.terminal_tombstone, r.created_at + s.i * 1000, r.updated_at + s.i * 1000
                FROM ({series}) AS s
                JOIN web_templates t ON t.k = s.i % {kinds}
                JOIN runs r ON r.run_id = t.run_id""")
            )
            connection.execute(
                text(f"""
                INSERT INTO events (run_id, sequence, type, payload_json, prior_hash,
                    event_hash, recorded_at, feed_position)
                SELECT {new_id}, e.sequence, e.type, replace(e.payload_json, e.run_id, {new_id}),
                    e.prior_hash, e.event_hash, e.recorded_at + s.i * 1000,
                    1000000 + s.i * 64 + e.sequence
                FROM ({series}) AS s
                JOIN web_templates t ON t.k = s.i % {kinds}
                JOIN events e ON e.run_id = t.run_id""")
            )
        print(f"  cloned {first + count:,} runs", file=sys.stderr, flush=True)
    with engine.begin() as connection:
        connection.execute(text("ANALYZE"))
    engine.dispose()


def build(url: str, runs: int) -> str:
    """Build the store at `url`; the id of its 5,000-event run."""
    store = open_store(url)
    try:
        templates = _templates(store)
        long_run = store.start_run("abel-implement", change="long-run", operation_id="long")
        store.transition(long_run.run_id, "paused", operation_id="long-pause", code="p")
        grow(store, long_run.run_id, LONG_RUN_EVENTS - 2, "long")
    finally:
        store.close()
    _clone(url, templates, runs)
    return long_run.run_id


def _long_run_id(url: str) -> str:
    engine = create_engine(url)
    with engine.connect() as connection:
        found = connection.execute(
            text("SELECT run_id FROM runs WHERE change_name = 'long-run'")
        ).scalar_one()
    engine.dispose()
    return str(found)


@contextmanager
def store_of(engine: str, runs: int, cache: Path) -> Iterator[tuple[str, str]]:
    """(url, the long run's id) of a built store of `runs` clones."""
    if engine == "sqlite":
        cache.mkdir(parents=True, exist_ok=True)
        path = cache / f"web-{runs}.sqlite3"
        url = f"sqlite:///{path}"
        if not (cache / f"web-{runs}.done").exists():
            path.unlink(missing_ok=True)
            started = time.monotonic()
            build(url, runs)
            (cache / f"web-{runs}.done").write_text(f"{time.monotonic() - started:.0f} s\n")
        yield url, _long_run_id(url)
        return
    with postgres_server() as url:
        started = time.monotonic()
        long_run = build(url, runs)
        print(f"  built in {time.monotonic() - started:.0f} s", file=sys.stderr)
        yield url, long_run


def pages(runs: int, long_run: str) -> dict[str, str]:
    """The paths measured: `/`, each filter, a deep page, the long run's page."""
    deep_page = min(10_000, max(1, runs // 50 // 2))
    after = f"b{CLONE_BASE + (deep_page - 1) * 50 - 1}"
    return {
        "/": "/",
        "state": "/?state=running",
        "stage": "/?stage=abel-implement",
        "change": "/?change=change-7",
        "id prefix": f"/?id=b{CLONE_BASE // 10 + 1}00",
        "updated range": "/?updated_after=1&updated_before=99999999999999",
        f"page {deep_page:,}": f"/?after={after}",
        f"page {deep_page:,}, back": f"/?before=b{CLONE_BASE + deep_page * 50}",
        f"run, {LONG_RUN_EVENTS:,} events": f"/runs/{long_run}",
        f"run, {LONG_RUN_EVENTS:,} events, last page": (
            f"/runs/{long_run}?before={LONG_RUN_EVENTS + 1}"
        ),
    }


def verify_ms(store: RunStore, run_id: str, rounds: int) -> dict[str, float]:
    """p50 and p95 (ms) of `verify_integrity(run_id)`, after one warm-up."""
    store.verify_integrity(run_id)
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        store.verify_integrity(run_id)
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {
        "p50_ms": round(statistics.median(samples), 1),
        "p95_ms": round(samples[min(len(samples) - 1, int(len(samples) * 0.95))], 1),
    }


def measure(client: TestClient, path: str, rounds: int) -> dict[str, float]:
    """p50 and p95 (ms) of `rounds` renders of `path`, after one warm-up."""
    assert client.get(path).status_code == 200, path
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        response = client.get(path)
        samples.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, path
    samples.sort()
    return {
        "p50_ms": round(statistics.median(samples), 1),
        "p95_ms": round(samples[min(len(samples) - 1, int(len(samples) * 0.95))], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000, help="cloned runs (default 100,000)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument(
        "--cache", type=Path, default=Path.home() / ".cache" / "cadence-store-bench"
    )
    arguments = parser.parse_args()
    results: dict[str, Any] = {
        "runs": arguments.runs,
        "rounds": arguments.rounds,
        "machine": machine(),
        "engines": {},
    }
    for engine in arguments.engines.split(","):
        with store_of(engine, arguments.runs, arguments.cache) as (url, long_run):
            store = RunStore(url)
            try:
                started = time.perf_counter()
                counts = store.counts()
                counts_ms = round((time.perf_counter() - started) * 1000, 1)
                results["engines"][engine] = {
                    "runs": counts.runs,
                    "events": counts.events,
                    "counts_ms": counts_ms,
                    "verify_long_run": verify_ms(store, long_run, arguments.rounds),
                    "pages": {},
                }
                with TestClient(create_app(store)) as client:
                    client.get("/healthz")  # the app started, as `serve` has it when it
                    freeze_startup_heap()  # freezes the heap it started with
                    for name, path in pages(arguments.runs, long_run).items():
                        results["engines"][engine]["pages"][name] = measure(
                            client, path, arguments.rounds
                        )
                        print(
                            f"  {engine} {name}: {results['engines'][engine]['pages'][name]}",
                            file=sys.stderr,
                            flush=True,
                        )
            finally:
                store.close()
    print(f"\nweb view render times, {arguments.rounds} renders each (ms)")
    engines = list(results["engines"])
    print(f"{'page':<34}" + "".join(f"{e + ' p50':>16}{e + ' p95':>16}" for e in engines))
    names = list(next(iter(results["engines"].values()))["pages"])
    for name in names:
        row = "".join(
            f"{results['engines'][e]['pages'][name]['p50_ms']:>16}{results['engines'][e]['pages'][name]['p95_ms']:>16}"
            for e in engines
        )
        print(f"{name:<34}{row}")
    for e in engines:
        verify = results["engines"][e]["verify_long_run"]
        print(
            f"{e}: {results['engines'][e]['runs']:,} runs, {results['engines'][e]['events']:,} events;"
            f" verify_integrity of the {LONG_RUN_EVENTS:,}-event run p50 {verify['p50_ms']} ms,"
            f" p95 {verify['p95_ms']} ms"
        )
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
