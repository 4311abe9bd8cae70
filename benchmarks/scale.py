"""Every call at size against the same call on a small store:
`python -m benchmarks.scale [--quick] [--engines sqlite postgresql] [--sizes ...] [--calls ...]`.

Sizes: `small` (10,000 runs / 100,000 events), `quick` (100,000 / 1,000,000) and `full`
(1,000,000 / 10,000,000); by default small and full, with `--quick` small and quick. The
stores are built by the library's write path and cached (`scale_build`). Each call is
timed warm (one RunStore, after a first call; the calls interleaved in a fresh random
order every round) and, for the reads, cold: a new RunStore (a new engine, so a new
connection and no statement cache) for each sample, its first call timed. The writes
are also timed alone (`writes_side_by_side`): every size's store open at once, only the
writes, in one random order across the sizes each round. On SQLite every call counts its
page reads (`read_syscalls`). The OS page
cache cannot be dropped without root, so "cold" is a fresh connection, not a cold disk.
Whole-store verify runs in a child process (`parallel_verify.iter_verified_runs`, one
job, its verdicts counted as they come): events/s and that process's peak RSS. A follower catching up reads the feed from
position 0 with `RunStore.follow`. Prints a table (call, small p50/p99, at size p50/p99,
ratios, the target, met or not) and writes `benchmarks/scale-results.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

import sqlalchemy

from cadence_store import RunStore

from .common import HERE, ROOT_HASH, machine, postgres_server
from .scale_build import LONG_CHANGE, SHORT_CHANGE, postgres_store, sqlite_store
from .scale_report import LEASES, WRITES, rows, storage_lines, table
from .scale_storage import postgres_storage, sqlite_storage

RESULTS = HERE / "scale-results.json"
SIZES = {"small": (10_000, 100_000), "quick": (100_000, 1_000_000), "full": (1_000_000, 10_000_000)}
PAGE = 50
DEEP_PAGE = 10_000
Call = Callable[[RunStore, int], object]


def _scalar(url: str, sql: str) -> Any:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            return connection.exec_driver_sql(sql).scalar_one()
    finally:
        engine.dispose()


def landmarks(store: RunStore, url: str, runs: int) -> dict[str, Any]:
    """What the calls read: the named runs, a change, a deep page's key, an updated range."""
    short = store.list_runs(change=SHORT_CHANGE)[0].run_id
    long = store.list_runs(change=LONG_CHANGE)[0].run_id
    ids = store.run_ids()
    middle = ids[len(ids) // 2]
    deep_page = min(DEEP_PAGE, runs // PAGE // 2)
    updated = int(_scalar(url, f"SELECT updated_at FROM runs WHERE run_id = '{middle}'"))
    pages_of_long = store.read_feed(run_id=long, limit=2_500)
    return {
        "short": short,
        "long": long,
        "change": store.status(middle).change or LONG_CHANGE,
        "deep_page": deep_page,
        "deep_after": ids[deep_page * PAGE - 1],
        "updated": (updated - 3_600_000, updated + 3_600_000),
        "long_middle": pages_of_long[-1].position,
        "head": int(_scalar(url, "SELECT MAX(feed_position) FROM events")),
        "tag": time.time_ns(),
    }


def read_calls(marks: dict[str, Any]) -> dict[str, Call]:
    after, before = marks["updated"]
    return {
        "status": lambda s, n: s.status(marks["short"]),
        "list_events (50 events)": lambda s, n: s.list_events(marks["short"]),
        "list_events (5,000 events)": lambda s, n: s.list_events(marks["long"]),
        "read_feed (a page of 100 of the 5,000-event run)": lambda s, n: s.read_feed(
            run_id=marks["long"], after=marks["long_middle"], limit=100
        ),
        "run_detail": lambda s, n: s.run_detail(marks["short"]),
        "list_runs (first page)": lambda s, n: s.list_runs(limit=PAGE),
        f"list_runs (page {marks['deep_page']:,}, keyset)": lambda s, n: s.list_runs(
            limit=PAGE, after=marks["deep_after"]
        ),
        "list_runs (state)": lambda s, n: s.list_runs(state="running", limit=PAGE),
        "list_runs (stage)": lambda s, n: s.list_runs(stage="abel-design", limit=PAGE),
        "list_runs (change)": lambda s, n: s.list_runs(change=marks["change"], limit=PAGE),
        "list_runs (root hash)": lambda s, n: s.list_runs(root_hash=ROOT_HASH, limit=PAGE),
        "list_runs (updated range)": lambda s, n: s.list_runs(
            updated_after=after, updated_before=before, limit=PAGE
        ),
        "counts": lambda s, n: s.counts(),
        "inspect_operation": lambda s, n: s.inspect_operation(marks["short"], "scale-start-0"),
        "read_feed (latest 1,000)": lambda s, n: s.read_feed(after=marks["head"] - 1_000),
        "verify_integrity (5,000-event run)": lambda s, n: s.verify_integrity(marks["long"]),
    }


SET_UP_WRITES: Final = 3  # what `write_calls` writes before it returns the calls


def write_calls(store: RunStore, marks: dict[str, Any]) -> dict[str, Call]:
    tag = marks["tag"]
    store.start_run("abel-implement", change=f"bench-replay-{tag}", operation_id=f"r-{tag}")
    mover = store.start_run("abel-implement", change=f"bench-move-{tag}", operation_id=f"m-{tag}")
    store.transition(mover.run_id, "paused", operation_id=f"mp-{tag}", code="bench")
    marks["mover"] = mover.run_id
    return {
        WRITES[0]: lambda s, n: s.start_run(
            "abel-implement", change=f"bench-{tag}-{n}", operation_id=f"s-{tag}-{n}"
        ),
        WRITES[1]: lambda s, n: s.start_run(
            "abel-implement", change=f"bench-replay-{tag}", operation_id=f"r-{tag}"
        ),
        WRITES[2]: lambda s, n: s.transition(
            mover.run_id, "paused", operation_id=f"t-{tag}-{n}", code="bench"
        ),
        "lease calls": lambda s, n: None,  # timed one by one in `lease_samples`
    }


def lease_samples(store: RunStore, run_id: str, n: int, samples: dict[str, list[float]]) -> None:
    """Time acquire, renew, assert and commit of one new lease, each on its own."""
    started = time.perf_counter()
    lease = store.acquire_lease(run_id, f"bench-lease-{n}-{time.time_ns()}", 60_000)
    renewed = time.perf_counter()
    lease = store.renew_lease(lease, 60_000)
    asserted = time.perf_counter()
    store.assert_lease(lease)
    committing = time.perf_counter()
    store.commit_lease(lease, {"done": True})
    ended = time.perf_counter()
    for name, seconds in zip(
        LEASES,
        (renewed - started, asserted - renewed, committing - asserted, ended - committing),
        strict=True,
    ):
        samples[name].append(seconds)


def summary(samples: list[float], page_reads: list[int] | None = None) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    figures = {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(p99 * 1000, 3),
        "samples": len(ordered),
    }
    if page_reads:
        figures["page_reads_per_call"] = round(statistics.mean(page_reads), 1)
    return figures


def read_syscalls() -> int:
    """This process's read syscalls so far (Linux's /proc/self/io, 0 elsewhere). A SQLite
    connection reads each page its cache does not hold with one `pread`, so the count
    across a SQLite call is the pages it had to fetch from the OS."""
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return 0
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("syscr"))


def _probe_cost() -> int:
    """The read syscalls that reading the count itself costs."""
    first = read_syscalls()
    return read_syscalls() - first


def measure_warm(
    url: str, marks: dict[str, Any], wanted: Callable[[str], bool], rounds: int
) -> dict[str, dict[str, float]]:
    """Every wanted call on one RunStore, interleaved in a fresh random order each round.
    On SQLite each call also counts its page reads."""
    store = RunStore(url, root_hash=ROOT_HASH)
    counts_pages = url.startswith("sqlite") and read_syscalls() > 0
    probe = _probe_cost()
    try:
        everything = {**read_calls(marks), **write_calls(store, marks)}
        calls = {name: call for name, call in everything.items() if wanted(name)}
        samples: dict[str, list[float]] = {name: [] for name in (*calls, *LEASES)}
        page_reads: dict[str, list[int]] = {name: [] for name in calls}
        for call in calls.values():
            call(store, 0)  # warm: the first call of each is not counted
        counter = 0
        for _ in range(rounds):
            order = list(calls)
            random.shuffle(order)
            for name in order:
                counter += 1
                if name == "lease calls":
                    lease_samples(store, marks["mover"], counter, samples)
                    continue
                reads_before = read_syscalls() if counts_pages else 0
                started = time.perf_counter()
                calls[name](store, counter)
                samples[name].append(time.perf_counter() - started)
                if reads_before:
                    page_reads[name].append(read_syscalls() - reads_before - probe)
    finally:
        store.close()
    return {name: summary(found, page_reads.get(name)) for name, found in samples.items() if found}


def postgres_blocks_read(url: str) -> int:
    """The blocks this PostgreSQL database has read from outside its shared buffers (the
    OS page cache or the disk), as its backends have reported them (at the latest when
    they exit)."""
    time.sleep(0.5)  # a closed store's backends report as they exit, just after
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            return int(
                connection.exec_driver_sql(
                    "SELECT blks_read FROM pg_stat_database WHERE datname = current_database()"
                ).scalar_one()
            )
    finally:
        engine.dispose()


def writes_side_by_side(
    stores: dict[str, tuple[str, dict[str, Any]]], wanted: Callable[[str], bool], rounds: int
) -> dict[str, dict[str, dict[str, float]]]:
    """The writes alone, as a writer issues them (no read between them to empty a SQLite
    connection's page cache), on every size's store in one loop: each round takes every
    (size, write) in a fresh random order, so the sizes are timed under the same
    conditions (the mixed pass times each size at its own time, one a 12 GB copy later).
    SQLite writes also count their page reads."""
    postgres = {size: url for size, (url, _) in stores.items() if url.startswith("postgresql")}
    blocks_before = {size: postgres_blocks_read(url) for size, url in postgres.items()}
    opened = {size: RunStore(url, root_hash=ROOT_HASH) for size, (url, _) in stores.items()}
    probe = _probe_cost()
    monitor = next(iter(postgres.values()), None)  # the WAL is the cluster's: any database
    wal_engine = sqlalchemy.create_engine(monitor) if monitor else None
    wal = wal_engine.connect() if wal_engine else None
    try:
        calls: dict[str, dict[str, Call]] = {}
        for size, store in opened.items():
            marks = {**stores[size][1], "tag": time.time_ns()}  # the mixed pass's ids unused
            every = write_calls(store, marks)
            calls[size] = {name: every[name] for name in WRITES if wanted(name)}
        samples: dict[tuple[str, str], list[float]] = {
            (size, name): [] for size in calls for name in calls[size]
        }
        page_reads: dict[tuple[str, str], list[int]] = {key: [] for key in samples}
        wal_bytes: dict[tuple[str, str], list[int]] = {key: [] for key in samples}
        for size, name in samples:
            calls[size][name](opened[size], 0)  # warm: not counted
        counter = 0
        for _ in range(rounds):
            order = list(samples)
            random.shuffle(order)
            for size, name in order:
                counter += 1
                lsn = _wal_insert_lsn(wal) if wal is not None else None
                reads_before = read_syscalls()
                started = time.perf_counter()
                calls[size][name](opened[size], counter)
                samples[size, name].append(time.perf_counter() - started)
                if reads_before and stores[size][0].startswith("sqlite"):
                    page_reads[size, name].append(read_syscalls() - reads_before - probe)
                if wal is not None and size in postgres:
                    wal_bytes[size, name].append(_wal_since(wal, lsn))
    finally:
        for store in opened.values():
            store.close()
        if wal is not None and wal_engine is not None:
            wal.close()
            wal_engine.dispose()
    timed = {
        size: {name: summary(samples[size, name], page_reads[size, name]) for name in calls[size]}
        for size in calls
    }
    for size, url in postgres.items():  # per write, over the pass (warm-ups and set-up too)
        writes = sum(len(samples[size, name]) + 1 for name in calls[size]) + SET_UP_WRITES
        blocks = (postgres_blocks_read(url) - blocks_before[size]) / writes
        for name, figures in timed[size].items():
            figures["blocks_read_per_write"] = round(blocks, 1)
            figures["wal_bytes_per_call"] = round(statistics.mean(wal_bytes[size, name]))
    return timed


def _wal_insert_lsn(connection: sqlalchemy.Connection) -> str:
    lsn = connection.exec_driver_sql("SELECT pg_current_wal_insert_lsn()::text").scalar_one()
    connection.commit()
    return str(lsn)


def _wal_since(connection: sqlalchemy.Connection, lsn: str | None) -> int:
    """The WAL the cluster wrote since `lsn` (full-page images included): one call's,
    as the calls run one at a time (autovacuum's too, if it ran meanwhile)."""
    written = connection.exec_driver_sql(
        "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %(lsn)s::pg_lsn)", {"lsn": lsn}
    ).scalar_one()
    connection.commit()
    return int(written)


def measure_cold(
    url: str, marks: dict[str, Any], wanted: Callable[[str], bool], rounds: int
) -> dict[str, dict[str, float]]:
    """Each sample: a new RunStore (new engine and connection), its first call timed."""
    calls = {name: call for name, call in read_calls(marks).items() if wanted(name)}
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            store = RunStore(url, root_hash=ROOT_HASH)
            try:
                started = time.perf_counter()
                call(store, 0)
                samples[name].append(time.perf_counter() - started)
            finally:
                store.close()
    return {name: summary(found) for name, found in samples.items()}


def follower(url: str, head: int) -> dict[str, float]:
    """A follower from position 0 to the head, as fast as the feed gives: events/s."""
    store = RunStore(url)
    seen = 0
    started = time.perf_counter()
    try:
        for item in store.follow(after=0, poll_s=0.01):
            seen += 1
            if item.position >= head:
                break
    finally:
        store.close()
    seconds = time.perf_counter() - started
    return {"events": seen, "seconds": round(seconds, 2), "events_per_s": round(seen / seconds)}


def verify_probe(url: str) -> dict[str, float]:
    """Run in a fresh child: verify every run with one job; events/s and peak RSS."""
    from cadence_store.parallel_verify import iter_verified_runs

    store = RunStore(url)
    events = store.counts().events
    runs = broken = 0
    started = time.perf_counter()
    for check in iter_verified_runs(store, jobs=1):  # counted, not kept
        runs += 1
        broken += not check.ok
    seconds = time.perf_counter() - started
    store.close()
    peak = next(
        int(line.split()[1]) / 1024
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmHWM:")
    )
    return {
        "runs": runs,
        "broken": broken,
        "events": events,
        "seconds": round(seconds, 2),
        "events_per_s": round(events / seconds),
        "peak_rss_mb": round(peak, 1),
    }


def whole_store_verify(url: str) -> dict[str, float]:
    probe = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale", "--verify-probe", url],
        capture_output=True,
        text=True,
        check=True,
        cwd=HERE.parent,
    )
    result: dict[str, float] = json.loads(probe.stdout.strip().splitlines()[-1])
    return result


def wanted_by(words: list[str] | None) -> Callable[[str], bool]:
    """`--calls`: a call is measured when its name holds one of the words (all without)."""
    return lambda name: not words or any(word in name for word in words)


def measure_store(
    engine: str, url: str, facts: dict[str, Any], size: str, args: argparse.Namespace, work: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """This size's figures, and the landmarks its calls read."""
    runs = SIZES[size][0]
    wanted = wanted_by(args.calls)
    store = RunStore(url)
    try:
        marks = landmarks(store, url, runs)
    finally:
        store.close()
    print(f"  {engine} {size}: {facts['runs']:,} runs, {facts['events']:,} events", file=sys.stderr)
    result: dict[str, Any] = {"store": facts, "deep_page": marks["deep_page"]}
    if wanted("storage"):
        path = Path(sqlalchemy.make_url(url).database or "")
        result["storage"] = (
            sqlite_storage(path, work) if engine == "sqlite" else postgres_storage(url)
        )
    result["cold"] = measure_cold(url, marks, wanted, args.cold_rounds)
    result["warm"] = measure_warm(url, marks, wanted, args.rounds)
    if wanted("follow"):
        result["follower"] = follower(url, marks["head"])
    if wanted("verify (whole store)"):
        result["verify_store"] = whole_store_verify(url)
    return result, marks


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="at size = 100,000 runs")
    parser.add_argument("--engines", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=None)
    parser.add_argument("--calls", nargs="+", default=None, help="only calls naming a word")
    parser.add_argument("--rounds", type=int, default=100, help="warm samples per call")
    parser.add_argument("--cold-rounds", type=int, default=15, help="cold samples per read")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--verify-probe", metavar="URL", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if args.verify_probe:
        print(json.dumps(verify_probe(args.verify_probe)))
        return 0
    sizes = args.sizes or ["small", "quick" if args.quick else "full"]
    results: dict[str, Any] = {"machine": machine(), "sizes": sizes, "engines": {}}
    if args.out.exists():  # keep the other engines' last figures
        results["engines"] = json.loads(args.out.read_text()).get("engines", {})
    for engine in args.engines:
        figures: dict[str, Any] = {}
        measured: dict[str, tuple[str, dict[str, Any]]] = {}
        with ExitStack() as stack:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="scale-")))
            server = stack.enter_context(postgres_server()) if engine == "postgresql" else None
            for size in sizes:
                runs, events = SIZES[size]
                if server is None:
                    url, facts = sqlite_store(runs, events, work)
                else:
                    url, facts = postgres_store(server, runs, events, work)
                figures[size], marks = measure_store(engine, url, facts, size, args, work)
                measured[size] = (url, marks)
            if len(measured) > 1:
                alone = writes_side_by_side(measured, wanted_by(args.calls), args.rounds)
                for size, timed in alone.items():
                    figures[size]["writes_alone"] = timed
        baseline = figures.get("small") if len(figures) > 1 else None
        compared = {
            size: rows(engine, None if size == "small" else baseline, figures[size])
            for size in figures
        }
        results["engines"][engine] = {
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "sizes": figures,
            "rows": compared,
        }
        for size in sizes:
            print(
                table(
                    engine, size, compared[size], results["engines"][engine]["load_average_after"]
                )
            )
            if "storage" in figures[size]:
                print(storage_lines(engine, size, figures[size]["storage"]))
            build = figures[size]["store"]
            print(
                f"  store: {build['runs']:,} runs, {build['events']:,} events, built by "
                f"{build['method']} in {build['build_s']} s; cache {build['cache']}"
            )
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
