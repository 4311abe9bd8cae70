"""When things happened: `RunEvent.recorded_at`, `RunDetail.created_at` / `updated_at`.

Times are set by the store's clock inside the appending transaction (the PostgreSQL
server's clock without `clock=`), outside every hash and `projection_json`.
"""

from __future__ import annotations

import logging
import time

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session
from support import ROOT_HASH

from cadence_store import InvalidInputError, RunRepository, RunStore
from cadence_store.journal import create_event


def server_ms(db: Engine) -> int:
    """The database's clock (PostgreSQL's; SQLite's is this machine's)."""
    if db.dialect.name != "postgresql":
        return time.time_ns() // 1_000_000
    with db.connect() as connection:
        return int(
            connection.execute(
                text("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint")
            ).scalar_one()
        )


def test_a_clock_store_records_exactly_its_clock(store, clock):
    created_at = clock.now
    run = store.start_run("abel-implement", change="times", operation_id="start-1")
    clock.advance(1_500)
    store.transition(run.run_id, "validating-delivery", operation_id="move-1")

    first, second = store.list_events(run.run_id)
    assert (first.recorded_at, second.recorded_at) == (created_at, created_at + 1_500)
    detail = store.run_detail(run.run_id)
    assert (detail.created_at, detail.updated_at) == (created_at, created_at + 1_500)
    assert [step.recorded_at for step in detail.timeline] == [created_at, created_at + 1_500]


def test_times_are_outside_the_hash_and_the_cadence_1x_objects(store, clock, table_rows):
    run = store.start_run("abel-implement", change="times", operation_id="start-1")
    [event] = store.list_events(run.run_id)
    assert event.hash == create_event(1, event.type, event.payload, event.prior_hash).hash
    assert "recordedAt" not in event.to_dict()
    assert event.model_dump()["recorded_at"] == clock.now
    assert "At" not in run.to_json()  # no recordedAt, createdAt, updatedAt
    [row] = table_rows("runs")
    assert "At" not in row["projection_json"] and str(clock.now) not in row["projection_json"]
    assert store.verify_integrity(run.run_id) == run


def test_recorded_at_never_decreases_when_the_clock_steps_back(store, clock):
    run = store.start_run("abel-implement", change="times", operation_id="start-1")
    started = clock.now
    clock.now = started - 60_000  # an NTP step back, or a slower client
    store.transition(run.run_id, "validating-delivery", operation_id="move-1")
    store.transition(run.run_id, "ready", operation_id="move-2")
    assert [event.recorded_at for event in store.list_events(run.run_id)] == [started] * 3
    assert store.run_detail(run.run_id).updated_at == started
    clock.now = started + 5
    store.transition(run.run_id, "running", operation_id="move-3")
    assert store.list_events(run.run_id)[-1].recorded_at == started + 5


def test_list_runs_filters_by_update_time(store, clock):
    early = store.start_run("abel-implement", change="early", operation_id="start-1")
    clock.advance(1_000)
    middle = store.start_run("abel-implement", change="middle", operation_id="start-2")
    clock.advance(1_000)
    late = store.start_run("abel-implement", change="late", operation_id="start-3")
    clock.advance(1_000)
    store.transition(early.run_id, "validating-delivery", operation_id="move-1")  # now latest

    def ids(**filters: int) -> set[str]:
        return {run.run_id for run in store.list_runs(**filters)}

    assert ids(updated_after=clock.now - 2_000) == {late.run_id, early.run_id}
    assert ids(updated_before=clock.now - 1_000) == {middle.run_id}
    assert ids(updated_after=clock.now - 3_000, updated_before=clock.now - 1_000) == {middle.run_id}
    assert ids(updated_after=clock.now) == set()
    for bad in (True, "1", 1.5, 2**53):
        with pytest.raises(InvalidInputError) as refused:
            store.list_runs(updated_after=bad)
        assert refused.value.code == "invalid-time-filter"


@pytest.mark.run_store_only
def test_without_a_clock_a_new_event_is_recorded_within_the_call(store_url, db):
    """RunStore and a RunRepository in a host session, each without `clock=`."""
    with RunStore(store_url, root_hash=ROOT_HASH) as store:
        before = server_ms(db)
        run = store.start_run("abel-implement", change="times", operation_id="start-1")
        after = server_ms(db)
    with Session(db) as session, session.begin():
        repository = RunRepository(session, root_hash=ROOT_HASH)
        moved_before = server_ms(db)
        repository.transition(run.run_id, "validating-delivery", operation_id="move-1")
        moved_after = server_ms(db)
    with RunStore(store_url) as store:
        first, second = store.list_events(run.run_id)
    assert first.recorded_at is not None and before <= first.recorded_at <= after
    assert second.recorded_at is not None and moved_before <= second.recorded_at <= moved_after


@pytest.mark.postgres
def test_on_postgresql_the_servers_clock_is_used_not_the_clients(pg_database_url, monkeypatch):
    """A client whose clock is 60 s ahead still records the server's time."""
    import cadence_store

    cadence_store.upgrade(pg_database_url)
    db = create_engine(pg_database_url)
    real = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real() + 60_000_000_000)
    try:
        with RunStore(pg_database_url, root_hash=ROOT_HASH) as store:
            before = server_ms(db)
            run = store.start_run("abel-implement", change="skew", operation_id="start-1")
            store.transition(run.run_id, "validating-delivery", operation_id="move-1")
            after = server_ms(db)
            times = [event.recorded_at for event in store.list_events(run.run_id)]
            detail = store.run_detail(run.run_id)
    finally:
        db.dispose()
    assert all(t is not None and before <= t <= after for t in times), (before, times, after)
    assert detail.created_at == times[0] and detail.updated_at == times[1]
    assert time.time_ns() // 1_000_000 - after > 50_000  # the client's clock is off indeed


@pytest.mark.run_store_only
def test_verification_reports_a_decreasing_recorded_at_without_failing(store, db, clock, caplog):
    run = store.start_run("abel-implement", change="times", operation_id="start-1")
    clock.advance(10)
    store.transition(run.run_id, "validating-delivery", operation_id="move-1")
    with db.begin() as connection:  # a copy from a store whose times were damaged
        connection.execute(
            text("UPDATE events SET recorded_at = recorded_at - 1000 WHERE sequence = 2")
        )
    caplog.set_level(logging.WARNING, logger="cadence_store")
    assert store.verify_integrity(run.run_id).sequence == 2
    [report] = [r for r in caplog.records if "recorded_at decreases" in r.getMessage()]
    assert report.levelno == logging.WARNING and run.run_id in report.getMessage()
    assert "sequence 2" in report.getMessage()
