"""The pure reducer against cadence 1.x: recorded runs, integrity codes, the state table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cadence_store import InvalidTransitionError, JournalIntegrityError
from cadence_store.journal import (
    RUN_STATES,
    TERMINAL_STATES,
    ZERO_EVENT_HASH,
    can_transition,
    create_event,
    legal_control_commands,
    reduce_events,
)

MANIFEST = Path(__file__).resolve().parents[1] / "fixtures" / "cadence-1x" / "manifest.json"
RUN_ID = "3f1c2a9e-8b7d-4c6e-9f01-23456789abcd"
ROOT = "1b" * 32
A = "a" * 64
B = "b" * 64
C = "c" * 64


def js(value: Any) -> str:
    """JSON.stringify of a parsed JSON value (key order kept)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------------------------------
# 1. Runs recorded by cadence 1.x
# ---------------------------------------------------------------------------------------


def _recorded_runs() -> list[Any]:
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    cases = []
    for store in manifest["stores"]:
        for run in store.get("runs") or []:
            cases.append(pytest.param(store, run, id=f"{store['file']}:{run['label']}"))
    return cases


RECORDED = _recorded_runs()


def test_the_manifest_has_runs_in_every_readable_store():
    files = {case.values[0]["file"] for case in RECORDED}
    assert files == {"current.sqlite3", "legacy-v4.sqlite3", "legacy-v2.sqlite3"}
    assert len(RECORDED) >= 14


@pytest.mark.parametrize(("store", "run"), RECORDED)
def test_recorded_run_reduces_to_its_recorded_status(store, run):
    projection = reduce_events(run["events"])
    assert projection.to_json() == js(run["status"])
    assert projection.model_dump(mode="json", by_alias=True, exclude_none=True) == run["status"]
    # every event's hash is the one create_event computes
    prior = ZERO_EVENT_HASH
    for event in run["events"]:
        made = create_event(event["sequence"], event["type"], event["payload"], prior)
        assert made.hash == event["hash"]
        assert event["priorHash"] == prior
        prior = made.hash
    # each journal receipt of this run holds the projection of a prefix of its chain
    for operation in store["operations"]:
        if operation["run_id"] != run["runId"] or operation["kind"] == "lease":
            continue
        outcome = json.loads(operation["outcome_json"])
        prefix = run["events"][: outcome["sequence"]]
        assert reduce_events(prefix).to_json() == operation["outcome_json"]


# ---------------------------------------------------------------------------------------
# 2. Integrity codes of the reducer
# ---------------------------------------------------------------------------------------


def chain(*steps: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Correctly hashed events (as cadence 1.x objects) for the given (type, payload)s."""
    events: list[dict[str, Any]] = []
    prior = ZERO_EVENT_HASH
    for sequence, (type_, payload) in enumerate(steps, start=1):
        event = create_event(sequence, type_, payload, prior)
        events.append(event.to_dict())
        prior = event.hash
    return events


def created(stage: str = "abel-implement", **keys: Any) -> tuple[str, dict[str, Any]]:
    if not keys:
        keys = {"change": "ship-it"}
    return "run-created", {"runId": RUN_ID, "rootHash": ROOT, "stage": stage, **keys}


def moved(source: str, target: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    return "state-transitioned", {"from": source, "to": target, **extra}


def bound(gate: str = "gate-a", revision: Any = 1, receipt: Any = A, **extra: Any):
    return "delivery-bound", {"gate": gate, "revision": revision, "receiptHash": receipt, **extra}


def expect_integrity(events: list[dict[str, Any]], code: str) -> JournalIntegrityError:
    with pytest.raises(JournalIntegrityError) as info:
        reduce_events(events)
    assert type(info.value) is JournalIntegrityError
    assert info.value.code == code
    return info.value


def test_a_valid_chain_reduces():
    events = chain(
        created(),
        bound("gate-b", 2, B),
        bound("gate-a", 2, A, approvalProof={"revision": 1, "contractHash": C, "recordHash": C}),
        bound("gate-b", 2, B),  # the same binding again: no change, no conflict
        moved("created", "paused", code="hold"),
        ("operation-interrupted", {}),
    )
    projection = reduce_events(events)
    assert projection.sequence == 6
    assert projection.event_hash == events[-1]["hash"]
    assert [(b.gate, b.revision) for b in projection.delivery_bindings] == [
        ("gate-a", 2),
        ("gate-b", 2),
    ]
    assert projection.delivery_revision == 2
    assert (projection.state, projection.pause_code) == ("paused", "operation-interrupted")
    assert list(projection.document())[-2:] == ["deliveryRevision", "pauseCode"]
    # reduce_events takes RunEvent models too
    models = [create_event(1, *created(), ZERO_EVENT_HASH)]
    assert reduce_events(models).state == "created"


def test_hash_chain_breaks():
    good = chain(created(), moved("created", "paused"), moved("paused", "ready"))

    edited = [dict(e) for e in good]
    edited[1] = {**edited[1], "payload": {"from": "created", "to": "discarded"}}
    assert expect_integrity(edited, "event-integrity-hash-chain").sequence == 2

    wrong_prior = [good[0], create_event(2, *moved("created", "paused"), "1" * 64).to_dict()]
    expect_integrity(wrong_prior, "event-integrity-hash-chain")

    gap = [good[0], create_event(3, *moved("created", "paused"), good[0]["hash"]).to_dict()]
    expect_integrity(gap, "event-integrity-hash-chain")

    expect_integrity(good[1:], "event-integrity-hash-chain")  # does not start at 1
    expect_integrity([good[0], good[2]], "event-integrity-hash-chain")
    expect_integrity([good[0], good[1], good[1]], "event-integrity-hash-chain")
    expect_integrity([{**good[0], "hash": good[0]["hash"].upper()}], "event-integrity-hash-chain")
    expect_integrity([{**good[0], "sequence": True}], "event-integrity-hash-chain")


@pytest.mark.parametrize(
    ("steps", "code"),
    [
        ([created(), created()], "event-integrity-duplicate-create"),
        ([created(stage="abel-review")], "event-integrity-invalid-stage"),
        ([created(stage=None)], "event-integrity-invalid-stage"),
        ([created(change="x", provisionalKey=A)], "event-integrity-invalid-run-key"),
        ([created(change="")], "event-integrity-invalid-run-key"),
        (
            [("run-created", {"runId": RUN_ID, "rootHash": ROOT, "stage": "abel-design"})],
            "event-integrity-invalid-run-key",
        ),
        (
            [("run-created", {"rootHash": ROOT, "stage": "abel-design", "change": "x"})],
            "event-integrity-invalid-runId",
        ),
        (
            [
                (
                    "run-created",
                    {"runId": RUN_ID, "rootHash": "", "stage": "abel-design", "change": "x"},
                )
            ],
            "event-integrity-invalid-rootHash",
        ),
        ([created(), ("change-bound", {"change": "named"})], "event-integrity-change-binding"),
        ([("change-bound", {"change": "named"})], "event-integrity-change-binding"),
        (
            [created(stage="abel-design", provisionalKey=A), ("change-bound", {"change": ""})],
            "event-integrity-invalid-change",
        ),
        ([created(), bound(gate="gate-c")], "event-integrity-delivery-binding"),
        ([created(), bound(revision=0)], "event-integrity-delivery-binding"),
        ([created(), bound(revision=True)], "event-integrity-delivery-binding"),
        ([created(), bound(revision=1.5)], "event-integrity-delivery-binding"),
        ([created(), bound(receipt=A.upper())], "event-integrity-delivery-binding"),
        ([created(), bound(approvalProof=None)], "event-integrity-delivery-binding"),
        (
            [created(), bound(approvalProof={"revision": 0, "contractHash": C, "recordHash": C})],
            "event-integrity-delivery-binding",
        ),
        (
            [created(), bound(approvalProof={"revision": 1, "contractHash": C})],
            "event-integrity-delivery-binding",
        ),
        ([created(), bound(receipt=A), bound(receipt=B)], "event-integrity-delivery-conflict"),
        (
            [
                created(),
                bound(),
                bound(approvalProof={"revision": 1, "contractHash": C, "recordHash": C}),
            ],
            "event-integrity-delivery-conflict",
        ),
        ([created(), moved("paused", "ready")], "event-integrity-state-mismatch"),
        ([created(), moved("created", "bogus")], "event-integrity-state-mismatch"),
        ([created(), ("state-transitioned", {"to": "paused"})], "event-integrity-state-mismatch"),
        ([bound()], "event-integrity-missing-run"),
        ([moved("created", "paused")], "event-integrity-missing-run"),
        ([("operation-interrupted", {})], "event-integrity-interruption"),
        (
            [created(), moved("created", "discarded"), ("operation-interrupted", {})],
            "event-integrity-interruption",
        ),
        ([created(), ("some-future-event", {})], "event-integrity-empty"),
    ],
)
def test_reducer_integrity_codes(steps, code):
    expect_integrity(chain(*steps), code)


def test_empty_chain_and_invalid_headers():
    expect_integrity([], "event-integrity-empty")
    for sequence, prior in [
        (0, ZERO_EVENT_HASH),
        (-1, ZERO_EVENT_HASH),
        (True, ZERO_EVENT_HASH),
        (1.5, ZERO_EVENT_HASH),
        (2**53, ZERO_EVENT_HASH),
        (1, "x" * 64),
        (1, ZERO_EVENT_HASH.upper().replace("0", "A")),
        (1, "0" * 63),
        (1, None),
    ]:
        with pytest.raises(JournalIntegrityError) as info:
            create_event(sequence, "run-created", {}, prior)
        assert info.value.code == "event-integrity-invalid-header"


def test_illegal_move_in_a_chain_is_a_transition_error():
    with pytest.raises(InvalidTransitionError) as info:
        reduce_events(chain(created(), moved("created", "running")))
    assert info.value.code == "invalid-run-transition:created:running"


def test_interruption_moves():
    applying = [
        moved("created", "validating-delivery"),
        moved("validating-delivery", "ready"),
        moved("ready", "running"),
        moved("running", "change-verifying"),
        moved("change-verifying", "ready-to-apply"),
        moved("ready-to-apply", "applying"),
    ]
    recovering = reduce_events(chain(created(), *applying, ("operation-interrupted", {})))
    assert (recovering.state, recovering.pause_code) == ("recovering", "operation-interrupted")
    paused = reduce_events(
        chain(created(), moved("created", "paused"), ("operation-interrupted", {}))
    )
    assert (paused.state, paused.pause_code) == ("paused", "operation-interrupted")


# ---------------------------------------------------------------------------------------
# 3. The state table (cadence 1.x run-state.ts)
# ---------------------------------------------------------------------------------------

CADENCE_STATES = [
    "created",
    "validating-delivery",
    "ready",
    "queued",
    "connecting",
    "running",
    "validating",
    "verifying",
    "retryable",
    "paused",
    "approval-needed",
    "change-verifying",
    "ready-to-apply",
    "applying",
    "recovering",
    "completed",
    "discarded",
    "rejected",
]
CADENCE_TRANSITIONS = {
    "created": ["validating-delivery", "paused", "discarded", "rejected"],
    "validating-delivery": ["ready", "paused", "approval-needed", "discarded", "rejected"],
    "ready": ["queued", "running", "paused", "discarded", "rejected"],
    "queued": ["connecting", "running", "paused", "discarded"],
    "connecting": ["running", "retryable", "paused", "discarded"],
    "running": [
        "validating",
        "verifying",
        "queued",
        "retryable",
        "paused",
        "approval-needed",
        "change-verifying",
        "discarded",
    ],
    "validating": ["running", "verifying", "retryable", "paused", "approval-needed", "discarded"],
    "verifying": [
        "running",
        "retryable",
        "paused",
        "approval-needed",
        "change-verifying",
        "discarded",
    ],
    "retryable": ["queued", "connecting", "running", "paused", "discarded"],
    "paused": [
        "paused",
        "validating-delivery",
        "ready",
        "queued",
        "connecting",
        "running",
        "approval-needed",
        "recovering",
        "completed",
        "discarded",
        "rejected",
    ],
    "approval-needed": ["validating-delivery", "paused", "discarded", "rejected"],
    "change-verifying": [
        "running",
        "retryable",
        "paused",
        "approval-needed",
        "ready-to-apply",
        "discarded",
    ],
    "ready-to-apply": ["applying", "paused", "discarded"],
    "applying": ["recovering", "completed"],
    "recovering": ["applying", "paused", "completed", "discarded", "rejected"],
    "completed": [],
    "discarded": [],
    "rejected": [],
}


def test_eighteen_states_and_the_terminal_ones():
    assert list(RUN_STATES) == CADENCE_STATES
    assert len(RUN_STATES) == 18
    assert set(TERMINAL_STATES) == {"completed", "discarded", "rejected"}


def test_can_transition_matches_cadence_1x():
    for source in CADENCE_STATES:
        for target in CADENCE_STATES:
            assert can_transition(source, target) == (target in CADENCE_TRANSITIONS[source]), (
                source,
                target,
            )
    for terminal in TERMINAL_STATES:
        assert not any(can_transition(terminal, target) for target in CADENCE_STATES)
    assert not can_transition("bogus", "paused")
    assert not can_transition("paused", "bogus")


def test_every_legal_move_reduces_and_every_illegal_one_is_refused():
    """Each state reached by a legal path, then every target tried from it."""
    paths = {"created": []}
    frontier = ["created"]
    while frontier:
        source = frontier.pop(0)
        for target in CADENCE_TRANSITIONS[source]:
            if target not in paths:
                paths[target] = [*paths[source], moved(source, target)]
                frontier.append(target)
    assert set(paths) == set(CADENCE_STATES)
    for source, path in paths.items():
        for target in CADENCE_STATES:
            events = chain(created(), *path, moved(source, target))
            if target in CADENCE_TRANSITIONS[source]:
                projection = reduce_events(events)
                assert projection.state == target
                assert projection.terminal == (target if target in TERMINAL_STATES else None)
            else:
                with pytest.raises(InvalidTransitionError) as info:
                    reduce_events(events)
                assert info.value.code == f"invalid-run-transition:{source}:{target}"


def test_legal_control_commands():
    for state in CADENCE_STATES:
        if state in ("completed", "discarded", "rejected"):
            expected = ["status"]
        elif state in ("paused", "retryable", "approval-needed"):
            expected = ["status", "resume", "rebind", "discard"]
        elif state == "recovering":
            expected = ["status", "resume", "discard"]
        else:
            expected = ["status", "cancel", "discard"]
        assert legal_control_commands(state) == expected, state
