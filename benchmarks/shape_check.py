"""What the shape check costs at open: `python -m benchmarks.shape_check [--engines ...]`.

Per engine, on a store at head: `shape_differences` on an open connection (the catalogue
reads alone), and opening a `RunStore` on an engine that has not been checked yet (first
open: connect, head check, shape check) against one whose check is cached. Medians of
`--rounds` (20) runs, in milliseconds; printed as a table and written as JSON.

A first open on a new engine also pays for SQLAlchemy compiling its catalogue queries for
that engine (its statement cache is per engine): most of the gap between `first_open_ms`
and `first_connect_ms + shape_differences_ms` on PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import sqlalchemy

from cadence_store import RunStore, upgrade
from cadence_store.storage.shape import shape_differences

from .common import ROOT_HASH, Engine, postgres_server

HERE = Path(__file__).resolve().parent


def _median_ms(run: Callable[[], object], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        samples.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(samples), 3)


def measure(url: str, rounds: int) -> dict[str, float]:
    upgrade(url)
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            differences = shape_differences(connection)
            assert not differences, differences
            check = _median_ms(lambda: shape_differences(connection), rounds)
            connection.rollback()

        def first_open() -> None:
            fresh = sqlalchemy.create_engine(url)
            RunStore(fresh, root_hash=ROOT_HASH).close()
            fresh.dispose()

        def first_connect() -> None:
            fresh = sqlalchemy.create_engine(url)
            with fresh.connect() as connection:
                connection.exec_driver_sql("SELECT 1")
            fresh.dispose()

        RunStore(engine, root_hash=ROOT_HASH).close()  # checked once: cached from now on
        cached = _median_ms(lambda: RunStore(engine, root_hash=ROOT_HASH).close(), rounds)
        first = _median_ms(first_open, rounds)
        connect = _median_ms(first_connect, rounds)
    finally:
        engine.dispose()
    return {
        "shape_differences_ms": check,
        "first_connect_ms": connect,
        "first_open_ms": first,
        "cached_open_ms": cached,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", default=str(HERE / "shape_check.json"))
    args = parser.parse_args(argv)
    engines = [name.strip() for name in args.engines.split(",") if name.strip()]
    results: dict[str, Any] = {"rounds": args.rounds, "engines": {}}
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cadence-shape-")))
        pg_url = stack.enter_context(postgres_server()) if "postgresql" in engines else None
        for name in engines:
            url = Engine(name, workdir, pg_url).fresh_url()
            results["engines"][name] = measure(url, args.rounds)
    columns = ["shape_differences_ms", "first_connect_ms", "first_open_ms", "cached_open_ms"]
    print(f"{'engine':<12}" + "".join(f"{column:>22}" for column in columns))
    for name, row in results["engines"].items():
        print(f"{name:<12}" + "".join(f"{row[column]:>22.3f}" for column in columns))
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
