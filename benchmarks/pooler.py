"""Throughput through PgBouncer (transaction mode) against a direct connection.

`python -m benchmarks.pooler [--quick]`: one private PostgreSQL server
(tests/pg_cluster.py) and a private PgBouncer in front of it (tests/pg_bouncer.py:
transaction pooling, 4 server connections). Four writer threads, each with its own
`RunStore` (default settings) and its own run, append transitions for a fixed time;
the variants run side by side, interleaved in rounds (direct, pooler over its unix
socket, pooler over TCP on 127.0.0.1), so that a change in the machine's load hits them
alike. Prints a table and writes `benchmarks/pooler-results.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import make_url

from cadence_store import RunStore, upgrade

from .common import HERE, ROOT_HASH, machine, paused_run

WRITERS = 4
POOL_SIZE = 4


def _round(url: str, runs: list[str], seconds: float, tag: str) -> dict[str, float]:
    """Calls per second of `WRITERS` threads on `url`, and their median latency."""
    stores = [RunStore(url, root_hash=ROOT_HASH) for _ in runs]
    latencies: list[list[float]] = [[] for _ in runs]
    start = threading.Barrier(len(runs) + 1)
    stop_at: list[float] = []

    def write(index: int) -> None:
        store, run_id, samples = stores[index], runs[index], latencies[index]
        store.transition(run_id, "paused", operation_id=f"{tag}-{index}-warm")
        start.wait()
        number = 0
        while time.monotonic() < stop_at[0]:
            began = time.perf_counter()
            store.transition(run_id, "paused", operation_id=f"{tag}-{index}-{number}")
            samples.append(time.perf_counter() - began)
            number += 1

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(runs))]
    for thread in threads:
        thread.start()
    stop_at.append(time.monotonic() + seconds + 0.0)
    start.wait()
    began = time.monotonic()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    for store in stores:
        store.close()
    calls = sum(len(samples) for samples in latencies)
    return {
        "calls_per_s": calls / elapsed,
        "median_ms": statistics.median(s for samples in latencies for s in samples) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short round")
    parser.add_argument("--out", type=Path, default=HERE / "pooler-results.json")
    args = parser.parse_args()
    rounds, seconds = (1, 2.0) if args.quick else (3, 5.0)

    sys.path.insert(0, str(HERE.parent / "tests"))
    from pg_bouncer import pgbouncer_in_front
    from pg_cluster import throwaway_cluster

    with throwaway_cluster() as direct, pgbouncer_in_front(direct, pool_size=POOL_SIZE) as pool:
        upgrade(direct)
        database = make_url(direct).database
        variants = {
            "direct (unix socket)": direct,
            "pgbouncer transaction (unix socket)": (
                f"postgresql+psycopg://postgres@/{database}?host={pool.root}&port={pool.port}"
            ),
            "pgbouncer transaction (tcp 127.0.0.1)": pool.url,
        }
        with RunStore(direct, root_hash=ROOT_HASH) as setup:
            runs = {
                name: [paused_run(setup, f"{number}-{n}") for n in range(WRITERS)]
                for number, name in enumerate(variants)
            }
        results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        for number in range(rounds):
            for name, url in variants.items():
                results[name].append(_round(url, runs[name], seconds, f"r{number}-{name[:6]}"))

    direct_rate = statistics.median(r["calls_per_s"] for r in results["direct (unix socket)"])
    table: list[dict[str, Any]] = []
    for name, samples in results.items():
        rate = statistics.median(r["calls_per_s"] for r in samples)
        table.append(
            {
                "variant": name,
                "calls_per_s": round(rate, 1),
                "median_ms": round(statistics.median(r["median_ms"] for r in samples), 3),
                "ratio_to_direct": round(rate / direct_rate, 3),
                "rounds": [round(r["calls_per_s"], 1) for r in samples],
            }
        )
    print(f"{WRITERS} writer threads, transitions, {rounds} x {seconds:g} s per variant")
    print(f"{'variant':40} {'calls/s':>9} {'median ms':>10} {'vs direct':>10}")
    for row in table:
        print(
            f"{row['variant']:40} {row['calls_per_s']:>9.1f} {row['median_ms']:>10.3f} "
            f"{row['ratio_to_direct']:>10.3f}"
        )
    document = {
        "benchmark": "pooler",
        "writers": WRITERS,
        "pool_size": POOL_SIZE,
        "rounds": rounds,
        "seconds_per_round": seconds,
        "results": table,
        "machine": machine(),
    }
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
