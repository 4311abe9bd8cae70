"""The stores `benchmarks.scale` measures: built through the library's write path, cached.

A store of `runs` runs and about `events` events is written by `RunStore.unit_of_work()`
(`start_run`, `bind_delivery`, `transition`, `acquire_lease`/`commit_lease`/
`interrupt_lease`, a few hundred calls per unit of work), so every chain, receipt and
binding is the library's own and every run verifies. Proportions (seeded, the same at
every size): 0.1 % of the runs carry about 40 % of the events (about 4,000 each); the
rest are short (1 + a geometric number of transitions, about 6 events on average); 70 %
`abel-implement`, 30 % `abel-design`, two thirds of those on a provisional key, every other run a change name;
60 % bound to gate-a (20 % also to gate-b); 30 % hold a committed lease, 3 % a live one,
1 % an interrupted one; 60 % end in a terminal state. Two runs are named for the calls:
change `scale-long-5000` (5,000 events) and `scale-short-50` (50 events). The clock moves
one minute per call from 2020-09-13, so `updated_at` spans years.

The PostgreSQL store is written the same way, by two processes (each its share of the
same planned runs, so the proportions are the same): about 2,000 events/s on this
two-core machine, where `copy_store` of the SQLite store took 725.

Cache: SQLite, a file `scale-<head revision>-<runs>.sqlite3` under
~/.cache/cadence-store-bench (copied to a work file before each measurement, so the
cached one stays as built); PostgreSQL, a `pg_dump --format=custom` of the built database
beside it, restored into the benchmark's throwaway cluster (`pg_restore --jobs 2`). A
`.json` file beside each says how the store was built and how long it took.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy

from cadence_store import RunStore, upgrade
from cadence_store.journal.states import LEGAL_TRANSITIONS, TERMINAL_STATES
from cadence_store.storage.schema import head_revision

from .common import ROOT_HASH

CACHE = Path.home() / ".cache" / "cadence-store-bench"
LONG_CHANGE = "scale-long-5000"
SHORT_CHANGE = "scale-short-50"
LONG_EVENTS = 5_000
SHORT_EVENTS = 50
HEAVY_SHARE_OF_RUNS = 0.001
HEAVY_SHARE_OF_EVENTS = 0.4
CALLS_PER_UNIT = 400  # journal calls per unit of work while building
START_MS = 1_600_000_000_000
STEP_MS = 60_000
SEED = 43
POSTGRES_WRITERS = 2  # processes writing the PostgreSQL store (the server takes both)


@dataclass(frozen=True)
class RunPlan:
    """One run to write: its number, how many events, and its name if it has one."""

    index: int
    events: int
    change: str | None


def plans(runs: int, events: int) -> list[RunPlan]:
    """Every run of a store of `runs` runs and about `events` events, in writing order."""
    rng = random.Random(SEED)
    heavy = max(2, round(runs * HEAVY_SHARE_OF_RUNS))
    heavy_each = max(1_000, round((events * HEAVY_SHARE_OF_EVENTS - LONG_EVENTS) / (heavy - 1)))
    short_runs = runs - heavy - 1
    short_mean = max(
        1.0, (events - LONG_EVENTS - heavy_each * (heavy - 1) - SHORT_EVENTS) / short_runs
    )
    # heavy runs spread evenly through the writing order (years of runs, a few long ones)
    heavy_at = {round(i * runs / heavy) + 1: i for i in range(heavy)}
    found: list[RunPlan] = []
    for index in range(runs):
        if index in heavy_at:
            first = heavy_at[index] == 0
            count = LONG_EVENTS if first else heavy_each
            found.append(RunPlan(index, count, LONG_CHANGE if first else None))
        elif index == 0:
            found.append(RunPlan(index, SHORT_EVENTS, SHORT_CHANGE))
        else:
            # 1 + geometric transitions with the mean that fills the rest of the events
            p = 1.0 / short_mean
            count = 1
            while rng.random() > p and count < 60:
                count += 1
            found.append(RunPlan(index, count, None))
    return found


class Writer:
    """Writes planned runs through one RunStore, `CALLS_PER_UNIT` calls per unit of work."""

    def __init__(self, url: str) -> None:
        self.now = START_MS
        self.store = RunStore(url, root_hash=ROOT_HASH, clock=self.tick)
        self.rng = random.Random(SEED + 1)
        self.events = 0

    def tick(self) -> int:
        self.now += STEP_MS
        return self.now

    def write(self, batch: list[RunPlan]) -> None:
        with self.store.unit_of_work() as uow:
            for plan in batch:
                self._run(uow.runs, plan)

    def _run(self, runs: Any, plan: RunPlan) -> None:
        rng, i = self.rng, plan.index
        stage = "abel-design" if rng.random() < 0.3 else "abel-implement"
        provisional = plan.change is None and stage == "abel-design" and rng.random() < 0.67
        change = None if provisional else plan.change or f"change-{i:07d}"
        key = f"{i:064x}" if provisional else None
        run_id = runs.start_run(
            stage, change=change, provisional_key=key, operation_id=f"scale-start-{i}"
        ).run_id
        state, left = "created", plan.events - 1
        roll = rng.random()
        lease = None
        if roll < 0.34:
            lease = runs.acquire_lease(run_id, f"scale-lease-{i}", 3_600_000)
        if left >= 2 and rng.random() < 0.6:
            runs.bind_delivery(run_id, "gate-a", 1, f"{i:064x}", operation_id=f"scale-a-{i}")
            left -= 1
            if left >= 2 and rng.random() < 0.33:
                runs.bind_delivery(run_id, "gate-b", 1, f"{i:063x}b", operation_id=f"scale-b-{i}")
                left -= 1
        finish = rng.random() < 0.6
        if lease is not None:
            self._end_lease(runs, lease, roll)
        for step in range(left):
            last = step == left - 1
            ending = [s for s in LEGAL_TRANSITIONS[state] if s in TERMINAL_STATES]
            if last and finish and ending:
                target = rng.choice(ending)
            elif plan.events > 100:
                target = "paused"  # a long run: a worker pausing and resuming, thousands of times
            else:
                target = rng.choice(
                    [s for s in LEGAL_TRANSITIONS[state] if s not in TERMINAL_STATES]
                )
            runs.transition(
                run_id,
                target,
                operation_id=f"scale-t-{i}-{step}",
                code="scale" if target == "paused" else None,
            )
            state = target
        self.events += plan.events

    @staticmethod
    def _end_lease(runs: Any, lease: Any, roll: float) -> None:
        if roll < 0.30:
            runs.commit_lease(lease, {"done": True})
        elif roll < 0.31:
            runs.interrupt_lease(lease)
        # else: a live lease (3 %)

    def close(self) -> None:
        self.store.close()


def _shares(runs: int, events: int, writers: int) -> Iterator[tuple[int, RunPlan]]:
    """Each planned run with the writer that writes it: the one with the fewest events so
    far (by run number alone, one writer got most of the long runs and wrote alone)."""
    loads = [0] * writers
    for plan in plans(runs, events):
        share = loads.index(min(loads))
        loads[share] += plan.events
        yield share, plan


def _write_share(url: str, runs: int, events: int, share: int, writers: int) -> int:
    """Write this writer's share of the planned runs (`_shares`); the events written."""
    writer = Writer(url)
    started = time.monotonic()
    try:
        batch: list[RunPlan] = []
        calls, shown = 0, 0
        for owner, plan in _shares(runs, events, writers):
            if owner != share:
                continue
            batch.append(plan)
            calls += plan.events
            if calls >= CALLS_PER_UNIT:
                writer.write(batch)
                batch, calls = [], 0
                if plan.index >= shown + 10_000 * writers:
                    shown = plan.index
                    elapsed = time.monotonic() - started
                    print(
                        f"  writer {share}: run {shown:,}, {writer.events:,} events, "
                        f"{elapsed:.0f} s",
                        file=sys.stderr,
                        flush=True,
                    )
        if batch:
            writer.write(batch)
        return writer.events
    finally:
        writer.close()


def build(url: str, runs: int, events: int, writers: int = 1) -> dict[str, Any]:
    """Write the store at `url` (upgraded to head first) with `writers` processes, each
    its share of the runs; what was written and how long."""
    upgrade(url)
    started = time.monotonic()
    if writers == 1:
        _write_share(url, runs, events, 0, 1)
    else:
        context = multiprocessing.get_context("spawn")
        with context.Pool(writers) as pool:
            pool.starmap(
                _write_share, [(url, runs, events, share, writers) for share in range(writers)]
            )
    with RunStore(url) as store:
        counts = store.counts()
    _analyze(url)
    processes = (
        "one process" if writers == 1 else f"{writers} processes, each its share of the runs"
    )
    return {
        "method": "the library's write path (RunStore.unit_of_work, 400 calls per unit; "
        f"{processes})",
        "build_s": round(time.monotonic() - started, 1),
        "runs": counts.runs,
        "events": counts.events,
        "operations": counts.operations,
        "bindings": counts.bindings,
    }


def cache_stem(runs: int) -> Path:
    return CACHE / f"scale-{head_revision()}-{runs}"


def sqlite_store(runs: int, events: int, workdir: Path) -> tuple[str, dict[str, Any]]:
    """A work copy of the cached SQLite store of this size (built first if absent)."""
    stem = cache_stem(runs)
    cached, about = stem.with_suffix(".sqlite3"), stem.with_suffix(".sqlite3.json")
    if not about.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{cached}{suffix}").unlink(missing_ok=True)
        print(f"building {runs:,} runs on sqlite ({cached})", file=sys.stderr, flush=True)
        about.write_text(json.dumps(build(f"sqlite:///{cached}", runs, events)) + "\n")
    work = workdir / cached.name
    shutil.copyfile(cached, work)
    facts = json.loads(about.read_text())
    return f"sqlite:///{work}", {**facts, "cache": str(cached), "cached": True}


def _pg_tool_url(url: str) -> str:
    return (
        sqlalchemy.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    )


def postgres_store(
    server_url: str, runs: int, events: int, workdir: Path
) -> tuple[str, dict[str, Any]]:
    """A database of this size in the cluster at `server_url`: restored from the cached
    dump, or built by the library's write path (`build`), then dumped."""
    stem = cache_stem(runs)
    dump, about = stem.with_suffix(".pgdump"), stem.with_suffix(".pgdump.json")
    database = f"scale_{runs}"
    admin = sqlalchemy.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{database}"')
    admin.dispose()
    url = (
        sqlalchemy.make_url(server_url).set(database=database).render_as_string(hide_password=False)
    )
    if about.exists():
        started = time.monotonic()
        subprocess.run(
            ["pg_restore", "--jobs", "2", "--no-owner", "-d", _pg_tool_url(url), str(dump)],
            check=True,
        )
        if _number_feed(url):  # a dump taken before numbering: compact it, dump it again
            _analyze(url, full=True)
            _dump(url, dump)
        else:
            _analyze(url)
        facts = json.loads(about.read_text())
        restored = round(time.monotonic() - started, 1)
        return url, {**facts, "cache": str(dump), "cached": True, "restore_s": restored}
    print(f"building {runs:,} runs on postgresql", file=sys.stderr, flush=True)
    facts = build(url, runs, events, writers=POSTGRES_WRITERS)
    _number_feed(url)
    _dump(url, dump)
    about.write_text(json.dumps(facts) + "\n")
    return url, {**facts, "cache": str(dump), "cached": False}


def _number_feed(url: str) -> bool:
    """Give copied events their feed positions, as a store in use has them (a copy leaves
    them to the first reader of the feed on PostgreSQL); whether any had none."""
    unnumbered = "SELECT COUNT(*) FROM events WHERE feed_position IS NULL"
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            if not connection.exec_driver_sql(unnumbered).scalar_one():
                return False
    finally:
        engine.dispose()
    with RunStore(url) as store:
        store.read_feed(limit=1)
    return True


def _dump(url: str, dump: Path) -> None:
    subprocess.run(
        ["pg_dump", "--format=custom", "--file", str(dump), _pg_tool_url(url)], check=True
    )


def _analyze(url: str, *, full: bool = False) -> None:
    """VACUUM ANALYZE (PostgreSQL; `full`: VACUUM FULL, rewriting the tables) or ANALYZE
    (SQLite): the statistics and the compact tables a store in use has."""
    engine = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            postgres = engine.dialect.name == "postgresql"
            vacuum = "VACUUM FULL ANALYZE" if full else "VACUUM ANALYZE"
            connection.exec_driver_sql(vacuum if postgres else "ANALYZE")
    finally:
        engine.dispose()
