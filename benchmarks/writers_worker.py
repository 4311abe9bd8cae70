"""One writer process of `benchmarks.writers` (importable, for the spawn start method).

`write` opens one client (a `RunStore(url)` with its default pool and settings, or the
hand-written floor on one connection), makes one warm-up call (the connection, prepared
statements, the run's head), waits at the common barrier, then appends durable
transitions to its run for `seconds`, one after the other, each with a unique operation
id. It puts one dict on `out`: every acknowledged call's latency (ns), the measured
window's ends on the monotonic clock (shared by the machine's processes), the operation
ids acknowledged, the `run-store-busy` count and any other error by its code.
"""

from __future__ import annotations

import time
import traceback
from collections import Counter
from typing import Any

from .common import ROOT_HASH

BARRIER_TIMEOUT_S = 600.0


def _client(kind: str, url: str) -> tuple[Any, Any]:
    """(the call `(run_id, operation_id) -> None`, the client to close)."""
    if kind == "store":
        from cadence_store import RunStore

        store = RunStore(url, root_hash=ROOT_HASH)

        def call(run_id: str, operation_id: str) -> None:
            store.transition(run_id, "paused", operation_id=operation_id, code="writer")

        return call, store
    from sqlalchemy import make_url

    from .floor import PostgresFloor, SqliteFloor

    parsed = make_url(url)
    floor: Any
    if kind == "floor-sqlite":
        floor = SqliteFloor(parsed.database or "")
    else:
        plain = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
        # psycopg's default (prepare after five uses) direct; never behind the pooler
        # (PgBouncer in transaction mode keeps no prepared statements)
        floor = PostgresFloor(plain, prepare_threshold=5 if kind == "floor-pg" else None)

    def floor_call(run_id: str, operation_id: str) -> None:
        floor.transition(run_id, operation_id, "paused", "writer")

    return floor_call, floor


def _error_code(error: BaseException) -> str:
    from cadence_store.errors import CadenceStoreError

    if isinstance(error, CadenceStoreError):
        return str(error.code)
    return type(error).__name__


def write(
    kind: str, url: str, run_id: str, worker: int, tag: str, seconds: float, start: Any, out: Any
) -> None:
    report: dict[str, Any] = {"worker": worker, "run_id": run_id}
    try:
        call, client = _client(kind, url)
        warm = f"{tag}-{worker}-warm"
        call(run_id, warm)
    except BaseException as error:  # the barrier must still be met, or the others wait
        report["failed"] = "".join(traceback.format_exception(error))
        try:
            start.wait(BARRIER_TIMEOUT_S)
        finally:
            out.put(report)
        return
    latencies: list[int] = []
    acknowledged = [warm]
    errors: Counter[str] = Counter()
    start.wait(BARRIER_TIMEOUT_S)
    began = time.monotonic_ns()
    stop_at = began + int(seconds * 1e9)
    index = 0
    now = began
    while now < stop_at:
        operation_id = f"{tag}-{worker}-{index}"
        index += 1
        try:
            call(run_id, operation_id)
        except Exception as error:
            errors[_error_code(error)] += 1
            now = time.monotonic_ns()
            continue
        ended = time.monotonic_ns()
        latencies.append(ended - now)
        acknowledged.append(operation_id)
        now = ended
    client.close()
    report.update(
        began_ns=began,
        ended_ns=now,
        latencies_ns=latencies,
        acknowledged=acknowledged,
        errors=dict(errors),
    )
    out.put(report)
