"""The read side: `list_runs`, `run_detail` and `counts`, through `RunStore`, a unit of
work (`uow.runs`) and a `RunRepository` in a host `Session` — on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session
from support import ROOT_HASH

import cadence_store
from cadence_store import (
    InvalidInputError,
    JournalIntegrityError,
    RunDetail,
    RunNotFoundError,
    RunRepository,
    RunStore,
    StoreCounts,
)
from cadence_store.journal.vocabulary import EventType, LeaseStanding, OperationState

A = "a" * 64
B = "b" * 64
C = "c" * 64
D = "d" * 64
OTHER_ROOT = "cd" * 32


def key(n: int) -> str:
    return f"{n:064x}"


def _populate(store: RunStore) -> dict[str, str]:
    """Five runs of two stages in four states; returns run ids by label."""
    design = store.start_run("abel-design", provisional_key=key(1), operation_id="d-start")
    store.bind_change(design.run_id, "login-flow", operation_id="d-change")
    store.transition(design.run_id, "paused", operation_id="d-pause", code="awaiting-review")
    fresh_design = store.start_run("abel-design", change="billing", operation_id="d2-start")
    implement = store.start_run("abel-implement", change="login-flow", operation_id="i-start")
    store.bind_delivery(implement.run_id, "gate-a", 1, A, operation_id="i-bind")
    for state in ("validating-delivery", "ready", "running"):
        store.transition(implement.run_id, state, operation_id=f"i-{state}")
    done = store.start_run("abel-implement", change="billing", operation_id="done-start")
    store.transition(done.run_id, "discarded", operation_id="done-discard")
    with RunStore(store.engine, root_hash=OTHER_ROOT) as other:
        foreign = other.start_run("abel-implement", change="login-flow", operation_id="f-start")
    return {
        "design": design.run_id,
        "fresh_design": fresh_design.run_id,
        "implement": implement.run_id,
        "done": done.run_id,
        "foreign": foreign.run_id,
    }


def _ids(projections: list[Any]) -> list[str]:
    return [projection.run_id for projection in projections]


# ---------------------------------------------------------------------------------------
# list_runs
# ---------------------------------------------------------------------------------------


def test_list_runs_returns_stored_projections_in_run_id_order(store):
    runs = _populate(store)
    listed = store.list_runs()
    assert _ids(listed) == sorted(runs.values())
    for projection in listed:
        stored = store.status(projection.run_id)
        assert projection == stored
        assert projection.to_json() == stored.to_json()  # cadence 1.x key order kept


def test_list_runs_filters(store):
    runs = _populate(store)

    def ids(**filters: Any) -> set[str]:
        return set(_ids(store.list_runs(**filters)))

    assert ids(stage="abel-design") == {runs["design"], runs["fresh_design"]}
    assert ids(stage=["abel-design", "abel-implement"]) == set(runs.values())
    assert ids(state="created") == {runs["fresh_design"], runs["foreign"]}
    assert ids(state=("paused", "running")) == {runs["design"], runs["implement"]}
    assert ids(state=["running", "running"]) == {runs["implement"]}
    assert ids(change="login-flow") == {runs["design"], runs["implement"], runs["foreign"]}
    assert ids(change="login-flow", stage="abel-implement") == {
        runs["implement"],
        runs["foreign"],
    }
    assert ids(change="login-flow", root_hash=ROOT_HASH, stage="abel-implement") == {
        runs["implement"]
    }
    assert ids(root_hash=OTHER_ROOT) == {runs["foreign"]}
    assert ids(state="completed") == set()
    assert ids(change="nothing-here") == set()


def test_list_runs_pages_by_run_id(store):
    for n in range(7):
        store.start_run("abel-implement", change=f"change-{n}", operation_id=f"s{n}")
    everything = _ids(store.list_runs())
    pages: list[list[str]] = []
    after = None
    while page := _ids(store.list_runs(limit=3, after=after)):
        pages.append(page)
        after = page[-1]
    assert [len(page) for page in pages] == [3, 3, 1]
    assert [run_id for page in pages for run_id in page] == everything
    # the cursor need not be a stored run id; filters and paging combine
    assert _ids(store.list_runs(after="")) == everything
    assert store.list_runs(after=everything[-1]) == []
    assert (
        _ids(store.list_runs(after=everything[2], limit=2, stage="abel-implement"))
        == (everything[3:5])
    )


@pytest.mark.parametrize(
    ("filters", "code"),
    [
        ({"stage": "abel-review"}, "invalid-run-stage"),
        ({"stage": ["abel-design", 3]}, "invalid-run-stage"),
        ({"stage": b"abel-design"}, "invalid-run-stage"),
        ({"state": "sleeping"}, "invalid-run-state"),
        ({"state": []}, "invalid-run-state"),
        ({"state": {"running": 1}}, "invalid-run-state"),
        ({"change": "Not A Change"}, "invalid-change"),
        ({"change": 7}, "invalid-change"),
        ({"root_hash": "ab"}, "invalid-root-hash"),
        ({"limit": 0}, "invalid-limit"),
        ({"limit": -3}, "invalid-limit"),
        ({"limit": True}, "invalid-limit"),
        ({"limit": 2.0}, "invalid-limit"),
        ({"limit": "10"}, "invalid-limit"),
        ({"after": 12}, "invalid-run-cursor"),
        ({"after": "run\x00id"}, "invalid-run-cursor"),
    ],
)
def test_list_runs_rejects_bad_arguments(store, rejected, filters, code):
    store.start_run("abel-implement", change="login-flow", operation_id="s1")
    with rejected(InvalidInputError, code):
        store.list_runs(**filters)


def test_list_runs_names_the_run_whose_stored_projection_is_damaged(store, db):
    run = store.start_run("abel-implement", change="login-flow", operation_id="s1")
    with db.begin() as connection:
        connection.exec_driver_sql("UPDATE runs SET projection_json = '[1]'")
    with pytest.raises(JournalIntegrityError) as info:
        store.list_runs()
    assert (info.value.code, info.value.run_id) == ("run-projection-invalid", run.run_id)


# ---------------------------------------------------------------------------------------
# run_detail
# ---------------------------------------------------------------------------------------


def test_run_detail(store, clock):
    run = store.start_run("abel-implement", change="login-flow", operation_id="start")
    proof = {"revision": 1, "contract_hash": C, "record_hash": D}
    store.bind_delivery(run.run_id, "gate-b", 1, B, operation_id="bind-b")
    store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="bind-a", approval_proof=proof)
    store.transition(run.run_id, "paused", operation_id="pause", code="operator-pause")
    store.transition(run.run_id, "ready", operation_id="resume")
    committed = store.acquire_lease(run.run_id, "apply", 60_000)
    store.commit_lease(committed, {"applied": True})
    store.interrupt_lease(store.acquire_lease(run.run_id, "gave-up", 60_000))
    store.acquire_lease(run.run_id, "lapsing", 1_000)
    store.acquire_lease(run.run_id, "working", 60_000)
    clock.advance(5_000)

    detail = store.run_detail(run.run_id)
    assert isinstance(detail, RunDetail)
    assert detail.projection == store.status(run.run_id)
    assert detail.projection.to_json() == store.status(run.run_id).to_json()

    assert [(b.gate, b.revision, b.operation_id) for b in detail.delivery_bindings] == [
        ("gate-a", 1, "bind-a"),
        ("gate-b", 1, "bind-b"),
    ]
    assert detail.delivery_bindings[0].approval_proof is not None
    assert detail.delivery_bindings[0].approval_proof.contract_hash == C
    assert detail.delivery_bindings[1].approval_proof is None
    assert detail.delivery_bindings[0].to_dict() == {
        "gate": "gate-a",
        "revision": 1,
        "receiptHash": A,
        "operationId": "bind-a",
        "approvalProof": {"revision": 1, "contractHash": C, "recordHash": D},
    }

    operations = {o.operation_id: o for o in detail.operations}
    assert list(operations) == sorted(operations)
    assert {name: (o.kind, o.state, o.lease) for name, o in operations.items()} == {
        "apply": ("lease", OperationState.COMMITTED, LeaseStanding.NONE),
        "bind-a": ("delivery-bound", OperationState.COMMITTED, LeaseStanding.NONE),
        "bind-b": ("delivery-bound", OperationState.COMMITTED, LeaseStanding.NONE),
        "gave-up": ("lease", OperationState.INTERRUPTED, LeaseStanding.NONE),
        "lapsing": ("lease", OperationState.RUNNING, LeaseStanding.EXPIRED),
        "pause": ("state-transitioned", OperationState.COMMITTED, LeaseStanding.NONE),
        "resume": ("state-transitioned", OperationState.COMMITTED, LeaseStanding.NONE),
        "start": ("start", OperationState.COMMITTED, LeaseStanding.NONE),
        "working": ("lease", OperationState.RUNNING, LeaseStanding.LIVE),
    }
    assert operations["apply"].outcome == {"applied": True}
    assert operations["working"].expires_at == clock.now - 5_000 + 60_000
    assert operations["pause"].outcome is not None
    assert operations["pause"].outcome["pauseCode"] == "operator-pause"
    assert "token" not in operations["working"].to_dict()  # a reader never gets a token

    times = [entry.recorded_at for entry in detail.timeline]
    assert None not in times and times == sorted(times)  # type: ignore[type-var]
    assert [
        entry.model_dump(exclude={"recorded_at"}, exclude_none=True, by_alias=True)
        for entry in detail.timeline
    ] == [
        {"sequence": 1, "event": EventType.RUN_CREATED, "state": "created"},
        {
            "sequence": 4,
            "event": EventType.STATE_TRANSITIONED,
            "state": "paused",
            "code": "operator-pause",
        },
        {"sequence": 5, "event": EventType.STATE_TRANSITIONED, "state": "ready"},
    ]


def test_run_detail_reads_and_writes_nothing_else(store, clock, snapshot):
    run = store.start_run("abel-implement", change="login-flow", operation_id="start")
    store.acquire_lease(run.run_id, "lapsing", 1_000)
    clock.advance(2_000)
    before = snapshot()
    [lapsing] = [o for o in store.run_detail(run.run_id).operations if o.kind == "lease"]
    # an expired lease is reported as such; reading does not recover it (inspect_operation does)
    assert (lapsing.state, lapsing.lease) == (OperationState.RUNNING, LeaseStanding.EXPIRED)
    assert snapshot() == before


def test_run_detail_of_an_unknown_run(store, rejected):
    store.start_run("abel-implement", change="login-flow", operation_id="start")
    with rejected(RunNotFoundError, "run-not-found"):
        store.run_detail("no-such-run")
    with rejected(InvalidInputError, "invalid-run-id"):
        store.run_detail(42)  # type: ignore[arg-type]


def test_run_detail_timeline_stops_where_the_chain_stops_applying(store, db, clock):
    run = store.start_run("abel-implement", change="login-flow", operation_id="start")
    store.transition(run.run_id, "paused", operation_id="pause")
    store.transition(run.run_id, "ready", operation_id="resume")
    with db.begin() as connection:  # sequence 2 now claims to leave `running`
        connection.exec_driver_sql(
            'UPDATE events SET payload_json = \'{"from":"running","to":"paused"}\' '
            "WHERE sequence = 2"
        )
    detail = store.run_detail(run.run_id)
    assert [entry.to_dict() for entry in detail.timeline] == [
        {"sequence": 1, "event": "run-created", "state": "created", "recordedAt": clock.now},
        {
            "sequence": 2,
            "event": "state-transitioned",
            "error": "event-integrity-state-mismatch",
            "recordedAt": clock.now,
        },
    ]


def test_run_detail_reads_one_snapshot(store_url, clock):
    """A write committed while `run_detail` is reading is not half in its answer."""
    writer = RunStore(store_url, root_hash=ROOT_HASH, clock=clock)
    run = writer.start_run("abel-implement", change="login-flow", operation_id="start")
    interleaved: list[str] = []

    def clock_that_writes() -> int:
        # run_detail reads the clock after the projection, before the other rows
        if not interleaved:
            interleaved.append("written")
            writer.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="bind")
            writer.transition(run.run_id, "paused", operation_id="pause")
        return clock()

    try:
        with RunStore(store_url, root_hash=ROOT_HASH, clock=clock_that_writes) as reader:
            detail = reader.run_detail(run.run_id)
            assert interleaved == ["written"]
            assert detail.projection.sequence == 1
            assert detail.delivery_bindings == ()
            assert [o.operation_id for o in detail.operations] == ["start"]
            assert [entry.sequence for entry in detail.timeline] == [1]
            after = reader.run_detail(run.run_id)
    finally:
        writer.close()
    assert after.projection.sequence == 3
    assert [b.operation_id for b in after.delivery_bindings] == ["bind"]
    assert [entry.state for entry in after.timeline] == ["created", "paused"]


# ---------------------------------------------------------------------------------------
# counts
# ---------------------------------------------------------------------------------------


def test_counts(store, table_rows):
    assert store.counts() == StoreCounts(runs=0, events=0, operations=0, bindings=0, by_state={})
    _populate(store)
    store.acquire_lease(store.list_runs(state="running")[0].run_id, "apply", 60_000)
    counted = store.counts()
    assert (counted.runs, counted.events, counted.operations, counted.bindings) == (
        len(table_rows("runs")),
        len(table_rows("events")),
        len(table_rows("operations")),
        len(table_rows("delivery_bindings")),
    )
    assert counted.by_state == {"created": 2, "discarded": 1, "paused": 1, "running": 1}
    assert list(counted.by_state) == sorted(counted.by_state)
    assert counted.to_dict()["byState"] == counted.by_state


# ---------------------------------------------------------------------------------------
# the same methods in a unit of work and in a host session
# ---------------------------------------------------------------------------------------


def test_read_methods_in_a_unit_of_work_see_its_own_writes(store):
    _populate(store)
    before = store.counts()

    class Abandon(Exception):
        pass

    with pytest.raises(Abandon), store.unit_of_work() as uow:
        run = uow.runs.start_run("abel-implement", change="uncommitted", operation_id="u1")
        uow.runs.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="u-bind")
        assert _ids(uow.runs.list_runs(change="uncommitted")) == [run.run_id]
        counted = uow.runs.counts()
        assert (counted.runs, counted.bindings) == (before.runs + 1, before.bindings + 1)
        detail = uow.runs.run_detail(run.run_id)
        assert [b.operation_id for b in detail.delivery_bindings] == ["u-bind"]
        assert [entry.state for entry in detail.timeline] == ["created"]
        raise Abandon
    assert store.counts() == before
    assert store.list_runs(change="uncommitted") == []


def test_read_methods_on_a_repository_in_a_host_session(store, db, clock):
    runs = _populate(store)
    with Session(db) as session, session.begin():
        repository = RunRepository(session, clock=clock)
        assert repository.list_runs() == store.list_runs()
        assert repository.list_runs(stage="abel-design", state="paused") == [
            store.status(runs["design"])
        ]
        assert repository.counts() == store.counts()
        assert repository.run_detail(runs["implement"]) == store.run_detail(runs["implement"])
        with pytest.raises(InvalidInputError) as info:
            repository.list_runs(limit=0)
        assert info.value.code == "invalid-limit"


@pytest.mark.postgres
def test_read_methods_in_their_own_postgresql_schema(pg_database_url, clock):
    host = create_engine(pg_database_url)
    with host.begin() as connection:  # a host's own `runs`, which the read side must not read
        connection.execute(text("CREATE TABLE runs (host_column INTEGER)"))
        connection.execute(text("INSERT INTO runs VALUES (1), (2), (3)"))
    cadence_store.upgrade(pg_database_url, schema="cadence")
    with RunStore(pg_database_url, root_hash=ROOT_HASH, clock=clock, schema="cadence") as store:
        run = store.start_run("abel-implement", change="in-a-schema", operation_id="s1")
        store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="b1")
        assert _ids(store.list_runs(stage="abel-implement", limit=5, after="")) == [run.run_id]
        assert (store.counts().runs, store.counts().bindings) == (1, 1)
        assert [b.operation_id for b in store.run_detail(run.run_id).delivery_bindings] == ["b1"]
        expected = store.run_detail(run.run_id)
    with Session(host) as session, session.begin():
        repository = RunRepository(session, clock=clock, schema="cadence")
        assert _ids(repository.list_runs()) == [run.run_id]
        assert repository.run_detail(run.run_id) == expected
    host.dispose()
