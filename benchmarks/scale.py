"""Every call at size against the same call on a small store.

`python -m benchmarks.scale [--quick] [--engines sqlite,postgresql] [--sizes R:E,R:E]`

Builds two stores per engine, a small one and a large one (`--sizes`, runs:events; by
default 10,000:100,000 and 1,000,000:10,000,000, `--quick` 10,000:100,000 and
100,000:1,000,000), through the library's own write path: units of work of `start_run`
and `transition` calls (`build`). Run lengths are skewed as in use: most runs short, one
in 300 of 1,000 events, one of 50 and one of 5,000 events; one run in ten a design run,
one in 40 left validating its delivery (the rest paused); a lease acquired and committed
on one run in 100, a delivery bound on one in 50. The build's seconds are reported.

SQLite stores are cached between runs (`$CADENCE_BENCH_CACHE`, default
`~/.cache/cadence-store/scale`), keyed by the schema's head revision and the size, so a
rerun measures, not builds (a measurement adds a few runs and events to a cached store).
PostgreSQL stores are built in the throwaway cluster every run.

Each call is then timed on both stores, warm (the same call made first), `--repeat`
times on varying runs, the two stores taking turns call by call: p50 and p99, and the
large store's over the small one's. Cold-cache figures are not taken yet. Prints a
table and writes `benchmarks/scale-results.json`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

from cadence_store import RunStore, upgrade
from cadence_store.storage.schema import head_revision

from .common import ROOT_HASH, Engine, benchmark_arguments, engines_of, machine, postgres_server

FULL_SIZES: Final = ((10_000, 100_000), (1_000_000, 10_000_000))
QUICK_SIZES: Final = ((10_000, 100_000), (100_000, 1_000_000))
LONG_EVERY: Final = 300  # one run in LONG_EVERY has LONG_EVENTS events
LONG_EVENTS: Final = 1_000
DESIGN_EVERY: Final = 10
VALIDATING_EVERY: Final = 40
LEASE_EVERY: Final = 100
BINDING_EVERY: Final = 50
BATCH: Final = 500  # calls per unit of work while building
RECEIPT: Final = "c" * 64


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _short_lengths(runs: int, events: int) -> list[int]:
    """Events per run (its start included): the long runs and the 50- and 5,000-event runs
    first, the rest short, summing to `events` (at least two each)."""
    longs = max(1, runs // LONG_EVERY)
    fixed = [50, 5_000] + [LONG_EVENTS] * longs
    rest = runs - len(fixed)
    left = max(events - sum(fixed), 2 * rest)
    base, extra = divmod(left, rest)
    return fixed + [base + (1 if n < extra else 0) for n in range(rest)]


def build(store: RunStore, runs: int, events: int) -> dict[str, Any]:
    """The store's runs, in the proportions above; where its named runs are."""
    lengths = _short_lengths(runs, events)
    run_ids: list[str] = []
    for first in range(0, runs, BATCH):
        with store.unit_of_work() as uow:
            for number in range(first, min(first + BATCH, runs)):
                if number % DESIGN_EVERY == 3:
                    run = uow.runs.start_run(
                        "abel-design", provisional_key=_sha(f"k{number}"), operation_id=f"s{number}"
                    )
                else:
                    run = uow.runs.start_run(
                        "abel-implement", change=f"change-{number}", operation_id=f"s{number}"
                    )
                run_ids.append(run.run_id)
                # a long run's transitions are written in units of their own, below
                for step in range(min(lengths[number], 20) - 1):
                    uow.runs.transition(run.run_id, "paused", operation_id=f"t{number}-{step}")
    for number, length in enumerate(lengths):
        for first in range(19, length - 1, BATCH):
            with store.unit_of_work() as uow:
                for step in range(first, min(first + BATCH, length - 1)):
                    uow.runs.transition(run_ids[number], "paused", operation_id=f"t{number}-{step}")
    for number in range(VALIDATING_EVERY - 1, runs, VALIDATING_EVERY):
        store.transition(run_ids[number], "validating-delivery", operation_id=f"v{number}")
    for number in range(5, runs, LEASE_EVERY):
        lease = store.acquire_lease(run_ids[number], f"l{number}", 60_000)
        store.commit_lease(lease, {"n": number})
    for number in range(1, runs, BINDING_EVERY):
        store.bind_delivery(run_ids[number], "gate-a", 1, RECEIPT, operation_id=f"b{number}")
    return {"run_50": run_ids[0], "run_5000": run_ids[1], "runs": runs, "events": events}


def _cache_dir() -> Path:
    configured = os.environ.get("CADENCE_BENCH_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "cadence-store" / "scale"


def sqlite_store(runs: int, events: int) -> tuple[str, dict[str, Any], float | None]:
    """A cached SQLite store of the size (built now if missing): its URL, its named runs,
    and the build's seconds (None: it was cached)."""
    directory = _cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"scale-{head_revision()}-{runs}-{events}"
    path, index = directory / f"{stem}.sqlite3", directory / f"{stem}.json"
    if path.exists() and index.exists():
        return f"sqlite:///{path}", json.loads(index.read_text()), None
    building = directory / f"{stem}.building.sqlite3"
    building.unlink(missing_ok=True)
    url = f"sqlite:///{building}"
    upgrade(url)
    started = time.perf_counter()
    with RunStore(url, root_hash=ROOT_HASH) as store:
        named = build(store, runs, events)
    seconds = time.perf_counter() - started
    named["build_s"] = round(seconds, 1)
    shutil.move(str(building), str(path))
    index.write_text(json.dumps(named))
    return f"sqlite:///{path}", named, seconds


def postgresql_store(engine: Engine, runs: int, events: int) -> tuple[str, dict[str, Any], float]:
    url = engine.fresh_url()
    upgrade(url)
    started = time.perf_counter()
    with RunStore(url, root_hash=ROOT_HASH) as store:
        named = build(store, runs, events)
    return url, named, time.perf_counter() - started


def calls(store: RunStore, named: dict[str, Any]) -> dict[str, Callable[[int], object]]:
    """Each call measured, given the repetition's number (varying its run)."""
    run_ids = list(itertools.islice(store.run_ids(), 0, None, max(1, named["runs"] // 2_000)))
    rng = random.Random(7)
    picks = [rng.choice(run_ids) for _ in range(4_096)]
    deep = run_ids[int(len(run_ids) * 0.9)]
    store.read_feed(after=0, limit=1)  # numbers any unnumbered event first (PostgreSQL)
    latest = max(0, store.counts().events - 1_000)  # positions count the events from 1
    made = itertools.count()
    tag = time.time_ns()  # a cached store keeps what earlier measurements wrote

    def start_run(_n: int) -> object:
        number = next(made)
        return store.start_run(
            "abel-implement", change=f"m-{tag}-{number}", operation_id=f"m-s{tag}-{number}"
        )

    def transition(n: int) -> object:
        run_id = picks[n % len(picks)]
        return store.transition(run_id, "paused", operation_id=f"m-t{tag}-{next(made)}")

    return {
        "status": lambda n: store.status(picks[n % len(picks)]),
        "list_events (50 events)": lambda _n: store.list_events(named["run_50"]),
        "list_events (5,000 events)": lambda _n: store.list_events(named["run_5000"]),
        "run_detail": lambda n: store.run_detail(picks[n % len(picks)]),
        "list_runs (first page)": lambda _n: store.list_runs(limit=50),
        "list_runs (deep keyset page)": lambda _n: store.list_runs(limit=50, after=deep),
        "list_runs (state)": lambda _n: store.list_runs(state="validating-delivery", limit=50),
        "list_runs (stage)": lambda _n: store.list_runs(stage="abel-design", limit=50),
        "list_runs (change)": lambda n: store.list_runs(change=f"change-{(n * 7919) % 1000 + 1}"),
        "list_runs (root hash)": lambda _n: store.list_runs(root_hash=ROOT_HASH, limit=50),
        "counts": lambda _n: store.counts(),
        "inspect_operation": lambda n: store.inspect_operation(picks[n % len(picks)], "nothing"),
        "read_feed (latest 1,000)": lambda _n: store.read_feed(after=latest, limit=1_000),
        "start_run (new key)": start_run,
        "start_run (replayed id)": lambda _n: store.start_run(
            "abel-implement", change="change-2", operation_id="s2"
        ),
        "transition": transition,
    }


def measure(
    stores: dict[str, tuple[RunStore, dict[str, Any]]], repeat: int
) -> dict[str, dict[str, dict[str, float]]]:
    """Each call on every store, warm, `repeat` times, the stores taking turns in a fresh
    random order each time (a shared machine's load hits them alike): p50 and p99 ms."""
    sets = {label: calls(store, named) for label, (store, named) in stores.items()}
    figures: dict[str, dict[str, dict[str, float]]] = {label: {} for label in stores}
    order = list(stores)
    rng = random.Random(11)
    for name in next(iter(sets.values())):
        samples: dict[str, list[float]] = {label: [] for label in stores}
        for label in order:
            sets[label][name](0)  # warm
        for n in range(repeat):
            rng.shuffle(order)
            for label in order:
                started = time.perf_counter()
                sets[label][name](n)
                samples[label].append((time.perf_counter() - started) * 1000)
        for label, values in samples.items():
            values.sort()
            figures[label][name] = {
                "p50_ms": round(statistics.median(values), 4),
                "p99_ms": round(values[min(len(values) - 1, int(len(values) * 0.99))], 4),
            }
    return figures


def table(results: dict[str, Any]) -> str:
    lines = []
    for engine, section in results["engines"].items():
        small, large = section["small"], section["large"]
        lines += [
            f"{engine}: {small['runs']:,} runs / {small['events']:,} events against "
            f"{large['runs']:,} / {large['events']:,} (build {small['build_s']} s, {large['build_s']} s)",
            "",
            "| call | small p50 / p99 ms | large p50 / p99 ms | p50 ratio | p99 ratio |",
            "|---|---|---|---|---|",
        ]
        for call, figure in large["calls"].items():
            base = small["calls"][call]
            lines.append(
                f"| {call} | {base['p50_ms']} / {base['p99_ms']} | {figure['p50_ms']} / "
                f"{figure['p99_ms']} | {figure['p50_ms'] / base['p50_ms']:.2f}x | "
                f"{figure['p99_ms'] / base['p99_ms']:.2f}x |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_arguments("benchmarks.scale", "scale-results.json", description=__doc__)
    parser.add_argument("--sizes", default=None, help="runs:events,runs:events (small, large)")
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    if args.sizes:
        pairs = [tuple(int(part) for part in size.split(":")) for size in args.sizes.split(",")]
        sizes = tuple((runs, events) for runs, events in pairs)  # type: ignore[assignment]
    results: dict[str, Any] = {
        "mode": "custom" if args.sizes else "quick" if args.quick else "full",
        "sizes": [list(size) for size in sizes],
        "repeat": args.repeat,
        "machine": machine(),
        "revision": head_revision(),
        "engines": {},
    }
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cadence-scale-")))
        engines = engines_of(args)
        pg_url = stack.enter_context(postgres_server()) if "postgresql" in engines else None
        for name in engines:
            section: dict[str, Any] = {}
            databases = Engine(name, workdir, pg_url)
            for label, (runs, events) in zip(("small", "large"), sizes, strict=True):
                print(f"[{name}] {label}: {runs:,} runs / {events:,} events ...", flush=True)
                if name == "sqlite":
                    url, named, seconds = sqlite_store(runs, events)
                else:
                    url, named, seconds = postgresql_store(databases, runs, events)
                named["build_s"] = named.get("build_s") if seconds is None else round(seconds, 1)
                named["url"] = url
                section[label] = named
            print(f"[{name}] measuring, the two stores in turn ...", flush=True)
            with ExitStack() as opened:
                stores = {
                    label: (
                        opened.enter_context(RunStore(named["url"], root_hash=ROOT_HASH)),
                        named,
                    )
                    for label, named in section.items()
                }
                for label, figures in measure(stores, args.repeat).items():
                    section[label]["calls"] = figures
                    del section[label]["url"]
            results["engines"][name] = section
    print(table(results))
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
