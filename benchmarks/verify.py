"""Verification benchmark: `python -m benchmarks.verify [--quick] [--engines sqlite,postgresql]`.

Two workloads per engine:

- one run of 50,000 events: `verify_integrity` events/s (wall and CPU time: this machine
  is shared, and CPU time shows what a busy neighbour hides) and the peak of Python
  memory (tracemalloc) at 5,000 and at 50,000 events, which must be the same: the chain
  is streamed, never loaded whole;
- a store of 1,000 runs x 100 events: `parallel_verify.verify_runs` (what
  `cadence-store verify --jobs N` runs) at 1 and 2 jobs, interleaved in random order per
  round; events/s over the whole store, and the ratio of medians. Also per CPU second of
  the busiest process: with the kernel's autogroup scheduling, all processes of one
  session share one session's slice of a busy machine, so only an idle machine shows the
  wall-time gain; the busiest process's CPU time is what the wall time is there.

Prints a table and writes `benchmarks/verify-results.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from cadence_store import RunStore

from .common import Engine, grow, machine, open_store, paused_run, postgres_server

HERE = Path(__file__).resolve().parent
TARGET_EVENTS_PER_S = 255_000  # issue 16: 1.5x cadence 1.x's 170k events/s
CADENCE_1X = {"events_per_s": 170_000, "peak_mb": "280-350 (RSS)"}

try:
    from cadence_store.parallel_verify import verify_runs

    JOBS = [1, 2]
except ImportError:  # a version before `--jobs` (to measure the "before" numbers): 1 job

    def verify_runs(store: RunStore, run_ids: Any = None, *, jobs: int = 1) -> Any:  # type: ignore[misc]
        return [store.verify_integrity(run_id) for run_id in run_ids or store.run_ids()]

    JOBS = [1]


def _cpu_seconds() -> tuple[float, float]:
    """CPU time of this process, and of its finished children (the verify workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def _timed(action: Callable[[], object]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds of this process, of its workers) of one call."""
    wall, (own, children) = time.perf_counter(), _cpu_seconds()
    action()
    own_after, children_after = _cpu_seconds()
    return time.perf_counter() - wall, own_after - own, children_after - children


def _peak_mb(action: Callable[[], object]) -> float:
    tracemalloc.start()
    try:
        action()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return round(peak / 2**20, 2)


def bench_one_run(engine: Engine, events: int, small: int, rounds: int) -> dict[str, Any]:
    store = open_store(engine.fresh_url())
    long_run = paused_run(store, "verify-long")
    grow(store, long_run, events - 2, "verify-long")
    short_run = paused_run(store, "verify-short")
    grow(store, short_run, small - 2, "verify-short")
    store.verify_integrity(long_run)  # warm: caches, the page cache
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(rounds):
        wall, cpu, _ = _timed(lambda: store.verify_integrity(long_run))
        walls.append(wall)
        cpus.append(cpu)
    peak_long = _peak_mb(lambda: store.verify_integrity(long_run))
    peak_short = _peak_mb(lambda: store.verify_integrity(short_run))
    store.close()
    return {
        "events": events,
        "rounds": rounds,
        "median_s": round(statistics.median(walls), 4),
        "events_per_s": round(events / statistics.median(walls)),
        "best_events_per_s": round(events / min(walls)),
        "cpu_events_per_s": round(events / statistics.median(cpus)),
        "peak_mb": peak_long,
        f"peak_mb_at_{small}": peak_short,
        "peak_growth": round(peak_long / peak_short, 3) if peak_short else None,
    }


def build_store(engine: Engine, runs: int, events: int) -> str:
    url = engine.fresh_url()
    store = open_store(url)
    per_unit = max(1, 5_000 // events)
    for first in range(0, runs, per_unit):
        with store.unit_of_work() as uow:
            for index in range(first, min(runs, first + per_unit)):
                run = uow.runs.start_run(
                    "abel-implement", change=f"bench-{index}", operation_id=f"start-{index}"
                )
                for step in range(events - 1):
                    uow.runs.transition(
                        run.run_id, "paused", operation_id=f"p-{index}-{step}", code="bench"
                    )
    store.close()
    return url


def bench_store(
    engine: Engine, runs: int, events: int, jobs: list[int], rounds: int
) -> dict[str, Any]:
    url = build_store(engine, runs, events)
    store = RunStore(url)
    total = runs * events
    checks = verify_runs(store, jobs=1)  # warm, and proves the store verifies
    assert len(checks) == runs
    samples: dict[int, list[float]] = {n: [] for n in jobs}
    order = list(jobs)
    cpu: dict[int, list[float]] = {n: [] for n in jobs}
    critical: dict[int, list[float]] = {n: [] for n in jobs}
    for _ in range(rounds):
        random.shuffle(order)
        for n in order:
            wall, own, workers = _timed(lambda n=n: verify_runs(store, jobs=n))
            samples[n].append(wall)
            cpu[n].append(own + workers)
            # the busiest process's CPU: the wall time when each job has a core of its own
            critical[n].append(max(own, workers / (n - 1)) if n > 1 else own)
            time.sleep(0.2)  # settle: let the workers' exit and the page cache calm down
    store.close()
    result: dict[str, Any] = {"runs": runs, "events_per_run": events, "rounds": rounds}
    for n in jobs:
        median = statistics.median(samples[n])
        result[f"jobs_{n}"] = {
            "median_s": round(median, 4),
            "events_per_s": round(total / median),
            # CPU seconds of all processes: parallelism's overhead, whatever the load
            "cpu_s": round(statistics.median(cpu[n]), 4),
            "events_per_busiest_cpu_s": round(total / statistics.median(critical[n])),
        }
    first, last = jobs[0], jobs[-1]
    if last != first:
        result[f"speedup_{last}_vs_{first}"] = round(
            statistics.median(samples[first]) / statistics.median(samples[last]), 3
        )
    return result


def table(results: dict[str, Any]) -> str:
    rows = [("engine", "measure", "value", "target", "ok")]
    for name, section in results["engines"].items():
        one = section["one_run"]
        rows.append(
            (
                name,
                f"verify_integrity, one {one['events']}-event run (median of {one['rounds']})",
                f"{one['events_per_s']} ev/s",
                f">= {TARGET_EVENTS_PER_S}",
                "yes" if one["events_per_s"] >= TARGET_EVENTS_PER_S else "NO",
            )
        )
        rows.append((name, "  same, best round", f"{one['best_events_per_s']} ev/s", "", ""))
        rows.append((name, "  same, per CPU second", f"{one['cpu_events_per_s']} ev/s", "", ""))
        small = next(key for key in one if key.startswith("peak_mb_at_"))
        rows.append(
            (
                name,
                f"  peak Python memory at {one['events']} / {small.removeprefix('peak_mb_at_')}"
                " events",
                f"{one['peak_mb']} / {one[small]} MB",
                "flat",
                "yes" if one["peak_growth"] is not None and one["peak_growth"] < 1.5 else "NO",
            )
        )
        store = section["store"]
        for key, value in store.items():
            if key.startswith("jobs_"):
                rows.append(
                    (
                        name,
                        f"verify store {store['runs']} runs x {store['events_per_run']} events,"
                        f" {key.removeprefix('jobs_')} job(s)",
                        f"{value['events_per_s']} ev/s (CPU {value['cpu_s']} s)",
                        "",
                        "",
                    )
                )
                rows.append(
                    (
                        name,
                        "    same, per CPU second of the busiest process",
                        f"{value['events_per_busiest_cpu_s']} ev/s",
                        "",
                        "",
                    )
                )
            elif key.startswith("speedup_"):
                rows.append((name, f"  {key.replace('_', ' ')}", f"{value}x", "", ""))
    widths = [max(len(str(row[i])) for row in rows) for i in range(5)]
    lines = [
        "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def run(
    engines: list[str],
    quick: bool,
    rounds: int | None = None,
    *,
    pg_url: str | None = None,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Both workloads on each engine (also called by `python -m benchmarks`, which passes
    its PostgreSQL server and work directory)."""
    events, small = (10_000, 5_000) if quick else (50_000, 5_000)
    runs = 200 if quick else 1_000
    results: dict[str, Any] = {
        "mode": "quick" if quick else "full",
        "machine": machine(),
        "target_events_per_s": TARGET_EVENTS_PER_S,
        "cadence_1x": CADENCE_1X,
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "engines": {},
    }
    with ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cadence-v-")))
        if pg_url is None and "postgresql" in engines:
            pg_url = stack.enter_context(postgres_server())
        for name in engines:
            engine = Engine(name, workdir, pg_url)
            engine.count = 1_000  # database names apart from those of `python -m benchmarks`
            print(f"[{name}] verify_integrity on one {events}-event run ...", flush=True)
            section = {"one_run": bench_one_run(engine, events, small, rounds or 5)}
            print(f"[{name}] verify a store of {runs} runs x 100 events, 1 and 2 jobs ...")
            section["store"] = bench_store(engine, runs, 100, JOBS, rounds or 5)
            results["engines"][name] = section
    # a shared machine: the load says how much of it these numbers had
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.verify", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, seconds per engine")
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds (default 5)")
    parser.add_argument("--out", default=str(HERE / "verify-results.json"))
    args = parser.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    results = run(engines, args.quick, args.rounds)
    print()
    print(table(results))
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
