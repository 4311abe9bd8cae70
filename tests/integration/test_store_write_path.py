"""The append's write path: one guarded write per transition, run heads kept for the rest
of a transaction, and the direct path RunStore takes when no host code runs.

A transition writes the run's new head, its event and its receipt only while the operation
id has no row and the run is still at the head the event was computed from (one statement
on PostgreSQL). A unit of work keeps the heads it locked, so a batch reads each run once;
a head that moved behind the journal's back is caught by that compare-and-set, never
forked. Every test runs through each entry point on both engines (conftest.py).
"""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, event, insert, text, update
from sqlalchemy.orm import Session
from support import ROOT_HASH

from cadence_store import (
    JournalIntegrityError,
    OperationConflictError,
    RunRepository,
    RunStore,
    SchemaOutOfDateError,
    StoreUnavailableError,
    TransactionAbortedError,
    upgrade,
)
from cadence_store.parallel_verify import verify_runs
from cadence_store.storage.models import operations, runs
from cadence_store.storage.schema import downgrade
from cadence_store.store.direct_write import fits_direct_writes


def _events_of(store, run_id):
    return [(e.sequence, e.type, e.payload.get("to")) for e in store.list_events(run_id)]


@pytest.mark.run_store_only
def test_a_batch_in_one_unit_of_work_chains_like_single_calls(store, table_rows):
    run = store.start_run("abel-implement", change="batch", operation_id="s1")
    with store.unit_of_work() as uow:
        moved = [
            uow.runs.transition(run.run_id, "paused", operation_id=f"b{i}", code=f"c{i}")
            for i in range(5)
        ]
    assert [m.sequence for m in moved] == [2, 3, 4, 5, 6]
    assert [m.pause_code for m in moved] == [f"c{i}" for i in range(5)]
    single = store.transition(run.run_id, "validating-delivery", operation_id="after")
    assert single.sequence == 7
    assert store.verify_integrity(run.run_id).to_json() == single.to_json()
    receipts = {r["operation_id"]: r for r in table_rows("operations")}
    for index, projection in enumerate(moved):
        assert receipts[f"b{index}"]["state"] == "committed"
        assert receipts[f"b{index}"]["outcome_json"] == projection.to_json()
    # a replay of a batched operation id, later, writes nothing
    assert store.transition(run.run_id, "paused", operation_id="b2").to_json() == moved[2].to_json()
    assert len(store.list_events(run.run_id)) == 7


@pytest.mark.run_store_only
def test_a_replay_inside_the_same_unit_of_work_appends_once(store):
    run = store.start_run("abel-implement", change="again", operation_id="s1")
    with store.unit_of_work() as uow:
        first, appended = uow.runs.transition_once(run.run_id, "paused", operation_id="t1")
        again, appended_again = uow.runs.transition_once(run.run_id, "ready", operation_id="t1")
        with pytest.raises(OperationConflictError) as conflict:
            uow.runs.transition(run.run_id, "paused", operation_id="s1")
        assert conflict.value.code == "operation-id-conflict"
        after = uow.runs.transition(run.run_id, "validating-delivery", operation_id="t2")
    assert (appended, appended_again) == (True, False)
    assert again.to_json() == first.to_json()
    assert after.sequence == 3
    assert _events_of(store, run.run_id) == [
        (1, "run-created", None),
        (2, "state-transitioned", "paused"),
        (3, "state-transitioned", "validating-delivery"),
    ]
    store.verify_integrity(run.run_id)


@pytest.mark.run_store_only
def test_several_runs_in_one_unit_of_work_keep_their_own_heads(store):
    first = store.start_run("abel-implement", change="one", operation_id="s1")
    second = store.start_run("abel-implement", change="two", operation_id="s2")
    with store.unit_of_work() as uow:
        for index in range(3):
            uow.runs.transition(first.run_id, "paused", operation_id=f"a{index}")
            uow.runs.transition(second.run_id, "paused", operation_id=f"b{index}")
        uow.runs.bind_delivery(first.run_id, "gate-a", 1, "a" * 64, operation_id="bind")
        uow.runs.transition(first.run_id, "paused", operation_id="a-last")
    assert store.verify_integrity(first.run_id).sequence == 6
    assert store.verify_integrity(second.run_id).sequence == 4


@pytest.mark.run_store_only
def test_a_head_moved_behind_the_journal_is_refused_not_forked(store, rejected):
    run = store.start_run("abel-implement", change="moved", operation_id="s1")
    store.transition(run.run_id, "paused", operation_id="t1")
    with (
        rejected(JournalIntegrityError, "run-projection-integrity-mismatch"),
        store.unit_of_work() as uow,
    ):
        uow.runs.transition(run.run_id, "paused", operation_id="t2")
        # a host statement that rewrites the head the unit of work has locked
        uow.session.execute(
            update(runs).where(runs.c.run_id == run.run_id).values(event_hash="f" * 64)
        )
        uow.runs.transition(run.run_id, "paused", operation_id="t3")
    assert store.verify_integrity(run.run_id).sequence == 2


def test_an_uncommitted_row_of_the_same_kind_is_completed_by_the_transition(store, db):
    run = store.start_run("abel-implement", change="half", operation_id="s1")
    with db.begin() as connection:
        connection.execute(
            insert(operations).values(
                run_id=run.run_id,
                operation_id="t1",
                kind="state-transitioned",
                state="interrupted",
                outcome_json=None,
            )
        )
    moved = store.transition(run.run_id, "paused", operation_id="t1")
    assert moved.sequence == 2
    assert store.transition(run.run_id, "ready", operation_id="t1").to_json() == moved.to_json()
    with db.connect() as connection:
        receipt = connection.execute(
            text("SELECT state, outcome_json FROM operations WHERE operation_id = 't1'")
        ).one()
    assert tuple(receipt) == ("committed", moved.to_json())
    store.verify_integrity(run.run_id)


@pytest.mark.run_store_only
def test_a_host_session_repository_never_keeps_a_head_past_its_transaction(store, store_url):
    run = store.start_run("abel-implement", change="host", operation_id="s1")
    engine = create_engine(store_url)
    try:
        with Session(engine) as session:
            repository = RunRepository(session, root_hash=ROOT_HASH)
            with session.begin():
                for index in range(3):  # a batch in a host transaction
                    repository.transition(run.run_id, "paused", operation_id=f"h{index}")
            # another writer moves the run on between the host's transactions
            store.transition(run.run_id, "paused", operation_id="other")
            with session.begin():
                last = repository.transition(run.run_id, "paused", operation_id="h-last")
    finally:
        engine.dispose()
    assert last.sequence == 6
    assert store.verify_integrity(run.run_id).to_json() == last.to_json()


@pytest.mark.run_store_only
def test_a_host_engine_with_connection_events_keeps_them(store_url):
    """RunStore's direct path skips `Connection`s, so an engine whose `Connection`
    events or options a host relies on goes through units of work instead."""
    engine = create_engine(store_url)
    begun: list[object] = []
    assert fits_direct_writes(engine)
    assert not fits_direct_writes(engine.execution_options(isolation_level="SERIALIZABLE"))
    event.listen(engine, "begin", begun.append)
    assert not fits_direct_writes(engine)
    try:
        with RunStore(engine, root_hash=ROOT_HASH) as hosted:
            run = hosted.start_run("abel-implement", change="events", operation_id="s1")
            hosted.transition(run.run_id, "paused", operation_id="t1")
            assert len(begun) >= 2  # each write began a transaction the host saw
            hosted.verify_integrity(run.run_id)
    finally:
        engine.dispose()


@pytest.mark.run_store_only
def test_the_connection_kept_between_writes_never_starves_the_store(store_url):
    with RunStore(
        store_url, root_hash=ROOT_HASH, pool_size=2, max_overflow=0, pool_timeout=10
    ) as small:
        run = small.start_run("abel-implement", change="small-pool", operation_id="s1")
        small.transition(run.run_id, "paused", operation_id="t1")  # keeps a connection
        with small.unit_of_work() as uow:  # takes one of the two
            uow.runs.transition(run.run_id, "paused", operation_id="t2")
            # a read needs the other one: the kept connection went back to the pool
            assert small.status(run.run_id).sequence == 2  # t2 is not committed yet
        assert small.transition(run.run_id, "paused", operation_id="t3").sequence == 4


@pytest.mark.run_store_only
def test_a_downgrade_through_the_engine_stops_the_next_direct_write(store_url):
    """The direct path remembers that its pool was checked ready; a downgrade through the
    same engine must still be seen by the next write, which is refused (and writes
    nothing), and an upgrade lets writes through again."""
    host_engine = create_engine(store_url)
    try:
        with RunStore(host_engine, root_hash=ROOT_HASH) as hosted:
            run = hosted.start_run("abel-implement", change="downgraded", operation_id="s1")
            hosted.transition(run.run_id, "paused", operation_id="t1")  # the direct path
            assert hosted.transactions._direct is not None and hosted.transactions._direct.ready()
            downgrade(host_engine, "-1")
            with pytest.raises(SchemaOutOfDateError) as refused:
                hosted.transition(run.run_id, "paused", operation_id="t2")
            assert refused.value.code == "run-store-upgrade-required"
            with host_engine.connect() as connection:  # the refused write wrote nothing
                written = connection.execute(
                    text("SELECT count(*) FROM events WHERE run_id = :run"), {"run": run.run_id}
                ).scalar_one()
                receipt = connection.execute(
                    text(
                        "SELECT count(*) FROM operations"
                        " WHERE run_id = :run AND operation_id = 't2'"
                    ),
                    {"run": run.run_id},
                ).scalar_one()
            assert (written, receipt) == (2, 0)
            upgrade(host_engine)
            assert hosted.transition(run.run_id, "paused", operation_id="t2").sequence == 3
            hosted.verify_integrity(run.run_id)
    finally:
        host_engine.dispose()


@pytest.mark.run_store_only
def test_no_connection_is_kept_from_a_host_pool_or_a_checking_pool(store_url):
    host_engine = create_engine(store_url)
    try:
        with RunStore(host_engine, root_hash=ROOT_HASH) as hosted:
            run = hosted.start_run("abel-implement", change="host-pool", operation_id="s1")
            hosted.transition(run.run_id, "paused", operation_id="t1")
            assert host_engine.pool.checkedout() == 0
    finally:
        host_engine.dispose()
    for index, options in enumerate(({"pool_pre_ping": True}, {"pool_recycle": 3600})):
        with RunStore(store_url, root_hash=ROOT_HASH, **options) as checking:
            checking.transition(run.run_id, "paused", operation_id=f"checking-{index}")
            assert checking.engine.pool.checkedout() == 0
    with RunStore(store_url, root_hash=ROOT_HASH) as own:
        own.transition(run.run_id, "paused", operation_id="kept")
        assert own.engine.pool.checkedout() == 1  # the one kept for the next write


@pytest.mark.run_store_only
def test_verifying_across_processes_after_writes_hands_no_connection_to_the_workers(
    store_url,
):
    with RunStore(store_url, root_hash=ROOT_HASH) as own:
        run_ids = []
        for index in range(4):
            run = own.start_run("abel-implement", change=f"jobs-{index}", operation_id=f"s{index}")
            own.transition(run.run_id, "paused", operation_id=f"t{index}")
            run_ids.append(run.run_id)
        assert own.engine.pool.checkedout() == 1  # kept by the direct write path
        checks = verify_runs(own, run_ids, jobs=2)
        assert [(check.run_id, check.ok) for check in checks] == [(r, True) for r in run_ids]
        # the parent's own connections are unharmed by the workers' exit
        assert own.transition(run_ids[0], "paused", operation_id="after").sequence == 3
        assert own.verify_integrity(run_ids[0]).sequence == 3


def _fail_event_inserts(db, fail: bool) -> None:
    """A trigger that refuses every event row: the journal call fails after its earlier
    writes (the binding row, the run's new head) already ran."""
    with db.begin() as connection:
        if db.dialect.name == "sqlite":
            connection.exec_driver_sql("DROP TRIGGER IF EXISTS refuse_events")
            if fail:
                connection.exec_driver_sql(
                    "CREATE TRIGGER refuse_events BEFORE INSERT ON events "
                    "BEGIN SELECT RAISE(ABORT, 'refused'); END"
                )
            return
        connection.exec_driver_sql("DROP TRIGGER IF EXISTS refuse_events ON events")
        if fail:
            connection.exec_driver_sql(
                "CREATE OR REPLACE FUNCTION refuse_event() RETURNS trigger "
                "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$"
            )
            connection.exec_driver_sql(
                "CREATE TRIGGER refuse_events BEFORE INSERT ON events "
                "FOR EACH ROW EXECUTE FUNCTION refuse_event()"
            )


_HALF_WRITTEN_CALLS = {
    # the head's guarded UPDATE, then the event: the event refused
    "bind_delivery": lambda runs, run_id: runs.bind_delivery(
        run_id, "gate-a", 1, "a" * 64, operation_id="b1"
    ),
    # the guarded UPDATE, the event and the receipt (one statement on PostgreSQL)
    "transition": lambda runs, run_id: runs.transition(run_id, "running", operation_id="b1"),
}


@pytest.mark.run_store_only
@pytest.mark.parametrize("call", sorted(_HALF_WRITTEN_CALLS))
def test_a_unit_of_work_never_commits_half_of_a_failed_journal_call(store, db, snapshot, call):
    run = store.start_run("abel-implement", change="half-call", operation_id="s1")
    store.transition(run.run_id, "paused", operation_id="t1")
    before = snapshot()
    _fail_event_inserts(db, True)
    try:
        with pytest.raises(TransactionAbortedError) as refused, store.unit_of_work() as uow:
            with pytest.raises(StoreUnavailableError) as failed:
                _HALF_WRITTEN_CALLS[call](uow.runs, run.run_id)
            assert failed.value.code == "run-store-write-failed"
            # the host goes on as if the call had simply failed
    finally:
        _fail_event_inserts(db, False)
    assert refused.value.code == "run-store-transaction-aborted"
    assert snapshot() == before  # no binding row, no moved head
    assert store.verify_integrity(run.run_id).sequence == 2
    # a call that fails before writing anything leaves the unit of work usable
    with store.unit_of_work() as uow:
        with pytest.raises(OperationConflictError):
            uow.runs.transition(run.run_id, "paused", operation_id="s1")
        uow.runs.transition(run.run_id, "paused", operation_id="t2")
    assert store.verify_integrity(run.run_id).sequence == 3
