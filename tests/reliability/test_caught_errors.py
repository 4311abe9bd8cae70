"""Issue 26: a caught journal error inside a unit of work never loses the rest silently.

In one unit of work: run A's transition returns, a host outbox row is added, run B's
transition fails with a coded error, the block catches it and goes on (it exits, or adds
one more host row). Afterwards either everything acknowledged is committed, or the unit of
work raised a coded error and nothing of it is committed (`uow_outcomes.py`).

How B's transition is made to fail:

- ``lock-timeout`` (PostgreSQL): another transaction holds B's row past ``lock_timeout``,
  so B fails with ``run-store-busy`` before writing; PostgreSQL has aborted the whole
  transaction, and a plain COMMIT would roll it back without a word;
- ``refused-head-update`` / ``refused-event-insert`` (both): a trigger refuses B's first
  write (the head's UPDATE) or a later one (the event's INSERT; on PostgreSQL both are one
  statement);
- ``rolled-back-transaction`` (SQLite): the trigger on B's head update uses
  ``RAISE(ROLLBACK)``, so SQLite rolls the whole transaction back on its own, as it may on
  ``SQLITE_FULL``, and the next statement would begin a new one.

Every case runs through `RunStore.unit_of_work()` and `AsyncRunStore.unit_of_work()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Engine, select
from support import ROOT_HASH, FakeClock
from uow_outcomes import (
    HOST_OUTBOX,
    Acknowledged,
    one_of_two_outcomes,
    outbox_engine,
    outbox_row,
)

import cadence_store
from cadence_store import AsyncRunStore, CadenceStoreError, RunStore
from cadence_store.async_store import async_database_url
from cadence_store.storage.models import runs

FAULTS = [
    pytest.param("sqlite", "refused-head-update", id="sqlite-refused-head-update"),
    pytest.param("sqlite", "refused-event-insert", id="sqlite-refused-event-insert"),
    pytest.param("sqlite", "rolled-back-transaction", id="sqlite-rolled-back-transaction"),
    *(
        pytest.param("postgresql", fault, id=f"postgresql-{fault}", marks=pytest.mark.postgres)
        for fault in ("lock-timeout", "refused-head-update", "refused-event-insert")
    ),
]
# the table and statement each trigger fault refuses, on B's row only
TRIGGERED = {
    "refused-head-update": ("runs", "UPDATE", "ABORT"),
    "refused-event-insert": ("events", "INSERT", "ABORT"),
    "rolled-back-transaction": ("runs", "UPDATE", "ROLLBACK"),
}
AFTERWARDS = ["exits", "adds-a-host-row"]
# a short lock wait, so that B's row held elsewhere fails fast (run-store-busy)
IMPATIENT_CONNECT_ARGS = {"options": "-c lock_timeout=200"}


@pytest.fixture
def engine_url(request: pytest.FixtureRequest) -> str:
    engine: str = request.param
    fixture = {"sqlite": "sqlite_database_url", "postgresql": "pg_database_url"}[engine]
    url: str = request.getfixturevalue(fixture)
    cadence_store.upgrade(url)
    return url


@pytest.fixture
def db(engine_url: str) -> Iterator[Engine]:
    with outbox_engine(engine_url) as engine:
        yield engine


@pytest.fixture
def plain_store(engine_url: str, clock: FakeClock) -> Iterator[RunStore]:
    """Sets the runs up and reads the outcome (never the store under test)."""
    with RunStore(engine_url, root_hash=ROOT_HASH, clock=clock) as store:
        yield store


def two_runs(store: RunStore) -> tuple[str, str]:
    a = store.start_run("abel-implement", change="run-a", operation_id="start-a")
    b = store.start_run("abel-implement", change="run-b", operation_id="start-b")
    return a.run_id, b.run_id


def _literal(value: str) -> str:
    assert "'" not in value and "\\" not in value, value  # run ids the store generated
    return f"'{value}'"


@contextmanager
def failing_transition(db: Engine, fault: str, run_b: str) -> Iterator[str]:
    """While inside, B's next transition fails as `fault` says; yields the code expected
    from it (empty: any coded error)."""
    sqlite = db.dialect.name == "sqlite"
    if fault == "lock-timeout":
        with db.connect() as holder:
            holder.execute(select(runs.c.run_id).where(runs.c.run_id == run_b).with_for_update())
            try:
                yield "run-store-busy"
            finally:
                holder.rollback()
        return
    table, statement, action = TRIGGERED[fault]
    with db.begin() as connection:
        if sqlite:
            connection.exec_driver_sql(
                f"CREATE TRIGGER refuse_run_b BEFORE {statement} ON {table} "
                f"WHEN NEW.run_id = {_literal(run_b)} "
                f"BEGIN SELECT RAISE({action}, 'refused'); END"
            )
        else:
            connection.exec_driver_sql(
                "CREATE FUNCTION refuse_run_b() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF NEW.run_id = {_literal(run_b)} THEN RAISE EXCEPTION 'refused'; END IF; "
                "RETURN NEW; END $$"
            )
            connection.exec_driver_sql(
                f"CREATE TRIGGER refuse_run_b BEFORE {statement} ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION refuse_run_b()"
            )
    try:
        yield ""
    finally:
        with db.begin() as connection:
            if sqlite:
                connection.exec_driver_sql("DROP TRIGGER refuse_run_b")
            else:
                connection.exec_driver_sql(f"DROP TRIGGER refuse_run_b ON {table}")
                connection.exec_driver_sql("DROP FUNCTION refuse_run_b()")


def store_options(fault: str) -> dict[str, Any]:
    """Engine options of the store under test."""
    return {"connect_args": IMPATIENT_CONNECT_ARGS} if fault == "lock-timeout" else {}


def _outcome_readers(
    store: RunStore,
) -> tuple[Callable[[str], int], Callable[[str, str], Any]]:
    return (lambda run_id: store.status(run_id).sequence), store.inspect_operation


def _assert_caught(error: CadenceStoreError, expected_code: str) -> None:
    assert isinstance(error.code, str) and error.code, error
    if expected_code:
        assert error.code == expected_code, error


def _check_untouched_b_and_chains(store: RunStore, run_a: str, run_b: str) -> None:
    assert store.status(run_b).sequence == 1
    # whatever was kept verifies, and both runs are writable again
    for run_id in (run_a, run_b):
        store.verify_integrity(run_id)
    store.transition(run_b, "paused", operation_id="after-b")


@pytest.mark.parametrize("afterwards", AFTERWARDS)
@pytest.mark.parametrize(("engine_url", "fault"), FAULTS, indirect=["engine_url"])
def test_a_caught_journal_error_in_a_unit_of_work_loses_nothing_silently(
    engine_url: str,
    fault: str,
    afterwards: str,
    db: Engine,
    plain_store: RunStore,
    clock: FakeClock,
) -> None:
    run_a, run_b = two_runs(plain_store)
    acknowledged = Acknowledged()
    sequence_of, receipt_of = _outcome_readers(plain_store)
    with (
        RunStore(engine_url, root_hash=ROOT_HASH, clock=clock, **store_options(fault)) as store,
        failing_transition(db, fault, run_b) as expected_code,
        one_of_two_outcomes(db, sequence_of, receipt_of, acknowledged),
        store.unit_of_work() as uow,
    ):
        moved = uow.runs.transition(run_a, "paused", operation_id="t-a", code="waiting")
        assert moved.sequence == 2
        acknowledged.call(run_a, "t-a", moved.sequence)
        uow.session.execute(HOST_OUTBOX.insert().values(outbox_row(1)))
        acknowledged.host_rows.append(1)
        try:
            uow.runs.transition(run_b, "paused", operation_id="t-b")
        except CadenceStoreError as caught:  # the host handles it and goes on
            _assert_caught(caught, expected_code)
        else:
            pytest.fail("the fault did not make B's transition fail")
        if afterwards == "adds-a-host-row":
            uow.session.execute(HOST_OUTBOX.insert().values(outbox_row(2)))
            acknowledged.host_rows.append(2)
    _check_untouched_b_and_chains(plain_store, run_a, run_b)


@pytest.mark.parametrize("afterwards", AFTERWARDS)
@pytest.mark.parametrize(("engine_url", "fault"), FAULTS, indirect=["engine_url"])
def test_a_caught_journal_error_in_an_async_unit_of_work_loses_nothing_silently(
    engine_url: str,
    fault: str,
    afterwards: str,
    db: Engine,
    plain_store: RunStore,
    clock: FakeClock,
) -> None:
    run_a, run_b = two_runs(plain_store)
    acknowledged = Acknowledged()
    sequence_of, receipt_of = _outcome_readers(plain_store)
    async_url = async_database_url(engine_url).render_as_string(hide_password=False)

    async def block() -> None:
        store = AsyncRunStore(async_url, root_hash=ROOT_HASH, clock=clock, **store_options(fault))
        try:
            async with store.unit_of_work() as uow:
                moved = await uow.runs.transition(
                    run_a, "paused", operation_id="t-a", code="waiting"
                )
                assert moved.sequence == 2
                acknowledged.call(run_a, "t-a", moved.sequence)
                await uow.session.execute(HOST_OUTBOX.insert().values(outbox_row(1)))
                acknowledged.host_rows.append(1)
                try:
                    await uow.runs.transition(run_b, "paused", operation_id="t-b")
                except CadenceStoreError as caught:
                    _assert_caught(caught, expected_code)
                else:
                    pytest.fail("the fault did not make B's transition fail")
                if afterwards == "adds-a-host-row":
                    await uow.session.execute(HOST_OUTBOX.insert().values(outbox_row(2)))
                    acknowledged.host_rows.append(2)
        finally:
            await store.aclose()

    with (
        failing_transition(db, fault, run_b) as expected_code,
        one_of_two_outcomes(db, sequence_of, receipt_of, acknowledged),
    ):
        asyncio.run(block())
    _check_untouched_b_and_chains(plain_store, run_a, run_b)
