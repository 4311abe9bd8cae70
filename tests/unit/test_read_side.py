"""The pure parts of the read side: the vocabulary, listing checks, leases, the timeline."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from cadence_store import InvalidInputError, OperationStatus
from cadence_store.journal import (
    EVENT_TYPES,
    RUN_STAGES,
    RUN_STATES,
    TERMINAL_STATES,
    ZERO_EVENT_HASH,
    RunEvent,
    create_event,
)
from cadence_store.journal.validation import DELIVERY_GATES
from cadence_store.journal.views import (
    RunListing,
    TimelineEntry,
    check_run_listing,
    lease_standing,
    state_path,
    state_timeline,
)
from cadence_store.journal.vocabulary import (
    EVENT_TYPE_NAMES,
    RUN_STATE_NAMES,
    STATE_SETTING_EVENTS,
    TERMINAL_RUN_STATES,
    EventType,
    Gate,
    LeaseStanding,
    OperationKind,
    OperationState,
    RunState,
    Stage,
)

RUN_ID = "3f1c2a9e-8b7d-4c6e-9f01-23456789abcd"
ROOT = "1b" * 32


def test_the_vocabulary_names_the_literals_the_code_base_spells_out():
    # until every module uses the vocabulary, it must agree with the older spellings
    assert tuple(RunState) == RUN_STATES
    assert tuple(Stage) == RUN_STAGES
    assert tuple(EventType) == EVENT_TYPES
    assert tuple(Gate) == DELIVERY_GATES
    assert TERMINAL_RUN_STATES == TERMINAL_STATES
    literal = typing.get_type_hints(OperationStatus)["state"]
    assert set(typing.get_args(literal)) == set(OperationState)
    assert {kind.value for kind in OperationKind} == {
        "start",
        "change-bound",
        "delivery-bound",
        "state-transitioned",
        "lease",
    }
    assert STATE_SETTING_EVENTS < EVENT_TYPE_NAMES
    # a member is its string: stored text compares equal, and membership works on strings
    assert EventType.RUN_CREATED == "run-created" and "paused" in RUN_STATE_NAMES


def test_check_run_listing_normalises_filters():
    assert check_run_listing() == RunListing()
    listing = check_run_listing(
        stage="abel-design", state=["running", "paused", "running"], limit=5, after="x"
    )
    assert listing == RunListing(
        stages=("abel-design",), states=("paused", "running"), limit=5, after="x"
    )
    assert check_run_listing(state=iter(["paused"])).states == ("paused",)
    assert check_run_listing(stage=Stage.DESIGN).stages == ("abel-design",)


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"stage": None, "state": "nope"}, "invalid-run-state"),
        ({"stage": 5}, "invalid-run-stage"),
        ({"limit": 2**60}, "invalid-limit"),
        ({"after": None, "limit": 0}, "invalid-limit"),
        ({"after": b"x"}, "invalid-run-cursor"),
    ],
)
def test_check_run_listing_codes(arguments: dict[str, Any], code: str):
    with pytest.raises(InvalidInputError) as info:
        check_run_listing(**arguments)
    assert info.value.code == code


@pytest.mark.parametrize(
    ("state", "has_token", "expires_at", "standing"),
    [
        ("committed", False, None, LeaseStanding.NONE),
        ("interrupted", False, None, LeaseStanding.NONE),
        ("running", True, 1_000, LeaseStanding.LIVE),  # live through its last millisecond
        ("running", True, 999, LeaseStanding.EXPIRED),
        ("running", False, 5_000, LeaseStanding.MISSING),
        ("running", True, None, LeaseStanding.MISSING),
    ],
)
def test_lease_standing(state, has_token, expires_at, standing):
    assert lease_standing(state, has_token, expires_at, now=1_000) == standing


def _chain(*steps: tuple[str, Any]) -> list[RunEvent]:
    events: list[RunEvent] = []
    prior = ZERO_EVENT_HASH
    for sequence, (type_, payload) in enumerate(steps, start=1):
        event = create_event(sequence, type_, payload, prior)
        events.append(event)
        prior = event.hash
    return events


CREATED = (
    "run-created",
    {"runId": RUN_ID, "rootHash": ROOT, "stage": "abel-implement", "change": "c"},
)


def test_state_timeline_follows_the_events_that_set_the_state():
    events = _chain(
        CREATED,
        ("delivery-bound", {"gate": "gate-a", "revision": 1, "receiptHash": "a" * 64}),
        ("state-transitioned", {"from": "created", "to": "paused", "code": "hold"}),
        ("state-transitioned", {"from": "paused", "to": "ready"}),
        ("state-transitioned", {"from": "ready", "to": "running"}),
        ("operation-interrupted", {}),
    )
    assert state_timeline(events) == (
        TimelineEntry(sequence=1, event="run-created", state="created"),
        TimelineEntry(sequence=3, event="state-transitioned", state="paused", code="hold"),
        TimelineEntry(sequence=4, event="state-transitioned", state="ready"),
        TimelineEntry(sequence=5, event="state-transitioned", state="running"),
        TimelineEntry(
            sequence=6, event="operation-interrupted", state="paused", code="operation-interrupted"
        ),
    )


def test_state_path_of_plain_fields_from_a_sequence():
    events = _chain(
        CREATED,
        ("state-transitioned", {"from": "created", "to": "paused", "code": "hold"}),
        ("state-transitioned", {"from": "paused", "to": "ready"}),
        ("state-transitioned", {"from": "ready", "to": "running"}),
    )
    fields = [(e.sequence, e.type, e.payload, e.hash, e.recorded_at) for e in events]
    assert state_path(fields) == state_timeline(events)
    # a page from sequence 3: the events before are folded (its state follows them)
    assert state_path(fields, since=2) == state_timeline(events)[2:]
    assert state_path(fields, since=2)[0] == TimelineEntry(
        sequence=3, event="state-transitioned", state="ready"
    )
    # the fold's projection is its own: the events' payloads are left as they were
    assert events[1].payload == {"from": "created", "to": "paused", "code": "hold"}


def test_state_timeline_ends_at_the_first_event_that_does_not_apply():
    illegal = _chain(
        CREATED,
        ("state-transitioned", {"from": "created", "to": "completed"}),
        ("state-transitioned", {"from": "created", "to": "paused"}),
    )
    assert [entry.to_dict() for entry in state_timeline(illegal)] == [
        {"sequence": 1, "event": "run-created", "state": "created"},
        {
            "sequence": 2,
            "event": "state-transitioned",
            "error": "invalid-run-transition:created:completed",
        },
    ]
    # an unknown event type leaves no projection (cadence 1.x); the next event cannot apply
    unknown = _chain(CREATED, ("mystery", {}), ("state-transitioned", {"from": "x", "to": "y"}))
    assert [(e.sequence, e.state, e.error) for e in state_timeline(unknown)] == [
        (1, "created", None),
        (3, None, "event-integrity-missing-run"),
    ]
    # a payload that is not an object is applied as an empty one
    odd = _chain(CREATED)
    odd.append(
        RunEvent.model_construct(
            sequence=2,
            type="state-transitioned",
            payload=[1],
            prior_hash=odd[0].hash,
            hash="f" * 64,
        )
    )
    assert state_timeline(odd)[-1].error == "event-integrity-state-mismatch"
