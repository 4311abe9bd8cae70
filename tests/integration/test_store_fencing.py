"""Fence numbers (issue 13): one number per grant of an operation's lease, growing with
each grant, kept by renew, carried through export/import/copy. Both engines."""

from __future__ import annotations

import io
import json

from support import ROOT_HASH

import cadence_store
from cadence_store import LeaseFencedError, OperationLease, RunRepository, RunStore
from cadence_store.transfer import copy_store, export_store, import_store


def test_fences_grow_with_each_grant_and_stay_across_renew_and_rejoin(store, clock, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    seen: list[int] = []

    first = store.acquire_lease(run.run_id, "apply-1", 1_000)
    seen.append(first.fence)
    renewed = store.renew_lease(first, 5_000)
    assert renewed.fence == first.fence  # renew keeps the fence
    rejoined = store.acquire_lease(run.run_id, "apply-1", 9_000)  # the live lease, as is
    assert (rejoined.token, rejoined.fence) == (first.token, first.fence)
    store.commit_lease(renewed, {"done": 1})

    after_commit = store.acquire_lease(run.run_id, "apply-1", 1_000)  # a grant
    seen.append(after_commit.fence)
    preempted_by = store.acquire_lease(run.run_id, "apply-1", 1_000, preempt=True)  # a grant
    seen.append(preempted_by.fence)
    assert store.renew_lease(preempted_by, 2_000).fence == preempted_by.fence
    store.interrupt_lease(preempted_by)

    after_interrupt = store.acquire_lease(run.run_id, "apply-1", 100, exclusive=True)
    seen.append(after_interrupt.fence)
    clock.advance(101)  # expired, not yet recovered
    after_expiry = store.acquire_lease(run.run_id, "apply-1", 100, exclusive=True)
    seen.append(after_expiry.fence)
    clock.advance(101)
    assert store.recover_expired_leases() == 1
    status = store.inspect_operation(run.run_id, "apply-1")
    assert (status.state, status.fence) == ("interrupted", after_expiry.fence)  # the last
    after_recovery = store.acquire_lease(run.run_id, "apply-1", 100)
    seen.append(after_recovery.fence)

    assert seen == sorted(set(seen)) == [1, 2, 3, 4, 5, 6]
    assert store.inspect_operation(run.run_id, "apply-1").fence == after_recovery.fence
    # each operation counts its own grants
    assert store.acquire_lease(run.run_id, "apply-2", 100).fence == 1

    # the token decides; a lease carrying another grant's fence is refused
    with rejected(LeaseFencedError, "lease-fenced"):
        store.assert_lease(after_recovery.model_copy(update={"fence": 2}))
    # a lease in cadence 1.x's shape (no fence) is judged by its token alone; what the
    # store returns carries the stored fence
    legacy = after_recovery.to_dict()
    assert "fence" not in legacy
    store.assert_lease(legacy)
    assert OperationLease.model_validate(legacy).fence == 0
    assert store.renew_lease(legacy, 100).fence == after_recovery.fence


def test_fences_in_a_unit_of_work_and_a_host_session(store, store_url, clock):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    with store.unit_of_work() as uow:
        first = uow.runs.acquire_lease(run.run_id, "apply-1", 1_000)
        second = uow.runs.acquire_lease(run.run_id, "apply-1", 1_000, preempt=True)
    assert (first.fence, second.fence) == (1, 2)
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    engine = create_engine(store_url)
    try:
        with Session(engine) as session, session.begin():
            runs = RunRepository(session, root_hash=ROOT_HASH, clock=clock)
            third = runs.acquire_lease(run.run_id, "apply-1", 1_000, preempt=True)
            assert runs.renew_lease(third, 1_000).fence == third.fence == 3
    finally:
        engine.dispose()
    assert store.inspect_operation(run.run_id, "apply-1").fence == 3


def _fences(store: RunStore, run_id: str, operation_ids: list[str]) -> dict[str, int | None]:
    fences = {}
    for operation_id in operation_ids:
        status = store.inspect_operation(run_id, operation_id)
        fences[operation_id] = None if status is None else status.fence
    return fences


def test_export_import_and_copy_keep_the_fences(store, clock, tmp_path):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    for _ in range(3):
        store.acquire_lease(run.run_id, "apply-1", 60_000, preempt=True)
    committed = store.acquire_lease(run.run_id, "apply-2", 60_000)
    store.commit_lease(committed, {"ok": True})
    store.acquire_lease(run.run_id, "apply-2", 60_000)
    live = store.acquire_lease(run.run_id, "apply-3", 60_000)
    expected = {"apply-1": 3, "apply-2": 2, "apply-3": 1, "s1": None}

    exported = io.StringIO()
    export_store(store.engine, exported)
    record = json.loads(exported.getvalue())
    assert {o["operation_id"]: o["lease_fence"] for o in record["operations"]} == expected

    for destination, move in (
        (f"sqlite:///{tmp_path}/imported.sqlite3", "import"),
        (f"sqlite:///{tmp_path}/copied.sqlite3", "copy"),
    ):
        cadence_store.upgrade(destination)
        if move == "import":
            import_store(destination, io.StringIO(exported.getvalue()))
        else:
            copy_store(store.engine, destination)
        with RunStore(destination, root_hash=ROOT_HASH, clock=clock) as moved:
            assert _fences(moved, run.run_id, list(expected)) == expected
            # the live lease moved with its token and fence; new grants continue above
            moved.assert_lease(live)
            assert moved.acquire_lease(run.run_id, "apply-1", 1_000, preempt=True).fence == 4
            assert moved.acquire_lease(run.run_id, "apply-2", 1_000, preempt=True).fence == 3


def test_an_export_made_before_fences_imports_with_the_revision_s_fences(store, tmp_path):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    for _ in range(2):
        store.acquire_lease(run.run_id, "apply-1", 60_000, preempt=True)
    exported = io.StringIO()
    export_store(store.engine, exported)
    record = json.loads(exported.getvalue())
    for row in record["operations"]:
        del row["lease_fence"]  # as exported before revision cs0002_lease_fence
    destination = f"sqlite:///{tmp_path}/old-export.sqlite3"
    cadence_store.upgrade(destination)
    import_store(destination, [json.dumps(record)])
    with RunStore(destination, root_hash=ROOT_HASH) as moved:
        # the fence that revision gives existing rows: 1 for a lease, none for a receipt
        assert _fences(moved, run.run_id, ["apply-1", "s1"]) == {"apply-1": 1, "s1": None}
