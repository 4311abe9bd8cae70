"""Answers that differed from cadence 1.x's without a word (issue 22), each as cadence 1.x
gives it: identifiers its /iu regex accepts, its order of checks, JavaScript numbers, lone
surrogates in outcomes, and `to_dict()` without cadence-store's additions."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from integration.conftest_migrations import copy_fixture, edit_sqlite, sqlite_url, store_entry
from support import ROOT_HASH

import cadence_store
from cadence_store import (
    AsyncRunStore,
    InvalidInputError,
    LeaseFencedError,
    OperationConflictError,
    RunNotFoundError,
    RunStore,
)
from cadence_store.async_store import async_database_url

A = "a" * 64
B = "b" * 64
UNSTORABLE_RUN_IDS = ("x\x00y", "\ud800")


def test_case_folded_identifiers_are_operation_ids(store, table_rows):
    # cadence 1.x's /iu regex matches U+212A (Kelvin sign) as k and U+017F (long s) as s
    run = store.start_run("abel-implement", change="ship-it", operation_id="op-\u212a")
    assert store.start_run("abel-implement", change="ship-it", operation_id="op-\u212a") == run
    moved = store.transition(run.run_id, "paused", operation_id="pau\u017fe")
    assert store.transition(run.run_id, "paused", operation_id="pau\u017fe") == moved
    assert len(store.list_events(run.run_id)) == 2
    lease = store.acquire_lease(run.run_id, "\u212a", 1_000)
    assert store.inspect_operation(run.run_id, "\u212a").state == "running"
    store.commit_lease(lease, {"ok": True})
    stored = {row["operation_id"] for row in table_rows("operations")}
    assert {"op-\u212a", "pau\u017fe", "\u212a"} <= stored


def test_an_adopted_store_replays_case_folded_identifiers(tmp_path: Path) -> None:
    entry = store_entry("current.sqlite3")
    path = copy_fixture("current.sqlite3", tmp_path)
    # a cadence 1.x store may hold an id only its /iu rule accepts
    edit_sqlite(
        path,
        "UPDATE operations SET operation_id = 'design-alpha-\u212a1' "
        "WHERE operation_id = 'design-alpha-t1'",
    )
    receipt = next(row for row in entry["operations"] if row["operation_id"] == "design-alpha-t1")
    url = sqlite_url(path)
    cadence_store.upgrade(url)
    with RunStore(url, root_hash=entry["consumerRootHash"], clock=lambda: 0) as store:
        events = store.list_events(receipt["run_id"])
        to = json.loads(receipt["outcome_json"])["state"]
        replayed = store.transition(receipt["run_id"], to, operation_id="design-alpha-\u212a1")
        assert replayed.document() == json.loads(receipt["outcome_json"])
        assert store.list_events(receipt["run_id"]) == events


@pytest.mark.parametrize("run_id", UNSTORABLE_RUN_IDS)
def test_a_lease_is_checked_before_a_run_id_no_run_can_have(store, rejected, run_id):
    """cadence 1.x checks `lease.runId !== runId` first: another run's lease is fenced."""
    other = store.start_run("abel-implement", change="other", operation_id="s1")
    lease = store.acquire_lease(other.run_id, "apply", 60_000)
    with rejected(LeaseFencedError, "lease-fenced"):
        store.bind_delivery(run_id, "gate-a", 1, A, operation_id="b1", lease=lease)
    with rejected(LeaseFencedError, "lease-fenced"):
        store.transition(run_id, "paused", operation_id="t1", lease=lease)
    with rejected(RunNotFoundError, "run-not-found"):
        store.bind_delivery(run_id, "gate-a", 1, A, operation_id="b1")
    with rejected(RunNotFoundError, "run-not-found"):
        store.transition(run_id, "paused", operation_id="t1")
    # the input rules still come first
    with rejected(InvalidInputError, "invalid-operation-id"):
        store.transition(run_id, "paused", operation_id="bad id", lease=lease)
    with rejected(InvalidInputError, "invalid-delivery-binding"):
        store.bind_delivery(run_id, "gate-c", 1, A, operation_id="b1", lease=lease)


@pytest.mark.run_store_only
@pytest.mark.parametrize("run_id", UNSTORABLE_RUN_IDS)
def test_bind_deliveries_atomically_checks_in_cadence_1x_order(store, rejected, run_id):
    other = store.start_run("abel-implement", change="other", operation_id="s1")
    lease = store.acquire_lease(other.run_id, "apply", 60_000)
    calls = []

    def request(run: str, operation_id: str, **extra):
        return {"run_id": run, "gate": "gate-a", "revision": 1, "receipt_hash": A,
                "operation_id": operation_id, **extra}  # fmt: skip

    with rejected(LeaseFencedError, "lease-fenced"):
        store.bind_deliveries_atomically([request(run_id, "b1", lease=lease)], write=calls.append)
    with rejected(RunNotFoundError, "run-not-found"):
        store.bind_deliveries_atomically([request(run_id, "b1")], write=calls.append)
    with rejected(InvalidInputError, "delivery-binding-write-invalid"):
        store.bind_deliveries_atomically(
            [request(run_id, "b1"), request(other.run_id, "b2")], write=calls.append
        )
    # an empty run id: cadence 1.x's `!runId`
    with rejected(InvalidInputError, "delivery-binding-write-invalid"):
        store.bind_deliveries_atomically([request("", "b1")], write=calls.append)
    with rejected(InvalidInputError, "delivery-binding-write-invalid"):
        store.bind_deliveries_atomically([request("", "b1", lease=lease)], write=calls.append)
    assert calls == []


def test_integral_floats_are_javascript_numbers(store, table_rows):
    """3.0 is 3 in JavaScript: for revisions, proofs, TTLs and lease mappings alike."""
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    proof = {"revision": 3.0, "contract_hash": A, "record_hash": B}
    bound = store.bind_delivery(
        run.run_id, "gate-a", 2.0, A, operation_id="b1", approval_proof=proof
    )
    binding = bound.delivery_bindings[0]
    assert (binding.revision, binding.approval_proof.revision) == (2, 3)
    assert type(binding.approval_proof.revision) is int
    assert store.list_events(run.run_id)[-1].payload["approvalProof"]["revision"] == 3
    assert json.loads(table_rows("events")[-1]["payload_json"])["approvalProof"]["revision"] == 3
    # the same request again replays (3.0 and 3 are one number)
    again = {"revision": 3, "contractHash": A, "recordHash": B}
    assert store.bind_delivery(run.run_id, "gate-a", 2, A, operation_id="b2", approval_proof=again)
    lease = store.acquire_lease(run.run_id, "apply", 1_000.0)
    mapping = {**lease.to_dict(), "expiresAt": float(lease.expires_at)}
    store.assert_lease(mapping)
    assert store.renew_lease(mapping, 2_000.0).expires_at == lease.expires_at + 1_000


def test_integral_float_rule_refuses_what_javascript_refuses(store, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    for revision in (3.5, float("nan"), float(2**53), True, "3"):
        proof = {"revision": revision, "contract_hash": A, "record_hash": B}
        with rejected(InvalidInputError, "invalid-delivery-binding"):
            store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="b1", approval_proof=proof)


def test_lone_surrogates_in_outcome_keys_stay_as_stored(store):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    lease = store.acquire_lease(run.run_id, "apply", 1_000)
    outcome = {"\ud800": 1, "nested": {"\udc00": ["\ud800", {"\udfff": None}]}}
    assert store.commit_lease(lease, outcome) == outcome
    status = store.inspect_operation(run.run_id, "apply")
    assert status.outcome == outcome
    assert status.to_dict() == {"state": "committed", "outcome": outcome}
    assert status.model_dump(mode="json")["outcome"] == outcome
    assert status.model_dump(mode="json", by_alias=True, exclude_none=True) == {
        "state": "committed",
        "outcome": outcome,
        "fence": 1,
    }
    # JSON text: the surrogates as JSON.stringify writes them (\\udxxx escapes)
    assert json.loads(status.model_dump_json())["outcome"] == outcome
    assert "\\ud800" in status.model_dump_json()
    receipt = store.inspect_operation(run.run_id, "s1")
    assert receipt.to_dict()["outcome"] == run.to_dict()


def test_a_journal_receipt_is_never_turned_into_a_lease(store, rejected):
    """cadence 1.x overwrote the receipt with a lease (and a retried transition then
    appended a second event); cadence-store refuses (README: Differences)."""
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    store.transition(run.run_id, "paused", operation_id="t1")
    with rejected(OperationConflictError, "operation-id-conflict"):
        store.acquire_lease(run.run_id, "t1", 1_000)
    assert store.transition(run.run_id, "paused", operation_id="t1").sequence == 2


@pytest.mark.run_store_only
def test_bind_delivery_atomically_with_an_empty_run_id_answers_as_cadence_1x(
    store, rejected, store_url, clock
):
    """cadence 1.x's single call checks the lease, then the run (`run-not-found`); only
    the batch call refuses an empty run id up front (its `!runId`)."""
    other = store.start_run("abel-implement", change="other", operation_id="s1")
    stale = store.acquire_lease(other.run_id, "apply", 60_000)
    live = store.acquire_lease(other.run_id, "apply", 60_000, preempt=True)
    calls: list[object] = []

    def bind(**extra):
        return store.bind_delivery_atomically(
            "", "gate-a", 1, A, operation_id="b1", write=calls.append, **extra
        )

    with rejected(RunNotFoundError, "run-not-found"):
        bind()
    for lease in (stale, live):
        with rejected(LeaseFencedError, "lease-fenced"):
            bind(lease=lease)
    request = {"run_id": "", "gate": "gate-a", "revision": 1, "receipt_hash": A,
               "operation_id": "b1"}  # fmt: skip
    with rejected(InvalidInputError, "delivery-binding-write-invalid"):
        store.bind_deliveries_atomically([request], write=calls.append)

    async def through_the_async_store(lease: object = None) -> None:
        async with AsyncRunStore(
            async_database_url(store_url), root_hash=ROOT_HASH, clock=clock
        ) as async_store:
            await async_store.bind_delivery_atomically(
                "", "gate-a", 1, A, operation_id="b1", write=calls.append, lease=lease
            )

    with rejected(RunNotFoundError, "run-not-found"):
        asyncio.run(through_the_async_store())
    with rejected(LeaseFencedError, "lease-fenced"):
        asyncio.run(through_the_async_store(stale))
    assert calls == []
