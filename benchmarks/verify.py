"""Verification benchmark: `python -m benchmarks.verify [--quick] [--engines sqlite,postgresql]`.

Two workloads per engine:

- one run of 50,000 events with a receipt per event: `verify_integrity` side by side with
  cadence 1.x's `verifyIntegrity` of the same rows (its own TypeScript store on Node 24,
  `verify_cadence1x.py`; when Node 24 or the sources are missing, the table says so and
  the published figure stands in), the two timed alternately in a fresh random order per
  round; the target is the ratio of medians (>= 1.5, stated for SQLite). Also CPU time,
  the peak of Python memory (tracemalloc) at 5,000 and at 50,000 events, which must be the
  same (the chain and its receipts are streamed, never loaded whole), and the peak RSS of
  a fresh process of each system that opens the store and verifies the run once;
- a store of 1,000 runs x 100 events: `parallel_verify.verify_runs` (what
  `cadence-store verify --jobs N` runs) at 1 and 2 jobs, interleaved in random order per
  round; events/s over the whole store, and the ratio of medians. Also per CPU second of
  the busiest process: with the kernel's autogroup scheduling, all processes of one
  session share one session's slice of a busy machine, so only an idle machine shows the
  wall-time gain; the busiest process's CPU time is what the wall time is there.

`run(...)` returns the figures with a `targets` list (measure, value, target, verdict)
for `python -m benchmarks`; run standalone, it prints a table and writes
`benchmarks/verify-results.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from cadence_store import RunStore

from .common import (
    HERE,
    Engine,
    benchmark_arguments,
    engines_of,
    grow,
    machine,
    open_store,
    paused_run,
    postgres_server,
)
from .verify_cadence1x import Cadence1x, locate

TARGET_RATIO = 1.5  # at least 1.5x cadence 1.x's verifyIntegrity, on SQLite
TARGET_JOBS_SPEEDUP = 1.3  # 2 jobs against 1 on this two-core machine
# the published figure, used (and labelled so) only when cadence 1.x cannot run here
CADENCE_1X_PUBLISHED = {"events_per_s": "104,000-125,000", "peak_rss_mb": 342}
CADENCE_1X_PUBLISHED_EVENTS_PER_S = 125_000

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


def _max_rss_mb() -> float:
    """This process's peak RSS (VmHWM). Not `ru_maxrss`: Linux carries that over from the
    parent across fork and exec, so a fresh process would report its parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux


def rss_probe(url: str, run_id: str) -> dict[str, float]:
    """Peak RSS of this (fresh) process after opening the store, and after one verify."""
    store = RunStore(url)
    store.status(run_id)
    opened = _max_rss_mb()
    store.verify_integrity(run_id)
    verified = _max_rss_mb()
    store.close()
    return {"opened_rss_mb": round(opened, 1), "peak_rss_mb": round(verified, 1)}


def _fresh_process_peak(url: str, run_id: str) -> dict[str, float]:
    probe = subprocess.run(
        [sys.executable, "-m", "benchmarks.verify", "--rss-probe", url, run_id],
        cwd=HERE.parent,
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, float] = json.loads(probe.stdout.strip().splitlines()[-1])
    return figures


def bench_one_run(
    engine: Engine,
    events: int,
    small: int,
    rounds: int,
    cadence_1x: tuple[str, Path] | str,
) -> dict[str, Any]:
    url = engine.fresh_url()
    store = open_store(url)
    long_run = paused_run(store, "verify-long")
    grow(store, long_run, events - 2, "verify-long")
    short_run = paused_run(store, "verify-short")
    grow(store, short_run, small - 2, "verify-short")
    reference: Cadence1x | None = None
    if not isinstance(cadence_1x, str):
        reference = Cadence1x(*cadence_1x, engine.workdir / f"cadence-1x-{engine.name}")
        reference.copy_from(url)
    walls: list[float] = []
    cpus: list[float] = []
    reference_walls: list[float] = []

    def ours() -> None:
        wall, cpu, _ = _timed(lambda: store.verify_integrity(long_run))
        walls.append(wall)
        cpus.append(cpu)

    def theirs() -> None:
        assert reference is not None
        reference_walls.append(reference.verify(long_run))

    contenders = [ours] if reference is None else [ours, theirs]
    for _ in range(2):  # warm: caches, the page cache, V8's JIT
        for contender in contenders:
            contender()
    walls.clear(), cpus.clear(), reference_walls.clear()
    for _ in range(rounds):
        random.shuffle(contenders)
        for contender in contenders:
            contender()
    peak_long = _peak_mb(lambda: store.verify_integrity(long_run))
    peak_short = _peak_mb(lambda: store.verify_integrity(short_run))
    store.close()
    median = statistics.median(walls)
    result: dict[str, Any] = {
        "events": events,
        "rounds": rounds,
        "median_s": round(median, 4),
        "events_per_s": round(events / median),
        "best_events_per_s": round(events / min(walls)),
        "cpu_events_per_s": round(events / statistics.median(cpus)),
        "peak_mb": peak_long,
        f"peak_mb_at_{small}": peak_short,
        "peak_growth": round(peak_long / peak_short, 3) if peak_short else None,
        "fresh_process": _fresh_process_peak(url, long_run),
    }
    if reference is None:
        result["cadence_1x"] = {"measured": False, "reason": cadence_1x}
        result["ratio_vs_cadence_1x"] = round(
            result["events_per_s"] / CADENCE_1X_PUBLISHED_EVENTS_PER_S, 3
        )
    else:
        reference_median = statistics.median(reference_walls)
        result["cadence_1x"] = {
            "measured": True,
            "median_s": round(reference_median, 4),
            "events_per_s": round(events / reference_median),
            "best_events_per_s": round(events / min(reference_walls)),
            "fresh_process": reference.fresh_process_peak_mb(long_run),
        }
        result["ratio_vs_cadence_1x"] = round(reference_median / median, 3)
        reference.close()
    return result


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


def _small(one: dict[str, Any]) -> str:
    return next(key for key in one if key.startswith("peak_mb_at_")).removeprefix("peak_mb_at_")


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with its measured value and verdict (`python -m benchmarks` prints them)."""
    rows: list[dict[str, Any]] = []
    for name, section in results["engines"].items():
        one = section["one_run"]
        measured = one["cadence_1x"]["measured"]
        ratio = one["ratio_vs_cadence_1x"]
        judged = name == "sqlite"  # the target is stated for SQLite
        rows.append(
            {
                "engine": name,
                "measure": f"verify one {one['events']}-event run / cadence 1.x"
                + ("" if measured else " (published figure: 1.x not run here)"),
                "value": ratio,
                "target": f">= {TARGET_RATIO}" if judged else "(stated for SQLite)",
                "verdict": ("yes" if ratio >= TARGET_RATIO else "NO") if judged else "-",
            }
        )
        rows.append(
            {
                "engine": name,
                "measure": f"peak Python memory, {one['events']} / {_small(one)} events",
                "value": one["peak_growth"],
                "target": "< 1.5 (flat)",
                "verdict": "yes"
                if one["peak_growth"] is not None and one["peak_growth"] < 1.5
                else "NO",
            }
        )
        speedup = section["store"].get("speedup_2_vs_1")
        if speedup is not None:
            rows.append(
                {
                    "engine": name,
                    "measure": "verify a whole store, 2 jobs / 1 job (wall)",
                    "value": speedup,
                    "target": f">= {TARGET_JOBS_SPEEDUP}",
                    "verdict": "yes" if speedup >= TARGET_JOBS_SPEEDUP else "NO",
                }
            )
    return rows


def _grid(rows: list[tuple[Any, ...]]) -> str:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def table(results: dict[str, Any]) -> str:
    verdicts = [("engine", "target", "measured", "wanted", "ok")]
    verdicts += [
        (t["engine"], t["measure"], f"{t['value']}x", t["target"], t["verdict"])
        for t in results.get("targets") or targets(results)
    ]
    rows: list[tuple[Any, ...]] = [("engine", "measure", "value")]
    for name, section in results["engines"].items():
        one = section["one_run"]
        events = one["events"]
        theirs = one["cadence_1x"]
        rows.append(
            (
                name,
                f"cadence-store verify_integrity, {events} events (median of {one['rounds']})",
                f"{one['events_per_s']} ev/s",
            )
        )
        if theirs["measured"]:
            rows.append(
                (
                    name,
                    "cadence 1.x verifyIntegrity, same rows, interleaved",
                    f"{theirs['events_per_s']} ev/s",
                )
            )
        else:
            rows.append(
                (
                    name,
                    f"cadence 1.x not measured: {theirs['reason']}",
                    f"published {CADENCE_1X_PUBLISHED['events_per_s']} ev/s",
                )
            )
        rows.append(
            (
                name,
                "  cadence-store best round / per CPU second",
                f"{one['best_events_per_s']} / {one['cpu_events_per_s']} ev/s",
            )
        )
        small = next(key for key in one if key.startswith("peak_mb_at_"))
        rows.append(
            (
                name,
                f"  peak Python memory at {events} / {small.removeprefix('peak_mb_at_')} events",
                f"{one['peak_mb']} / {one[small]} MB",
            )
        )
        fresh = one["fresh_process"]
        rows.append(
            (
                name,
                "  peak RSS of a fresh process: opened / after one verify",
                f"{fresh['opened_rss_mb']} / {fresh['peak_rss_mb']} MB",
            )
        )
        if theirs["measured"]:
            fresh = theirs["fresh_process"]
            rows.append(
                (
                    name,
                    "  same, cadence 1.x (Node)",
                    f"{fresh['opened_rss_mb']} / {fresh['peak_rss_mb']} MB",
                )
            )
        store = section["store"]
        for key, value in store.items():
            if key.startswith("jobs_"):
                rows.append(
                    (
                        name,
                        f"verify store {store['runs']} runs x "
                        f"{store['events_per_run']} events, {key.removeprefix('jobs_')}"
                        " job(s)",
                        f"{value['events_per_s']} ev/s (CPU {value['cpu_s']} s)",
                    )
                )
                rows.append(
                    (
                        name,
                        "    same, per CPU second of the busiest process",
                        f"{value['events_per_busiest_cpu_s']} ev/s",
                    )
                )
    return _grid(verdicts) + "\n\n" + _grid(rows)


def run(
    engines: list[str],
    quick: bool,
    rounds: int | None = None,
    *,
    pg_url: str | None = None,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Both workloads on each engine, with `targets` (measure, value, target, verdict).
    Also called by `python -m benchmarks`, which passes its PostgreSQL server and work
    directory."""
    events, small = (10_000, 5_000) if quick else (50_000, 5_000)
    runs = 200 if quick else 1_000
    cadence_1x = locate()
    results: dict[str, Any] = {
        "mode": "quick" if quick else "full",
        "machine": machine(),
        "target_ratio_vs_cadence_1x": TARGET_RATIO,
        "cadence_1x": (
            {"node": cadence_1x[0], "source": str(cadence_1x[1])}
            if not isinstance(cadence_1x, str)
            else {"not_measured": cadence_1x, "published": CADENCE_1X_PUBLISHED}
        ),
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "engines": {},
    }
    if isinstance(cadence_1x, str):
        print(f"cadence 1.x not measured: {cadence_1x}", flush=True)
    with ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cadence-v-")))
        if pg_url is None and "postgresql" in engines:
            pg_url = stack.enter_context(postgres_server())
        for name in engines:
            engine = Engine(name, workdir, pg_url)
            engine.count = 1_000  # database names apart from those of `python -m benchmarks`
            print(f"[{name}] verify one {events}-event run, and cadence 1.x ...", flush=True)
            section = {"one_run": bench_one_run(engine, events, small, rounds or 5, cadence_1x)}
            print(f"[{name}] verify a store of {runs} runs x 100 events, 1 and 2 jobs ...")
            section["store"] = bench_store(engine, runs, 100, JOBS, rounds or 5)
            results["engines"][name] = section
    # a shared machine: the load says how much of it these numbers had
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    results["targets"] = targets(results)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_arguments("benchmarks.verify", "verify-results.json", description=__doc__)
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds (default 5)")
    parser.add_argument("--rss-probe", nargs=2, metavar=("URL", "RUN_ID"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_probe:
        print(json.dumps(rss_probe(*args.rss_probe)))
        return 0
    engines = engines_of(args)
    results = run(engines, args.quick, args.rounds)
    print()
    print(table(results))
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
