"""Worker functions of the multi-process tests (tests/integration/test_contention.py).

They live in an importable module, not in the test file, so that a "spawn" child (a
fresh interpreter that unpickles its target by module and name) can import them: the
test module puts this directory on ``sys.path`` before it imports ``workers`` (whatever
pytest's import mode), and ``multiprocessing.spawn`` hands the parent's ``sys.path`` to
the child before it unpickles the target (``serve`` re-adds the directory in case a
caller trimmed it). test_contention checks that this really holds. Every worker:

1. is one of a few long-lived spawned processes (``serve``) that run jobs one by one,
2. opens its own ``RunStore`` for each job,
3. waits at the shared ``Barrier`` so that the contended calls really overlap,
4. reports ``("ok", value)`` or ``("error", description)`` on the shared queue.

Failures a call is expected to raise are caught and recorded as data
(``expected_failure``); anything else reaches ``run_task`` and is reported as an error,
which the tests assert never happens.
"""

from __future__ import annotations

import hashlib
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = str(Path(__file__).resolve().parent)
ROOT_HASH = "ab" * 32
BARRIER_TIMEOUT_S = 60
LEASE_TTL_MS = 600_000  # long: these tests fence by token, never by expiry

Report = dict[str, Any]


def describe(error: BaseException) -> Report:
    """A picklable description of an exception (class, `.code`, traceback)."""
    return {
        "type": type(error).__name__,
        "module": type(error).__module__,
        "code": getattr(error, "code", None),
        "message": str(error),
        "traceback": "".join(traceback.format_exception(error)),
    }


def expected_failure(call: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """("ok", result) or ("failed", description) of a call that may lose a race.

    Only `CadenceStoreError`s are data here: anything else propagates to `run_task`.
    """
    from cadence_store import CadenceStoreError

    try:
        return "ok", call(*args, **kwargs)
    except CadenceStoreError as error:
        return "failed", describe(error)


def run_task(task: str, url: str, index: int, barrier: Any, params: Any) -> tuple[str, Any]:
    """Open a `RunStore` on `url`, run `TASKS[task]` with it, close it: ("ok", value) or
    ("error", description of what reached this caller)."""
    try:
        from cadence_store import RunStore

        with RunStore(url, root_hash=ROOT_HASH) as store:
            return "ok", TASKS[task](store, index, barrier, params)
    except BaseException as error:
        barrier.abort()  # the others stop waiting for a worker that will not come
        return "error", describe(error)


def serve(index: int, barrier: Any, inbox: Any, results: Any) -> None:
    """The `Process` target: a worker that runs jobs from `inbox` until it gets None.

    One spawned interpreter serves many jobs, so that a test pays for its workers'
    imports once; each job opens (and closes) its own `RunStore`.
    """
    if HERE not in sys.path:  # a fresh interpreter: make sure `workers` stays importable
        sys.path.insert(0, HERE)
    while True:
        job = inbox.get()
        if job is None:
            return
        job_id, task, url, params = job
        status, value = run_task(task, url, index, barrier, params)
        results.put((job_id, index, status, value))


def whoami(_store: Any, index: int, barrier: Any, _params: Any) -> Report:
    """How this child was started (the spawn plumbing test)."""
    import multiprocessing

    barrier.wait(timeout=BARRIER_TIMEOUT_S)
    return {
        "index": index,
        "pid": os.getpid(),
        "parent": os.getppid(),
        "module_file": str(Path(__file__).resolve()),
        "module_name": __name__,
        "start_method": multiprocessing.get_start_method(allow_none=True),
        "main_module": getattr(sys.modules.get("__main__"), "__name__", None),
        "here_on_path": HERE in sys.path,
        "orig_argv": list(sys.orig_argv),
    }


def append_transitions(store: Any, index: int, barrier: Any, params: Report) -> Report:
    """(a) `count` transitions paused -> paused of one run, distinct operation ids.

    Every exception of a call is recorded and the loop goes on, so the test sees them all.
    """
    run_id, count = params["run_id"], params["count"]
    sequences: list[int] = []
    errors: list[Report] = []
    barrier.wait(timeout=BARRIER_TIMEOUT_S)
    for n in range(count):
        operation_id = f"w{index}-t{n}"
        try:
            projection = store.transition(
                run_id, "paused", operation_id=operation_id, code=operation_id
            )
        except Exception as error:
            errors.append({"n": n, **describe(error)})
        else:
            sequences.append(projection.sequence)
    return {"sequences": sequences, "errors": errors}


def start_one_change(store: Any, index: int, barrier: Any, params: Report) -> list[str]:
    """(b) per round, every worker starts the same change with its own operation id."""
    run_ids = []
    for round_ in range(params["rounds"]):
        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        projection = store.start_run(
            "abel-implement",
            change=f"{params['prefix']}-{round_}",
            operation_id=f"w{index}-s{round_}",
        )
        run_ids.append(projection.run_id)
    return run_ids


def start_distinct_changes(store: Any, index: int, barrier: Any, params: Report) -> list[str]:
    """(c) every worker starts its own changes, all at once."""
    barrier.wait(timeout=BARRIER_TIMEOUT_S)
    return [
        store.start_run(
            "abel-implement", change=f"w{index}-c{n}", operation_id=f"w{index}-s{n}"
        ).run_id
        for n in range(params["count"])
    ]


def start_same_operation(store: Any, index: int, barrier: Any, params: Report) -> list[Report]:
    """Idempotency race: per round, every worker sends the very same start_run."""
    projections = []
    for round_ in range(params["rounds"]):
        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        projection = store.start_run(
            "abel-implement",
            change=f"{params['prefix']}-{round_}",
            operation_id=f"{params['prefix']}-op-{round_}",
        )
        projections.append(projection.model_dump(mode="json", by_alias=True))
    return projections


def _holder_order(round_: int, workers: int) -> list[int]:
    return [(round_ + k) % workers for k in range(workers)]


def lease_holders(store: Any, index: int, barrier: Any, params: Report) -> list[Report]:
    """(d) per round, the workers acquire one lease operation one after another, each
    later one with ``preempt=True``; all of them then hold a lease object. At one barrier
    they all append with their lease, at the next they all commit with it: only the live
    lease (the last acquired) may succeed."""
    run_id, workers = params["run_id"], params["workers"]
    rounds = []
    for round_ in range(params["rounds"]):
        operation_id = f"lease-{round_}"
        order = _holder_order(round_, workers)
        lease = None
        for position, holder in enumerate(order):  # one at a time, in `order`
            if holder == index:
                lease = store.acquire_lease(
                    run_id, operation_id, LEASE_TTL_MS, preempt=position > 0
                )
            barrier.wait(timeout=BARRIER_TIMEOUT_S)
        assert lease is not None
        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        transition = expected_failure(
            store.transition,
            run_id,
            "paused",
            operation_id=f"r{round_}-w{index}",
            code=f"r{round_}-w{index}",
            lease=lease,
        )
        if transition[0] == "ok":
            transition = ("ok", transition[1].sequence)
        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        commit = expected_failure(store.commit_lease, lease, {"holder": index, "round": round_})
        rounds.append(
            {
                "token": lease.token,
                "position": order.index(index),
                "transition": transition,
                "commit": commit,
            }
        )
    return rounds


def preempt_while_committing(store: Any, index: int, barrier: Any, params: Report) -> list[Report]:
    """(d, open race) worker 0 holds the lease and commits it at the very moment the
    other workers preempt it; then every preemptor commits with its lease at once."""
    run_id = params["run_id"]
    rounds = []
    for round_ in range(params["rounds"]):
        operation_id = f"race-{round_}"
        lease = None
        if index == 0:
            lease = store.acquire_lease(run_id, operation_id, LEASE_TTL_MS)
        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        if index == 0:
            first = expected_failure(store.commit_lease, lease, {"holder": 0, "round": round_})
        else:
            lease = store.acquire_lease(run_id, operation_id, LEASE_TTL_MS, preempt=True)
            first = ("ok", None)
        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        assert lease is not None
        second = (
            ("skipped", None)
            if index == 0
            else expected_failure(store.commit_lease, lease, {"holder": index, "round": round_})
        )
        rounds.append({"token": lease.token, "first": first, "second": second})
    return rounds


def receipt_hash(round_: int, index: int) -> str:
    return hashlib.sha256(f"receipt-{round_}-{index}".encode()).hexdigest()


def bind_one_revision(store: Any, index: int, barrier: Any, params: Report) -> list[Report]:
    """(e) per round, every worker binds (gate-a, revision) with its own receipt."""
    run_id = params["run_id"]
    rounds = []
    for round_ in range(params["rounds"]):
        revision = round_ + 1
        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        status, value = expected_failure(
            store.bind_delivery,
            run_id,
            "gate-a",
            revision,
            receipt_hash(round_, index),
            operation_id=f"b{round_}-w{index}",
        )
        rounds.append({"status": status, "value": value.sequence if status == "ok" else value})
    return rounds


TASKS: dict[str, Callable[[Any, int, Any, Any], Any]] = {
    "whoami": whoami,
    "append_transitions": append_transitions,
    "start_one_change": start_one_change,
    "start_distinct_changes": start_distinct_changes,
    "start_same_operation": start_same_operation,
    "lease_holders": lease_holders,
    "preempt_while_committing": preempt_while_committing,
    "bind_one_revision": bind_one_revision,
}
