"""RunStore.start_run: new runs, lookup keys, receipts and replays, terminal re-keying."""

from __future__ import annotations

import uuid

import pytest

from cadence_store import (
    InvalidInputError,
    OperationConflictError,
    RunStore,
)
from cadence_store.journal import ZERO_EVENT_HASH, create_event

ROOT_HASH = "ab" * 32  # the `store` fixture's root
OTHER_ROOT = "cd" * 32


def key(n: int) -> str:
    return f"{n:064x}"


def is_run_id(value: str) -> bool:
    """A time-ordered UUID (version 7), in canonical form."""
    parsed = uuid.UUID(value)
    return parsed.version == 7 and str(parsed) == value


def test_new_change_run_is_created_with_its_event_row_and_receipt(store, table_rows, clock):
    run = store.start_run(
        "abel-implement", change="durable-control-plane", operation_id="start-001"
    )

    assert is_run_id(run.run_id)
    assert (run.root_hash, run.stage, run.change, run.provisional_key) == (
        ROOT_HASH,
        "abel-implement",
        "durable-control-plane",
        None,
    )
    assert (run.state, run.sequence, run.delivery_revision) == ("created", 1, None)
    assert (run.delivery_bindings, run.pause_code, run.terminal) == ((), None, None)

    [event] = store.list_events(run.run_id)
    expected_payload = {
        "runId": run.run_id,
        "rootHash": ROOT_HASH,
        "stage": "abel-implement",
        "change": "durable-control-plane",
    }
    assert (event.sequence, event.type, event.prior_hash) == (1, "run-created", ZERO_EVENT_HASH)
    assert event.payload == expected_payload
    assert list(event.payload) == list(expected_payload)
    assert event.hash == create_event(1, "run-created", expected_payload, ZERO_EVENT_HASH).hash
    assert run.event_hash == event.hash

    assert run.to_json() == (
        f'{{"runId":"{run.run_id}","rootHash":"{ROOT_HASH}","stage":"abel-implement",'
        f'"change":"durable-control-plane","state":"created","sequence":1,'
        f'"eventHash":"{event.hash}","deliveryBindings":[]}}'
    )
    assert run.model_dump(mode="json", by_alias=True, exclude_none=True) == {
        "runId": run.run_id,
        "rootHash": ROOT_HASH,
        "stage": "abel-implement",
        "change": "durable-control-plane",
        "state": "created",
        "sequence": 1,
        "eventHash": event.hash,
        "deliveryBindings": [],
    }

    [row] = table_rows("runs")
    assert row == {
        "run_id": run.run_id,
        "root_hash": ROOT_HASH,
        "stage": "abel-implement",
        "lookup_key": "change:durable-control-plane",
        "change_name": "durable-control-plane",
        "provisional_key": None,
        "state": "created",
        "sequence": 1,
        "event_hash": event.hash,
        "delivery_revision": None,
        "projection_json": run.to_json(),
        "terminal_tombstone": None,
        "created_at": clock.now,
        "updated_at": clock.now,
    }
    assert table_rows("operations") == [
        {
            "run_id": run.run_id,
            "operation_id": "start-001",
            "kind": "start",
            "state": "committed",
            "outcome_json": run.to_json(),
            "lease_token": None,
            "lease_expires_at": None,
            "lease_fence": None,
            "sequence": 1,  # the sequence its projection names (revision cs0005)
        }
    ]
    assert table_rows("delivery_bindings") == []
    assert store.status(run.run_id).to_json() == run.to_json()


def test_new_provisional_design_run(store, table_rows):
    run = store.start_run(
        "abel-design",
        provisional_key=key(1),
        provisional_aliases=[key(2), key(3)],
        operation_id="start-design",
    )
    assert is_run_id(run.run_id)
    assert (run.stage, run.change, run.provisional_key) == ("abel-design", None, key(1))
    [event] = store.list_events(run.run_id)
    # aliases are lookup keys only: the event names the primary provisional key
    assert event.payload == {
        "runId": run.run_id,
        "rootHash": ROOT_HASH,
        "stage": "abel-design",
        "provisionalKey": key(1),
    }
    assert list(event.payload) == ["runId", "rootHash", "stage", "provisionalKey"]
    assert list(run.document()) == [
        "runId",
        "rootHash",
        "stage",
        "provisionalKey",
        "state",
        "sequence",
        "eventHash",
        "deliveryBindings",
    ]
    [row] = table_rows("runs")
    assert (row["lookup_key"], row["change_name"], row["provisional_key"]) == (
        f"provisional:{key(1)}",
        None,
        key(1),
    )


def test_existing_run_is_returned_and_receipt_records_what_was_returned(store, table_rows):
    first = store.start_run("abel-implement", change="feature-x", operation_id="s1")
    paused = store.transition(first.run_id, "paused", operation_id="t1", code="hold")

    again = store.start_run("abel-implement", change="feature-x", operation_id="s2")
    assert again.run_id == first.run_id
    assert again.to_json() == paused.to_json()  # the current projection, not a new run
    assert len(table_rows("runs")) == 1
    assert len(store.list_events(first.run_id)) == 2
    receipts = {r["operation_id"]: r for r in table_rows("operations")}
    assert receipts["s2"]["kind"] == "start"
    assert receipts["s2"]["state"] == "committed"
    assert receipts["s2"]["outcome_json"] == paused.to_json()

    store.transition(first.run_id, "validating-delivery", operation_id="t2")
    # replays return what each call returned then, even after later events
    assert store.start_run("abel-implement", change="feature-x", operation_id="s2").to_json() == (
        paused.to_json()
    )
    assert store.start_run("abel-implement", change="feature-x", operation_id="s1").to_json() == (
        first.to_json()
    )
    # a new operation id gets the current projection
    current = store.start_run("abel-implement", change="feature-x", operation_id="s3")
    assert current.state == "validating-delivery"
    assert current.sequence == 3
    assert len(store.list_events(first.run_id)) == 3


def test_operation_id_reuse_in_root_and_stage(store, store_url, clock, rejected, table_rows):
    run = store.start_run("abel-implement", change="feature-x", operation_id="s1")

    # same operation id, a key it did not start a run under
    with rejected(OperationConflictError, "operation-id-conflict"):
        store.start_run("abel-implement", change="feature-y", operation_id="s1")
    # an operation id used for another kind in this root and stage
    store.transition(run.run_id, "paused", operation_id="t1")
    with rejected(OperationConflictError, "operation-id-conflict"):
        store.start_run("abel-implement", change="feature-x", operation_id="t1")
    with rejected(OperationConflictError, "operation-id-conflict"):
        store.start_run("abel-implement", change="feature-new", operation_id="t1")

    # an operation id recorded on two runs of this root and stage is ambiguous
    other = store.start_run("abel-implement", change="feature-y", operation_id="shared")
    store.transition(run.run_id, "validating-delivery", operation_id="shared")
    with rejected(OperationConflictError, "operation-id-conflict"):
        store.start_run("abel-implement", change="feature-y", operation_id="shared")

    # another stage is another scope: the same operation id starts a design run
    design = store.start_run("abel-design", change="feature-x", operation_id="s1")
    assert design.run_id not in (run.run_id, other.run_id)
    assert design.stage == "abel-design"

    # another root is another scope too, even for the same change
    with RunStore(store_url, root_hash=OTHER_ROOT, clock=clock) as elsewhere:
        foreign = elsewhere.start_run("abel-implement", change="feature-x", operation_id="s1")
        assert foreign.run_id != run.run_id
        assert foreign.root_hash == OTHER_ROOT
        assert elsewhere.start_run(
            "abel-implement", change="feature-x", operation_id="s1"
        ).to_json() == (foreign.to_json())
    assert store.start_run("abel-implement", change="feature-x", operation_id="s1").run_id == (
        run.run_id
    )
    assert len(table_rows("runs")) == 4


def test_provisional_aliases_find_a_run_and_a_key_owned_twice_conflicts(store, rejected):
    first = store.start_run("abel-design", provisional_key=key(1), operation_id="s1")

    via_alias = store.start_run(
        "abel-design", provisional_key=key(2), provisional_aliases=[key(1)], operation_id="s2"
    )
    assert via_alias.run_id == first.run_id
    assert via_alias.provisional_key == key(1)
    # replaying s2 with the same keys returns the recorded outcome
    replay = store.start_run(
        "abel-design", provisional_key=key(2), provisional_aliases=[key(1)], operation_id="s2"
    )
    assert replay.to_json() == via_alias.to_json()

    # duplicate aliases (and an alias equal to the key) collapse; four are allowed
    second = store.start_run(
        "abel-design",
        provisional_key=key(3),
        provisional_aliases=[key(3), key(4), key(4), key(5)],
        operation_id="s3",
    )
    assert second.run_id != first.run_id
    assert second.provisional_key == key(3)
    assert (
        store.start_run("abel-design", provisional_key=key(5), operation_id="s4").run_id
        != second.run_id
    ), "aliases are not lookup keys of the run they created"

    # the keys name two different runs
    with rejected(OperationConflictError, "run-lookup-conflict"):
        store.start_run(
            "abel-design", provisional_key=key(1), provisional_aliases=[key(3)], operation_id="s5"
        )
    with rejected(InvalidInputError, "invalid-provisional-key"):
        store.start_run(
            "abel-design",
            provisional_key=key(9),
            provisional_aliases=[key(10), key(11), key(12), key(13), key(14)],
            operation_id="s6",
        )
    empty = store.start_run(
        "abel-design", provisional_key=key(20), provisional_aliases=[], operation_id="s7"
    )
    assert empty.provisional_key == key(20)


def test_terminal_design_run_is_rekeyed_and_replaced(store, rejected, table_rows):
    paths = {
        "completed": ["paused", "completed"],
        "discarded": ["discarded"],
        "rejected": ["rejected"],
    }
    for terminal, path in paths.items():
        change = f"design-{terminal}"
        old = store.start_run("abel-design", change=change, operation_id=f"start-{terminal}")
        for step, state in enumerate(path):
            store.transition(old.run_id, state, operation_id=f"{terminal}-{step}")
        finished = store.status(old.run_id)
        assert finished.terminal == terminal

        new = store.start_run("abel-design", change=change, operation_id=f"restart-{terminal}")
        assert new.run_id != old.run_id
        assert (new.state, new.sequence, new.change, new.terminal) == (
            "created",
            1,
            change,
            None,
        )
        rows = {r["run_id"]: r for r in table_rows("runs")}
        assert rows[old.run_id]["lookup_key"] == f"terminal:{old.run_id}"
        assert rows[new.run_id]["lookup_key"] == f"change:{change}"
        # the old run itself is untouched
        assert store.status(old.run_id).to_json() == finished.to_json()
        assert len(store.list_events(old.run_id)) == len(path) + 1
        store.verify_integrity(old.run_id)
        # the restart replays; the old start no longer matches a key and conflicts
        replay = store.start_run("abel-design", change=change, operation_id=f"restart-{terminal}")
        assert replay.run_id == new.run_id
        with rejected(OperationConflictError, "operation-id-conflict"):
            store.start_run("abel-design", change=change, operation_id=f"start-{terminal}")
        # a later start finds the live replacement
        later = store.start_run("abel-design", change=change, operation_id=f"later-{terminal}")
        assert later.run_id == new.run_id

    # a terminal provisional run found through an alias is replaced too
    old = store.start_run("abel-design", provisional_key=key(1), operation_id="p1")
    store.transition(old.run_id, "rejected", operation_id="p1-reject")
    new = store.start_run(
        "abel-design", provisional_key=key(2), provisional_aliases=[key(1)], operation_id="p2"
    )
    assert new.run_id != old.run_id
    assert new.provisional_key == key(2)
    rows = {r["run_id"]: r for r in table_rows("runs")}
    assert rows[old.run_id]["lookup_key"] == f"terminal:{old.run_id}"
    assert rows[new.run_id]["lookup_key"] == f"provisional:{key(2)}"


def test_terminal_implement_run_is_returned_as_is(store, table_rows):
    old = store.start_run("abel-implement", change="drop-flag", operation_id="s1")
    discarded = store.transition(old.run_id, "discarded", operation_id="t1")
    again = store.start_run("abel-implement", change="drop-flag", operation_id="s2")
    assert again.run_id == old.run_id
    assert again.to_json() == discarded.to_json()
    assert again.terminal == "discarded"
    [row] = table_rows("runs")
    assert row["lookup_key"] == "change:drop-flag"
    assert {r["operation_id"] for r in table_rows("operations")} == {"s1", "t1", "s2"}


def test_start_run_input_rules(store, rejected):
    store.start_run("abel-design", provisional_key=key(1), operation_id="existing")
    cases = [
        (dict(stage="abel-review", change="x"), "invalid-run-stage"),
        (dict(stage="Abel-Design", change="x"), "invalid-run-stage"),
        (dict(stage=None, change="x"), "invalid-run-stage"),
        (dict(stage="abel-review", change="NOT VALID"), "invalid-run-stage"),
        (dict(stage="abel-design"), "invalid-run-lookup-key"),
        (dict(stage="abel-design", change="x", provisional_key=key(2)), "invalid-run-lookup-key"),
        (
            dict(stage="abel-implement", change="x", provisional_aliases=[key(2)]),
            "invalid-run-lookup-key",
        ),
        (
            dict(stage="abel-implement", change="x", provisional_aliases=[]),
            "invalid-run-lookup-key",
        ),
        (dict(stage="abel-implement", change=""), "invalid-change"),
        (dict(stage="abel-implement", change="Feature"), "invalid-change"),
        (dict(stage="abel-implement", change="feature.x"), "invalid-change"),
        (dict(stage="abel-design", provisional_key="A" * 64), "invalid-provisional-key"),
        (dict(stage="abel-design", provisional_key="a" * 63), "invalid-provisional-key"),
        (dict(stage="abel-implement", provisional_key="a" * 63), "invalid-provisional-key"),
        (
            dict(stage="abel-design", provisional_key=key(2), provisional_aliases=["g" * 64]),
            "invalid-provisional-key",
        ),
        (
            dict(stage="abel-design", provisional_key=key(2), provisional_aliases=key(3)),
            "invalid-provisional-key",
        ),
        (
            dict(stage="abel-design", provisional_key=key(2), provisional_aliases=[key(3)] * 5),
            "invalid-provisional-key",
        ),
        (dict(stage="abel-implement", provisional_key=key(2)), "provisional-run-requires-design"),
        (
            dict(stage="abel-implement", provisional_key=key(1), provisional_aliases=[key(2)]),
            "provisional-run-requires-design",
        ),
    ]
    for kwargs, code in cases:
        stage = kwargs.pop("stage")
        with rejected(InvalidInputError, code):
            store.start_run(stage, operation_id="new-op", **kwargs)
    # the operation id is checked first
    with rejected(InvalidInputError, "invalid-operation-id"):
        store.start_run("abel-review", operation_id="-bad")


def test_start_run_needs_a_root_hash(store_url, clock, rejected):
    with RunStore(store_url, clock=clock) as rootless:
        assert rootless.root_hash is None
        with rejected(InvalidInputError, "invalid-root-hash"):
            rootless.start_run("abel-implement", change="x", operation_id="s1")
    for bad in ("AB" * 32, "ab" * 31, "", "ab" * 32 + "\n"):
        with rejected(InvalidInputError, "invalid-root-hash"):
            RunStore(store_url, root_hash=bad, clock=clock)


@pytest.mark.parametrize("stage", ["abel-design", "abel-implement"])
def test_same_change_in_both_stages_gives_two_runs(store, stage):
    # the lookup key is scoped by stage
    here = store.start_run(stage, change="shared-change", operation_id="s1")
    other_stage = "abel-implement" if stage == "abel-design" else "abel-design"
    there = store.start_run(other_stage, change="shared-change", operation_id="s2")
    assert here.run_id != there.run_id
    assert {here.stage, there.stage} == {"abel-design", "abel-implement"}
