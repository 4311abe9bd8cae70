"""What the journal feed costs an append, and how soon a follower sees a commit.

`python -m benchmarks.feed [--quick] [--engines sqlite,postgresql] [--before DIR]`

1. Cost: durable transitions with the feed (this checkout) and without it, each on a
   database of its own (same engine, same disk), with 1 process and with 4 processes
   appending at once (each to its own run). "Without" is by default this checkout with
   the feed's append-time work taken out (`_feed_off_tree`: no position computed, no
   `events.feed_position` index, no NOTIFY), so that nothing else differs; `--before
   DIR` measures against another source tree instead (holding `cadence_store/` and
   `migrations/`, e.g. the library before the feed:
   `git archive 88feea9 cadence_store migrations alembic.ini | tar -x -C DIR`). The
   variants take turns a batch at a time, in a fresh random order every round; the
   figures are the medians over batches of the batch's wall time per append, and the
   ratio is the median of each round's with / without (paired: a shared machine's load
   drifts between rounds, far less within one).
2. Latency: one writer appends every ~20 ms while a follower process follows the feed;
   the latency of an event is from the start of its appending call to the follower's
   yield (the machine's monotonic clock): p50 and p99.

Prints a table and writes `benchmarks/feed-results.json`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import sqlalchemy

from .common import HERE, Engine, benchmark_arguments, engines_of, machine, postgres_server

WORKER = HERE / "feed_worker.py"
PROCESS_COUNTS = (1, 4)
PER_TURN = 2  # appends per process per turn (short: the disk's slow fsync stretches hit both)
ROUNDS = 500
QUICK_ROUNDS = 120
LATENCY_EVENTS = 300
QUICK_LATENCY_EVENTS = 60
LATENCY_GAP_S = 0.02


def _env(source: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = str(source)
    return env


def _upgrade(url: str, source: Path | None) -> None:
    subprocess.run(
        [sys.executable, "-c", f"import cadence_store; cadence_store.upgrade({url!r})"],
        env=_env(source),
        check=True,
        cwd=source or HERE.parent,
    )


class _Appender:
    def __init__(self, url: str, tag: str, source: Path | None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), "append", url, tag],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=_env(source),
        )
        self.module = self.answer()["module"]

    def answer(self) -> Any:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("a feed benchmark worker exited")
        return json.loads(line)

    def go(self, count: int) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"go {count}\n")
        self.process.stdin.flush()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("quit\n")
        self.process.stdin.close()
        self.process.wait(timeout=60)


def _turn(appenders: list[_Appender], count: int) -> float:
    """Every appender runs `count` appends at once: wall seconds per append."""
    started = time.perf_counter()
    for appender in appenders:
        appender.go(count)
    for appender in appenders:
        appender.answer()
    return (time.perf_counter() - started) / (count * len(appenders))


def bench_cost(engine: Engine, before: Path, rounds: int, feed_off: bool) -> dict[str, Any]:
    urls = {"feed": engine.fresh_url(), "before": engine.fresh_url()}
    _upgrade(urls["feed"], None)
    _upgrade(urls["before"], before)
    if feed_off:
        plain = sqlalchemy.create_engine(urls["before"])
        with plain.begin() as connection:
            connection.exec_driver_sql(f"DROP INDEX {FEED_INDEX}")
        plain.dispose()
    sources = {"feed": None, "before": before}
    result: dict[str, Any] = {}
    for processes in PROCESS_COUNTS:
        groups = {
            name: [
                _Appender(urls[name], f"{name}-{processes}-{i}-{time.time_ns()}", sources[name])
                for i in range(processes)
            ]
            for name in urls
        }
        samples: dict[str, list[float]] = {name: [] for name in groups}
        try:
            for group in groups.values():
                _turn(group, PER_TURN)  # warm-up: statements compiled, pages cached
            for _ in range(rounds):
                order = list(groups)
                random.shuffle(order)
                for name in order:
                    samples[name].append(_turn(groups[name], PER_TURN))
        finally:
            for group in groups.values():
                for appender in group:
                    appender.close()
        feed_ms = statistics.median(samples["feed"]) * 1000
        before_ms = statistics.median(samples["before"]) * 1000
        paired = [f / b for f, b in zip(samples["feed"], samples["before"], strict=True)]
        result[f"{processes}_process"] = {
            "with_feed_ms": round(feed_ms, 4),
            "without_feed_ms": round(before_ms, 4),
            "ratio": round(statistics.median(paired), 4),
            "ratio_of_medians": round(feed_ms / before_ms, 4),
            "batches": len(samples["feed"]),
            "appends_per_batch": PER_TURN * processes,
        }
        result["before_module"] = groups["before"][0].module
    return result


def bench_latency(engine: Engine, events: int) -> dict[str, Any]:
    url = engine.fresh_url()
    _upgrade(url, None)
    follower = subprocess.Popen(
        [sys.executable, str(WORKER), "latency-follower", url, "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert follower.stdout is not None and follower.stdin is not None
    json.loads(follower.stdout.readline())  # ready
    writer = subprocess.run(
        [sys.executable, str(WORKER), "latency-writer", url, str(events), str(LATENCY_GAP_S)],
        capture_output=True,
        text=True,
        check=True,
    )
    started = {}
    for line in writer.stdout.splitlines():
        row = json.loads(line)
        started[(row["run_id"], row["sequence"])] = row["started_ns"]
    latencies = []
    while len(latencies) < len(started):
        row = json.loads(follower.stdout.readline())
        key = (row["run_id"], row["sequence"])
        if key in started:
            latencies.append((row["yielded_ns"] - started[key]) / 1e6)
    follower.stdin.close()
    follower.wait(timeout=60)
    latencies.sort()
    return {
        "p50_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 2),
        "max_ms": round(latencies[-1], 2),
        "events": len(latencies),
    }


def table(results: dict[str, Any]) -> str:
    lines = [
        "append with / without the feed (median ms per durable transition; ratio)",
        f"{'engine':<12}{'processes':>10}{'with':>10}{'without':>10}{'ratio':>8}",
    ]
    for engine, row in results["engines"].items():
        for processes in PROCESS_COUNTS:
            cell = row["cost"][f"{processes}_process"]
            lines.append(
                f"{engine:<12}{processes:>10}{cell['with_feed_ms']:>10.3f}"
                f"{cell['without_feed_ms']:>10.3f}{cell['ratio']:>8.3f}"
            )
    lines.append("commit -> follow yield latency (ms)")
    lines.append(f"{'engine':<12}{'p50':>10}{'p99':>10}{'max':>10}{'events':>8}")
    for engine, row in results["engines"].items():
        cell = row["latency"]
        lines.append(
            f"{engine:<12}{cell['p50_ms']:>10.2f}{cell['p99_ms']:>10.2f}"
            f"{cell['max_ms']:>10.2f}{cell['events']:>8}"
        )
    return "\n".join(lines)


# what `_feed_off_tree` takes out of this checkout's sources: (file, text, replacement)
FEED_OFF_PATCHES = (
    (
        "cadence_store/storage/models.py",
        "feed_position: Mapped[int | None] = mapped_column(Int64, index=True, unique=True)",
        "feed_position: Mapped[int | None] = mapped_column(Int64)",
    ),
    (
        "cadence_store/storage/feed_statements.py",
        '    if dialect_name == "postgresql":\n        return cast(null(), BigInteger)\n',
        "    return cast(null(), BigInteger)\n",
    ),
    (
        "cadence_store/storage/feed_notifier.py",
        "    feed_notifier(engine).poke()\n",
        "    return\n",
    ),
)
FEED_INDEX = "ix_events_feed_position"


def _feed_off_tree(directory: Path) -> Path:
    """This checkout's library with the feed's append-time work taken out (the
    `follower_positions` table and the NULL column stay; they cost an append nothing)."""
    root = HERE.parent
    for name in ("cadence_store", "migrations"):
        shutil.copytree(root / name, directory / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(root / "alembic.ini", directory / "alembic.ini")
    for name, text, replacement in FEED_OFF_PATCHES:
        path = directory / name
        source = path.read_text()
        if source.count(text) != 1:
            raise RuntimeError(f"{name} changed: update benchmarks.feed.FEED_OFF_PATCHES")
        path.write_text(source.replace(text, replacement))
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_arguments(
        "benchmarks.feed", "feed-results.json", description=__doc__, before=True
    )
    args = parser.parse_args(argv)
    engines = engines_of(args)
    results: dict[str, Any] = {"machine": machine(), "engines": {}}
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cadence-feed-")))
        before = args.before
        if before is None:
            before = _feed_off_tree(Path(stack.enter_context(tempfile.TemporaryDirectory())))
        results["without"] = str(args.before or "this checkout, the feed's append work out")
        pg_url = stack.enter_context(postgres_server()) if "postgresql" in engines else None
        for name in engines:
            engine = Engine(name, workdir, pg_url)
            print(f"[{name}] append with / without the feed, 1 and 4 processes ...", flush=True)
            rounds = QUICK_ROUNDS if args.quick else ROUNDS
            cost = bench_cost(engine, before, rounds, feed_off=args.before is None)
            print(f"[{name}] commit -> follow latency ...", flush=True)
            latency = bench_latency(engine, QUICK_LATENCY_EVENTS if args.quick else LATENCY_EVENTS)
            results["engines"][name] = {"cost": cost, "latency": latency}
    print(table(results))
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
