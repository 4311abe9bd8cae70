"""What archiving finished runs costs, and what it does to writers: `python -m
benchmarks.archive [--runs N]`.

On SQLite and PostgreSQL, a store of N finished runs (default 100,000; each started and
discarded through the library, so every chain, projection and receipt is real: two events
and two receipts a run) and two active runs, with a checkpoint of it signed (as a store
that checkpoints regularly has). Two writer processes (`benchmarks/archive_worker.py`)
append durable transitions to the active runs, one after the other, the whole time:

1. for `--baseline-s` seconds with nothing else running (the writers alone);
2. while `RunStore.archive` archives the N runs: a checkpoint of the store, the file
   written (records and inclusion proofs) and made durable, then the runs deleted in
   transactions of `--batch` runs.

It reports the archive's throughput (runs/s and events/s, overall and for each phase)
and the p50/p99/max of the writers' transitions in each window: alone, during the whole
archive, during its deletes. Then `verify_archive` checks the file offline (runs/s), and
on SQLite the file's size before and after, its free pages, and a `VACUUM`'s time.

Prints a table and writes `benchmarks/archive-results.json`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy

from cadence_store import RunStore
from cadence_store.journal.archives import ArchiveProgress
from cadence_store.journal.note_keys import generate_signer_key
from cadence_store.storage.feed_notifier import flush_notifiers
from cadence_store.transfer.archive_file import verify_archive

from .common import (
    HERE,
    ROOT_HASH,
    benchmark_arguments,
    engines_of,
    machine,
    open_store,
    paused_run,
    postgres_server,
    settle,
)

ORIGIN = "bench.cadence-store/archive"
BUILD_BATCH = 500  # runs started and discarded per unit of work
WRITERS = 2


# -- building the store ------------------------------------------------------------------


def build(url: str, runs: int) -> list[str]:
    """`runs` discarded runs and `WRITERS` paused ones (their ids returned)."""
    store = open_store(url)
    try:
        for first in range(0, runs, BUILD_BATCH):
            with store.unit_of_work() as uow:
                for i in range(first, min(first + BUILD_BATCH, runs)):
                    run = uow.runs.start_run(
                        "abel-implement", change=f"a-{i}", operation_id=f"s-{i}"
                    )
                    uow.runs.transition(run.run_id, "discarded", operation_id=f"d-{i}")
            if (first // BUILD_BATCH) % 20 == 19:
                print(f"  {first + BUILD_BATCH:,} runs", file=sys.stderr, flush=True)
        writers = [paused_run(store, f"writer-{n}") for n in range(WRITERS)]
        flush_notifiers()
    finally:
        store.close()
    return writers


@contextmanager
def store_url(engine: str, workdir: Path) -> Iterator[str]:
    if engine == "sqlite":
        yield f"sqlite:///{workdir}/archive.sqlite3"
        return
    with postgres_server() as url:
        yield url


# -- the writers ---------------------------------------------------------------------------


@contextmanager
def writers(url: str, run_ids: list[str]) -> Iterator[list[list[tuple[int, int]]]]:
    """The writer processes, appending until the block ends; then their samples."""
    environment = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    processes = [
        subprocess.Popen(
            [sys.executable, str(HERE / "archive_worker.py"), url, run_id, str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
        )  # fmt: skip
        for n, run_id in enumerate(run_ids)
    ]
    samples: list[list[tuple[int, int]]] = []
    try:
        for process in processes:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
        yield samples
    finally:
        for process in processes:
            assert process.stdin is not None
            process.stdin.close()
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline()
            process.wait(timeout=60)
            if line:
                samples.append([tuple(pair) for pair in json.loads(line)])


def latency(samples: list[list[tuple[int, int]]], start_ns: int, end_ns: int) -> dict[str, Any]:
    """p50/p99/max (ms) of the writers' calls that started in [start_ns, end_ns)."""
    inside = sorted(d for worker in samples for s, d in worker if start_ns <= s < end_ns)
    if not inside:
        return {"calls": 0}

    def at(fraction: float) -> float:
        return round(inside[min(len(inside) - 1, int(fraction * len(inside)))] / 1e6, 2)

    return {
        "calls": len(inside),
        "p50_ms": at(0.50),
        "p99_ms": at(0.99),
        "max_ms": round(inside[-1] / 1e6, 2),
        "mean_ms": round(statistics.fmean(inside) / 1e6, 2),
    }


# -- measuring -----------------------------------------------------------------------------


def _sqlite_space(url: str) -> dict[str, int]:
    path = sqlalchemy.make_url(url).database or ""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            pages = connection.exec_driver_sql("PRAGMA page_count").scalar_one()
            free = connection.exec_driver_sql("PRAGMA freelist_count").scalar_one()
    finally:
        engine.dispose()
    return {"file_bytes": os.path.getsize(path), "pages": pages, "free_pages": free}


def _vacuum_s(url: str) -> float:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            started = time.perf_counter()
            connection.exec_driver_sql("VACUUM")
            return round(time.perf_counter() - started, 2)
    finally:
        engine.dispose()


def measure(url: str, runs: int, workdir: Path, baseline_s: float, batch: int) -> dict[str, Any]:
    started = time.monotonic()
    writer_runs = build(url, runs)
    result: dict[str, Any] = {"runs": runs, "build_s": round(time.monotonic() - started, 1)}
    key = generate_signer_key(ORIGIN)
    store = RunStore(url, root_hash=ROOT_HASH)
    sqlite = sqlalchemy.make_url(url).get_backend_name() == "sqlite"
    try:
        store.checkpoint(key)
        settle(url)
        if sqlite:
            result["space_before"] = _sqlite_space(url)
        bound = int(time.time() * 1000) + 1
        marks: dict[str, int] = {}

        def progress(step: ArchiveProgress) -> None:
            if step.phase == "archive":
                marks["written"] = time.monotonic_ns()
            elif "deleting" not in marks:
                marks["deleting"] = marks.get("written", time.monotonic_ns())

        with writers(url, writer_runs) as samples:
            time.sleep(0.5)  # the writers warm up
            baseline_start = time.monotonic_ns()
            time.sleep(baseline_s)
            archive_start = time.monotonic_ns()
            report = store.archive(
                finished_before_ms=bound,
                to=workdir / "runs.archive",
                key=key,
                batch=batch,
                progress=progress,
            )
            archive_end = time.monotonic_ns()
            time.sleep(0.2)
        assert report.runs_archived == runs, report
        deleting = marks.get("deleting", archive_start)
        seconds = (archive_end - archive_start) / 1e9
        write_s = (deleting - archive_start) / 1e9
        delete_s = (archive_end - deleting) / 1e9
        result["archive"] = {
            "seconds": round(seconds, 2),
            "runs_per_s": round(runs / seconds),
            "events_per_s": round(report.events_archived / seconds),
            "write_s": round(write_s, 2),
            "delete_s": round(delete_s, 2),
            "delete_runs_per_s": round(runs / delete_s) if delete_s else None,
            "events": report.events_archived,
            "file_bytes": os.path.getsize(report.path),
            "batch": batch,
        }
        result["writers"] = {
            "alone": latency(samples, baseline_start, archive_start),
            "during the archive": latency(samples, archive_start, archive_end),
            "during its deletes": latency(samples, deleting, archive_end),
        }
        with open(report.path, encoding="utf-8") as lines:
            verify_started = time.perf_counter()
            checked = verify_archive(lines, report.checkpoint.note, key.verifier())
            verify_s = time.perf_counter() - verify_started
        assert checked.ok, checked.failure
        result["verify_archive"] = {
            "seconds": round(verify_s, 2),
            "runs_per_s": round(runs / verify_s),
        }
    finally:
        store.close()
    if sqlite:
        result["space_after"] = _sqlite_space(url)
        result["vacuum_s"] = _vacuum_s(url)
        result["space_after_vacuum"] = _sqlite_space(url)
    return result


def table(results: dict[str, Any]) -> str:
    engines = results["engines"]
    names = list(engines)
    header = "| | " + " | ".join(names) + " |"
    lines = [
        f"archive of {results['runs']:,} finished runs, {WRITERS} writer processes appending",
        "",
        header,
        "|---|" + "---:|" * len(names),
    ]

    def row(label: str, cell: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(str(cell(engines[n])) for n in names) + " |")

    row("archive, s", lambda e: e["archive"]["seconds"])
    row("runs/s", lambda e: f"{e['archive']['runs_per_s']:,}")
    row("events/s", lambda e: f"{e['archive']['events_per_s']:,}")
    row("file written, s", lambda e: e["archive"]["write_s"])
    row("deletes, s", lambda e: e["archive"]["delete_s"])
    for window in ("alone", "during the archive", "during its deletes"):
        for stat in ("p50_ms", "p99_ms", "max_ms"):
            row(
                f"writers {window}, {stat[:-3]} ms",
                lambda e, w=window, s=stat: e["writers"][w].get(s, "-"),
            )
        row(f"writers {window}, calls", lambda e, w=window: e["writers"][w]["calls"])
    row("verify --archive, runs/s", lambda e: f"{e['verify_archive']['runs_per_s']:,}")
    row("archive file, MB", lambda e: round(e["archive"]["file_bytes"] / 1e6, 1))
    for label, key in (
        ("before", "space_before"),
        ("after", "space_after"),
        ("after VACUUM", "space_after_vacuum"),
    ):
        row(
            f"SQLite file {label}, MB (free pages)",
            lambda e, k=key: (
                f"{e[k]['file_bytes'] / 1e6:.1f} ({e[k]['free_pages']:,})" if k in e else "-"
            ),
        )
    row("SQLite VACUUM, s", lambda e: e.get("vacuum_s", "-"))
    return "\n".join(lines)


def main() -> None:
    parser = benchmark_arguments(
        "benchmarks.archive", "archive-results.json", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000, help="runs deleted per transaction")
    parser.add_argument("--baseline-s", type=float, default=15.0)
    arguments = parser.parse_args()
    runs = 5_000 if arguments.quick else arguments.runs
    results: dict[str, Any] = {"runs": runs, "machine": machine(), "engines": {}}
    for engine in engines_of(arguments):
        with (
            tempfile.TemporaryDirectory(prefix="cadence-archive-") as workdir,
            store_url(engine, Path(workdir)) as url,
        ):
            print(f"{engine}: building {runs:,} finished runs", file=sys.stderr, flush=True)
            results["engines"][engine] = measure(
                url, runs, Path(workdir), arguments.baseline_s, arguments.batch
            )
        print(json.dumps(results["engines"][engine], indent=2), file=sys.stderr)
    print(table(results))
    Path(arguments.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
