"""Reading and verifying: status, list_events, rebuild_projection, verify_integrity;
tampered rows, O(1) appends, close and reopen, schema checks."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import create_engine, delete, inspect, update
from sqlalchemy.pool import NullPool

from cadence_store import (
    InvalidInputError,
    JournalIntegrityError,
    RunEvent,
    RunNotFoundError,
    RunStore,
    SchemaOutOfDateError,
    StoreUnavailableError,
)
from cadence_store.journal import ZERO_EVENT_HASH, create_event, reduce_events
from cadence_store.repository.run_repository import EVENT_BATCH
from cadence_store.storage.models import events, operations, runs

A = "a" * 64
B = "b" * 64
C = "c" * 64
D = "d" * 64
ROOT_HASH = "ab" * 32
UNKNOWN = "00000000-0000-4000-8000-000000000000"


def busy_run(store):
    """A run with every event type the store writes, a pause code and a proof."""
    run = store.start_run("abel-design", provisional_key=B, operation_id="s1")
    store.transition(run.run_id, "paused", operation_id="t1", code="needs-name")
    store.bind_change(run.run_id, "named-change", operation_id="c1")
    store.bind_delivery(run.run_id, "gate-b", 2, B, operation_id="b1")
    store.bind_delivery(
        run.run_id,
        "gate-a",
        2,
        A,
        operation_id="b2",
        approval_proof={"revision": 3, "contractHash": C, "recordHash": D},
    )
    store.transition(run.run_id, "validating-delivery", operation_id="t2")
    store.transition(run.run_id, "ready", operation_id="t3")
    return store.status(run.run_id)


def test_events_chain_and_projections_agree(store):
    status = busy_run(store)
    listed = store.list_events(status.run_id)

    assert all(isinstance(e, RunEvent) for e in listed)
    assert [e.sequence for e in listed] == list(range(1, 8))
    assert [e.type for e in listed] == [
        "run-created",
        "state-transitioned",
        "change-bound",
        "delivery-bound",
        "delivery-bound",
        "state-transitioned",
        "state-transitioned",
    ]
    prior = ZERO_EVENT_HASH
    for event in listed:
        assert event.prior_hash == prior
        assert event.hash == create_event(event.sequence, event.type, event.payload, prior).hash
        prior = event.hash
    assert status.event_hash == prior
    assert listed[0].to_dict() == {
        "sequence": 1,
        "type": "run-created",
        "payload": listed[0].payload,
        "priorHash": ZERO_EVENT_HASH,
        "hash": listed[0].hash,
    }
    assert list(store.iter_events(status.run_id)) == listed

    rebuilt = store.rebuild_projection(status.run_id)
    verified = store.verify_integrity(status.run_id)
    assert rebuilt.to_json() == status.to_json()
    assert verified.to_json() == status.to_json()
    assert reduce_events(listed).to_json() == status.to_json()
    assert status.model_dump(mode="json", by_alias=True, exclude_none=True) == json.loads(
        status.to_json()
    )
    assert list(status.document()) == [
        "runId",
        "rootHash",
        "stage",
        "state",
        "sequence",
        "eventHash",
        "deliveryBindings",
        "change",
        "deliveryRevision",
    ]
    assert status.delivery_bindings[0].approval_proof.revision == 3


def test_unknown_run_ids(store, rejected):
    store.start_run("abel-implement", change="ship-it", operation_id="s1")
    for call in (
        store.status,
        store.list_events,
        store.rebuild_projection,
        store.verify_integrity,
        lambda run_id: list(store.iter_events(run_id)),
        lambda run_id: store.inspect_operation(run_id, "s1"),
    ):
        for run_id in (UNKNOWN, "", "not-a-uuid"):
            with rejected(RunNotFoundError, "run-not-found"):
                call(run_id)
        with rejected(InvalidInputError, "invalid-run-id"):
            call(None)


def test_verify_integrity_detects_a_tampered_projection(store, db):
    status = busy_run(store)
    stored = status.to_json()

    def set_run(**values):
        with db.begin() as connection:
            connection.execute(update(runs).where(runs.c.run_id == status.run_id).values(**values))

    document = json.loads(stored)
    tampered = {
        "another state": json.dumps({**document, "state": "completed"}, separators=(",", ":")),
        "key order": json.dumps(dict(reversed(list(document.items()))), separators=(",", ":")),
        "a binding dropped": json.dumps(
            {**document, "deliveryBindings": document["deliveryBindings"][:1]},
            separators=(",", ":"),
        ),
        "an extra key": json.dumps({**document, "pauseCode": "x"}, separators=(",", ":")),
    }
    for label, projection_json in tampered.items():
        set_run(projection_json=projection_json)
        with pytest.raises(JournalIntegrityError) as info:
            store.verify_integrity(status.run_id)
        assert info.value.code == "run-projection-integrity-mismatch", label
        assert info.value.run_id == status.run_id
        # status serves what is stored; rebuild serves the chain
        assert store.status(status.run_id).to_json() == projection_json
        assert store.rebuild_projection(status.run_id).to_json() == stored
    set_run(projection_json=stored)
    assert store.verify_integrity(status.run_id).to_json() == stored

    # the run row's columns are checked too
    for column, value in (("state", "completed"), ("delivery_revision", 1)):
        set_run(**{column: value})
        with pytest.raises(JournalIntegrityError) as info:
            store.verify_integrity(status.run_id)
        assert info.value.code == "run-projection-integrity-mismatch", column
        set_run(**{column: getattr(status, column)})
    assert store.verify_integrity(status.run_id).to_json() == stored


def test_a_chain_longer_than_a_page_reads_and_verifies_whole(store, run_store, db):
    """A chain is read a page (`EVENT_BATCH` events) first, the rest streamed in one
    statement: a run of more than two pages lists every event once and in order,
    replays to its head, and a broken event on its last page is found there."""
    run = run_store.start_run("abel-design", provisional_key=C, operation_id="long-s")
    count = 2 * EVENT_BATCH + 150
    with run_store.unit_of_work() as uow:
        for n in range(count - 1):
            uow.runs.transition(run.run_id, "paused", operation_id=f"long-{n}", code=f"c{n % 7}")
    listed = store.list_events(run.run_id)
    assert [event.sequence for event in listed] == list(range(1, count + 1))
    assert store.verify_integrity(run.run_id).sequence == count
    assert store.rebuild_projection(run.run_id) == store.status(run.run_id)
    broken = count - 3
    with db.begin() as connection:
        connection.execute(
            update(events)
            .where(events.c.run_id == run.run_id, events.c.sequence == broken)
            .values(payload_json=json.dumps({**listed[broken - 1].payload, "code": "edited"}))
        )
    with pytest.raises(JournalIntegrityError) as info:
        store.verify_integrity(run.run_id)
    assert (info.value.code, info.value.sequence) == ("event-integrity-hash-chain", broken)


def test_receipts_past_the_first_page_are_checked(store, run_store, db):
    """A run's receipts are read a page first on a plain cursor, and streamed from the
    start only when that page is full: a run of exactly one page of receipts, and one of
    more, verify; a receipt edited on the last page of either is found at its sequence."""
    for count in (EVENT_BATCH, EVENT_BATCH + 40):  # receipts: the start's, one per move
        tag = f"r{count}"
        run = run_store.start_run(
            "abel-design", provisional_key=f"{count:064x}", operation_id=f"{tag}-s"
        )
        with run_store.unit_of_work() as uow:
            for n in range(count - 1):
                uow.runs.transition(run.run_id, "paused", operation_id=f"{tag}-{n}")
        assert store.verify_integrity(run.run_id).sequence == count
        edited = count - 2  # the receipt of the move to this sequence
        with db.begin() as connection:
            connection.execute(
                update(operations)
                .where(operations.c.run_id == run.run_id, operations.c.sequence == edited)
                .values(outcome_json=operations.c.outcome_json + " ")
            )
        with pytest.raises(JournalIntegrityError) as info:
            store.verify_integrity(run.run_id)
        assert info.value.sequence == edited, count
        assert info.value.code == "operation-receipt-mismatch", info.value.code


def test_append_does_not_read_the_chain(store, db):
    """An append works from the stored head (O(1)); a break in old events shows only on
    a full replay."""
    status = busy_run(store)
    old = store.list_events(status.run_id)[1]  # sequence 2, far from the head
    with db.begin() as connection:
        connection.execute(
            update(events)
            .where(events.c.run_id == status.run_id, events.c.sequence == 2)
            .values(payload_json=json.dumps({**old.payload, "code": "edited"}))
        )

    moved = store.transition(status.run_id, "running", operation_id="t4")
    assert (moved.state, moved.sequence) == ("running", 8)
    assert store.list_events(status.run_id)[-1].prior_hash == status.event_hash
    bound = store.bind_delivery(status.run_id, "gate-a", 3, A, operation_id="b3")
    assert bound.sequence == 9

    for replay in (store.verify_integrity, store.rebuild_projection):
        with pytest.raises(JournalIntegrityError) as info:
            replay(status.run_id)
        assert info.value.code == "event-integrity-hash-chain"
        assert info.value.sequence == 2
        assert info.value.run_id == status.run_id

    # a missing old event (a gap) is only seen by a replay as well
    other = busy_run_two(store)
    with db.begin() as connection:
        connection.execute(
            delete(events).where(events.c.run_id == other.run_id, events.c.sequence == 2)
        )
    assert store.transition(other.run_id, "paused", operation_id="t9").sequence == 4
    with pytest.raises(JournalIntegrityError) as info:
        store.verify_integrity(other.run_id)
    assert info.value.code == "event-integrity-hash-chain"
    assert info.value.sequence == 2


def busy_run_two(store):
    run = store.start_run("abel-implement", change="second-run", operation_id="x1")
    store.transition(run.run_id, "validating-delivery", operation_id="x2")
    store.transition(run.run_id, "ready", operation_id="x3")
    return store.status(run.run_id)


def test_append_checks_the_stored_head(store, db, rejected):
    status = busy_run_two(store)
    with db.begin() as connection:
        connection.execute(
            update(runs).where(runs.c.run_id == status.run_id).values(sequence=status.sequence + 1)
        )
    with rejected(JournalIntegrityError, "run-projection-integrity-mismatch"):
        store.transition(status.run_id, "paused", operation_id="t-next")


def test_close_and_reopen_give_identical_status_and_events(store_url, clock):
    first = RunStore(store_url, root_hash=ROOT_HASH, clock=clock)
    status = busy_run(first)
    other = busy_run_two(first)
    lease = first.acquire_lease(status.run_id, "apply-1", 60_000)
    first.commit_lease(lease, {"applied": 1})
    before = {
        run_id: (first.status(run_id).to_json(), first.list_events(run_id))
        for run_id in (status.run_id, other.run_id)
    }
    first.close()
    first.close()  # idempotent
    with pytest.raises(StoreUnavailableError) as info:
        first.status(status.run_id)
    assert info.value.code == "run-store-closed"
    with pytest.raises(StoreUnavailableError):
        first.transition(status.run_id, "running", operation_id="after-close")

    with RunStore(store_url, root_hash=ROOT_HASH, clock=clock) as reopened:
        for run_id, (projection_json, listed) in before.items():
            assert reopened.status(run_id).to_json() == projection_json
            assert reopened.list_events(run_id) == listed
            assert reopened.verify_integrity(run_id).to_json() == projection_json
        assert sorted(reopened.run_ids()) == sorted(before)
        assert reopened.inspect_operation(status.run_id, "apply-1").outcome == {"applied": 1}
        # replays survive the reopen
        assert reopened.start_run(
            "abel-design", change="named-change", operation_id="s1"
        ).run_id == (status.run_id)
        assert reopened.transition(status.run_id, "running", operation_id="t4").sequence == 8


def test_a_database_that_was_never_upgraded_is_refused(database_url, clock):
    with pytest.raises(SchemaOutOfDateError) as info:
        RunStore(database_url, root_hash=ROOT_HASH, clock=clock)
    assert info.value.code == "run-store-upgrade-required"
    assert "cadence-store upgrade" in str(info.value)
    # the store ran no DDL
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            assert inspect(connection).get_table_names() == []
    finally:
        engine.dispose()


def test_tampered_receipts_are_refused(store, db, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    other = store.start_run("abel-implement", change="other", operation_id="s2")
    lease = store.acquire_lease(run.run_id, "apply-1", 1_000)
    store.commit_lease(lease, {"ok": True})

    def set_operation(operation_id, **values):
        with db.begin() as connection:
            connection.execute(
                update(operations)
                .where(operations.c.run_id == run.run_id, operations.c.operation_id == operation_id)
                .values(**values)
            )

    # a start receipt whose outcome names another run
    set_operation("s1", outcome_json=other.to_json())
    with rejected(JournalIntegrityError, "operation-outcome-invalid"):
        store.start_run("abel-implement", change="ship-it", operation_id="s1")
    set_operation("s1", outcome_json=run.to_json())
    assert store.start_run("abel-implement", change="ship-it", operation_id="s1").to_json() == (
        run.to_json()
    )

    set_operation("apply-1", outcome_json="[1, 2]")
    with rejected(JournalIntegrityError, "operation-outcome-invalid"):
        store.inspect_operation(run.run_id, "apply-1")
    set_operation("apply-1", outcome_json='{"ok":true}', state="exploded")
    with rejected(JournalIntegrityError, "operation-state-invalid"):
        store.inspect_operation(run.run_id, "apply-1")


def test_unusual_text_survives_the_database_byte_for_byte(store):
    """Codes and outcomes with control characters, separators, astral and lone surrogate
    code points: stored as JSON.stringify wrote them, re-read and re-hashed unchanged."""
    codes = ["a\x00b", "tab\tnew\nline", "\u2028\u2029\u0085", "✓ 完了 😀", "\ud800 lone", "\"'\\/"]
    run = store.start_run("abel-implement", change="unusual-text", operation_id="s1")
    for n, code in enumerate(codes):
        projection = store.transition(run.run_id, "paused", operation_id=f"t{n}", code=code)
        assert projection.pause_code == code
        assert store.status(run.run_id).pause_code == code
        assert store.list_events(run.run_id)[-1].payload["code"] == code
    assert store.verify_integrity(run.run_id).to_json() == projection.to_json()
    listed = store.list_events(run.run_id)
    assert [e.payload.get("code") for e in listed[1:]] == codes
    assert reduce_events(listed).to_json() == projection.to_json()

    lease = store.acquire_lease(run.run_id, "apply-1", 1_000)
    outcome = {code: code for code in codes}
    assert store.commit_lease(lease, outcome) == outcome
    assert store.inspect_operation(run.run_id, "apply-1").outcome == outcome
