"""cadence-store benchmarks: `python -m benchmarks [--quick] [--engines sqlite,postgresql]`.

Prints a table and writes `benchmarks/results.json` and `benchmarks/append-cost.png`
(with matplotlib, the `bench` extra). Compared variants run interleaved in one process,
in a fresh random order every round, with a settle pause after long calls; the report
gives medians and ratios of medians, and a write+fsync of the same disk runs among the
transition variants so that a slow stretch of the disk is visible (`common.py`).

The library is measured as installed without the `otel` extra: run as a program, this
starts again with `CADENCE_BENCH_OTEL=absent` (`no_otel.py`; `--otel`: as this
environment has it). What the extra costs is the telemetry section's.

cadence 1.x's figures (`CADENCE_1X`) were measured in a separate harness (Node 24,
`node:sqlite`, the same machine kind); they are drawn on the chart as published, not
re-measured here.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import queue
import statistics
import sys
import tempfile
import time
import tracemalloc
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import sqlalchemy

from cadence_store import RunStore
from cadence_store.repository.run_repository import system_clock

from .common import (
    HERE,
    ROOT_HASH,
    Engine,
    FsyncReference,
    grow,
    interleave,
    machine,
    median_ms,
    open_store,
    paused_run,
    postgres_server,
    settle,
    timed,
)
from .no_otel import rerun_as_installed
from .sqlite_gap import FLOOR_OF, OTEL_STORE, bench_sqlite_gap
from .telemetry import PER_ROUND, QUICK_ROUNDS, ROUNDS, bench_telemetry
from .telemetry import table as telemetry_table
from .workers import contender

TARGETS: dict[str, Any] = {
    # SQLite: the store opened by a URL, side by side with the floor and eventsourcing
    # (`sqlite_gap.py`); PostgreSQL: the store against the floor (`bench_transition`)
    "transition_ratio": {"sqlite": 1.15, "postgresql": 1.0},
    # the store's layers: the store against the floor doing the contract's own work
    "transition_vs_contract_floor": 1.10,
    "append_flatness": 1.2,
    "start_run_flatness": 1.2,
    "batching_ratio": {"sqlite": 0.12, "postgresql": 0.10},
    "verify_events_per_s": 255_000,
    "verify_peak_mb": 100,
    "contention_ratio_4p": 0.8,
    "fenced_clock_ratio": 1.05,
}
# Published figures, measured in a separate harness: cadence 1.x's TypeScript
# RunStore on Node 24's node:sqlite (an append rewrites the run from its whole chain).
CADENCE_1X: dict[str, Any] = {
    "append_ms": {"3000": 13.0, "10000": 47.0},
    "start_run_ms": {"20000": 12.9},
    "verify_events_per_s": 170_000,
}


# -- workloads ---------------------------------------------------------------------------


def bench_transition(engine: Engine, rounds: int, per_round: int) -> dict[str, Any]:
    """A durable transition on PostgreSQL: cadence-store against the hand-written floor,
    each with and without statements prepared on the server, and the disk's write+fsync as
    a reference, interleaved.

    `store` is the store's default (statements prepared on the server from their second
    use, nothing behind a pooler: `docs/reference/engines.md`), `store_prepared` the URL
    with `?prepare_threshold=5`; `floor` is psycopg's default (prepares after five uses),
    `floor_unprepared` the floor with nothing prepared. The defaults are compared, as a
    new user meets them."""
    url = engine.fresh_url()
    store = open_store(url)
    prepared_url = sqlalchemy.make_url(url).update_query_dict({"prepare_threshold": "5"})
    store_prepared = RunStore(
        prepared_url.render_as_string(hide_password=False), root_hash=ROOT_HASH
    )
    floor = engine.floor(url)
    floor_unprepared = engine.floor(url, prepare_threshold=None)
    fsync = FsyncReference(engine.workdir)
    runs = {
        name: paused_run(store, name)
        for name in ("store", "store_prepared", "floor", "floor_unprepared")
    }

    def through_store(each: RunStore, run_id: str) -> Any:
        return lambda n: each.transition(run_id, "paused", operation_id=f"t-{n}", code="bench")

    def through_floor(each: Any, run_id: str) -> Any:
        return lambda n: each.transition(run_id, f"t-{n}", "paused", "bench")

    settle()
    samples = interleave(
        {
            "store": through_store(store, runs["store"]),
            "store_prepared": through_store(store_prepared, runs["store_prepared"]),
            "floor": through_floor(floor, runs["floor"]),
            "floor_unprepared": through_floor(floor_unprepared, runs["floor_unprepared"]),
            "fsync": fsync,
        },
        rounds=rounds,
        per_round=per_round,
    )
    for run_id in runs.values():
        store.verify_integrity(run_id)  # the floors wrote chains our verifier accepts
    fsync.close()
    floor.close()
    floor_unprepared.close()
    store_prepared.close()
    store.close()
    medians = {name: median_ms(values) for name, values in samples.items()}
    fsync_sorted = sorted(samples["fsync"])
    return {
        "store_ms": round(medians["store"], 4),
        "floor_ms": round(medians["floor"], 4),
        "ratio": round(medians["store"] / medians["floor"], 3),
        "floor_unprepared_ms": round(medians["floor_unprepared"], 4),
        "store_prepared_ms": round(medians["store_prepared"], 4),
        "floor_prepared_ms": round(medians["floor"], 4),
        "prepared_ratio": round(medians["store_prepared"] / medians["floor"], 3),
        "fsync_ms": round(medians["fsync"], 4),
        "fsync_p90_ms": round(fsync_sorted[int(len(fsync_sorted) * 0.9)] * 1000, 4),
        "samples": len(samples["store"]),
    }


def bench_fenced_transition(engine: Engine, rounds: int, per_round: int) -> dict[str, Any]:
    """A transition fenced by a lease, with lease time by the PostgreSQL server's clock
    (no `clock=`, folded into the operation row's locking SELECT) against the caller's
    clock (an explicit `clock=`), interleaved."""
    url = engine.fresh_url()
    stores = {
        "server_clock": open_store(url),
        "caller_clock": RunStore(url, root_hash=ROOT_HASH, clock=system_clock),
    }
    leased = {}
    for name, store in stores.items():
        run_id = paused_run(store, f"fenced-{name}")
        leased[name] = (run_id, store.acquire_lease(run_id, "hold", 3_600_000))

    def fenced(name: str) -> Any:
        store = stores[name]
        run_id, lease = leased[name]
        return lambda n: store.transition(
            run_id, "paused", operation_id=f"f-{n}", code="bench", lease=lease
        )

    samples = interleave(
        {name: fenced(name) for name in stores}, rounds=rounds, per_round=per_round
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
    """One durable append to chains of each length, cadence-store and the floor."""
    url = engine.fresh_url()
    store = open_store(url)
    floor = engine.floor(url)
    runs = {}
    for length in lengths:
        for variant in ("store", "floor"):
            run_id = paused_run(store, f"{variant}-{length}")
            grow(store, run_id, max(0, length - 2), f"{variant}-{length}")
            runs[(variant, length)] = run_id
    settle(url)

    def append(variant: str, length: int) -> Any:
        run_id = runs[(variant, length)]
        if variant == "store":
            return lambda n: store.transition(run_id, "paused", operation_id=f"a-{n}", code="x")
        return lambda n: floor.transition(run_id, f"a-{n}", "paused", "x")

    samples = interleave(
        {f"{variant}@{length}": append(variant, length) for variant, length in runs},
        rounds=rounds,
        per_round=per_round,
    )
    floor.close()
    store.close()
    result: dict[str, Any] = {
        variant + "_ms": {str(n): round(median_ms(samples[f"{variant}@{n}"]), 4) for n in lengths}
        for variant in ("store", "floor")
    }
    first, last = str(lengths[0]), str(lengths[-1])
    result["flatness"] = round(result["store_ms"][last] / result["store_ms"][first], 3)
    return result


def bench_start_run(
    engine: Engine, sizes: list[int], rounds: int, repetitions: int = 3
) -> dict[str, Any]:
    """`start_run` in stores already holding `sizes` runs, and in a second store of the
    smallest size (the control: its ratio is what the method's noise alone gives).

    The calls alternate one by one in a fresh random order (`per_round=1`): with blocks of
    calls, a slow stretch of this shared machine lands on one store's block and passes for
    its cost (blocks of 20 gave 0.6-1.3x between two runs of the same stores). Each
    repetition gives a ratio to the smallest store; the verdict takes the median of them."""
    stores = {}
    urls = []
    labels = [str(size) for size in sizes] + [f"{sizes[0]}-control"]
    for label in labels:
        size = int(label.split("-")[0])
        urls.append(engine.fresh_url())
        store = open_store(urls[-1])
        created = 0
        while created < size:
            batch = min(2_000, size - created)
            with store.unit_of_work() as uow:
                for index in range(created, created + batch):
                    uow.runs.start_run(
                        "abel-implement", change=f"bulk-{index}", operation_id=f"bulk-{index}"
                    )
            created += batch
        stores[label] = store
    settle(*urls)
    wal = {
        label: wal_bytes_per_start(engine, store, url)
        for (label, store), url in zip(stores.items(), urls, strict=True)
    }
    settle(*urls)

    def start(label: str) -> Any:
        store = stores[label]
        return lambda n: store.start_run("abel-implement", change=f"new-{n}", operation_id=f"n{n}")

    repeated: list[dict[str, float]] = []
    for _ in range(repetitions):
        samples = interleave({label: start(label) for label in labels}, rounds=rounds, per_round=1)
        repeated.append({label: median_ms(values) for label, values in samples.items()})
    for store in stores.values():
        store.close()
    base = str(sizes[0])
    ratios = {
        label: sorted(medians[label] / medians[base] for medians in repeated)
        for label in labels[1:]
    }
    return {
        "start_run_ms": {
            label: round(statistics.median(m[label] for m in repeated), 4) for label in labels
        },
        "flatness": {label: round(values[len(values) // 2], 3) for label, values in ratios.items()},
        "flatness_each_repetition": {
            label: [round(value, 3) for value in values] for label, values in ratios.items()
        },
        "wal_bytes_per_start_run": wal,
        "calls_per_repetition": rounds,
    }


def wal_bytes_per_start(engine: Engine, store: Any, url: str, calls: int = 50) -> float | None:
    """PostgreSQL: the WAL one `start_run` writes, from the server's WAL insert position
    around `calls` calls (nothing else writes to the cluster meanwhile)."""
    if engine.name != "postgresql":
        return None
    watcher = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with watcher.connect() as connection:
            position = "SELECT pg_current_wal_insert_lsn()"
            before = connection.exec_driver_sql(position).scalar()
            for index in range(calls):
                store.start_run("abel-implement", change=f"wal-{index}", operation_id=f"w{index}")
            written = connection.exec_driver_sql(
                f"SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '{before}')"
            ).scalar()
    finally:
        watcher.dispose()
    return round(float(written) / calls, 1)


def bench_batching(engine: Engine, rounds: int, batches: list[int]) -> dict[str, Any]:
    """N transitions in one unit of work (cost per transition) against single calls: N
    calls of `uow.runs.transition`, and one `uow.runs.transition_many` of N requests."""
    store = open_store(engine.fresh_url())
    run_id = paused_run(store, "batching")
    settle()

    def single(n: int) -> None:
        store.transition(run_id, "paused", operation_id=f"s-{n}")

    def calls(size: int) -> Any:
        def call(n: int) -> None:
            with store.unit_of_work() as uow:
                for index in range(size):
                    uow.runs.transition(run_id, "paused", operation_id=f"b-{n}-{index}")

        return call

    def batch(size: int) -> Any:
        def call(n: int) -> None:
            requests = [
                {"run_id": run_id, "to": "paused", "operation_id": f"m-{n}-{index}"}
                for index in range(size)
            ]
            with store.unit_of_work() as uow:
                uow.runs.transition_many(requests)

        return call

    variants = (
        {"single": single}
        | {str(size): calls(size) for size in batches}
        | {f"many-{size}": batch(size) for size in batches}
    )
    samples = interleave(variants, rounds=rounds, per_round=5)
    store.verify_integrity(run_id)
    store.close()
    single_ms = median_ms(samples["single"])
    per_op = {str(size): median_ms(samples[str(size)]) / size for size in batches}
    many_per_op = {str(size): median_ms(samples[f"many-{size}"]) / size for size in batches}
    return {
        "single_ms": round(single_ms, 4),
        "batched_ms_per_op": {size: round(ms, 4) for size, ms in per_op.items()},
        "ratio": {size: round(ms / single_ms, 3) for size, ms in per_op.items()},
        "many_ms_per_op": {size: round(ms, 4) for size, ms in many_per_op.items()},
        "many_ratio": {size: round(ms / single_ms, 3) for size, ms in many_per_op.items()},
    }


def bench_verify(engine: Engine, events: int) -> dict[str, Any]:
    store = open_store(engine.fresh_url())
    run_id = paused_run(store, "verify")
    grow(store, run_id, events - 2, "verify")
    settle()
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


# -- report ------------------------------------------------------------------------------


def ok(condition: bool) -> str:
    return "met" if condition else "not met"


def side_by_side_rows(gap: dict[str, Any], limit: float) -> list[tuple[str, ...]]:
    """The SQLite side by side of one mode (`sqlite_gap.py`): every way to open the store
    against the floor and eventsourcing, and where the time goes (CPU, waiting)."""
    medians, ratios, cpu, wait = gap["median_ms"], gap["ratios"], gap["cpu_ms"], gap["wait_ms"]
    frames = gap["wal_frames_per_commit"]
    mode = gap["mode"]
    layers_limit = TARGETS["transition_vs_contract_floor"]
    rows: list[tuple[str, ...]] = [
        (
            f"durable transition ({mode}): opentelemetry in the store's process",
            "importable" if gap["opentelemetry"] else "not importable (as without `otel`)",
            "",
            "",
        )
    ]
    for system, floor in FLOOR_OF.items():
        rows.append(
            (
                f"durable transition ({mode}), {system}/{floor} ms "
                f"({medians[system]}/{medians[floor]})",
                f"{ratios[f'{system}/{floor}']}x",
                f"<= {limit}x",
                ok(ratios[f"{system}/{floor}"] <= limit),
            )
        )
        if gap["eventsourcing"]:
            rows.append(
                (
                    f"durable transition ({mode}), {system}/eventsourcing SQLite recorder ms "
                    f"({medians[system]}/{medians['eventsourcing']})",
                    f"{ratios[f'{system}/eventsourcing']}x",
                    "",
                    "",
                )
            )
    if OTEL_STORE in medians:
        rows.append(
            (
                f"durable transition ({mode}), {OTEL_STORE} (the otel extra, no provider)"
                f"/floor ms ({medians[OTEL_STORE]}/{medians['floor']})",
                f"{ratios[f'{OTEL_STORE}/floor']}x",
                "",
                "",
            )
        )
    if "floor_contract" in medians:
        # the bound: the contract's own work by hand, without the library's layers
        rows.append(
            (
                f"durable transition ({mode}), floor_contract/floor ms "
                f"({medians['floor_contract']}/{medians['floor']}): the contract's own work",
                f"{ratios['floor_contract/floor']}x",
                "",
                "",
            )
        )
        rows.append(
            (
                f"durable transition ({mode}), store_url/floor_contract: the layers' cost",
                f"{ratios['store_url/floor_contract']}x",
                f"<= {layers_limit}x",
                ok(ratios["store_url/floor_contract"] <= layers_limit),
            )
        )
        if gap["eventsourcing"]:
            rows.append(
                (
                    f"durable transition ({mode}), floor_contract/eventsourcing: the bound "
                    "of any layering of the contract",
                    f"{ratios['floor_contract/eventsourcing']}x",
                    "",
                    "",
                )
            )
    rows.append(
        (
            f"durable transition ({mode}), floor_engine/floor (a plain pool's checkout)",
            f"{ratios['floor_engine/floor']}x",
            "",
            "",
        )
    )
    if not gap["eventsourcing"]:
        rows.append(("eventsourcing SQLite recorder", "skipped", "pip install eventsourcing", ""))
    rows.append(
        (
            f"CPU / wait per call ({mode}), store_url vs floor",
            f"{cpu['store_url']} / {wait['store_url']} vs {cpu['floor']} / {wait['floor']} ms",
            "",
            "",
        )
    )
    rows.append(
        (
            "WAL frames per commit: store / floor / eventsourcing",
            f"{frames['store_url']} / {frames['floor']} / {frames.get('eventsourcing', '-')}",
            "",
            "",
        )
    )
    rows.append(("reference: 4 KiB write+fsync, median", f"{medians['fsync']} ms", "", ""))
    return rows


def engine_rows(name: str, section: dict[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    limit = TARGETS["transition_ratio"][name]
    if "side_by_side" in section:
        for key in ("side_by_side", "side_by_side_processes"):
            if key in section:
                rows.extend(side_by_side_rows(section[key], limit))
    else:
        t = section["transition"]
        rows.append(
            (
                "durable transition, each as it comes (psycopg's defaults), store/floor ms "
                f"({t['store_ms']}/{t['floor_ms']})",
                f"{t['ratio']}x",
                f"<= {limit}x",
                ok(t["ratio"] <= limit),
            )
        )
        if "prepared_ratio" in t:
            rows.append(
                (
                    "durable transition, prepared (`?prepare_threshold=5`), store/floor ms "
                    f"({t['store_prepared_ms']}/{t['floor_prepared_ms']})",
                    f"{t['prepared_ratio']}x",
                    f"<= {limit}x",
                    ok(t["prepared_ratio"] <= limit),
                )
            )
        rows.append(
            (
                "reference: 4 KiB write+fsync, median / p90",
                f"{t['fsync_ms']} / {t['fsync_p90_ms']} ms",
                "",
                "",
            )
        )
    b = section["batching"]
    largest = list(b["ratio"])[-1]
    batch_limit = TARGETS["batching_ratio"][name]
    for ratios, per_op, how in (
        ("ratio", "batched_ms_per_op", "calls of transition"),
        ("many_ratio", "many_ms_per_op", "one transition_many"),
    ):
        for size, ratio in b.get(ratios, {}).items():
            rows.append(
                (
                    f"batch of {size} in one unit of work ({how}), per transition "
                    f"({b[per_op][size]} ms; single {b['single_ms']} ms)",
                    f"{ratio}x",
                    f"<= {batch_limit}x" if size == largest else "",
                    ok(ratio <= batch_limit) if size == largest else "",
                )
            )
    a = section["append"]
    for length, value in a["store_ms"].items():
        published = CADENCE_1X["append_ms"].get(length) if name == "sqlite" else None
        versus = f"; cadence 1.x {published} ms" if published else ""
        rows.append(
            (
                f"append at {length} events (floor {a['floor_ms'][length]} ms{versus})",
                f"{value} ms",
                "",
                f"{published / value:.0f}x faster" if published else "",
            )
        )
    rows.append(
        (
            "append flatness (longest/shortest)",
            f"{a['flatness']}x",
            f"<= {TARGETS['append_flatness']}x",
            ok(a["flatness"] <= TARGETS["append_flatness"]),
        )
    )
    s = section["start_run"]
    sizes = list(s["start_run_ms"])
    for size, value in s["start_run_ms"].items():
        published = CADENCE_1X["start_run_ms"].get(size) if name == "sqlite" else None
        wal = s.get("wal_bytes_per_start_run", {}).get(size)
        notes = [f"cadence 1.x {published} ms"] if published else []
        notes += [f"{wal} B of WAL each"] if wal is not None else []
        rows.append(
            (
                f"start_run with {size} runs" + (f" ({'; '.join(notes)})" if notes else ""),
                f"{value} ms",
                "",
                f"{published / value:.0f}x faster" if published else "",
            )
        )
    for size, flatness in s["flatness"].items():
        each = ", ".join(str(v) for v in s["flatness_each_repetition"][size])
        control = size.endswith("-control")
        rows.append(
            (
                f"start_run at {size} runs / at {sizes[0]} runs, median of ({each})",
                f"{flatness}x",
                "" if control else f"<= {TARGETS['start_run_flatness']}x",
                "" if control else ok(flatness <= TARGETS["start_run_flatness"]),
            )
        )
    v = section["verify"]
    rows.append(
        (
            f"verify_integrity, one run of {v['events']} events",
            f"{v['events_per_s']} ev/s",
            f">= {TARGETS['verify_events_per_s']}",
            ok(v["events_per_s"] >= TARGETS["verify_events_per_s"]),
        )
    )
    rows.append(
        (
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
                (f"contended appends, {key} process(es)", f"{value['appends_per_s']}/s", "", "")
            )
    rows.append(
        (
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
                f"fenced transition, server/caller clock ms "
                f"({f['server_clock_ms']}/{f['caller_clock_ms']})",
                f"{f['ratio']}x",
                f"<= {TARGETS['fenced_clock_ratio']}x",
                ok(f["ratio"] <= TARGETS["fenced_clock_ratio"]),
            )
        )
    return rows


def table(results: dict[str, Any]) -> str:
    rows = [("engine", "measure", "value", "target", "ok")]
    for name, section in results["engines"].items():
        rows.extend((name, *row) for row in engine_rows(name, section))
    widths = [max(len(str(row[i])) for row in rows) for i in range(5)]
    lines = [
        "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def chart(results: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, (appends, starts) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, section in results["engines"].items():
        append = section["append"]
        lengths = [int(n) for n in append["store_ms"]]
        appends.plot(
            lengths, list(append["store_ms"].values()), marker="o", label=f"cadence-store ({name})"
        )
        appends.plot(
            lengths,
            list(append["floor_ms"].values()),
            marker="x",
            linestyle="--",
            label=f"hand-written DB-API floor ({name})",
        )
        start = {
            size: ms
            for size, ms in section["start_run"]["start_run_ms"].items()
            if size.isdigit()  # not the control store
        }
        starts.plot(
            [int(n) for n in start],
            list(start.values()),
            marker="o",
            label=f"cadence-store ({name})",
        )
    published = CADENCE_1X["append_ms"]
    label_1x = "cadence 1.x, published\n(separate harness, Node 24)"
    appends.plot(
        [int(n) for n in published],
        list(published.values()),
        marker="s",
        color="black",
        label=label_1x,
    )
    starts.plot(
        [int(n) for n in CADENCE_1X["start_run_ms"]],
        list(CADENCE_1X["start_run_ms"].values()),
        marker="s",
        linestyle="none",
        color="black",
        label=label_1x,
    )
    for axis in (appends, starts):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.legend(fontsize=7)
    appends.set_xlabel("events already in the chain")
    appends.set_ylabel("median durable append (ms, log)")
    appends.set_title("Append: O(N) in cadence 1.x, O(1) here")
    starts.set_xlabel("runs already in the store")
    starts.set_ylabel("median start_run (ms, log)")
    starts.set_title("start_run against store size")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, a few minutes")
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--out", default=str(HERE / "results.json"))
    parser.add_argument(
        "--otel",
        action="store_true",
        help="opentelemetry as installed here (default: hidden, as without the otel extra)",
    )
    args = parser.parse_args(argv)
    if argv is None:
        rerun_as_installed("benchmarks", sys.argv[1:])
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    quick = args.quick
    lengths = [10, 1_000, 3_000, 10_000] if quick else [10, 1_000, 3_000, 10_000, 100_000]
    sizes = [200, 20_000] if quick else [200, 20_000, 100_000]
    results: dict[str, Any] = {
        "mode": "quick" if quick else "full",
        "machine": machine(),
        "targets": TARGETS,
        "cadence_1x_published": CADENCE_1X,
        "engines": {},
    }
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cadence-bench-")))
        pg_url = stack.enter_context(postgres_server()) if "postgresql" in engines else None
        for name in engines:
            engine = Engine(name, workdir, pg_url)
            section: dict[str, Any] = {}
            if name == "sqlite":
                print(
                    f"[{name}] durable transition: floor, eventsourcing, the store by URL,"
                    " RunStore.open and Engine, write+fsync ...",
                    flush=True,
                )
                gap = bench_sqlite_gap(workdir, rounds=400 if quick else 1500)
                section["side_by_side"] = gap
                print(f"[{name}] the same, one process per system ...", flush=True)
                section["side_by_side_processes"] = bench_sqlite_gap(
                    workdir, rounds=400 if quick else 1500, processes=True
                )
                section["transition"] = {
                    "store_ms": gap["median_ms"]["store_url"],
                    "floor_ms": gap["median_ms"]["floor"],
                    "ratio": gap["ratios"]["store_url/floor"],
                    "fsync_ms": gap["median_ms"]["fsync"],
                }
            else:
                print(f"[{name}] durable transition vs floor vs write+fsync ...", flush=True)
                section["transition"] = bench_transition(
                    engine, rounds=400 if quick else 1500, per_round=1
                )
            print(f"[{name}] unit_of_work batching ...", flush=True)
            section["batching"] = bench_batching(
                engine, rounds=10 if quick else 30, batches=[10, 100]
            )
            print(f"[{name}] append cost vs chain length {lengths} ...", flush=True)
            section["append"] = bench_append_flatness(
                engine, lengths, rounds=5 if quick else 10, per_round=20
            )
            print(f"[{name}] start_run cost vs runs {sizes} ...", flush=True)
            section["start_run"] = bench_start_run(engine, sizes, rounds=100 if quick else 300)
            print(f"[{name}] verify_integrity ...", flush=True)
            section["verify"] = bench_verify(engine, 20_000 if quick else 50_000)
            print(f"[{name}] telemetry: none / API only / SDK, side by side ...", flush=True)
            section["telemetry"] = bench_telemetry(
                engine, rounds=QUICK_ROUNDS if quick else ROUNDS, per_round=PER_ROUND
            )
            print(f"[{name}] contention 1/2/4 processes ...", flush=True)
            section["contention"] = bench_contention(
                engine, [1, 2, 4], appends=100 if quick else 300
            )
            if name == "postgresql":
                print(f"[{name}] fenced transition: server clock vs caller clock ...", flush=True)
                section["fenced_transition"] = bench_fenced_transition(
                    engine, rounds=10 if quick else 30, per_round=50 if quick else 100
                )
                with sqlalchemy.create_engine(pg_url or "").connect() as connection:
                    results["machine"]["postgresql"] = connection.exec_driver_sql(
                        "SHOW server_version"
                    ).scalar()
            results["engines"][name] = section
        print("verification (benchmarks.verify) ...", flush=True)
        from . import verify as verification

        results["verification"] = verification.run(
            engines, quick, rounds=3 if quick else 5, pg_url=pg_url, workdir=workdir
        )
    print()
    print(table(results))
    print()
    print(verification.table(results["verification"]))
    print()
    print(
        telemetry_table(
            {name: section["telemetry"] for name, section in results["engines"].items()}
        )
    )
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    if chart(results, HERE / "append-cost.png"):
        print(f"wrote {HERE / 'append-cost.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
