"""RunStore.bind_change and RunStore.bind_delivery."""

from __future__ import annotations

import json

from cadence_store import (
    ApprovalProof,
    InvalidInputError,
    InvalidTransitionError,
    OperationConflictError,
    RunNotFoundError,
)

A = "a" * 64
B = "b" * 64
C = "c" * 64
D = "d" * 64
PROOF = {"revision": 1, "contractHash": C, "recordHash": D}


def key(n: int) -> str:
    return f"{n:064x}"


# ---------------------------------------------------------------------------------------
# bind_change
# ---------------------------------------------------------------------------------------


def test_bind_change_rekeys_the_run_and_appends_change_bound(store, table_rows, rejected):
    run = store.start_run("abel-design", provisional_key=key(1), operation_id="s1")
    bound = store.bind_change(run.run_id, "login-flow", operation_id="bind-1")

    assert (bound.change, bound.provisional_key, bound.sequence) == ("login-flow", None, 2)
    events = store.list_events(run.run_id)
    assert [e.type for e in events] == ["run-created", "change-bound"]
    assert events[1].payload == {"change": "login-flow"}
    assert events[1].prior_hash == run.event_hash
    assert bound.event_hash == events[1].hash
    # provisionalKey is gone; change comes after deliveryBindings (cadence 1.x key order)
    assert bound.to_json() == (
        f'{{"runId":"{run.run_id}","rootHash":"{run.root_hash}","stage":"abel-design",'
        f'"state":"created","sequence":2,"eventHash":"{bound.event_hash}",'
        f'"deliveryBindings":[],"change":"login-flow"}}'
    )
    [row] = table_rows("runs")
    assert (row["lookup_key"], row["change_name"], row["provisional_key"]) == (
        "change:login-flow",
        "login-flow",
        None,
    )
    assert row["projection_json"] == bound.to_json()
    receipts = {r["operation_id"]: r for r in table_rows("operations")}
    assert receipts["bind-1"]["kind"] == "change-bound"
    assert receipts["bind-1"]["outcome_json"] == bound.to_json()
    store.verify_integrity(run.run_id)

    # the run is now found by its change; its provisional key was given up
    assert store.start_run("abel-design", change="login-flow", operation_id="s2").run_id == (
        run.run_id
    )
    fresh = store.start_run("abel-design", provisional_key=key(1), operation_id="s3")
    assert fresh.run_id != run.run_id
    # the original start no longer matches the run's key: its id now conflicts
    with rejected(OperationConflictError, "operation-id-conflict"):
        store.start_run("abel-design", provisional_key=key(1), operation_id="s1")

    # replay after later events returns the recorded projection, appending nothing
    store.transition(run.run_id, "paused", operation_id="t1")
    replay = store.bind_change(run.run_id, "login-flow", operation_id="bind-1")
    assert replay.to_json() == bound.to_json()
    assert len(store.list_events(run.run_id)) == 3


def test_bind_change_key_order_with_pause_code_and_bindings(store):
    run = store.start_run("abel-design", provisional_key=key(1), operation_id="s1")
    store.transition(run.run_id, "paused", operation_id="t1", code="awaiting-name")
    store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="b1")
    bound = store.bind_change(run.run_id, "named", operation_id="c1")
    assert list(bound.document()) == [
        "runId",
        "rootHash",
        "stage",
        "state",
        "sequence",
        "eventHash",
        "deliveryBindings",
        "pauseCode",
        "deliveryRevision",
        "change",
    ]
    resumed = store.transition(run.run_id, "paused", operation_id="t2", code="again")
    assert list(resumed.document())[-2:] == ["change", "pauseCode"]
    assert store.verify_integrity(run.run_id).to_json() == resumed.to_json()


def test_bind_change_rules(store, rejected):
    design = store.start_run("abel-design", provisional_key=key(1), operation_id="s1")
    implement = store.start_run("abel-implement", change="owned", operation_id="s2")
    owner = store.start_run("abel-design", change="taken", operation_id="s3")

    with rejected(InvalidTransitionError, "change-binding-not-allowed"):
        store.bind_change(implement.run_id, "other", operation_id="c1")
    with rejected(InvalidTransitionError, "change-binding-not-allowed"):
        store.bind_change(owner.run_id, "other", operation_id="c1")
    with rejected(OperationConflictError, "change-run-already-exists"):
        store.bind_change(design.run_id, "taken", operation_id="c1")
    with rejected(RunNotFoundError, "run-not-found"):
        store.bind_change("00000000-0000-4000-8000-000000000000", "free", operation_id="c1")
    with rejected(InvalidInputError, "invalid-change"):
        store.bind_change(design.run_id, "Not-Valid", operation_id="c1")
    with rejected(InvalidInputError, "invalid-change"):
        store.bind_change(design.run_id, "", operation_id="c1")
    with rejected(InvalidInputError, "invalid-operation-id"):
        store.bind_change(design.run_id, "free", operation_id="c 1")
    # the start receipt's operation id is another kind
    with rejected(OperationConflictError, "operation-id-conflict"):
        store.bind_change(design.run_id, "free", operation_id="s1")

    # a finished design run keeps its change key until a start replaces it
    store.transition(owner.run_id, "discarded", operation_id="t-end")
    with rejected(OperationConflictError, "change-run-already-exists"):
        store.bind_change(design.run_id, "taken", operation_id="c1")

    # a change owned by an implement run is not a design conflict
    bound = store.bind_change(design.run_id, "owned", operation_id="c1")
    assert bound.change == "owned"
    with rejected(InvalidTransitionError, "change-binding-not-allowed"):
        store.bind_change(design.run_id, "owned", operation_id="c2")


# ---------------------------------------------------------------------------------------
# bind_delivery
# ---------------------------------------------------------------------------------------


def test_bind_delivery_inserts_row_event_and_projection(store, table_rows):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    bound = store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="bind-a1")

    [event] = store.list_events(run.run_id)[1:]
    assert (event.sequence, event.type, event.prior_hash) == (2, "delivery-bound", run.event_hash)
    assert event.payload == {"gate": "gate-a", "revision": 1, "receiptHash": A}
    assert list(event.payload) == ["gate", "revision", "receiptHash"]
    assert bound.delivery_revision == 1
    assert [b.to_dict() for b in bound.delivery_bindings] == [
        {"gate": "gate-a", "revision": 1, "receiptHash": A}
    ]
    # deliveryRevision is a new key: it goes to the end
    assert bound.to_json() == (
        f'{{"runId":"{run.run_id}","rootHash":"{run.root_hash}","stage":"abel-implement",'
        f'"change":"ship-it","state":"created","sequence":2,"eventHash":"{event.hash}",'
        f'"deliveryBindings":[{{"gate":"gate-a","revision":1,"receiptHash":"{A}"}}],'
        f'"deliveryRevision":1}}'
    )
    assert table_rows("delivery_bindings") == [
        {
            "run_id": run.run_id,
            "gate": "gate-a",
            "revision": 1,
            "receipt_hash": A,
            "operation_id": "bind-a1",
            "approval_revision": None,
            "contract_hash": None,
            "record_hash": None,
        }
    ]
    [row] = table_rows("runs")
    assert (row["delivery_revision"], row["sequence"], row["projection_json"]) == (
        1,
        2,
        bound.to_json(),
    )
    receipts = {r["operation_id"]: r for r in table_rows("operations")}
    assert receipts["bind-a1"]["kind"] == "delivery-bound"
    assert receipts["bind-a1"]["outcome_json"] == bound.to_json()


def test_bindings_sorted_by_revision_then_gate_and_revision_is_the_highest(store, table_rows):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    steps = [("gate-b", 2, B), ("gate-a", 3, A), ("gate-a", 2, A), ("gate-b", 1, B)]
    for n, (gate, revision, receipt) in enumerate(steps):
        projection = store.bind_delivery(run.run_id, gate, revision, receipt, operation_id=f"b{n}")
    assert [(b.gate, b.revision) for b in projection.delivery_bindings] == [
        ("gate-b", 1),
        ("gate-a", 2),
        ("gate-b", 2),
        ("gate-a", 3),
    ]
    assert projection.delivery_revision == 3
    assert table_rows("runs")[0]["delivery_revision"] == 3
    assert len(table_rows("delivery_bindings")) == 4
    assert store.verify_integrity(run.run_id).to_json() == projection.to_json()


def test_approval_proof_as_model_or_mapping(store, table_rows):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    forms = [
        ApprovalProof(revision=1, contract_hash=C, record_hash=D),
        {"revision": 1, "contractHash": C, "recordHash": D},
        {"revision": 1, "contract_hash": C, "record_hash": D},
    ]
    for revision, proof in enumerate(forms, start=1):
        projection = store.bind_delivery(
            run.run_id, "gate-b", revision, B, operation_id=f"b{revision}", approval_proof=proof
        )
    for binding in projection.document()["deliveryBindings"]:
        assert binding["approvalProof"] == PROOF
        assert list(binding["approvalProof"]) == ["revision", "contractHash", "recordHash"]
    for event in store.list_events(run.run_id)[1:]:
        assert event.payload["approvalProof"] == PROOF
    assert projection.delivery_bindings[0].approval_proof == ApprovalProof(
        revision=1, contract_hash=C, record_hash=D
    )
    for row in table_rows("delivery_bindings"):
        assert (row["approval_revision"], row["contract_hash"], row["record_hash"]) == (1, C, D)
    assert json.loads(table_rows("runs")[0]["projection_json"]) == projection.document()


def test_same_binding_again_records_a_receipt_without_an_event(store, table_rows):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    first = store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="b1", approval_proof=PROOF)
    store.transition(run.run_id, "validating-delivery", operation_id="t1")
    current = store.status(run.run_id)

    again = store.bind_delivery(
        run.run_id, "gate-a", 1, A, operation_id="b2", approval_proof=dict(PROOF)
    )
    assert again.to_json() == current.to_json()
    assert len(store.list_events(run.run_id)) == 3
    assert len(table_rows("delivery_bindings")) == 1
    receipts = {r["operation_id"]: r for r in table_rows("operations")}
    assert receipts["b2"]["kind"] == "delivery-bound"
    assert receipts["b2"]["outcome_json"] == current.to_json()
    # the binding row keeps the operation id that created it
    assert table_rows("delivery_bindings")[0]["operation_id"] == "b1"

    # replays return the recorded projections, whatever the arguments now say
    assert store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="b1").to_json() == (
        first.to_json()
    )
    assert store.bind_delivery(run.run_id, "gate-b", 7, B, operation_id="b2").to_json() == (
        current.to_json()
    )
    assert len(store.list_events(run.run_id)) == 3
    assert len(table_rows("delivery_bindings")) == 1


def test_delivery_revision_conflicts(store, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="plain")
    store.bind_delivery(run.run_id, "gate-b", 1, B, operation_id="proved", approval_proof=PROOF)

    conflicts = [
        ("gate-a", 1, B, None),  # another receipt
        ("gate-a", 1, A, PROOF),  # a proof where there was none
        ("gate-b", 1, B, None),  # no proof where there was one
        ("gate-b", 1, A, PROOF),  # another receipt, same proof
        ("gate-b", 1, B, {**PROOF, "revision": 2}),
        ("gate-b", 1, B, {**PROOF, "contractHash": A}),
        ("gate-b", 1, B, {**PROOF, "recordHash": A}),
    ]
    for gate, revision, receipt, proof in conflicts:
        with rejected(OperationConflictError, "delivery-revision-conflict"):
            store.bind_delivery(
                run.run_id, gate, revision, receipt, operation_id="new", approval_proof=proof
            )
    # a different revision of the same gate is a new binding
    assert store.bind_delivery(run.run_id, "gate-a", 2, B, operation_id="new").sequence == 4


def test_bind_delivery_input_rules(store, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="b1")
    invalid = [
        ("gate-c", 1, A, None),
        ("Gate-A", 1, A, None),
        (None, 1, A, None),
        ("gate-a", 0, A, None),
        ("gate-a", -1, A, None),
        ("gate-a", True, A, None),
        ("gate-a", 1.5, A, None),
        ("gate-a", "2", A, None),
        ("gate-a", 2**53, A, None),
        ("gate-a", 2, A.upper(), None),
        ("gate-a", 2, "a" * 63, None),
        ("gate-a", 2, A + "\n", None),
        ("gate-a", 2, A, {**PROOF, "revision": 0}),
        ("gate-a", 2, A, {**PROOF, "revision": True}),
        ("gate-a", 2, A, {**PROOF, "contractHash": "x" * 64}),
        ("gate-a", 2, A, {**PROOF, "recordHash": D.upper()}),
        ("gate-a", 2, A, {"revision": 1, "contractHash": C}),
        ("gate-a", 2, A, {**PROOF, "extra": 1}),
        ("gate-a", 2, A, [1, C, D]),
    ]
    for gate, revision, receipt, proof in invalid:
        with rejected(InvalidInputError, "invalid-delivery-binding"):
            store.bind_delivery(
                run.run_id, gate, revision, receipt, operation_id="b2", approval_proof=proof
            )
    with rejected(InvalidInputError, "invalid-operation-id"):
        store.bind_delivery(run.run_id, "gate-a", 2, A, operation_id="")
    with rejected(RunNotFoundError, "run-not-found"):
        store.bind_delivery("no-such-run", "gate-a", 2, A, operation_id="b2")
    # operation ids of another kind on this run
    for used in ("s1",):
        with rejected(OperationConflictError, "operation-id-conflict"):
            store.bind_delivery(run.run_id, "gate-a", 2, A, operation_id=used)
    store.transition(run.run_id, "paused", operation_id="t1")
    with rejected(OperationConflictError, "operation-id-conflict"):
        store.bind_delivery(run.run_id, "gate-a", 2, A, operation_id="t1")
    # the boundaries are accepted
    top = store.bind_delivery(run.run_id, "gate-b", 2**53 - 1, B, operation_id="b-top")
    assert top.delivery_revision == 2**53 - 1
    assert store.verify_integrity(run.run_id).to_json() == top.to_json()


def test_bindings_are_per_run(store, table_rows):
    first = store.start_run("abel-implement", change="one", operation_id="s1")
    second = store.start_run("abel-implement", change="two", operation_id="s2")
    store.bind_delivery(first.run_id, "gate-a", 1, A, operation_id="bind")
    # same gate, revision and operation id on another run: an independent binding
    other = store.bind_delivery(second.run_id, "gate-a", 1, B, operation_id="bind")
    assert other.delivery_bindings[0].receipt_hash == B
    assert store.status(first.run_id).delivery_bindings[0].receipt_hash == A
    assert len(table_rows("delivery_bindings")) == 2
