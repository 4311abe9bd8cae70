"""RunStore.transition: legal moves, pause codes, terminal states, receipts and replays."""

from __future__ import annotations

from cadence_store import (
    InvalidInputError,
    InvalidTransitionError,
    OperationConflictError,
    RunNotFoundError,
)
from cadence_store.journal import RUN_STATES, TERMINAL_STATES

A = "a" * 64

# created -> ... -> completed through every non-pause, non-terminal state
LONG_PATH = [
    "validating-delivery",
    "approval-needed",
    "validating-delivery",
    "ready",
    "queued",
    "connecting",
    "retryable",
    "running",
    "validating",
    "verifying",
    "change-verifying",
    "ready-to-apply",
    "applying",
    "recovering",
    "applying",
    "completed",
]


def test_transition_appends_event_and_records_receipt(store, table_rows):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    moved = store.transition(run.run_id, "validating-delivery", operation_id="t1")

    assert (moved.state, moved.sequence, moved.pause_code, moved.terminal) == (
        "validating-delivery",
        2,
        None,
        None,
    )
    event = store.list_events(run.run_id)[-1]
    assert (event.sequence, event.type, event.prior_hash) == (
        2,
        "state-transitioned",
        run.event_hash,
    )
    assert event.payload == {"from": "created", "to": "validating-delivery"}
    assert list(event.payload) == ["from", "to"]
    assert moved.event_hash == event.hash
    [row] = table_rows("runs")
    assert (row["state"], row["sequence"], row["event_hash"], row["terminal_tombstone"]) == (
        "validating-delivery",
        2,
        event.hash,
        None,
    )
    assert row["projection_json"] == moved.to_json()
    receipts = {r["operation_id"]: r for r in table_rows("operations")}
    assert receipts["t1"] == {
        "run_id": run.run_id,
        "operation_id": "t1",
        "kind": "state-transitioned",
        "state": "committed",
        "outcome_json": moved.to_json(),
        "lease_token": None,
        "lease_expires_at": None,
        "lease_fence": None,
        "sequence": 2,  # the sequence its projection names (revision cs0005)
    }


def test_long_legal_path_to_completed(store, table_rows):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    states = ["created"]
    for n, state in enumerate(LONG_PATH):
        projection = store.transition(run.run_id, state, operation_id=f"t{n}")
        assert projection.state == state
        states.append(state)
    assert projection.terminal == "completed"
    assert projection.sequence == len(LONG_PATH) + 1
    events = store.list_events(run.run_id)
    assert [(e.payload["from"], e.payload["to"]) for e in events[1:]] == list(
        zip(states, states[1:], strict=False)
    )
    assert table_rows("runs")[0]["terminal_tombstone"] == "completed"
    assert store.verify_integrity(run.run_id).to_json() == projection.to_json()
    assert store.rebuild_projection(run.run_id).to_json() == projection.to_json()


def test_illegal_moves_are_refused_with_their_codes(store, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    with rejected(InvalidTransitionError, "invalid-run-transition:created:running"):
        store.transition(run.run_id, "running", operation_id="t-bad")
    with rejected(InvalidTransitionError, "invalid-run-transition:created:created"):
        store.transition(run.run_id, "created", operation_id="t-bad")
    for n, state in enumerate(["validating-delivery", "ready", "running"]):
        store.transition(run.run_id, state, operation_id=f"t{n}")
    with rejected(InvalidTransitionError, "invalid-run-transition:running:completed"):
        store.transition(run.run_id, "completed", operation_id="t-bad")
    with rejected(InvalidTransitionError, "invalid-run-transition:running:ready"):
        store.transition(run.run_id, "ready", operation_id="t-bad")
    # the refused operation id was not recorded: it can still be used
    assert store.transition(run.run_id, "paused", operation_id="t-bad").state == "paused"


def test_unknown_target_is_a_state_mismatch(store, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    for target in ("bogus", "Running", "", None, 3, "terminal"):
        with rejected(InvalidTransitionError, "event-integrity-state-mismatch"):
            store.transition(run.run_id, target, operation_id="t1")


def test_terminal_states_have_no_moves(store, rejected):
    for terminal in sorted(TERMINAL_STATES):
        run = store.start_run(
            "abel-implement", change=f"end-{terminal}", operation_id=f"s-{terminal}"
        )
        if terminal == "completed":
            store.transition(run.run_id, "paused", operation_id=f"p-{terminal}")
        done = store.transition(run.run_id, terminal, operation_id=f"t-{terminal}")
        assert (done.state, done.terminal) == (terminal, terminal)
        assert list(done.document())[-1] == "terminal"
        targets = RUN_STATES if terminal == "completed" else ("paused", terminal, "created")
        for target in targets:
            with rejected(InvalidTransitionError, f"invalid-run-transition:{terminal}:{target}"):
                store.transition(run.run_id, target, operation_id="after")


def test_pause_code_and_terminal_move_to_the_end(store):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    run_id, root = run.run_id, run.root_hash

    paused = store.transition(run_id, "paused", operation_id="t1", code="operator-pause")
    assert paused.pause_code == "operator-pause"
    assert list(paused.document())[-1] == "pauseCode"
    assert store.list_events(run_id)[-1].payload == {
        "from": "created",
        "to": "paused",
        "code": "operator-pause",
    }

    bound = store.bind_delivery(run_id, "gate-a", 1, A, operation_id="b1")
    assert list(bound.document())[-2:] == ["pauseCode", "deliveryRevision"]

    again = store.transition(run_id, "paused", operation_id="t2", code="still-paused")
    assert list(again.document())[-3:] == ["deliveryBindings", "deliveryRevision", "pauseCode"]

    # no code (or an empty one): the pause code is dropped, no code in the event
    resumed = store.transition(run_id, "validating-delivery", operation_id="t3", code="")
    assert resumed.pause_code is None
    assert "pauseCode" not in resumed.document()
    assert store.list_events(run_id)[-1].payload == {
        "from": "paused",
        "to": "validating-delivery",
    }

    # a code on a move that is not a pause still becomes pauseCode (cadence 1.x)
    rejected_run = store.transition(run_id, "rejected", operation_id="t4", code="policy-violation")
    binding = f'{{"gate":"gate-a","revision":1,"receiptHash":"{A}"}}'
    assert rejected_run.to_json() == (
        f'{{"runId":"{run_id}","rootHash":"{root}","stage":"abel-implement",'
        f'"change":"ship-it","state":"rejected","sequence":6,'
        f'"eventHash":"{rejected_run.event_hash}","deliveryBindings":[{binding}],'
        f'"deliveryRevision":1,"pauseCode":"policy-violation","terminal":"rejected"}}'
    )
    assert (rejected_run.pause_code, rejected_run.terminal) == ("policy-violation", "rejected")
    assert store.verify_integrity(run_id).to_json() == rejected_run.to_json()


def test_transition_replays_and_operation_id_kinds(store, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    first = store.transition(run.run_id, "paused", operation_id="t1", code="hold")
    store.transition(run.run_id, "validating-delivery", operation_id="t2")
    store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="b1")
    lease = store.acquire_lease(run.run_id, "apply-1", 60_000)
    events_before = len(store.list_events(run.run_id))

    # a replay returns the recorded projection, even though the move is illegal now
    replay = store.transition(run.run_id, "paused", operation_id="t1", code="hold")
    assert replay.to_json() == first.to_json()
    # and whatever the arguments say
    replay = store.transition(run.run_id, "discarded", operation_id="t1")
    assert replay.to_json() == first.to_json()
    assert len(store.list_events(run.run_id)) == events_before
    assert store.status(run.run_id).state == "validating-delivery"

    for used in ("s1", "b1", "apply-1"):
        with rejected(OperationConflictError, "operation-id-conflict"):
            store.transition(run.run_id, "ready", operation_id=used)
    with rejected(OperationConflictError, "operation-id-conflict"):
        store.transition(run.run_id, "ready", operation_id="apply-1", lease=lease)
    # an operation id is scoped to its run
    other = store.start_run("abel-implement", change="other", operation_id="s2")
    assert store.transition(other.run_id, "paused", operation_id="t1").run_id == other.run_id


def test_transition_input_rules(store, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    with rejected(RunNotFoundError, "run-not-found"):
        store.transition("00000000-0000-4000-8000-000000000000", "paused", operation_id="t1")
    with rejected(RunNotFoundError, "run-not-found"):
        store.transition("00000000-0000-4000-8000-000000000000", "bogus", operation_id="t1")
    with rejected(InvalidInputError, "invalid-operation-id"):
        store.transition(run.run_id, "paused", operation_id="t1!")
    with rejected(InvalidInputError, "invalid-transition-code"):
        store.transition(run.run_id, "paused", operation_id="t1", code=5)
