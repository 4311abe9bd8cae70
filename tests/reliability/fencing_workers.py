"""Process bodies of the fencing tests (tests/reliability/test_fencing.py).

They live in an importable module so that a "spawn" child (a fresh interpreter) can
import them by name; the test module puts this directory on ``sys.path`` first, and
``multiprocessing.spawn`` hands that path to the child.

- ``skewed_attempts``: run in a process whose system clock is off (``skew_clock`` as its
  pool initializer patches ``time.time_ns`` and ``time.time`` in that process only), it
  tries what such a process would wrongly be allowed to do if its clock judged expiry.
- ``serve_campaigns``: one contender of the fencing campaign, serving campaign jobs until
  it gets None: short leases, pauses past the TTL, renew, preempt, commit, interrupt, and
  fenced host writes that record their fence; every acknowledged grant and write is a row
  of ``fence_log`` written in the same transaction, so the log's ids are in commit order
  for each operation.
"""

from __future__ import annotations

import random
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

HERE = str(Path(__file__).resolve().parent)
ROOT_HASH = "ab" * 32
BARRIER_TIMEOUT_S = 60

Report = dict[str, Any]


def skew_clock(offset_ms: int) -> None:
    """Move this process's system clock by `offset_ms` (this process only)."""
    real_ns, real_s = time.time_ns, time.time
    time.time_ns = lambda: real_ns() + offset_ms * 1_000_000  # type: ignore[assignment]
    time.time = lambda: real_s() + offset_ms / 1000  # type: ignore[assignment]


def _outcome(call: Any, *args: Any, **kwargs: Any) -> Any:
    from cadence_store import CadenceStoreError

    try:
        result = call(*args, **kwargs)
    except CadenceStoreError as error:
        return ["error", error.code]
    return ["ok", result.model_dump() if hasattr(result, "model_dump") else result]


def skewed_attempts(url: str, plan: Report) -> Report:
    """Run `plan`'s attempts (in a process whose clock `skew_clock` moved)."""
    from cadence_store import RunStore

    results: Report = {"system_now_ms": time.time_ns() // 1_000_000}
    explicit = plan.get("explicit_clock", False)
    clock = (lambda: time.time_ns() // 1_000_000) if explicit else None
    with RunStore(url, root_hash=ROOT_HASH, clock=clock) as store:
        run_id = plan["run_id"]
        if "take_over" in plan:
            operation_id = plan["take_over"]
            results["exclusive"] = _outcome(
                store.acquire_lease, run_id, operation_id, 1_000, exclusive=True
            )
            results["rejoin"] = _outcome(store.acquire_lease, run_id, operation_id, 1_000)
            results["recovered"] = store.recover_expired_leases()
            results["status"] = _outcome(store.inspect_operation, run_id, operation_id)
        if "stale_lease" in plan:
            lease = plan["stale_lease"]
            results["assert"] = _outcome(store.assert_lease, lease)
            results["renew"] = _outcome(store.renew_lease, lease, 60_000)
            results["transition"] = _outcome(
                store.transition, run_id, "paused", operation_id="skewed-write", lease=lease
            )
            results["commit"] = _outcome(store.commit_lease, lease, {"by": "skewed"})
    return results


# -- the campaign ------------------------------------------------------------------------


def fence_log_table() -> Any:
    from sqlalchemy import Column, Integer, MetaData, Table, Text

    return Table(
        "fence_log",
        MetaData(),
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("kind", Text, nullable=False),  # grant | renew | write | commit | interrupt
        Column("operation_id", Text, nullable=False),
        Column("token", Text, nullable=False),
        Column("fence", Integer, nullable=False),
        Column("worker", Integer, nullable=False),
    )


@contextmanager
def _weakened_fencing() -> Iterator[None]:
    """The deliberately weakened fence: a lease check that accepts any holder of a running
    operation (the token and fence are not compared), for the checker to catch."""
    from cadence_store.errors import LeaseFencedError
    from cadence_store.repository import leases

    def weak_assert_live(self: Any, sql: Any, lease: Any) -> Any:
        row, now = self._access.timed_operation(sql, lease.run_id, lease.operation_id, lock=True)
        if row is None or now is None or row.state != "running":
            raise LeaseFencedError("lease-fenced")
        return row, now

    sound = leases.Leases.assert_live
    leases.Leases.assert_live = weak_assert_live  # type: ignore[method-assign]
    try:
        yield
    finally:
        leases.Leases.assert_live = sound  # type: ignore[method-assign]


def serve_campaigns(index: int, barrier: Any, inbox: Any, results: Any) -> None:
    """A contender process (a `Process` target) running campaign jobs (url, params) from
    `inbox` until None; puts (job, index, counts of what it did) on `results` (the log
    holds the evidence), or (job, index, {"error": traceback})."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    while True:
        job = inbox.get()
        if job is None:
            return
        job_id, url, params = job
        try:
            with _weakened_fencing() if params.get("weakened") else nullcontext():
                report = _campaign(url, index, barrier, params)
        except BaseException as error:
            barrier.abort()
            report = {"error": "".join(traceback.format_exception(error))}
        results.put((job_id, index, report))


def _campaign(url: str, index: int, barrier: Any, params: Report) -> Report:
    from cadence_store import CadenceStoreError, RunStore

    log = fence_log_table()
    rng = random.Random(params["seed"] * 100 + index)
    ttl = params["ttl_ms"]
    run_id = params["run_id"]
    operations = [f"op-{n}" for n in range(params["operations"])]
    counts = {"grants": 0, "writes": 0, "refused": 0, "stale_refused": 0, "busy": 0}

    def record(uow: Any, kind: str, lease: Any) -> None:
        uow.session.execute(
            log.insert().values(
                kind=kind,
                operation_id=lease.operation_id,
                token=lease.token,
                fence=lease.fence,
                worker=index,
            )
        )

    with RunStore(url, root_hash=ROOT_HASH) as store:

        def fenced_write(lease: Any, kind: str = "write") -> bool:
            """A host row written only if the lease is live, in one transaction."""
            try:
                with store.unit_of_work() as uow:
                    if kind == "renew":
                        lease = uow.runs.renew_lease(lease, ttl)
                    else:
                        uow.runs.assert_lease(lease)
                    record(uow, kind, lease)
            except CadenceStoreError as error:
                if error.code == "run-store-busy":
                    counts["busy"] += 1
                    return False
                assert error.code == "lease-fenced", error.code
                counts["refused"] += 1
                return False
            counts["writes"] += 1
            return True

        if params.get("weakened"):
            # a stale holder that writes after a newer grant: worker 0 is granted, worker
            # 1 preempts, then worker 0 writes with its replaced lease
            stale = None
            if index == 0:
                stale = _grant(store, record, run_id, "weak-op", ttl, preempt=False)
            barrier.wait(timeout=BARRIER_TIMEOUT_S)
            if index == 1:
                _grant(store, record, run_id, "weak-op", ttl, preempt=True)
            barrier.wait(timeout=BARRIER_TIMEOUT_S)
            if stale is not None:
                fenced_write(stale)

        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        deadline = time.monotonic() + params["seconds"]
        while time.monotonic() < deadline:
            operation_id = rng.choice(operations)
            choice = rng.random()
            try:
                lease = _grant(
                    store,
                    record,
                    run_id,
                    operation_id,
                    ttl,
                    preempt=choice < 0.3,
                    exclusive=0.3 <= choice < 0.5,
                )
            except CadenceStoreError as error:
                assert error.code in ("operation-already-running", "run-store-busy"), error.code
                continue
            counts["grants"] += 1
            lost = False
            for _ in range(rng.randint(1, 4)):
                step = rng.random()
                if step < 0.15:
                    time.sleep(ttl * rng.uniform(1.1, 2.0) / 1000)  # a pause past the TTL
                elif step < 0.3:
                    lost = not fenced_write(lease, "renew") or lost
                    continue
                if not fenced_write(lease):
                    lost = True
                    break
            if lost:
                # a holder that lost its lease tries once more: it must be refused
                if not fenced_write(lease):
                    counts["stale_refused"] += 1
                continue
            finish = rng.random()
            try:
                with store.unit_of_work() as uow:
                    if finish < 0.4:
                        uow.runs.commit_lease(lease, {"worker": index})
                        record(uow, "commit", lease)
                    elif finish < 0.7:
                        uow.runs.interrupt_lease(lease)
                        record(uow, "interrupt", lease)
            except CadenceStoreError as error:
                assert error.code in ("lease-fenced", "run-store-busy"), error.code
    return counts


def _grant(
    store: Any,
    record: Any,
    run_id: str,
    operation_id: str,
    ttl: int,
    *,
    preempt: bool = False,
    exclusive: bool = False,
) -> Any:
    """Acquire, and log what was returned (a rejoined live lease logs its own token and
    fence again; the checker tells a new grant by its token)."""
    with store.unit_of_work() as uow:
        lease = uow.runs.acquire_lease(
            run_id, operation_id, ttl, preempt=preempt, exclusive=exclusive
        )
        record(uow, "grant", lease)
    return lease
