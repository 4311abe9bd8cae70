"""One writer process of the deployment campaigns (tests/reliability/test_deployment.py).

``python pooler_writer.py URL RUN_ID PREFIX LOG STOP MODE FAILOVER_TIMEOUT_S`` writes to
RUN_ID through its own store on URL, with the store's default settings but for
`failover_timeout_s`, until the file STOP exists. MODE: ``sync`` (`RunStore`), ``async``
(`AsyncRunStore`) or ``schema:NAME`` (`RunStore(schema=NAME)`). Each round is a
transition (operation PREFIX-N), and every fourth round on a sync store also a lease
(acquire, commit: operation PREFIX-lease-N) and a read of the run's status (async: its
events). It never
retries by itself. Every call is a line in LOG, flushed at once:

    call <kind> <op> <unix time>
    ack <kind> <op> <unix time> <seconds>
    fail <kind> <op> <unix time> <seconds> <code>
"""

from __future__ import annotations

import asyncio
import functools
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

from cadence_store import AsyncRunStore, CadenceStoreError, RunStore

ROOT_HASH = "ab" * 32


class Log:
    def __init__(self, out: TextIO) -> None:
        self._out = out

    def call(self, kind: str, operation_id: str, action: Callable[[], Any]) -> Any:
        started = self._start(kind, operation_id)
        try:
            result = action()
        except CadenceStoreError as error:
            self._end(f"fail {kind} {operation_id}", started, error.code)
            return None
        self._end(f"ack {kind} {operation_id}", started)
        return result

    async def acall(
        self, kind: str, operation_id: str, action: Callable[[], Awaitable[Any]]
    ) -> Any:
        started = self._start(kind, operation_id)
        try:
            result = await action()
        except CadenceStoreError as error:
            self._end(f"fail {kind} {operation_id}", started, error.code)
            return None
        self._end(f"ack {kind} {operation_id}", started)
        return result

    def _start(self, kind: str, operation_id: str) -> float:
        self._out.write(f"call {kind} {operation_id} {time.time():.6f}\n")
        self._out.flush()
        return time.monotonic()

    def _end(self, head: str, started: float, code: str = "") -> None:
        elapsed = time.monotonic() - started
        self._out.write(f"{head} {time.time():.6f} {elapsed:.3f} {code}".rstrip() + "\n")
        self._out.flush()


def _read(store: RunStore, run_id: str) -> Any:
    # a re-runnable read (`iter_events` streams: a lost connection ends the stream)
    return store.status(run_id)


def write_sync(store: RunStore, run_id: str, prefix: str, log: Log, stop: Path) -> None:
    number = 0
    while not stop.exists():
        operation_id = f"{prefix}-{number}"
        log.call(
            "transition",
            operation_id,
            functools.partial(
                store.transition, run_id, "paused", operation_id=operation_id, code="tick"
            ),
        )
        if number % 4 == 0:
            lease_op = f"{prefix}-lease-{number}"
            lease = log.call(
                "acquire",
                lease_op,
                functools.partial(store.acquire_lease, run_id, lease_op, 60_000),
            )
            if lease is not None:
                log.call(
                    "commit", lease_op, functools.partial(store.commit_lease, lease, {"n": number})
                )
            log.call("read", operation_id, functools.partial(_read, store, run_id))
        number += 1


async def write_async(url: str, run_id: str, prefix: str, log: Log, stop: Path) -> None:
    async with AsyncRunStore(url, root_hash=ROOT_HASH) as store:
        number = 0
        while not stop.exists():
            operation_id = f"{prefix}-{number}"
            await log.acall(
                "transition",
                operation_id,
                functools.partial(
                    store.transition, run_id, "paused", operation_id=operation_id, code="tick"
                ),
            )
            if number % 4 == 0:

                async def read() -> list[Any]:
                    return [event async for event in store.iter_events(run_id)]

                await log.acall("read", operation_id, read)
            number += 1


def main(
    url: str, run_id: str, prefix: str, log_path: str, stop_path: str, mode: str, timeout: str
) -> None:
    stop = Path(stop_path)
    with open(log_path, "a") as out:
        log = Log(out)
        if mode == "async":
            asyncio.run(write_async(url, run_id, prefix, log, stop))
            return
        schema = mode.split(":", 1)[1] if mode.startswith("schema:") else None
        with RunStore(
            url, root_hash=ROOT_HASH, schema=schema, failover_timeout_s=float(timeout)
        ) as store:
            write_sync(store, run_id, prefix, log, stop)


if __name__ == "__main__":
    main(*sys.argv[1:8])
