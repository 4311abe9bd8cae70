"""What every benchmark shares: engines, stores, timing, and interleaving.

This machine is shared and its disk's fsync is bimodal (about 0.15 ms, then about 4 ms
for stretches of seconds), so compared variants are never timed one after the other:
`interleave` runs them in a fresh random order in every round and reports medians, and a
write+fsync of the same disk (`FsyncReference`) runs among them, so that a slow stretch
shows in its own row instead of passing for the code's cost.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import random
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy

import cadence_store
from cadence_store import RunStore, upgrade

from .floor import PostgresFloor, SqliteFloor

HERE = Path(__file__).resolve().parent
ROOT_HASH = "ab" * 32
SETTLE_S = 1.0  # after a long call (bulk loading, checkpoints), before timing again
LONG_CALL_S = 0.25  # a call this long (a bulk load, a checkpoint) is followed by a settle


def benchmark_arguments(
    module: str, out: str, *, description: str | None = None, before: bool = False
) -> argparse.ArgumentParser:
    """The options every benchmark takes: `--quick`, `--engines`, `--out` (default
    `benchmarks/<out>`), and with `before`, `--before DIR` (an older tree to compare)."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, a shorter run")
    parser.add_argument("--engines", default="sqlite,postgresql")
    if before:
        parser.add_argument("--before", type=Path, default=None)
    parser.add_argument("--out", default=str(HERE / out))
    return parser


def engines_of(arguments: argparse.Namespace) -> list[str]:
    """The engine names of `--engines` (comma-separated)."""
    return [name.strip() for name in arguments.engines.split(",") if name.strip()]


class Engine:
    """Fresh databases of one engine kind for the benchmark's workloads."""

    def __init__(self, name: str, workdir: Path, pg_url: str | None) -> None:
        self.name = name
        self.workdir = workdir
        self.pg_url = pg_url
        self.count = 0

    def fresh_url(self) -> str:
        self.count += 1
        if self.name == "sqlite":
            return f"sqlite:///{self.workdir}/bench-{self.count}.sqlite3"
        assert self.pg_url is not None
        database = f"bench_{os.getpid()}_{self.count}"
        admin = sqlalchemy.create_engine(self.pg_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{database}"')
        admin.dispose()
        return (
            sqlalchemy.make_url(self.pg_url)
            .set(database=database)
            .render_as_string(hide_password=False)
        )

    def floor(self, url: str, *, prepare_threshold: int | None = 5) -> Any:
        """The hand-written floor on `url`; PostgreSQL: with psycopg's `prepare_threshold`."""
        if self.name == "sqlite":
            return SqliteFloor(sqlalchemy.make_url(url).database or "")
        plain = sqlalchemy.make_url(url).set(drivername="postgresql")
        return PostgresFloor(
            plain.render_as_string(hide_password=False), prepare_threshold=prepare_threshold
        )


@contextmanager
def postgres_server() -> Iterator[str]:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from pg_cluster import pg_available, throwaway_cluster

    available, reason = pg_available()
    if not available:
        raise SystemExit(f"PostgreSQL is not available: {reason}")
    with throwaway_cluster() as url:
        yield url


def open_store(url: str) -> RunStore:
    upgrade(url)
    return RunStore(url, root_hash=ROOT_HASH)


def paused_run(store: RunStore, tag: str) -> str:
    key = hashlib.sha256(tag.encode()).hexdigest()
    run = store.start_run("abel-design", provisional_key=key, operation_id=f"start-{tag}")
    store.transition(run.run_id, "paused", operation_id=f"pause-{tag}")
    return run.run_id


def grow(store: RunStore, run_id: str, events: int, tag: str) -> None:
    """Append `events` transitions quickly (many per unit of work)."""
    done = 0
    while done < events:
        batch = min(5_000, events - done)
        with store.unit_of_work() as uow:
            for index in range(done, done + batch):
                uow.runs.transition(run_id, "paused", operation_id=f"g-{tag}-{index}", code="grow")
        done += batch


def settle(*urls: str) -> None:
    """Let the disk and the database's background writers catch up after bulk work.

    PostgreSQL databases among `urls` are brought to the state autovacuum would leave a
    store in use in (VACUUM ANALYZE), so that the writes measured do not pay for the bulk
    load's pending work. No CHECKPOINT: right before a measurement it would make every
    page's first write log a full image (measured: start_run at 100,000 runs 1.55x the
    cost at 200 after one, 1.09-1.31x without)."""
    for url in urls:
        if sqlalchemy.make_url(url).get_backend_name() != "postgresql":
            continue
        engine = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.exec_driver_sql("VACUUM ANALYZE")
        finally:
            engine.dispose()
    time.sleep(SETTLE_S)


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def wall_seconds(call: Callable[[int], object], n: int) -> float:
    """`interleave`'s default measure: the call's wall-clock seconds."""
    started = time.perf_counter()
    call(n)
    return time.perf_counter() - started


Sample = TypeVar("Sample", float, tuple[float, float])


def interleave(
    variants: dict[str, Callable[[int], object]],
    *,
    rounds: int,
    per_round: int,
    measure: Callable[[Callable[[int], object], int], Sample] = wall_seconds,  # type: ignore[assignment]
) -> dict[str, list[Sample]]:
    """What `measure` says of each call of each variant (its wall seconds, unless told
    otherwise; a pair's first value is its wall seconds). Each round runs every variant
    `per_round` times, the variants in a fresh random order; `call(n)` gets a number
    unique in the run (for operation ids). A call longer than `LONG_CALL_S` is followed
    by a settle pause."""
    samples: dict[str, list[Sample]] = {name: [] for name in variants}
    counter = 0
    for _ in range(rounds):
        order = list(variants)
        random.shuffle(order)
        for name in order:
            call = variants[name]
            for _ in range(per_round):
                counter += 1
                sample = measure(call, counter)
                samples[name].append(sample)
                elapsed = sample if isinstance(sample, float) else sample[0]
                if elapsed > LONG_CALL_S:
                    settle()
    return samples


class FsyncReference:
    """Write 4 KiB and fsync it, in the directory the databases live in: what the disk
    alone costs, timed among the variants."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / "fsync-reference.bin"
        self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT, 0o600)
        self._block = os.urandom(4096)

    def __call__(self, _n: int) -> None:
        os.pwrite(self._fd, self._block, 0)
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)
        self._path.unlink(missing_ok=True)


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "sqlalchemy": sqlalchemy.__version__,
        "cadence_store": cadence_store.__version__,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
