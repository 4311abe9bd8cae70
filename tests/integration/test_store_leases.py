"""Operation leases: acquire, renew, assert, commit, interrupt, inspect, recover; fencing."""

from __future__ import annotations

import json
import uuid

from cadence_store import (
    InvalidInputError,
    LeaseFencedError,
    OperationConflictError,
    OperationLease,
    OperationStatus,
    RunNotFoundError,
    RunStore,
)

A = "a" * 64
OUTCOME = {
    "status": "applied",
    "zeta": "insertion order is kept",
    "count": 3,
    "detail": {"b": [1, 2.5], "a": None},
    "ünïcode": "✓ 完了",
}
OUTCOME_JSON = (
    '{"status":"applied","zeta":"insertion order is kept","count":3,'
    '"detail":{"b":[1,2.5],"a":null},"ünïcode":"✓ 完了"}'
)


def lease_row(table_rows, lease):
    rows = [
        r
        for r in table_rows("operations")
        if (r["run_id"], r["operation_id"]) == (lease.run_id, lease.operation_id)
    ]
    assert len(rows) == 1
    return rows[0]


def assert_fenced_everywhere(store, rejected, lease, *, step=0):
    """Every call that carries `lease` refuses it and writes nothing."""
    with rejected(LeaseFencedError, "lease-fenced"):
        store.assert_lease(lease)
    with rejected(LeaseFencedError, "lease-fenced"):
        store.renew_lease(lease, 1_000)
    with rejected(LeaseFencedError, "lease-fenced"):
        store.commit_lease(lease, {"ok": True})
    with rejected(LeaseFencedError, "lease-fenced"):
        store.interrupt_lease(lease)
    with rejected(LeaseFencedError, "lease-fenced"):
        store.transition(lease.run_id, "paused", operation_id=f"fenced-t{step}", lease=lease)
    with rejected(LeaseFencedError, "lease-fenced"):
        store.bind_delivery(
            lease.run_id, "gate-a", 9, A, operation_id=f"fenced-b{step}", lease=lease
        )


def test_acquire_creates_a_running_lease(store, clock, table_rows):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    lease = store.acquire_lease(run.run_id, "apply-1", 30_000)

    assert isinstance(lease, OperationLease)
    assert (lease.run_id, lease.operation_id, lease.expires_at) == (
        run.run_id,
        "apply-1",
        clock.now + 30_000,
    )
    assert uuid.UUID(lease.token).version == 4
    assert lease.expires_at > 2**32  # epoch milliseconds need 64-bit columns
    assert lease.fence == 1
    # exactly the cadence 1.x object; `fence`, cadence-store's addition, is an attribute
    assert lease.to_dict() == {
        "runId": run.run_id,
        "operationId": "apply-1",
        "token": lease.token,
        "expiresAt": lease.expires_at,
    }
    assert lease.model_dump()["fence"] == 1
    assert lease_row(table_rows, lease) == {
        "run_id": run.run_id,
        "operation_id": "apply-1",
        "kind": "lease",
        "state": "running",
        "outcome_json": None,
        "lease_token": lease.token,
        "lease_expires_at": lease.expires_at,
        "lease_fence": 1,
        "sequence": None,  # a lease names no sequence of the chain
    }
    status = store.inspect_operation(run.run_id, "apply-1")
    assert status == OperationStatus(state="running", expires_at=lease.expires_at, fence=1)
    assert status.to_dict() == {"state": "running", "expiresAt": lease.expires_at}
    store.assert_lease(lease)
    # leases do not touch the journal
    assert len(store.list_events(run.run_id)) == 1


def test_live_lease_is_returned_replaced_or_refused(store, clock, rejected, table_rows):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    lease = store.acquire_lease(run.run_id, "apply-1", 30_000)
    clock.advance(10)

    same = store.acquire_lease(run.run_id, "apply-1", 99_000)
    assert same == lease  # the live lease as is: same token, same expiry
    with rejected(OperationConflictError, "operation-already-running"):
        store.acquire_lease(run.run_id, "apply-1", 30_000, exclusive=True)

    newer = store.acquire_lease(run.run_id, "apply-1", 5_000, preempt=True)
    assert newer.token != lease.token
    assert newer.expires_at == clock.now + 5_000
    row = lease_row(table_rows, newer)
    assert (row["state"], row["lease_token"], row["lease_expires_at"]) == (
        "running",
        newer.token,
        newer.expires_at,
    )
    # preempt with exclusive still replaces
    newest = store.acquire_lease(run.run_id, "apply-1", 5_000, preempt=True, exclusive=True)
    assert newest.token not in (lease.token, newer.token)

    for n, stale in enumerate([lease, newer]):
        assert_fenced_everywhere(store, rejected, stale, step=n)
    # the live one works everywhere
    store.assert_lease(newest)
    moved = store.transition(run.run_id, "paused", operation_id="t1", lease=newest)
    assert moved.state == "paused"
    bound = store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="b1", lease=newest)
    assert bound.delivery_revision == 1
    # other operation ids have their own leases
    other = store.acquire_lease(run.run_id, "apply-2", 1_000, exclusive=True)
    assert other.token != newest.token
    store.assert_lease(newest)


def test_expiry_boundary_and_expired_leases_are_fenced(store, clock, rejected, table_rows):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    lease = store.acquire_lease(run.run_id, "apply-1", 1_000)

    clock.now = lease.expires_at  # expires_at == now: still live
    store.assert_lease(lease)
    assert store.acquire_lease(run.run_id, "apply-1", 50) == lease
    assert store.recover_expired_leases() == 0
    assert store.inspect_operation(run.run_id, "apply-1").state == "running"
    assert store.transition(run.run_id, "paused", operation_id="t1", lease=lease).state == "paused"

    clock.advance(1)  # expires_at < now: expired
    assert_fenced_everywhere(store, rejected, lease)
    row = lease_row(table_rows, lease)
    assert (row["state"], row["lease_token"]) == ("running", lease.token)

    # an expired lease is not live: exclusive does not refuse, a new token is issued
    fresh = store.acquire_lease(run.run_id, "apply-1", 1_000, exclusive=True)
    assert fresh.token != lease.token
    assert fresh.expires_at == clock.now + 1_000
    with rejected(LeaseFencedError, "lease-fenced"):
        store.assert_lease(lease)


def test_renew_extends_the_live_lease(store, clock, rejected, table_rows):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    lease = store.acquire_lease(run.run_id, "apply-1", 1_000)
    clock.advance(900)

    renewed = store.renew_lease(lease, 5_000)
    assert renewed == lease.model_copy(update={"expires_at": clock.now + 5_000})
    assert lease_row(table_rows, lease)["lease_expires_at"] == renewed.expires_at

    clock.advance(1_000)  # past the first expiry, within the renewed one
    store.assert_lease(renewed)
    # the old copy carries the same token: fencing is by token, not by expiry
    store.assert_lease(lease)
    # leases as mappings, camelCase or snake_case
    camel = store.renew_lease(renewed.to_dict(), 2_000)
    snake = store.renew_lease(renewed.model_dump(), 3_000)
    assert (camel.expires_at, snake.expires_at) == (clock.now + 2_000, clock.now + 3_000)

    for ttl in (0, -1, True, 1.5, "10", None, 2**53):
        with rejected(InvalidInputError, "invalid-lease-ttl"):
            store.renew_lease(lease, ttl)
    for bad in ({"runId": run.run_id}, {**lease.to_dict(), "expiresAt": "soon"}, "token", None):
        with rejected(InvalidInputError, "invalid-lease"):
            store.renew_lease(bad, 1_000)
    forged = lease.model_copy(update={"token": str(uuid.uuid4())})
    with rejected(LeaseFencedError, "lease-fenced"):
        store.renew_lease(forged, 1_000)
    unknown = lease.model_copy(update={"operation_id": "never-acquired"})
    with rejected(LeaseFencedError, "lease-fenced"):
        store.renew_lease(unknown, 1_000)

    clock.advance(3_001)
    with rejected(LeaseFencedError, "lease-fenced"):
        store.renew_lease(lease, 1_000)


def test_commit_lease_stores_and_returns_the_outcome(store, clock, rejected, table_rows):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    lease = store.acquire_lease(run.run_id, "apply-1", 30_000)

    returned = store.commit_lease(lease, OUTCOME)
    assert returned == OUTCOME
    assert list(returned) == list(OUTCOME)
    assert returned is not OUTCOME
    assert lease_row(table_rows, lease) == {
        "run_id": run.run_id,
        "operation_id": "apply-1",
        "kind": "lease",
        "state": "committed",
        "outcome_json": OUTCOME_JSON,
        "lease_token": None,
        "lease_expires_at": None,
        "lease_fence": 1,  # the last grant's, kept
        "sequence": None,
    }
    status = store.inspect_operation(run.run_id, "apply-1")
    assert status.state == "committed"
    assert status.outcome == OUTCOME
    assert list(status.outcome) == list(OUTCOME)
    assert status.expires_at is None
    assert status.to_dict() == {"state": "committed", "outcome": OUTCOME}
    assert status.fence == 1
    assert json.dumps(status.to_dict()["outcome"], ensure_ascii=False, separators=(",", ":")) == (
        OUTCOME_JSON
    )

    # a committed lease is not live any more
    assert_fenced_everywhere(store, rejected, lease)
    # acquiring again starts a new attempt
    again = store.acquire_lease(run.run_id, "apply-1", 1_000)
    assert again.token != lease.token
    row = lease_row(table_rows, again)
    assert (row["state"], row["outcome_json"]) == ("running", None)

    for bad in ([1, 2], "applied", None, 42):
        with rejected(InvalidInputError, "operation-outcome-invalid"):
            store.commit_lease(again, bad)
    # a mapping lease works
    assert store.commit_lease(again.to_dict(), {"n": 1}) == {"n": 1}


def test_interrupt_lease(store, rejected, table_rows):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    lease = store.acquire_lease(run.run_id, "apply-1", 30_000)
    assert store.interrupt_lease(lease) is None
    row = lease_row(table_rows, lease)
    assert (row["state"], row["outcome_json"], row["lease_token"], row["lease_expires_at"]) == (
        "interrupted",
        None,
        None,
        None,
    )
    status = store.inspect_operation(run.run_id, "apply-1")
    assert status.to_dict() == {"state": "interrupted"}
    assert status.fence == 1
    assert_fenced_everywhere(store, rejected, lease)


def test_inspect_operation(store, clock, rejected, table_rows):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    moved = store.transition(run.run_id, "paused", operation_id="t1")
    lease = store.acquire_lease(run.run_id, "apply-1", 100)

    assert store.inspect_operation(run.run_id, "never") is None
    # a journal receipt inspects as a committed operation whose outcome is the projection
    receipt = store.inspect_operation(run.run_id, "t1")
    assert receipt.state == "committed"
    assert receipt.outcome == moved.document()
    assert receipt.fence is None  # receipts are not leases
    with rejected(RunNotFoundError, "run-not-found"):
        store.inspect_operation("no-such-run", "apply-1")
    with rejected(InvalidInputError, "invalid-operation-id"):
        store.inspect_operation(run.run_id, "bad id")

    clock.advance(101)
    status = store.inspect_operation(run.run_id, "apply-1")
    assert status.to_dict() == {"state": "interrupted"}
    assert status.fence == 1
    row = lease_row(table_rows, lease)
    assert (row["state"], row["lease_token"], row["lease_expires_at"]) == (
        "interrupted",
        None,
        None,
    )
    assert store.inspect_operation(run.run_id, "apply-1").state == "interrupted"
    with rejected(LeaseFencedError, "lease-fenced"):
        store.assert_lease(lease)


def test_recover_expired_leases(store, clock, table_rows):
    first = store.start_run("abel-implement", change="one", operation_id="s1")
    second = store.start_run("abel-implement", change="two", operation_id="s2")
    expiring = [
        store.acquire_lease(first.run_id, "op-1", 100),
        store.acquire_lease(second.run_id, "op-1", 150),
    ]
    boundary = store.acquire_lease(first.run_id, "op-2", 200)
    live = store.acquire_lease(second.run_id, "op-3", 10_000)
    committed = store.acquire_lease(first.run_id, "op-4", 10)
    store.commit_lease(committed, {"done": True})
    interrupted = store.acquire_lease(first.run_id, "op-5", 10)
    store.interrupt_lease(interrupted)

    clock.advance(200)  # boundary.expires_at == now: still live
    assert store.recover_expired_leases() == 2
    assert store.recover_expired_leases() == 0
    states = {(r["run_id"], r["operation_id"]): r for r in table_rows("operations")}
    for lease in expiring:
        row = states[(lease.run_id, lease.operation_id)]
        assert (row["state"], row["lease_token"], row["lease_expires_at"]) == (
            "interrupted",
            None,
            None,
        )
    for lease in (boundary, live):
        assert states[(lease.run_id, lease.operation_id)]["state"] == "running"
    assert states[(first.run_id, "op-4")]["outcome_json"] == '{"done":true}'
    store.assert_lease(boundary)

    clock.advance(1)
    assert store.recover_expired_leases() == 1
    assert store.inspect_operation(first.run_id, "op-2").state == "interrupted"
    assert store.inspect_operation(second.run_id, "op-3").state == "running"


def test_leases_fence_journal_calls(store, clock, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    other = store.start_run("abel-implement", change="other", operation_id="s2")
    lease = store.acquire_lease(run.run_id, "apply-1", 30_000)

    # a lease of another run is not this run's lease
    with rejected(LeaseFencedError, "lease-fenced"):
        store.transition(other.run_id, "paused", operation_id="t1", lease=lease)
    with rejected(LeaseFencedError, "lease-fenced"):
        store.bind_delivery(other.run_id, "gate-a", 1, A, operation_id="b1", lease=lease)
    forged = lease.model_copy(update={"token": str(uuid.uuid4())})
    with rejected(LeaseFencedError, "lease-fenced"):
        store.transition(run.run_id, "paused", operation_id="t1", lease=forged)
    with rejected(InvalidInputError, "invalid-lease"):
        store.transition(run.run_id, "paused", operation_id="t1", lease={"token": lease.token})

    # mappings (camelCase or snake_case) are accepted
    moved = store.transition(run.run_id, "paused", operation_id="t1", lease=lease.to_dict())
    bound = store.bind_delivery(
        run.run_id, "gate-a", 1, A, operation_id="b1", lease=lease.model_dump()
    )
    assert (moved.sequence, bound.sequence) == (2, 3)

    # the lease is checked before a replay: a stale holder does not get the receipt
    newer = store.acquire_lease(run.run_id, "apply-1", 30_000, preempt=True)
    with rejected(LeaseFencedError, "lease-fenced"):
        store.transition(run.run_id, "paused", operation_id="t1", lease=lease)
    with rejected(LeaseFencedError, "lease-fenced"):
        store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="b1", lease=lease)
    assert store.transition(run.run_id, "paused", operation_id="t1", lease=newer).to_json() == (
        moved.to_json()
    )


def test_acquire_lease_input_rules(store, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    for ttl in (0, -1, True, False, 1.5, "1000", None, 2**53):
        with rejected(InvalidInputError, "invalid-lease-ttl"):
            store.acquire_lease(run.run_id, "apply-1", ttl)
    with rejected(InvalidInputError, "invalid-operation-id"):
        store.acquire_lease(run.run_id, "apply 1", 1_000)
    with rejected(RunNotFoundError, "run-not-found"):
        store.acquire_lease("no-such-run", "apply-1", 1_000)
    # a journal receipt's operation id is never turned into a lease
    with rejected(OperationConflictError, "operation-id-conflict"):
        store.acquire_lease(run.run_id, "s1", 1_000)
    for flag in ({"preempt": 1}, {"exclusive": "yes"}):
        with rejected(InvalidInputError, "invalid-lease-option"):
            store.acquire_lease(run.run_id, "apply-1", 1_000, **flag)
    assert store.acquire_lease(run.run_id, "apply-1", 1).expires_at > 0


def test_clock_must_return_int_milliseconds(store, store_url, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    for bad in (1.5e12, True, "1768469475000", None):
        odd = RunStore(store_url, root_hash="ab" * 32, clock=lambda bad=bad: bad)
        with odd, rejected(InvalidInputError, "invalid-clock"):
            odd.acquire_lease(run.run_id, "apply-1", 1_000)
