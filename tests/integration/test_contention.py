"""Contention: several processes writing one store at once (issue 4).

Every store test runs on a SQLite file and on PostgreSQL (``database_url``), with
WORKERS spawned processes (fresh interpreters, the "spawn" start method) that open their
own ``RunStore`` and then line up at a ``Barrier``, so that the contended calls really
overlap. The worker functions live in ``tests/integration/workers.py``; a worker reports
what each call returned, and what a call that may lose a race raised, through a queue;
any other exception that reaches a worker fails the test. The workers are spawned once
per module (``WorkerPool``: an interpreter's imports cost about a second) and each test
hands every one of them a job; each job opens and closes its own store.

Sizes are bounded ("quick": the file runs in well under a minute on both engines);
``--slow`` adds each test again with larger sizes ("long").
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # `workers` must import by that name here and in the children
    sys.path.insert(0, _HERE)

import workers  # noqa: E402

from cadence_store import RunStore  # noqa: E402
from cadence_store.storage.models import delivery_bindings, events, operations, runs  # noqa: E402

WORKERS = 4
TIMEOUT_S = 90  # a worker that has not reported by then is hung: a bug


@dataclass(frozen=True)
class Sizes:
    appends: int  # per worker, (a)
    rounds: int  # rounds of each per-round race
    distinct_runs: int  # per worker, (c)


QUICK = Sizes(appends=40, rounds=10, distinct_runs=20)
LONG = Sizes(appends=250, rounds=60, distinct_runs=150)


@pytest.fixture(
    name="sizes",
    params=[pytest.param(QUICK, id="quick"), pytest.param(LONG, id="long", marks=pytest.mark.slow)],
)
def _sizes(request: pytest.FixtureRequest) -> Sizes:
    """Every contention test runs bounded ("quick"), and larger with --slow ("long")."""
    size: Sizes = request.param
    return size


class WorkerPool:
    """WORKERS spawned processes (``workers.serve``), reused by every test of this module.

    ``run(task, url, params)`` hands one job to every worker and returns their values in
    worker order. It fails on any error a worker reports (an exception that reached a
    caller) and on a worker that does not report in time (a hang: the pool is then killed
    and the next test starts a new one).
    """

    def __init__(self, count: int = WORKERS) -> None:
        self.context = multiprocessing.get_context("spawn")
        self.count = count
        self.barrier = self.context.Barrier(count)
        self.results = self.context.Queue()
        self.inboxes = [self.context.Queue() for _ in range(count)]
        self.jobs = 0
        self.processes = [
            self.context.Process(
                target=workers.serve,
                args=(index, self.barrier, inbox, self.results),
                name=f"contention-worker-{index}",
                daemon=True,
            )
            for index, inbox in enumerate(self.inboxes)
        ]
        for process in self.processes:
            process.start()
        self.broken = False

    def run(self, task: str, url: str, params: Any = None) -> list[Any]:
        assert not self.broken
        self.jobs += 1
        job_id = self.jobs
        for inbox in self.inboxes:
            inbox.put((job_id, task, url, params))
        reports: dict[int, tuple[str, Any]] = {}
        deadline = time.monotonic() + TIMEOUT_S
        while len(reports) < self.count:
            try:
                job, index, status, value = self.results.get(
                    timeout=max(0.1, deadline - time.monotonic())
                )
            except queue.Empty:
                self.close(kill=True)
                missing = sorted(set(range(self.count)) - set(reports))
                raise AssertionError(
                    f"{task}: workers {missing} did not report within {TIMEOUT_S} s (hang?)"
                ) from None
            assert job == job_id, (job, job_id)
            reports[index] = (status, value)
        errors = {
            index: f"{value['module']}.{value['type']} code={value['code']!r}\n{value['traceback']}"
            for index, (status, value) in reports.items()
            if status != "ok"
        }
        if errors:
            self.barrier.reset()  # a failed job may have broken it; all workers are idle
        assert not errors, "an exception reached a caller:\n" + "\n".join(
            f"worker {index}: {text}" for index, text in errors.items()
        )
        return [reports[index][1] for index in range(self.count)]

    def close(self, *, kill: bool = False) -> None:
        self.broken = True
        if not kill:
            for inbox in self.inboxes:
                inbox.put(None)
        for process in self.processes:
            if kill:
                process.kill()  # SIGKILL to that worker's own pid
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join(timeout=30)
        for channel in [self.results, *self.inboxes]:
            channel.close()
            channel.cancel_join_thread()


@pytest.fixture(scope="module")
def _pool_holder() -> Iterator[list[WorkerPool]]:
    holder: list[WorkerPool] = []
    yield holder
    for pool in holder:
        if not pool.broken:
            pool.close()


@pytest.fixture
def pool(_pool_holder: list[WorkerPool]) -> WorkerPool:
    """The module's worker processes (started by the first test that asks, restarted
    after a hang)."""
    if not _pool_holder or _pool_holder[-1].broken:
        _pool_holder.append(WorkerPool())
    return _pool_holder[-1]


def assert_chain(store: RunStore, run_id: str) -> list[Any]:
    """No gap, no fork: sequences 1..N, each prior hash the previous hash; the stored
    projection is what the chain rebuilds, and the store verifies."""
    chain = store.list_events(run_id)
    assert [event.sequence for event in chain] == list(range(1, len(chain) + 1))
    prior = "0" * 64
    for event in chain:
        assert event.prior_hash == prior, event.sequence
        prior = event.hash
    verified = store.verify_integrity(run_id)
    stored = store.status(run_id)
    assert stored == store.rebuild_projection(run_id) == verified
    assert stored.sequence == len(chain)
    assert stored.event_hash == prior
    return chain


def count_rows(db: Any, table: Any, *where: Any) -> int:
    with db.connect() as connection:
        return int(
            connection.execute(select(func.count()).select_from(table).where(*where)).one()[0]
        )


def failure(outcome: tuple[str, Any]) -> tuple[str, str | None]:
    status, value = outcome
    assert status == "failed", outcome
    return value["type"], value["code"]


# -- the plumbing ----------------------------------------------------------------------


def test_workers_are_fresh_spawned_interpreters(pool, sqlite_database_url: str) -> None:
    import cadence_store

    cadence_store.upgrade(sqlite_database_url)
    # the parent imported `workers` from this directory, not a namesake elsewhere
    assert Path(workers.__file__).resolve().parent == Path(__file__).resolve().parent
    reports = pool.run("whoami", sqlite_database_url)
    assert [report["index"] for report in reports] == list(range(WORKERS))
    assert len({report["pid"] for report in reports}) == WORKERS
    for report in reports:
        assert report["parent"] == os.getpid()
        assert report["pid"] != os.getpid()
        assert report["module_name"] == "workers"
        assert report["module_file"] == str(Path(workers.__file__).resolve())
        assert report["here_on_path"]
        # a spawned child is a new interpreter started by multiprocessing.spawn
        assert any("spawn_main" in arg for arg in report["orig_argv"]), report["orig_argv"]


# -- (a) appends to one run ------------------------------------------------------------


def test_processes_appending_to_one_run_lose_nothing(pool, store, store_url, db, sizes) -> None:
    run = store.start_run("abel-implement", change="contended", operation_id="start")
    base = store.transition(run.run_id, "paused", operation_id="t0").sequence

    reports = pool.run(
        "append_transitions", store_url, {"run_id": run.run_id, "count": sizes.appends}
    )

    errors = [error for report in reports for error in report["errors"]]
    assert errors == [], errors
    seconds = max(report["seconds"] for report in reports)
    print(
        f"{WORKERS} x {sizes.appends} appends to one run: {WORKERS * sizes.appends / seconds:.0f}/s"
    )
    appended = sorted(s for report in reports for s in report["sequences"])
    assert appended == list(range(base + 1, base + 1 + WORKERS * sizes.appends))
    final = store.verify_integrity(run.run_id)
    assert final.sequence == base + WORKERS * sizes.appends
    chain = assert_chain(store, run.run_id)
    assert (
        Counter(event.type for event in chain)["state-transitioned"] == 1 + WORKERS * sizes.appends
    )
    assert count_rows(db, operations) == 2 + WORKERS * sizes.appends
    for index, report in enumerate(reports):
        # each worker's own appends came back in increasing order
        assert report["sequences"] == sorted(report["sequences"])
        last = store.transition(
            run.run_id, "paused", operation_id=f"w{index}-t{sizes.appends - 1}", code="replay"
        )
        assert last.sequence == report["sequences"][-1]  # a replay, not a new event
    assert store.status(run.run_id).sequence == final.sequence


# -- (b) one change, distinct operation ids --------------------------------------------


def test_processes_starting_one_change_share_one_run(pool, store, store_url, db, sizes) -> None:
    reports = pool.run("start_one_change", store_url, {"rounds": sizes.rounds, "prefix": "shared"})

    for round_ in range(sizes.rounds):
        returned = {report[round_] for report in reports}
        assert len(returned) == 1, f"round {round_}: {returned}"
        (run_id,) = returned
        assert count_rows(db, runs, runs.c.lookup_key == f"change:shared-{round_}") == 1
        assert count_rows(db, operations, operations.c.run_id == run_id) == WORKERS
        assert assert_chain(store, run_id)[-1].sequence == 1
    assert count_rows(db, runs) == sizes.rounds
    assert count_rows(db, events) == sizes.rounds


# -- (c) distinct changes --------------------------------------------------------------


def test_processes_starting_distinct_changes_lose_no_run(pool, store, store_url, db, sizes) -> None:
    reports = pool.run("start_distinct_changes", store_url, {"count": sizes.distinct_runs})

    run_ids = [run_id for report in reports for run_id in report]
    assert len(run_ids) == len(set(run_ids)) == WORKERS * sizes.distinct_runs
    assert count_rows(db, runs) == WORKERS * sizes.distinct_runs
    assert count_rows(db, events) == WORKERS * sizes.distinct_runs
    assert count_rows(db, operations) == WORKERS * sizes.distinct_runs
    assert sorted(store.run_ids()) == sorted(run_ids)
    with db.connect() as connection:
        keys = set(connection.execute(select(runs.c.lookup_key)).scalars())
    assert keys == {f"change:w{i}-c{n}" for i in range(WORKERS) for n in range(sizes.distinct_runs)}
    for index, report in enumerate(reports):
        for n in (0, sizes.distinct_runs - 1):
            projection = store.status(report[n])
            assert projection.change == f"w{index}-c{n}"
            assert store.verify_integrity(report[n]) == projection


# -- idempotency: one operation id from every process ----------------------------------


def test_processes_sending_one_start_all_get_its_recorded_outcome(
    pool, store, store_url, db, sizes
) -> None:
    reports = pool.run(
        "start_same_operation", store_url, {"rounds": sizes.rounds, "prefix": "idem"}
    )

    for round_ in range(sizes.rounds):
        projections = [report[round_] for report in reports]
        assert all(p == projections[0] for p in projections), projections
        run_id = projections[0]["runId"]
        assert store.status(run_id).model_dump(mode="json", by_alias=True) == projections[0]
        assert count_rows(db, operations, operations.c.run_id == run_id) == 1
        assert_chain(store, run_id)
    assert count_rows(db, runs) == sizes.rounds
    assert count_rows(db, events) == sizes.rounds


# -- (d) lease fencing -----------------------------------------------------------------


@pytest.mark.parametrize("group", [2, 4], ids=["pairs", "chain-of-4"])
def test_only_the_live_lease_appends_and_commits(pool, store, store_url, db, sizes, group) -> None:
    """Two holders of one lease operation (pairs: two such races at once), or four in a
    chain, the later ones acquiring with preempt=True; then all append with their lease
    at one barrier, and all commit with it at the next: only the live lease succeeds, each
    stale holder gets LeaseFencedError `lease-fenced`."""
    run = store.start_run("abel-implement", change="leased", operation_id="start")
    base = store.transition(run.run_id, "paused", operation_id="t0").sequence

    reports = pool.run(
        "lease_holders", store_url, {"run_id": run.run_id, "rounds": sizes.rounds, "group": group}
    )

    groups = WORKERS // group
    for round_ in range(sizes.rounds):
        holders = [report[round_] for report in reports]
        assert len({holder["token"] for holder in holders}) == WORKERS
        for members in (range(g * group, (g + 1) * group) for g in range(groups)):
            (live,) = [i for i in members if holders[i]["live"]]
            operation_id = holders[live]["operation_id"]
            for index in members:
                holder = holders[index]
                assert holder["operation_id"] == operation_id
                if index == live:
                    assert holder["transition"][0] == "ok", holder["transition"]
                    assert holder["commit"] == ("ok", {"holder": live, "round": round_})
                else:
                    assert failure(holder["transition"]) == ("LeaseFencedError", "lease-fenced")
                    assert failure(holder["commit"]) == ("LeaseFencedError", "lease-fenced")
            status = store.inspect_operation(run.run_id, operation_id)
            assert status is not None
            assert (status.state, status.outcome) == (
                "committed",
                {"holder": live, "round": round_},
            )
    chain = assert_chain(store, run.run_id)
    # one append per group and round: the live holder's
    assert len(chain) == base + sizes.rounds * groups
    transitions = count_rows(db, operations, operations.c.kind == "state-transitioned")
    assert transitions == 1 + sizes.rounds * groups
    assert count_rows(db, operations, operations.c.kind == "lease") == sizes.rounds * groups


def test_a_commit_racing_preemption_is_fenced_or_first(pool, store, store_url, db, sizes) -> None:
    run = store.start_run("abel-implement", change="preempted", operation_id="start")

    reports = pool.run(
        "preempt_while_committing", store_url, {"run_id": run.run_id, "rounds": sizes.rounds}
    )

    for round_ in range(sizes.rounds):
        first_holder = reports[0][round_]
        if first_holder["first"][0] != "ok":  # preempted before it committed
            assert failure(first_holder["first"]) == ("LeaseFencedError", "lease-fenced")
        preemptors = [report[round_] for report in reports[1:]]
        winners = [i + 1 for i, p in enumerate(preemptors) if p["second"][0] == "ok"]
        assert len(winners) == 1, preemptors
        (winner,) = winners
        assert reports[winner][round_]["second"][1] == {"holder": winner, "round": round_}
        for index, preemptor in enumerate(preemptors, start=1):
            if index != winner:
                assert failure(preemptor["second"]) == ("LeaseFencedError", "lease-fenced")
        status = store.inspect_operation(run.run_id, f"race-{round_}")
        assert status is not None
        assert (status.state, status.outcome) == ("committed", {"holder": winner, "round": round_})
    assert_chain(store, run.run_id)


def test_processes_racing_to_preempt_get_fences_in_grant_order(
    pool, store, store_url, db, sizes
) -> None:
    """Issue 13: every preempting process gets its own fence, and the fences follow the
    order in which the grants committed (host rows written in each grant's transaction)."""
    run = store.start_run("abel-implement", change="fenced", operation_id="start")
    grants = workers.grants_table()
    grants.metadata.create_all(db)

    reports = pool.run(
        "preempt_race", store_url, {"run_id": run.run_id, "rounds": sizes.rounds, "prefix": "pr"}
    )

    with db.connect() as connection:
        logged = connection.execute(select(grants).order_by(grants.c.id)).all()
    for round_ in range(sizes.rounds):
        operation_id = f"pr-{round_}"
        returned = sorted(report[round_]["fence"] for report in reports)
        assert returned == list(range(1, WORKERS + 1)), returned  # distinct, none skipped
        in_commit_order = [row.fence for row in logged if row.operation_id == operation_id]
        assert in_commit_order == list(range(1, WORKERS + 1))
        # the live lease is the last grant, with the highest fence
        last = max((report[round_] for report in reports), key=lambda r: r["fence"])
        status = store.inspect_operation(run.run_id, operation_id)
        assert status is not None and (status.state, status.fence) == ("running", WORKERS)
        assert store.acquire_lease(run.run_id, operation_id, 1_000).token == last["token"]


# -- (e) one delivery revision, different receipts -------------------------------------


def test_one_receipt_wins_a_delivery_revision(pool, store, store_url, db, sizes) -> None:
    run = store.start_run("abel-implement", change="delivered", operation_id="start")

    reports = pool.run(
        "bind_one_revision", store_url, {"run_id": run.run_id, "rounds": sizes.rounds}
    )

    chain = assert_chain(store, run.run_id)
    bound = [event for event in chain if event.type == "delivery-bound"]
    assert [event.payload["revision"] for event in bound] == list(range(1, sizes.rounds + 1))
    for round_ in range(sizes.rounds):
        outcomes = [report[round_] for report in reports]
        winners = [i for i, outcome in enumerate(outcomes) if outcome["status"] == "ok"]
        assert len(winners) == 1, outcomes
        (winner,) = winners
        for index, outcome in enumerate(outcomes):
            if index != winner:
                assert outcome["status"] == "failed"
                assert (outcome["value"]["type"], outcome["value"]["code"]) == (
                    "OperationConflictError",
                    "delivery-revision-conflict",
                )
        revision = round_ + 1
        with db.connect() as connection:
            rows = connection.execute(
                select(delivery_bindings.c.receipt_hash, delivery_bindings.c.operation_id).where(
                    delivery_bindings.c.run_id == run.run_id,
                    delivery_bindings.c.gate == "gate-a",
                    delivery_bindings.c.revision == revision,
                )
            ).all()
        assert rows == [(workers.receipt_hash(round_, winner), f"b{round_}-w{winner}")]
        assert bound[round_].payload["receiptHash"] == workers.receipt_hash(round_, winner)
        assert outcomes[winner]["value"] == bound[round_].sequence
    assert count_rows(db, delivery_bindings) == sizes.rounds
    assert len(bound) == sizes.rounds
    assert store.status(run.run_id).delivery_revision == sizes.rounds


def test_one_receipt_binds_once_for_every_process(pool, store, store_url, db, sizes) -> None:
    run = store.start_run("abel-implement", change="same-receipt", operation_id="start")

    reports = pool.run(
        "bind_same_receipt", store_url, {"run_id": run.run_id, "rounds": sizes.rounds}
    )

    chain = assert_chain(store, run.run_id)
    assert len(chain) == 1 + sizes.rounds  # one delivery-bound event per revision
    for round_ in range(sizes.rounds):
        # every caller got the projection with the binding: the event's own sequence
        assert {report[round_] for report in reports} == {round_ + 2}
    assert count_rows(db, delivery_bindings) == sizes.rounds
    assert count_rows(db, operations) == 1 + WORKERS * sizes.rounds


# -- more leases and keys ----------------------------------------------------------------


def test_processes_acquiring_one_lease_share_its_token(pool, store, store_url, db, sizes) -> None:
    run = store.start_run("abel-implement", change="shared-lease", operation_id="start")

    reports = pool.run(
        "acquire_one_lease",
        store_url,
        {"run_id": run.run_id, "rounds": sizes.rounds, "exclusive": False, "prefix": "shared"},
    )

    for round_ in range(sizes.rounds):
        outcomes = [report[round_] for report in reports]
        assert all(outcome["status"] == "ok" for outcome in outcomes), outcomes
        tokens = {outcome["value"] for outcome in outcomes}
        assert len(tokens) == 1, tokens
    assert count_rows(db, operations, operations.c.kind == "lease") == sizes.rounds


def test_an_exclusive_lease_admits_one_process(pool, store, store_url, db, sizes) -> None:
    run = store.start_run("abel-implement", change="exclusive-lease", operation_id="start")

    reports = pool.run(
        "acquire_one_lease",
        store_url,
        {"run_id": run.run_id, "rounds": sizes.rounds, "exclusive": True, "prefix": "only"},
    )

    for round_ in range(sizes.rounds):
        outcomes = [report[round_] for report in reports]
        winners = [outcome for outcome in outcomes if outcome["status"] == "ok"]
        assert len(winners) == 1, outcomes
        for outcome in outcomes:
            if outcome["status"] != "ok":
                assert failure((outcome["status"], outcome["value"])) == (
                    "OperationConflictError",
                    "operation-already-running",
                )
        status = store.inspect_operation(run.run_id, f"only-{round_}")
        assert status is not None and status.state == "running"
    assert count_rows(db, operations, operations.c.kind == "lease") == sizes.rounds


def test_one_design_run_claims_a_change(pool, store, store_url, db, sizes) -> None:
    run_ids = [
        [
            store.start_run(
                "abel-design",
                provisional_key=f"{round_:032x}{index:032x}",
                operation_id=f"design-{round_}-{index}",
            ).run_id
            for index in range(WORKERS)
        ]
        for round_ in range(sizes.rounds)
    ]

    reports = pool.run("claim_one_change", store_url, {"rounds": sizes.rounds, "run_ids": run_ids})

    for round_ in range(sizes.rounds):
        outcomes = [report[round_] for report in reports]
        winners = [i for i, outcome in enumerate(outcomes) if outcome["status"] == "ok"]
        assert len(winners) == 1, outcomes
        (winner,) = winners
        for index, outcome in enumerate(outcomes):
            run_id = run_ids[round_][index]
            if index == winner:
                assert store.status(run_id).change == f"claimed-{round_}"
                assert assert_chain(store, run_id)[-1].type == "change-bound"
            else:
                assert failure((outcome["status"], outcome["value"])) == (
                    "OperationConflictError",
                    "change-run-already-exists",
                )
                assert store.status(run_id).change is None
                assert len(assert_chain(store, run_id)) == 1
        owners = count_rows(db, runs, runs.c.lookup_key == f"change:claimed-{round_}")
        assert owners == 1


# -- reading while others append -------------------------------------------------------


@pytest.mark.parametrize(
    "read",
    [
        "verify_integrity",
        "list_events",
    ],
)
def test_reading_a_run_while_processes_append(pool, store, store_url, db, sizes, read) -> None:
    """A healthy chain verifies whenever it is read: a reader sees one consistent state,
    however many processes append meanwhile."""
    run = store.start_run("abel-implement", change="read-while-append", operation_id="start")
    store.transition(run.run_id, "paused", operation_id="t0")
    appends = max(sizes.appends, 100)  # per appender: hundreds of reads meet appends

    final = 2 + (WORKERS - 1) * appends
    reports = pool.run(
        "read_while_appending",
        store_url,
        {"run_id": run.run_id, "count": appends, "read": read, "final": final},
    )

    errors = [(index, error) for index, report in enumerate(reports) for error in report["errors"]]
    assert errors == [], (
        f"{len(errors)} of {reports[0]['calls']} reads failed: "
        f"{[(i, e['type'], e['code'], e['message']) for i, e in errors[:3]]}"
    )
    assert assert_chain(store, run.run_id)[-1].sequence == final


# -- everything at once ------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2])
def test_a_mixed_workload_raises_only_the_errors_its_races_allow(
    pool, store, store_url, db, sizes, seed
) -> None:
    """Appends, replays, bindings, leases (some expiring at once), starts, change claims
    and reads from every process on a few shared runs: only the failures that a lost race
    or a fenced lease explain reach the callers, and every chain verifies afterwards."""
    run_ids = [
        store.start_run("abel-implement", change=f"mixed-{k}", operation_id=f"start-{k}").run_id
        for k in range(3)
    ]
    for run_id in run_ids:
        store.transition(run_id, "paused", operation_id="t0")
    design_ids = [
        store.start_run(
            "abel-design", provisional_key=f"{k:064x}", operation_id=f"design-{k}"
        ).run_id
        for k in range(4)
    ]

    reports = pool.run(
        "mixed_workload",
        store_url,
        {
            "run_ids": run_ids,
            "design_ids": design_ids,
            "count": sizes.appends * 3,
            "seed": seed,
        },
    )

    unexpected = [error for report in reports for error in report["unexpected"]]
    assert unexpected == [], [
        (e["kind"], e["type"], e["code"], e["message"]) for e in unexpected[:5]
    ]
    for run_id in store.run_ids():
        assert_chain(store, run_id)
    with db.connect() as connection:
        claims = connection.execute(
            select(runs.c.lookup_key, func.count())
            .where(runs.c.lookup_key.like("change:%"))
            .group_by(runs.c.lookup_key)
        ).all()
    assert all(count == 1 for _, count in claims), claims
