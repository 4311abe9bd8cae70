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
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = str(Path(__file__).resolve().parent)
ROOT_HASH = "ab" * 32
BARRIER_TIMEOUT_S = 60
LEASE_TTL_MS = 600_000  # long: these tests fence by token, never by expiry
READ_DEADLINE_S = 60

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
    started = time.monotonic()
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
    return {"sequences": sequences, "errors": errors, "seconds": time.monotonic() - started}


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


def lease_holders(store: Any, index: int, barrier: Any, params: Report) -> list[Report]:
    """(d) The workers form groups of ``params["group"]`` (2: pairs; 4: one chain), one
    lease operation per group and round. In a group the members acquire one after another,
    each later one with ``preempt=True`` (the order rotates per round), so that all of
    them hold a lease object. Then, at one barrier, everyone appends with their lease; at
    the next, everyone commits with it: only the live lease (the last acquired) of each
    group may succeed."""
    run_id, group = params["run_id"], params["group"]
    mine, member = divmod(index, group)
    rounds = []
    for round_ in range(params["rounds"]):
        operation_id = f"lease-{round_}-g{mine}"
        position = (member + round_) % group  # this worker's turn to acquire
        lease = None
        for turn in range(group):  # one turn at a time, every group in parallel
            if turn == position:
                lease = store.acquire_lease(run_id, operation_id, LEASE_TTL_MS, preempt=turn > 0)
            barrier.wait(timeout=BARRIER_TIMEOUT_S)
        assert lease is not None
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
                "operation_id": operation_id,
                "token": lease.token,
                "live": position == group - 1,
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


def acquire_one_lease(store: Any, index: int, barrier: Any, params: Report) -> list[Report]:
    """Per round, every worker acquires the same lease operation at once (``exclusive``
    as given): the first creates it; the others share it, or are refused if exclusive."""
    run_id, exclusive = params["run_id"], params["exclusive"]
    rounds = []
    for round_ in range(params["rounds"]):
        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        status, value = expected_failure(
            store.acquire_lease,
            run_id,
            f"{params['prefix']}-{round_}",
            LEASE_TTL_MS,
            exclusive=exclusive,
        )
        rounds.append({"status": status, "value": value.token if status == "ok" else value})
    return rounds


def claim_one_change(store: Any, index: int, barrier: Any, params: Report) -> list[Report]:
    """Per round, every worker binds its own design run to the same change at once."""
    rounds = []
    for round_ in range(params["rounds"]):
        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        status, value = expected_failure(
            store.bind_change,
            params["run_ids"][round_][index],
            f"claimed-{round_}",
            operation_id=f"claim-{round_}-w{index}",
        )
        rounds.append({"status": status, "value": value.sequence if status == "ok" else value})
    return rounds


def bind_same_receipt(store: Any, index: int, barrier: Any, params: Report) -> list[int]:
    """Per round, every worker binds (gate-b, revision) with the SAME receipt at once."""
    sequences = []
    for round_ in range(params["rounds"]):
        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        projection = store.bind_delivery(
            params["run_id"],
            "gate-b",
            round_ + 1,
            receipt_hash(round_, -1),
            operation_id=f"same-{round_}-w{index}",
        )
        sequences.append(projection.sequence)
    return sequences


def read_while_appending(store: Any, index: int, barrier: Any, params: Report) -> Report:
    """Workers 1.. append `count` transitions each to one run; worker 0 reads the run
    (``params["read"]``: ``verify_integrity`` or ``list_events``) over and over until
    the appends are all in (bounded by READ_DEADLINE_S). Every error is recorded."""
    run_id, count, read = params["run_id"], params["count"], params["read"]
    errors: list[Report] = []
    calls = 0
    barrier.wait(timeout=BARRIER_TIMEOUT_S)
    if index != 0:
        for n in range(count):
            operation_id = f"w{index}-r{n}"
            try:
                store.transition(run_id, "paused", operation_id=operation_id, code=operation_id)
                calls += 1
            except Exception as error:
                errors.append({"n": n, **describe(error)})
        return {"calls": calls, "errors": errors}
    deadline = time.monotonic() + READ_DEADLINE_S
    while store.status(run_id).sequence < params["final"] and time.monotonic() < deadline:
        try:
            if read == "verify_integrity":
                store.verify_integrity(run_id)
            elif read == "list_events":
                chain = store.list_events(run_id)
                if [event.sequence for event in chain] != list(range(1, len(chain) + 1)):
                    raise AssertionError("list_events: not 1..N")
            else:
                raise ValueError(read)
            calls += 1
        except Exception as error:
            errors.append({"n": calls, **describe(error)})
            calls += 1
    return {"calls": calls, "errors": errors}


# What each call of the mixed workload may raise (a lost race, a fenced lease, ...);
# anything else is unexpected.
MIXED_EXPECTED: dict[str, set[str]] = {
    "transition": set(),
    "transition_leased": {"lease-fenced"},
    "replay": set(),
    "bind": {"delivery-revision-conflict"},
    "acquire": {"operation-already-running"},
    "renew": {"lease-fenced"},
    "assert": {"lease-fenced"},
    "commit": {"lease-fenced"},
    "interrupt": {"lease-fenced"},
    "start": set(),
    "claim": {"change-run-already-exists", "change-binding-not-allowed"},
    "inspect": set(),
    "recover": set(),
    "status": set(),
    "list_events": set(),
    "rebuild": set(),
}


def mixed_workload(store: Any, index: int, barrier: Any, params: Report) -> Report:
    """Every worker makes `count` random calls (seeded per worker) on a few shared runs:
    appends, replays, bindings, leases (short and long), starts, change claims, reads.
    Failures outside MIXED_EXPECTED are recorded as unexpected."""
    import random

    from cadence_store import CadenceStoreError

    rng = random.Random(params["seed"] * 100 + index)
    run_ids, design_ids = params["run_ids"], params["design_ids"]
    held: list[Any] = []
    done: list[tuple[str, str, int]] = []  # (run_id, operation_id, sequence) appended here
    unexpected: list[Report] = []
    counts: dict[str, int] = {}
    barrier.wait(timeout=BARRIER_TIMEOUT_S)
    for n in range(params["count"]):
        run_id = rng.choice(run_ids)
        operation_id = f"w{index}-m{n}"
        kind = rng.choice(list(MIXED_EXPECTED))
        if kind in ("transition_leased", "renew", "assert", "commit", "interrupt") and not held:
            kind = "acquire"
        if kind == "replay" and not done:
            kind = "transition"
        counts[kind] = counts.get(kind, 0) + 1
        try:
            if kind == "transition":
                projection = store.transition(run_id, "paused", operation_id=operation_id)
                done.append((run_id, operation_id, projection.sequence))
            elif kind == "transition_leased":
                lease = rng.choice(held)
                store.transition(lease.run_id, "paused", operation_id=operation_id, lease=lease)
            elif kind == "replay":
                replay_run, replay_id, sequence = rng.choice(done)
                projection = store.transition(replay_run, "paused", operation_id=replay_id)
                if projection.sequence != sequence:
                    raise AssertionError(
                        f"replay of {replay_id}: {projection.sequence} != {sequence}"
                    )
            elif kind == "bind":
                store.bind_delivery(
                    run_id,
                    rng.choice(["gate-a", "gate-b"]),
                    rng.randint(1, 4),
                    receipt_hash(rng.randint(0, 1), -2),
                    operation_id=operation_id,
                )
            elif kind == "acquire":
                held.append(
                    store.acquire_lease(
                        run_id,
                        f"lease-{rng.randint(0, 3)}",
                        rng.choice([1, 20, LEASE_TTL_MS]),
                        preempt=rng.random() < 0.3,
                        exclusive=rng.random() < 0.3,
                    )
                )
                del held[:-4]
            elif kind == "renew":
                held.append(store.renew_lease(rng.choice(held), rng.choice([1, LEASE_TTL_MS])))
            elif kind == "assert":
                store.assert_lease(rng.choice(held))
            elif kind == "commit":
                store.commit_lease(rng.choice(held), {"worker": index, "n": n})
            elif kind == "interrupt":
                store.interrupt_lease(rng.choice(held))
            elif kind == "start":
                store.start_run(
                    "abel-implement", change=f"mix-{rng.randint(0, 5)}", operation_id=operation_id
                )
            elif kind == "claim":
                store.bind_change(
                    rng.choice(design_ids), f"claim-{rng.randint(0, 2)}", operation_id=operation_id
                )
            elif kind == "inspect":
                store.inspect_operation(run_id, f"lease-{rng.randint(0, 3)}")
            elif kind == "recover":
                store.recover_expired_leases()
            elif kind == "status":
                store.status(run_id)
            elif kind == "list_events":
                chain = store.list_events(run_id)
                if [event.sequence for event in chain] != list(range(1, len(chain) + 1)):
                    raise AssertionError("list_events: not 1..N")
            elif kind == "rebuild":
                store.rebuild_projection(run_id)
        except CadenceStoreError as error:
            if error.code not in MIXED_EXPECTED[kind]:
                unexpected.append({"n": n, "kind": kind, **describe(error)})
        except Exception as error:
            unexpected.append({"n": n, "kind": kind, **describe(error)})
    return {"unexpected": unexpected, "counts": counts}


def grants_table() -> Any:
    """A host table: one row per lease grant, written in the grant's own transaction, so
    that its ids are in commit order (the grants of one operation queue on its row)."""
    from sqlalchemy import Column, Integer, MetaData, Table, Text

    return Table(
        "fence_grants",
        MetaData(),
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("operation_id", Text, nullable=False),
        Column("token", Text, nullable=False),
        Column("fence", Integer, nullable=False),
        Column("worker", Integer, nullable=False),
    )


def preempt_race(store: Any, index: int, barrier: Any, params: Report) -> list[Report]:
    """Per round, every worker preempts the same lease operation at once, recording its
    grant (token, fence) in a host row of the same transaction."""
    grants = grants_table()
    rounds = []
    for round_ in range(params["rounds"]):
        operation_id = f"{params['prefix']}-{round_}"
        barrier.wait(timeout=BARRIER_TIMEOUT_S)
        with store.unit_of_work() as uow:
            lease = uow.runs.acquire_lease(
                params["run_id"], operation_id, LEASE_TTL_MS, preempt=True
            )
            uow.session.execute(
                grants.insert().values(
                    operation_id=operation_id, token=lease.token, fence=lease.fence, worker=index
                )
            )
        rounds.append({"operation_id": operation_id, "token": lease.token, "fence": lease.fence})
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
    "acquire_one_lease": acquire_one_lease,
    "preempt_race": preempt_race,
    "claim_one_change": claim_one_change,
    "bind_same_receipt": bind_same_receipt,
    "read_while_appending": read_while_appending,
    "mixed_workload": mixed_workload,
}
