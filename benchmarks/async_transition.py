"""Async vs sync transition cost: `python -m benchmarks.async_transition [--quick]`.

The same durable transition through `RunStore.transition` and through `await
AsyncRunStore.transition` (aiosqlite; psycopg's async mode), on one database, interleaved
in rounds in one process (the event loop otherwise idle). Prints a table, writes
`benchmarks/async-results.json`. Target: async within 1.3x of sync.

For comparison only, a third variant runs the sync store in a worker thread
(`asyncio.to_thread`): the alternative to driving the repository through run_sync.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from cadence_store import AsyncRunStore
from cadence_store.async_store import async_database_url

from .common import (
    ROOT_HASH,
    Engine,
    benchmark_arguments,
    engines_of,
    machine,
    median_ms,
    open_store,
    paused_run,
    timed,
)

TARGET = 1.3


async def _bench(engine: Engine, rounds: int, per_round: int) -> dict[str, Any]:
    url = engine.fresh_url()
    store = open_store(url)
    sync_run, async_run = paused_run(store, "sync"), paused_run(store, "async")
    thread_run = paused_run(store, "thread")
    async_url = async_database_url(url).render_as_string(hide_password=False)
    sync_ms: list[float] = []
    async_ms: list[float] = []
    thread_ms: list[float] = []
    counter = 0
    async with AsyncRunStore(async_url, root_hash=ROOT_HASH) as async_store:
        await async_store.transition(async_run, "paused", operation_id="warm", code="bench")
        loop = asyncio.get_running_loop()
        for _ in range(rounds):
            for _ in range(per_round):
                counter += 1
                op = f"t-{counter}"
                sync_ms.append(
                    timed(lambda op=op: store.transition(sync_run, "paused", operation_id=op))
                )
            for _ in range(per_round):
                counter += 1
                started = loop.time()
                await async_store.transition(async_run, "paused", operation_id=f"t-{counter}")
                async_ms.append(loop.time() - started)
            for _ in range(per_round):
                counter += 1
                started = loop.time()
                await asyncio.to_thread(
                    store.transition, thread_run, "paused", operation_id=f"t-{counter}"
                )
                thread_ms.append(loop.time() - started)
        await async_store.verify_integrity(async_run)
    store.verify_integrity(sync_run)
    store.close()
    sync_median, async_median = median_ms(sync_ms), median_ms(async_ms)
    return {
        "sync_ms": round(sync_median, 4),
        "async_ms": round(async_median, 4),
        "ratio": round(async_median / sync_median, 3),
        "thread_ms": round(median_ms(thread_ms), 4),
        "thread_ratio": round(median_ms(thread_ms) / sync_median, 3),
        "samples": len(async_ms),
    }


def table(results: dict[str, Any]) -> str:
    rows = [("engine", "sync ms", "async ms", "async/sync", "target", "ok", "to_thread/sync")]
    for name, r in results["engines"].items():
        rows.append(
            (
                name,
                str(r["sync_ms"]),
                str(r["async_ms"]),
                f"{r['ratio']}x",
                f"<= {TARGET}x",
                "yes" if r["ratio"] <= TARGET else "NO",
                f"{r['thread_ratio']}x",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = benchmark_arguments("benchmarks.async_transition", "async-results.json").parse_args(argv)
    rounds, per_round = (10, 50) if args.quick else (20, 100)
    results: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "machine": machine(),
        "target": TARGET,
        "engines": {},
    }
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cadence-bench-")))
        names = engines_of(args)
        pg_url = None
        if "postgresql" in names:
            from .common import postgres_server

            pg_url = stack.enter_context(postgres_server())
        for name in names:
            print(f"[{name}] async vs sync transition ...", flush=True)
            results["engines"][name] = asyncio.run(
                _bench(Engine(name, workdir, pg_url), rounds, per_round)
            )
    # the machine is shared: its load is part of the figures
    results["machine"]["load_average_1m"] = round(os.getloadavg()[0], 2)
    print()
    print(table(results))
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
