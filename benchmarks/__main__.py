"""cadence-store benchmarks: `python -m benchmarks [--quick] [--engines sqlite,postgresql]`.

Prints a table and writes `benchmarks/results.json` (and `benchmarks/append-cost.png`
when matplotlib is installed). Variants that are compared run interleaved in rounds in
one process, and the report gives medians and ratios of medians: this machine is shared
and noisy, so only ratios measured side by side mean anything.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import queue
import sqlite3
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy

import cadence_store
from cadence_store import RunStore, upgrade

from .floor import PostgresFloor, SqliteFloor
from .workers import contender

HERE = Path(__file__).resolve().parent
ROOT_HASH = "ab" * 32
TARGETS = {
    "transition_ratio": {"sqlite": 1.5, "postgresql": 1.3},
    "append_flatness": 1.2,
    "start_run_flatness": 1.3,
    "verify_events_per_s": 100_000,
    "verify_peak_mb": 100,
    "contention_ratio_4p": 0.8,
    "fenced_clock_ratio": 1.05,
}


# -- engines -----------------------------------------------------------------------------


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

    def floor(self, url: str) -> Any:
        if self.name == "sqlite":
            return SqliteFloor(sqlalchemy.make_url(url).database or "")
        plain = sqlalchemy.make_url(url).set(drivername="postgresql")
        return PostgresFloor(plain.render_as_string(hide_password=False))


@contextmanager
def postgres_server() -> Iterator[str]:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from pg_cluster import pg_available, throwaway_cluster

    available, reason = pg_available()
    if not available:
        raise SystemExit(f"PostgreSQL is not available: {reason}")
    with throwaway_cluster() as url:
        yield url


# -- helpers -----------------------------------------------------------------------------


def open_store(url: str) -> RunStore:
    upgrade(url)
    return RunStore(url, root_hash=ROOT_HASH)


def paused_run(store: RunStore, tag: str) -> str:
    key = __import__("hashlib").sha256(tag.encode()).hexdigest()
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


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


# -- workloads ---------------------------------------------------------------------------


def bench_transition(engine: Engine, rounds: int, per_round: int) -> dict[str, Any]:
    url = engine.fresh_url()
    store = open_store(url)
    floor = engine.floor(url)
    store_run, floor_run = paused_run(store, "store"), paused_run(store, "floor")
    store_ms: list[float] = []
    floor_ms: list[float] = []
    counter = 0
    for _ in range(rounds):
        for _ in range(per_round):
            counter += 1
            op = f"t-{counter}"
            store_ms.append(
                timed(
                    lambda op=op: store.transition(
                        store_run, "paused", operation_id=op, code="bench"
                    )
                )
            )
        for _ in range(per_round):
            counter += 1
            op = f"t-{counter}"
            floor_ms.append(timed(lambda op=op: floor.transition(floor_run, op, "paused", "bench")))
    store.verify_integrity(store_run)
    store.verify_integrity(floor_run)  # the floor wrote a chain our verifier accepts
    floor.close()
    store.close()
    store_median, floor_median = median_ms(store_ms), median_ms(floor_ms)
    return {
        "store_ms": round(store_median, 4),
        "floor_ms": round(floor_median, 4),
        "ratio": round(store_median / floor_median, 3),
        "samples": len(store_ms),
    }


def bench_fenced_transition(engine: Engine, rounds: int, per_round: int) -> dict[str, Any]:
    """A transition fenced by a lease, with lease time by the PostgreSQL server's clock
    (no `clock=`, folded into the operation row's locking SELECT) against the caller's
    clock (an explicit `clock=`, as every store judged expiry before), interleaved."""
    from cadence_store.repository import system_clock

    url = engine.fresh_url()
    stores = {
        "server_clock": open_store(url),
        "caller_clock": RunStore(url, root_hash=ROOT_HASH, clock=system_clock),
    }
    leased = {}
    for name, store in stores.items():
        run_id = paused_run(store, f"fenced-{name}")
        leased[name] = (run_id, store.acquire_lease(run_id, "hold", 3_600_000))
    samples: dict[str, list[float]] = {name: [] for name in stores}
    counter = 0
    for round_ in range(rounds):
        # alternate which variant goes first: on a busy machine the position in a round
        # showed up as a 10 % bias between two identical stores
        order = list(stores) if round_ % 2 == 0 else list(reversed(stores))
        for name in order:
            store = stores[name]
            run_id, lease = leased[name]
            for _ in range(per_round):
                counter += 1
                op = f"f-{counter}"
                samples[name].append(
                    timed(
                        lambda store=store, run_id=run_id, lease=lease, op=op: store.transition(
                            run_id, "paused", operation_id=op, code="bench", lease=lease
                        )
                    )
                )
    for store in stores.values():
        store.close()
    server, caller = median_ms(samples["server_clock"]), median_ms(samples["caller_clock"])
    return {
        "server_clock_ms": round(server, 4),
        "caller_clock_ms": round(caller, 4),
        "ratio": round(server / caller, 3),
        "samples": len(samples["server_clock"]),
    }


def bench_append_flatness(
    engine: Engine, lengths: list[int], rounds: int, per_round: int
) -> dict[str, Any]:
    url = engine.fresh_url()
    store = open_store(url)
    floor = engine.floor(url)
    runs = {}
    for length in lengths:
        for variant in ("store", "floor"):
            run_id = paused_run(store, f"{variant}-{length}")
            grow(store, run_id, max(0, length - 2), f"{variant}-{length}")
            runs[(variant, length)] = run_id
    samples: dict[tuple[str, int], list[float]] = {key: [] for key in runs}
    counter = 0
    for _ in range(rounds):
        for length in lengths:
            for _ in range(per_round):
                counter += 1
                op = f"a-{counter}"
                run_id = runs[("store", length)]
                samples[("store", length)].append(
                    timed(
                        lambda r=run_id, op=op: store.transition(
                            r, "paused", operation_id=op, code="x"
                        )
                    )
                )
                counter += 1
                op = f"a-{counter}"
                run_id = runs[("floor", length)]
                samples[("floor", length)].append(
                    timed(lambda r=run_id, op=op: floor.transition(r, op, "paused", "x"))
                )
    floor.close()
    store.close()
    result: dict[str, Any] = {
        "store_ms": {str(n): round(median_ms(samples[("store", n)]), 4) for n in lengths},
        "floor_ms": {str(n): round(median_ms(samples[("floor", n)]), 4) for n in lengths},
    }
    first, last = str(lengths[0]), str(lengths[-1])
    result["flatness"] = round(result["store_ms"][last] / result["store_ms"][first], 3)
    return result


def bench_start_run(
    engine: Engine, sizes: list[int], rounds: int, per_round: int
) -> dict[str, Any]:
    stores = {}
    for size in sizes:
        store = open_store(engine.fresh_url())
        created = 0
        while created < size:
            batch = min(2_000, size - created)
            with store.unit_of_work() as uow:
                for index in range(created, created + batch):
                    uow.runs.start_run(
                        "abel-implement", change=f"bulk-{index}", operation_id=f"bulk-{index}"
                    )
            created += batch
        stores[size] = store
    samples: dict[int, list[float]] = {size: [] for size in sizes}
    counter = 0
    for _ in range(rounds):
        for size, store in stores.items():
            for _ in range(per_round):
                counter += 1
                name = f"new-{counter}"
                samples[size].append(
                    timed(
                        lambda s=store, n=name: s.start_run(
                            "abel-implement", change=n, operation_id=n
                        )
                    )
                )
    for store in stores.values():
        store.close()
    medians = {str(size): round(median_ms(samples[size]), 4) for size in sizes}
    return {
        "start_run_ms": medians,
        "flatness": round(medians[str(sizes[-1])] / medians[str(sizes[0])], 3),
    }


def bench_verify(engine: Engine, events: int) -> dict[str, Any]:
    store = open_store(engine.fresh_url())
    run_id = paused_run(store, "verify")
    grow(store, run_id, events - 2, "verify")
    seconds = min(timed(lambda: store.verify_integrity(run_id)) for _ in range(3))
    tracemalloc.start()
    store.verify_integrity(run_id)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    store.close()
    return {
        "events": events,
        "seconds": round(seconds, 3),
        "events_per_s": round(events / seconds),
        "peak_mb": round(peak / 2**20, 2),
    }


def bench_contention(engine: Engine, processes: list[int], appends: int) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    result: dict[str, Any] = {}
    for count in processes:
        url = engine.fresh_url()
        store = open_store(url)
        run_id = paused_run(store, f"contention-{count}")
        before = store.status(run_id).sequence
        start, done = context.Barrier(count + 1), context.Queue()
        workers = [
            context.Process(target=contender, args=(url, run_id, w, appends, start, done))
            for w in range(count)
        ]
        for process in workers:
            process.start()
        start.wait()
        started = time.perf_counter()
        finished = 0
        while finished < count:
            try:
                done.get(timeout=1)
                finished += 1
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in workers):
                    raise SystemExit("a contending process failed") from None
        wall = time.perf_counter() - started
        for process in workers:
            process.join()
        after = store.verify_integrity(run_id).sequence
        store.close()
        if after - before != count * appends:
            raise SystemExit(f"lost appends: {after - before} != {count * appends}")
        result[str(count)] = {
            "appends_per_s": round(count * appends / wall, 1),
            "wall_s": round(wall, 3),
        }
    base = result[str(processes[0])]["appends_per_s"]
    result["ratio_max_to_1"] = round(result[str(processes[-1])]["appends_per_s"] / base, 3)
    return result


def bench_batching(engine: Engine, rounds: int, batch: int) -> dict[str, Any]:
    store = open_store(engine.fresh_url())
    run_id = paused_run(store, "batching")
    single: list[float] = []
    batched: list[float] = []
    counter = 0
    for _ in range(rounds):
        for _ in range(batch):
            counter += 1
            op = f"s-{counter}"
            single.append(timed(lambda op=op: store.transition(run_id, "paused", operation_id=op)))

        def many() -> None:
            nonlocal counter
            with store.unit_of_work() as uow:
                for _ in range(batch):
                    counter += 1
                    uow.runs.transition(run_id, "paused", operation_id=f"b-{counter}")

        batched.append(timed(many) / batch)
    store.verify_integrity(run_id)
    store.close()
    return {
        "batch": batch,
        "single_ms": round(median_ms(single), 4),
        "batched_ms_per_op": round(median_ms(batched), 4),
        "speedup": round(median_ms(single) / median_ms(batched), 2),
    }


# -- report ------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "sqlalchemy": sqlalchemy.__version__,
        "cadence_store": cadence_store.__version__,
    }


def table(results: dict[str, Any]) -> str:
    rows = [("engine", "measure", "value", "target", "ok")]
    for name, section in results["engines"].items():
        t = section["transition"]
        limit = TARGETS["transition_ratio"][name]
        rows.append(
            (
                name,
                f"transition store/floor ms ({t['store_ms']}/{t['floor_ms']})",
                f"{t['ratio']}x",
                f"<= {limit}x",
                ok(t["ratio"] <= limit),
            )
        )
        a = section["append"]
        for length, value in a["store_ms"].items():
            rows.append(
                (
                    name,
                    f"append at {length} events (floor {a['floor_ms'][length]} ms)",
                    f"{value} ms",
                    "",
                    "",
                )
            )
        rows.append(
            (
                name,
                "append flatness (longest/shortest)",
                f"{a['flatness']}x",
                f"<= {TARGETS['append_flatness']}x",
                ok(a["flatness"] <= TARGETS["append_flatness"]),
            )
        )
        s = section["start_run"]
        for size, value in s["start_run_ms"].items():
            rows.append((name, f"start_run with {size} runs", f"{value} ms", "", ""))
        rows.append(
            (
                name,
                "start_run flatness",
                f"{s['flatness']}x",
                f"<= {TARGETS['start_run_flatness']}x",
                ok(s["flatness"] <= TARGETS["start_run_flatness"]),
            )
        )
        v = section["verify"]
        rows.append(
            (
                name,
                f"verify_integrity ({v['events']} events)",
                f"{v['events_per_s']} ev/s",
                f">= {TARGETS['verify_events_per_s']}",
                ok(v["events_per_s"] >= TARGETS["verify_events_per_s"]),
            )
        )
        rows.append(
            (
                name,
                "verify_integrity peak memory",
                f"{v['peak_mb']} MB",
                f"< {TARGETS['verify_peak_mb']} MB",
                ok(v["peak_mb"] < TARGETS["verify_peak_mb"]),
            )
        )
        c = section["contention"]
        for key, value in c.items():
            if key != "ratio_max_to_1":
                rows.append(
                    (
                        name,
                        f"contended appends, {key} process(es)",
                        f"{value['appends_per_s']}/s",
                        "",
                        "",
                    )
                )
        rows.append(
            (
                name,
                "contention: max processes / 1 process",
                f"{c['ratio_max_to_1']}x",
                f">= {TARGETS['contention_ratio_4p']}x",
                ok(c["ratio_max_to_1"] >= TARGETS["contention_ratio_4p"]),
            )
        )
        f = section.get("fenced_transition")
        if f is not None:
            rows.append(
                (
                    name,
                    f"fenced transition, server/caller clock ms "
                    f"({f['server_clock_ms']}/{f['caller_clock_ms']})",
                    f"{f['ratio']}x",
                    f"<= {TARGETS['fenced_clock_ratio']}x",
                    ok(f["ratio"] <= TARGETS["fenced_clock_ratio"]),
                )
            )
        b = section["batching"]
        rows.append(
            (
                name,
                f"unit_of_work batching of {b['batch']} (single {b['single_ms']} ms)",
                f"{b['batched_ms_per_op']} ms/op",
                "",
                f"{b['speedup']}x",
            )
        )
    widths = [max(len(str(row[i])) for row in rows) for i in range(5)]
    lines = [
        "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def ok(condition: bool) -> str:
    return "yes" if condition else "NO"


def chart(results: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axis = plt.subplots(figsize=(7, 4))
    for name, section in results["engines"].items():
        append = section["append"]
        lengths = [int(n) for n in append["store_ms"]]
        axis.plot(
            lengths, list(append["store_ms"].values()), marker="o", label=f"cadence-store ({name})"
        )
        axis.plot(
            lengths,
            list(append["floor_ms"].values()),
            marker="x",
            linestyle="--",
            label=f"raw DB-API floor ({name})",
        )
    axis.set_xscale("log")
    axis.set_xlabel("events already in the chain")
    axis.set_ylabel("median durable append (ms)")
    axis.set_title("Append cost vs chain length")
    axis.set_ylim(bottom=0)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, under a minute per engine"
    )
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--out", default=str(HERE / "results.json"))
    args = parser.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    quick = args.quick
    lengths = [10, 1_000, 10_000] if quick else [10, 1_000, 10_000, 100_000]
    sizes = [100, 10_000] if quick else [100, 10_000, 100_000]
    results: dict[str, Any] = {
        "mode": "quick" if quick else "full",
        "machine": machine(),
        "targets": TARGETS,
        "engines": {},
    }
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cadence-bench-")))
        pg_url = stack.enter_context(postgres_server()) if "postgresql" in engines else None
        for name in engines:
            engine = Engine(name, workdir, pg_url)
            print(f"[{name}] transition vs floor ...", flush=True)
            section: dict[str, Any] = {
                "transition": bench_transition(
                    engine, rounds=10 if quick else 20, per_round=50 if quick else 100
                )
            }
            print(f"[{name}] append cost vs chain length {lengths} ...", flush=True)
            section["append"] = bench_append_flatness(
                engine, lengths, rounds=5 if quick else 10, per_round=20
            )
            print(f"[{name}] start_run cost vs runs {sizes} ...", flush=True)
            section["start_run"] = bench_start_run(
                engine, sizes, rounds=5 if quick else 10, per_round=20
            )
            print(f"[{name}] verify_integrity ...", flush=True)
            section["verify"] = bench_verify(engine, 20_000 if quick else 100_000)
            print(f"[{name}] contention 1/2/4 processes ...", flush=True)
            section["contention"] = bench_contention(
                engine, [1, 2, 4], appends=100 if quick else 300
            )
            print(f"[{name}] unit_of_work batching ...", flush=True)
            section["batching"] = bench_batching(engine, rounds=10 if quick else 30, batch=10)
            if name == "postgresql":
                print(f"[{name}] fenced transition: server clock vs caller clock ...", flush=True)
                section["fenced_transition"] = bench_fenced_transition(
                    engine, rounds=10 if quick else 30, per_round=50 if quick else 100
                )
            results["engines"][name] = section
            if pg_url is not None and name == "postgresql":
                with sqlalchemy.create_engine(pg_url).connect() as connection:
                    results["machine"]["postgresql"] = connection.exec_driver_sql(
                        "SHOW server_version"
                    ).scalar()
        print("verification (benchmarks.verify) ...", flush=True)
        from . import verify as verification

        results["verification"] = verification.run(
            engines, quick, rounds=3 if quick else 5, pg_url=pg_url, workdir=workdir
        )
    print()
    print(table(results))
    print()
    print(verification.table(results["verification"]))
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    if chart(results, HERE / "append-cost.png"):
        print(f"wrote {HERE / 'append-cost.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
