"""Traces and metrics (extra `otel`), read back from the SDK's in-memory exporters.

Every test runs through each entry point (RunStore, a unit of work, RunRepository in a
host session) on both engines; the async classes have their own tests at the end.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session
from support import ROOT_HASH
from telemetry_support import Telemetry, installed

import cadence_store
from cadence_store import AsyncRunStore, CadenceStoreError, RunRepository, RunStore, upgrade
from cadence_store.async_store import async_database_url
from cadence_store.telemetry import UNIT_OF_WORK_SPAN


@pytest.fixture
def telemetry() -> Any:
    with installed().recording() as recording:
        yield recording


def calls(telemetry: Telemetry) -> list[Any]:
    """The spans of library calls (a unit of work's own span left out)."""
    return [
        span
        for span in telemetry.spans()
        if span.name.startswith("cadence_store.") and span.name != UNIT_OF_WORK_SPAN
    ]


def engine_name(store: Any) -> str:
    return str(store.engine.dialect.name)


def test_one_span_per_call_with_its_attributes(store, telemetry):
    run = store.start_run("abel-implement", change="telemetry", operation_id="start-1")
    store.transition(run.run_id, "validating-delivery", operation_id="ready-1")

    started, moved = calls(telemetry)
    assert (started.name, moved.name) == ("cadence_store.start_run", "cadence_store.transition")
    assert dict(moved.attributes) == {
        "db.system": engine_name(store),
        "cadence_store.run_id": run.run_id,
        "cadence_store.operation_id": "ready-1",
        "cadence_store.replayed": False,
    }
    # start_run learns its run id from its result
    assert started.attributes["cadence_store.run_id"] == run.run_id
    assert started.attributes["cadence_store.replayed"] is False
    assert all(span.status.status_code is StatusCode.UNSET for span in (started, moved))


def test_a_replay_says_replayed(store, telemetry):
    run = store.start_run("abel-implement", change="telemetry", operation_id="start-1")
    store.transition(run.run_id, "validating-delivery", operation_id="ready-1")
    store.transition(
        run.run_id, "validating-delivery", operation_id="ready-1"
    )  # the same operation id
    store.start_run("abel-implement", change="telemetry", operation_id="start-1")

    replayed = {(s.name, s.attributes["cadence_store.replayed"]) for s in calls(telemetry)[2:]}
    assert replayed == {("cadence_store.transition", True), ("cadence_store.start_run", True)}
    assert telemetry.metric("cadence_store.events.appended") == 2


def test_a_batch_is_one_span_and_counts_each_event_it_appends(store, telemetry):
    run = store.start_run("abel-implement", change="telemetry", operation_id="start-1")
    requests = [
        {"run_id": run.run_id, "to": state, "operation_id": f"move-{n}"}
        for n, state in enumerate(["validating-delivery", "ready", "paused"])
    ]
    store.transition_many(requests)
    store.transition_many(requests)  # every request replays

    _, appended, replayed = calls(telemetry)
    assert (appended.name, replayed.name) == ("cadence_store.transition_many",) * 2
    assert appended.attributes["cadence_store.replayed"] is False
    assert replayed.attributes["cadence_store.replayed"] is True
    assert telemetry.metric("cadence_store.events.appended") == 1 + 3


def test_a_failing_call_has_status_error_and_its_code(store, telemetry):
    run = store.start_run("abel-implement", change="telemetry", operation_id="start-1")
    with pytest.raises(CadenceStoreError) as failed:
        store.transition(run.run_id, "completed", operation_id="bad-1")

    span = calls(telemetry)[-1]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == failed.value.code
    assert span.attributes["cadence_store.error_code"] == failed.value.code
    assert "cadence_store.replayed" not in span.attributes


def test_a_span_is_a_child_of_the_callers_span(store, telemetry):
    with trace.get_tracer("host-app").start_as_current_span("host-request") as parent:
        store.start_run("abel-implement", change="telemetry", operation_id="start-1")
    [call] = calls(telemetry)
    assert call.parent is not None
    assert call.context.trace_id == parent.get_span_context().trace_id
    by_id = {span.context.span_id: span for span in telemetry.spans()}
    ancestor = by_id.get(call.parent.span_id)
    if ancestor is not None and ancestor.name == UNIT_OF_WORK_SPAN:  # the uow entry point
        assert ancestor.parent is not None
        assert ancestor.parent.span_id == parent.get_span_context().span_id
    else:
        assert call.parent.span_id == parent.get_span_context().span_id


def test_counters_match_the_appended_events_and_fenced_leases(store, telemetry):
    run = store.start_run("abel-implement", change="telemetry", operation_id="start-1")
    for n, state in enumerate(["validating-delivery", "ready", "running", "paused"]):
        store.transition(run.run_id, state, operation_id=f"move-{n}")
    first = store.acquire_lease(run.run_id, "apply", 60_000)
    store.acquire_lease(run.run_id, "apply", 60_000, preempt=True)  # fences the first
    for _ in range(2):
        with pytest.raises(CadenceStoreError) as fenced:
            store.assert_lease(first)
        assert fenced.value.code == "lease-fenced"

    assert telemetry.metric("cadence_store.events.appended") == len(store.list_events(run.run_id))
    assert telemetry.metric("cadence_store.leases.fenced") == 2
    # one duration per outermost call (and per unit of work, on that entry point)
    assert telemetry.metric("cadence_store.call.duration") == len(telemetry.spans())


def test_no_span_attribute_or_log_record_holds_a_lease_token_or_password(
    store, telemetry, caplog, database_url
):
    caplog.set_level(logging.DEBUG, logger="cadence_store")
    run = store.start_run("abel-implement", change="telemetry", operation_id="start-1")
    lease = store.acquire_lease(run.run_id, "apply", 60_000)
    lease = store.renew_lease(lease, 60_000)
    store.transition(run.run_id, "validating-delivery", operation_id="ready-1", lease=lease)
    store.bind_delivery(run.run_id, "gate-a", 1, "a" * 64, operation_id="bind-1", lease=lease)
    store.inspect_operation(run.run_id, "apply")
    stale = store.acquire_lease(run.run_id, "apply", 60_000, preempt=True)
    with pytest.raises(CadenceStoreError):
        store.assert_lease(lease)
    store.commit_lease(stale, {"applied": True})
    store.verify_integrity(run.run_id)
    # the URL with a password goes through an upgrade (logged) and a store's calls
    url = make_url(database_url).set(password="s3cret").render_as_string(hide_password=False)
    if url.startswith("postgresql"):
        assert cadence_store.upgrade(url)
        with RunStore(url, root_hash=ROOT_HASH) as other:
            other.transition(run.run_id, "ready", operation_id="ready-2")

    secrets = {lease.token, stale.token, "s3cret"}
    texts = [record.getMessage() for record in caplog.records]
    for span in telemetry.spans():
        texts += [f"{key}={value}" for key, value in span.attributes.items()]
        texts += [str(event.attributes) for event in span.events]
        texts.append(str(span.status.description))
    assert texts
    assert not [text for text in texts for secret in secrets if secret in text]


# -- the appended counter counts what was committed ----------------------------------------

APPENDED = "cadence_store.events.appended"


class Refused(Exception):
    """The host's own failure, raised to roll a transaction back."""


@pytest.fixture
def dangling_row(db):
    """A host table whose deferred foreign key fails only at COMMIT."""
    with db.begin() as connection:
        connection.exec_driver_sql(
            "CREATE TABLE fk_probe (run_id TEXT REFERENCES runs(run_id) "
            "DEFERRABLE INITIALLY DEFERRED)"
        )
    return text("INSERT INTO fk_probe (run_id) VALUES ('no-such-run')")


@pytest.mark.run_store_only
def test_appends_the_store_rolled_back_are_not_counted(store, telemetry, dangling_row):
    """RunStore and a unit of work: a `write=` that raises, a block that raises, a commit
    that fails count nothing; what commits counts once."""
    run = store.start_run("abel-implement", change="counted", operation_id="s1")
    with installed().recording() as counted:

        def refuse(_session: Any) -> None:
            raise Refused

        with pytest.raises(Refused):
            store.transition_atomically(run.run_id, "paused", operation_id="t1", write=refuse)
        with pytest.raises(CadenceStoreError):  # the host's row fails at COMMIT
            store.transition_atomically(
                run.run_id, "paused", operation_id="t1", write=lambda s: s.execute(dangling_row)
            )
        with pytest.raises(Refused), store.unit_of_work() as uow:
            uow.runs.transition(run.run_id, "paused", operation_id="t2")
            raise Refused
        with pytest.raises(CadenceStoreError), store.unit_of_work() as uow:
            uow.runs.transition(run.run_id, "paused", operation_id="t3")
            uow.session.execute(dangling_row)
        assert counted.metric(APPENDED) == 0
        assert len(store.list_events(run.run_id)) == 1  # nothing was kept

        store.transition_atomically(run.run_id, "paused", operation_id="t4", write=lambda s: None)
        with store.unit_of_work() as uow:
            uow.runs.transition(run.run_id, "validating-delivery", operation_id="t5")
            uow.runs.transition(run.run_id, "ready", operation_id="t6")
        assert counted.metric(APPENDED) == 3 == len(store.list_events(run.run_id)) - 1


@pytest.mark.run_store_only
def test_appends_a_host_rolled_back_are_not_counted(store, store_url, clock, telemetry):
    """RunRepository in a host session: counted when the host commits, never when it
    rolls back (by an exception or by `rollback()`)."""
    run = store.start_run("abel-implement", change="counted", operation_id="s1")
    host = create_engine(store_url)
    try:
        with installed().recording() as counted:
            with pytest.raises(Refused), Session(host) as session, session.begin():
                RunRepository(session, root_hash=ROOT_HASH, clock=clock).transition(
                    run.run_id, "paused", operation_id="t1"
                )
                raise Refused
            with Session(host) as session:
                runs = RunRepository(session, root_hash=ROOT_HASH, clock=clock)
                runs.transition(run.run_id, "paused", operation_id="t2")
                session.rollback()
                assert counted.metric(APPENDED) == 0
                runs.transition(run.run_id, "paused", operation_id="t3")
                session.commit()
            assert counted.metric(APPENDED) == 1 == len(store.list_events(run.run_id)) - 1
    finally:
        host.dispose()


@pytest.mark.run_store_only
def test_appends_an_async_unit_of_work_rolled_back_are_not_counted(
    store, store_url, clock, telemetry
):
    run = store.start_run("abel-implement", change="counted", operation_id="s1")
    async_url = async_database_url(store_url).render_as_string(hide_password=False)

    async def units() -> None:
        async with AsyncRunStore(async_url, root_hash=ROOT_HASH, clock=clock) as async_store:
            with pytest.raises(Refused):
                async with async_store.unit_of_work() as uow:
                    await uow.runs.transition(run.run_id, "paused", operation_id="t1")
                    raise Refused

            def refuse(_session: Any) -> None:
                raise Refused

            with pytest.raises(Refused):
                await async_store.transition_atomically(
                    run.run_id, "paused", operation_id="t2", write=refuse
                )
            async with async_store.unit_of_work() as uow:
                await uow.runs.transition(run.run_id, "paused", operation_id="t3")

    with installed().recording() as counted:
        asyncio.run(units())
        assert counted.metric(APPENDED) == 1 == len(store.list_events(run.run_id)) - 1


# -- the async classes ------------------------------------------------------------------


@pytest.fixture
def async_url(database_url: str) -> str:
    upgrade(database_url)
    return async_database_url(database_url).render_as_string(hide_password=False)


def test_async_store_calls_have_one_span_each(async_url, clock, telemetry):
    async def lifecycle() -> str:
        store = AsyncRunStore(async_url, root_hash=ROOT_HASH, clock=clock)
        try:
            run = await store.start_run("abel-implement", change="a", operation_id="start-1")
            await store.transition(run.run_id, "validating-delivery", operation_id="ready-1")
            await store.transition(run.run_id, "validating-delivery", operation_id="ready-1")
            async with store.unit_of_work() as uow:
                await uow.runs.transition(run.run_id, "ready", operation_id="run-1")
            return run.run_id
        finally:
            await store.aclose()

    run_id = asyncio.run(lifecycle())
    spans = telemetry.spans()
    names = [span.name for span in spans]
    assert names.count("cadence_store.transition") == 3
    assert names.count(UNIT_OF_WORK_SPAN) == 1
    moved = [span for span in spans if span.name == "cadence_store.transition"]
    assert [span.attributes["cadence_store.replayed"] for span in moved] == [False, True, False]
    assert {span.attributes["cadence_store.run_id"] for span in moved} == {run_id}
    [unit] = [span for span in spans if span.name == UNIT_OF_WORK_SPAN]
    assert moved[-1].parent is not None and moved[-1].parent.span_id == unit.context.span_id
    assert telemetry.metric("cadence_store.events.appended") == 3


def test_a_normal_call_logs_nothing_at_info(store, caplog):
    caplog.set_level(logging.DEBUG, logger="cadence_store")
    run = store.start_run("abel-implement", change="quiet", operation_id="start-1")
    store.transition(run.run_id, "validating-delivery", operation_id="move-1")
    store.transition(run.run_id, "validating-delivery", operation_id="move-1")  # a replay
    lease = store.acquire_lease(run.run_id, "apply", 60_000)
    store.commit_lease(lease, {"applied": True})
    store.verify_integrity(run.run_id)
    store.run_detail(run.run_id)
    loud = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert loud == [], [r.getMessage() for r in loud]
    assert all(r.name.startswith("cadence_store.") for r in caplog.records)


def test_a_fenced_lease_is_logged_with_its_reason(store, caplog):
    caplog.set_level(logging.INFO, logger="cadence_store")
    run = store.start_run("abel-implement", change="fenced", operation_id="start-1")
    first = store.acquire_lease(run.run_id, "apply", 60_000)
    store.acquire_lease(run.run_id, "apply", 60_000, preempt=True)
    with pytest.raises(CadenceStoreError):
        store.assert_lease(first)
    [record] = [r for r in caplog.records if "fenced" in r.getMessage()]
    assert record.name == "cadence_store.repository.leases" and record.levelno == logging.INFO
    assert run.run_id in record.getMessage() and "later grant" in record.getMessage()
    assert first.token not in record.getMessage()
