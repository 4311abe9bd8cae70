"""What an archive costs, and what writers see during one: `python -m benchmarks.retention
[--runs N] [--batch N] [--engines sqlite,postgresql] [--quick]`.

On a store of N finished runs (default 100,000; two events each, built in units of work of
1,000 runs, their times a day in the past) and a few active runs, it times
`RunStore.archive` of all of them: the whole call, the file's writing (checkpoint, records
and proofs, fsync, rename) and the deletion (transactions of `--batch` runs), runs and
events per second, the file's size. Meanwhile a writer thread (its own store) appends to
the active runs without pause; its transitions' latency is reported before the archive
(as long a stretch as the archive took) and during it: median, p99, max. Prints a table and
writes `benchmarks/retention-results.json`.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from cadence_store import RunStore, generate_signer_key, upgrade
from cadence_store.journal.archives import ArchiveProgress

from .checkpoint import store_url
from .common import ROOT_HASH, benchmark_arguments, engines_of, machine, open_store, settle

DAY_MS = 86_400_000
BUILD_BATCH = 1000
WRITER_RUNS = 4
KEY = generate_signer_key("bench.example/retention")


def build(url: str, runs: int) -> list[str]:
    """`runs` discarded runs, recorded a day ago; and the writer's active runs."""
    upgrade(url)
    past = time.time_ns() // 1_000_000 - DAY_MS
    with RunStore(url, root_hash=ROOT_HASH, clock=lambda: past) as store:
        for first in range(0, runs, BUILD_BATCH):
            with store.unit_of_work() as uow:
                for index in range(first, min(runs, first + BUILD_BATCH)):
                    run = uow.runs.start_run("abel-implement", change=f"old-{index}",
                                             operation_id=f"s-{index}")  # fmt: skip
                    uow.runs.transition(run.run_id, "discarded", operation_id=f"d-{index}")
    with open_store(url) as store:
        return [
            store.start_run("abel-implement", change=f"live-{i}", operation_id=f"l-{i}").run_id
            for i in range(WRITER_RUNS)
        ]


class Writer:
    """Transitions on the active runs, back to back, each one's latency kept with the
    time it started."""

    def __init__(self, url: str, run_ids: list[str]) -> None:
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, args=(url, run_ids), daemon=True)

    def _write(self, url: str, run_ids: list[str]) -> None:
        with RunStore(url, root_hash=ROOT_HASH) as store:
            count = 0
            while not self._stop.is_set():
                run_id = run_ids[count % len(run_ids)]
                started = time.perf_counter()
                store.transition(run_id, "paused", operation_id=f"w-{count}", code="bench")
                self.samples.append((started, time.perf_counter() - started))
                count += 1

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> dict[str, float]:
        latencies = sorted(ms for at, ms in self.samples if start <= at < end)
        if not latencies:
            return {"calls": 0}
        return {
            "calls": len(latencies),
            "median_ms": round(statistics.median(latencies) * 1000, 3),
            "p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))] * 1000, 3),
            "max_ms": round(latencies[-1] * 1000, 3),
        }


def measure(url: str, runs: int, batch: int, workdir: Path) -> dict[str, Any]:
    started = time.monotonic()
    live = build(url, runs)
    built_s = round(time.monotonic() - started, 1)
    settle(url)
    writer = Writer(url, live)
    writer.start()
    time.sleep(1.0)  # the writer warmed up
    marks: dict[str, float] = {}

    def progress(step: ArchiveProgress) -> None:
        marks.setdefault(step.phase, time.perf_counter())

    path = workdir / "bench.archive"
    with RunStore(url, root_hash=ROOT_HASH) as store:
        begin = time.perf_counter()
        report = store.archive(
            finished_before_ms=time.time_ns() // 1_000_000 - DAY_MS // 2,
            to=path,
            key=KEY,
            batch=batch,
            progress=progress,
        )
        end = time.perf_counter()
    time.sleep(min(end - begin, 5.0))  # a stretch after, for comparison
    writer.stop()
    took = end - begin
    deleting = end - marks.get("delete", end)
    return {
        "runs": report.runs_archived,
        "events": report.events_archived,
        "batch": batch,
        "build_s": built_s,
        "archive_s": round(took, 2),
        "write_s": round(took - deleting, 2),
        "delete_s": round(deleting, 2),
        "runs_per_s": round(report.runs_archived / took),
        "events_per_s": round(report.events_archived / took),
        "file_mb": round(path.stat().st_size / 1e6, 1),
        "writer_before": writer.between(begin - took, begin),
        "writer_during": writer.between(begin, end),
        "writer_during_delete": writer.between(end - deleting, end),
    }


def table(results: dict[str, Any]) -> str:
    lines = [
        "| engine | runs | archive s | write s | delete s | runs/s | writer p99 before"
        " | writer p99 during | during deletes (p99 / max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for engine, found in results["engines"].items():
        before, during = found["writer_before"], found["writer_during"]
        deletes = found["writer_during_delete"]
        lines.append(
            f"| {engine} | {found['runs']:,} | {found['archive_s']} | {found['write_s']} | "
            f"{found['delete_s']} | {found['runs_per_s']:,} | {before.get('p99_ms')} ms | "
            f"{during.get('p99_ms')} ms | {deletes.get('p99_ms')} / {deletes.get('max_ms')} ms |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = benchmark_arguments(
        "benchmarks.retention", "retention-results.json", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    arguments = parser.parse_args()
    runs = 5_000 if arguments.quick else arguments.runs
    results: dict[str, Any] = {"machine": machine(), "engines": {}}
    for engine in engines_of(arguments):
        with (
            tempfile.TemporaryDirectory(prefix="cadence-retention-") as workdir,
            store_url(engine, Path(workdir)) as url,
        ):
            print(f"{engine}: building {runs:,} finished runs", file=sys.stderr, flush=True)
            results["engines"][engine] = measure(url, runs, arguments.batch, Path(workdir))
        print(json.dumps(results["engines"][engine], indent=2), file=sys.stderr)
    print(table(results))
    Path(arguments.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
