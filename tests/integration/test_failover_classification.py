"""Which failures `RunStore` re-runs across a failover (`failures.is_connection_lost`),
and the re-run loop's timeout (`failover.Failover` in `retries.call_with_retries`).

The driver errors are real: a backend terminated with `pg_terminate_backend`, a
read-only transaction, a refused connection, constraint violations and a serialization
failure from a real PostgreSQL server; SQLite's own errors from a real file.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from cadence_store import (
    InvalidInputError,
    LeaseFencedError,
    RunNotFoundError,
    RunStore,
    StoreBusyError,
    StoreUnavailableError,
)
from cadence_store.storage.failures import is_connection_lost, sqlstate, translate_database_error
from cadence_store.store.failover import MAX_DELAY_S, Failover
from cadence_store.store.retries import call_with_retries

pytestmark = pytest.mark.postgres

REFUSED_URL = "postgresql+psycopg://postgres:s3cret@127.0.0.1:1/nowhere?connect_timeout=2"


@pytest.fixture
def engine(pg_database_url: str) -> Iterator[Engine]:
    created = create_engine(pg_database_url, pool_size=2)
    with created.begin() as connection:
        connection.exec_driver_sql(
            "CREATE TABLE items (id INT PRIMARY KEY, n INT NOT NULL CHECK (n >= 0))"
        )
        connection.exec_driver_sql("INSERT INTO items VALUES (1, 1)")
    yield created
    created.dispose()


def _conninfo(url: str) -> str:
    parsed = make_url(url)
    query = parsed.query
    return (
        f"host={query['host']} port={query['port']} dbname={parsed.database} user={parsed.username}"
    )


def _terminate(engine: Engine, pid: int) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as admin:
        admin.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")


# -- retried ------------------------------------------------------------------------------


def test_a_terminated_backend_is_an_admin_shutdown_and_is_retried(engine: Engine) -> None:
    with engine.connect() as connection:
        pid = connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        connection.rollback()
        _terminate(engine, pid)
        with pytest.raises(DBAPIError) as caught:
            connection.exec_driver_sql("SELECT 1")
    assert sqlstate(caught.value) == "57P01"
    assert is_connection_lost(caught.value)
    # what RunStore sees: the coded error, whose cause is the driver's
    coded = translate_database_error(caught.value)
    assert coded.code == "run-store-unavailable"


def test_a_terminated_backend_raised_bare_by_the_driver_is_retried(
    pg_database_url: str, engine: Engine
) -> None:
    # the append path runs on the DB-API cursor, so the driver's own exception arrives
    with psycopg.connect(_conninfo(pg_database_url)) as raw:
        _terminate(engine, raw.info.backend_pid)
        with pytest.raises(psycopg.OperationalError) as caught:
            raw.execute("SELECT 1")
    assert is_connection_lost(caught.value)


def test_a_read_only_transaction_is_retried(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.exec_driver_sql("SET TRANSACTION READ ONLY")
        with pytest.raises(DBAPIError) as caught:
            connection.exec_driver_sql("UPDATE items SET n = 2")
    assert sqlstate(caught.value) == "25006"
    assert is_connection_lost(caught.value)


def test_no_server_answering_is_retried() -> None:
    refused = create_engine(REFUSED_URL)
    try:
        with pytest.raises(DBAPIError) as caught:
            refused.connect()
    finally:
        refused.dispose()
    assert sqlstate(caught.value) is None
    assert is_connection_lost(caught.value)


# -- not retried --------------------------------------------------------------------------


def test_constraint_violations_are_not_retried(engine: Engine) -> None:
    statements = {
        "23505": "INSERT INTO items VALUES (1, 5)",
        "23514": "UPDATE items SET n = -1",
        "23502": "INSERT INTO items VALUES (2, NULL)",
    }
    for expected, statement in statements.items():
        with engine.connect() as connection, pytest.raises(DBAPIError) as caught:
            connection.exec_driver_sql(statement)
        assert sqlstate(caught.value) == expected
        assert not is_connection_lost(caught.value), expected


def test_a_serialization_failure_is_not_a_lost_connection(engine: Engine) -> None:
    # 40001 is re-run by the bounded busy loop, not by the failover loop
    with engine.connect() as first, engine.connect() as second:
        first.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        first.exec_driver_sql("SELECT n FROM items WHERE id = 1").scalar_one()
        second.exec_driver_sql("UPDATE items SET n = 7 WHERE id = 1")
        second.commit()
        with pytest.raises(DBAPIError) as caught:
            first.exec_driver_sql("UPDATE items SET n = 8 WHERE id = 1")
    assert sqlstate(caught.value) == "40001"
    assert not is_connection_lost(caught.value)


@pytest.mark.parametrize(
    "error",
    [
        RunNotFoundError("run-not-found"),
        LeaseFencedError("lease-fenced"),
        InvalidInputError("invalid-change"),
        StoreBusyError("run-store-busy"),
        StoreUnavailableError("run-store-closed"),
        None,
    ],
    ids=lambda error: getattr(error, "code", "none"),
)
def test_the_librarys_own_coded_errors_are_not_retried(error: BaseException | None) -> None:
    assert not is_connection_lost(error)


def test_sqlite_errors_are_not_retried(tmp_path: Path) -> None:
    path = tmp_path / "ro.sqlite3"
    sqlite3.connect(path).close()
    failures = []
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        for statement in ("CREATE TABLE t (x)", "SELECT * FROM missing"):
            with pytest.raises(sqlite3.OperationalError) as caught:
                connection.execute(statement)
            failures.append(caught.value)
    assert [is_connection_lost(failure) for failure in failures] == [False, False]


# -- the loop -----------------------------------------------------------------------------


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _refused_attempt(attempts: list[bool]) -> object:
    """What a unit of work does when no server answers: a coded error from the driver's."""

    def attempt(again: bool) -> object:
        attempts.append(again)
        refused = create_engine(REFUSED_URL)
        try:
            refused.connect()
        except DBAPIError as error:
            raise translate_database_error(error) from error
        finally:
            refused.dispose()
        raise AssertionError("nothing listens on port 1")

    return attempt


def _through_the_loop(failover: Failover, attempt: Any) -> object:
    """`attempt(again)` as the retry loop runs a call (`again`: True on a re-run)."""
    return call_with_retries(
        failover, lambda work: work(None), lambda _: attempt(False), lambda _: attempt(True)
    )


def test_the_timeout_is_honoured(caplog: pytest.LogCaptureFixture) -> None:
    clock, attempts = FakeTime(), []
    failover = Failover(
        5.0,
        database="postgresql+psycopg://postgres:***@127.0.0.1:1/nowhere",
        monotonic=clock.monotonic,
        sleep=clock.sleep,
    )
    with (
        caplog.at_level(logging.WARNING, logger="cadence_store"),
        pytest.raises(StoreUnavailableError) as caught,
    ):
        _through_the_loop(failover, _refused_attempt(attempts))
    assert caught.value.code == "run-store-unavailable"
    assert "outcome of the call is unknown" in str(caught.value)
    assert "same operation id" in str(caught.value)
    assert clock.now == pytest.approx(105.0)  # gave up exactly at the deadline, not later
    assert sum(clock.sleeps) == pytest.approx(5.0)
    assert all(0 < delay <= MAX_DELAY_S for delay in clock.sleeps)
    assert attempts[0] is False and all(attempts[1:])  # re-runs know they are re-runs
    assert len(attempts) == len(clock.sleeps) + 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == len(clock.sleeps)  # one line per re-run
    assert all("s3cret" not in r.getMessage() and "***" in r.getMessage() for r in warnings)


def test_a_zero_timeout_turns_re_running_off() -> None:
    clock, attempts = FakeTime(), []
    failover = Failover(0, database="x", monotonic=clock.monotonic, sleep=clock.sleep)
    with pytest.raises(StoreUnavailableError) as caught:
        _through_the_loop(failover, _refused_attempt(attempts))
    assert attempts == [False] and clock.sleeps == []
    assert "outcome" not in str(caught.value)  # the driver's failure, as before


def test_a_coded_failure_is_raised_at_once() -> None:
    clock, attempts = FakeTime(), []

    def attempt(again: bool) -> None:
        attempts.append(again)
        raise LeaseFencedError("lease-fenced")

    failover = Failover(30, database="x", monotonic=clock.monotonic, sleep=clock.sleep)
    with pytest.raises(LeaseFencedError):
        _through_the_loop(failover, attempt)
    assert attempts == [False] and clock.sleeps == []


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), True, "30", None])
def test_a_bad_failover_timeout_is_refused(pg_database_url: str, value: object) -> None:
    with pytest.raises(InvalidInputError) as caught:
        RunStore(pg_database_url, failover_timeout_s=value)  # type: ignore[arg-type]
    assert caught.value.code == "invalid-failover-timeout"


def test_without_a_watchdog_an_attempt_past_the_deadline_is_told_by_the_clock() -> None:
    """On an engine whose connections are never interrupted (SQLite, a host's engine) a
    database failure after the deadline reports the outcome unknown, as the watchdog's
    flag makes it on a watched one; before the deadline it is raised as it is."""
    clock = FakeTime()
    failover = Failover(
        5.0, database="x", monotonic=clock.monotonic, sleep=clock.sleep, interrupts=False
    )

    def attempt_taking(seconds: float) -> object:
        def attempt(_again: bool) -> None:
            clock.now += seconds
            try:
                raise sqlite3.IntegrityError("UNIQUE constraint failed")
            except sqlite3.IntegrityError as error:
                raise StoreBusyError("run-store-busy") from error

        return attempt

    with pytest.raises(StoreBusyError):
        _through_the_loop(failover, attempt_taking(1.0))
    with pytest.raises(StoreUnavailableError) as caught:
        _through_the_loop(failover, attempt_taking(6.0))
    assert caught.value.code == "run-store-unavailable"
    assert isinstance(caught.value.__cause__, StoreBusyError)
    assert clock.sleeps == []
