"""What makes cadence-store safe behind a transaction pooler, on the real server.

- (the engines the store makes prepare statements only where no pooler is in between:
  tests/integration/test_prepared_statements.py);
- a lost connection as psycopg reports it with no SQLSTATE (a pooler's symptoms) is a
  lost connection: coded `run-store-unavailable` and re-run, never
  `run-store-write-failed` ("nothing was kept");
- statements name their schema: `public` when `schema=None`, whatever the connection's
  `search_path`.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session
from support import ROOT_HASH

import cadence_store
from cadence_store import RunRepository, RunStore
from cadence_store.storage.failures import is_connection_lost, translate_database_error

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize(
    "message",
    [
        "received 2 results from command 'BEGIN'",
        "received 2 results from command 'COMMIT'",
        "server closed the connection unexpectedly",
        "query_wait_timeout",
    ],
)
def test_a_pooler_s_symptoms_are_a_lost_connection(message: str) -> None:
    for error_type in (psycopg.InternalError, psycopg.OperationalError):
        error = error_type(message)
        assert is_connection_lost(error)
        assert translate_database_error(error).code == "run-store-unavailable"


def test_a_client_side_mistake_with_no_sqlstate_is_not_a_lost_connection() -> None:
    error = psycopg.ProgrammingError("the query has 1 placeholder but 2 parameters were passed")
    assert not is_connection_lost(error)
    assert translate_database_error(error).code == "run-store-write-failed"


@pytest.mark.parametrize("state", ["57P01", "57P02", "57P03", "57P05", "08006", "08P01"])
def test_server_side_ends_of_a_session_are_lost_connections(
    pg_database_url: str, state: str
) -> None:
    # raised by the real server (a PL/pgSQL RAISE with that SQLSTATE)
    engine = create_engine(pg_database_url)
    try:
        with engine.connect() as connection, pytest.raises(Exception) as caught:
            connection.execute(
                text(f"DO $$ BEGIN RAISE EXCEPTION 'test' USING ERRCODE = '{state}'; END $$")
            )
    finally:
        engine.dispose()
    assert is_connection_lost(caught.value)
    assert translate_database_error(caught.value).code == "run-store-unavailable"


@pytest.fixture
def trap_database(pg_database_url: str) -> str:
    """A database whose every new connection has `search_path = trap`, where a second set of
    cadence tables waits to catch writes that follow the search_path."""
    cadence_store.upgrade(pg_database_url)
    cadence_store.upgrade(pg_database_url, schema="trap")
    engine = create_engine(pg_database_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            name = connection.execute(text("SELECT current_database()")).scalar_one()
            connection.execute(text(f'ALTER DATABASE "{name}" SET search_path = trap'))
    finally:
        engine.dispose()
    return pg_database_url


def _where(url: str, run_id: str) -> tuple[int, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return tuple(  # type: ignore[return-value]
                connection.execute(
                    text(f"SELECT count(*) FROM {schema}.runs WHERE run_id = :run"), {"run": run_id}
                ).scalar_one()
                for schema in ("public", "trap")
            )
    finally:
        engine.dispose()


@pytest.mark.parametrize("entry", ["store", "uow", "repository"])
def test_schema_none_writes_to_public_whatever_the_search_path(
    trap_database: str, entry: str
) -> None:
    change = f"trap-{entry}"
    with RunStore(trap_database, root_hash=ROOT_HASH) as store:
        if entry == "store":
            run = store.start_run("abel-implement", change=change, operation_id=change)
        elif entry == "uow":
            with store.unit_of_work() as uow:
                run = uow.runs.start_run("abel-implement", change=change, operation_id=change)
        else:
            host = create_engine(trap_database)
            try:
                with Session(host) as session, session.begin():
                    runs = RunRepository(session, root_hash=ROOT_HASH)
                    run = runs.start_run("abel-implement", change=change, operation_id=change)
            finally:
                host.dispose()
        assert store.status(run.run_id).run_id == run.run_id
    assert _where(trap_database, run.run_id) == (1, 0)


def test_export_and_import_use_public_whatever_the_search_path(
    trap_database: str, tmp_path: Path
) -> None:
    with RunStore(trap_database, root_hash=ROOT_HASH) as store:
        run = store.start_run("abel-implement", change="moved", operation_id="moved")
    export = tmp_path / "runs.jsonl"
    with export.open("w") as out:
        cadence_store.export_store(trap_database, out)
    assert run.run_id in export.read_text()  # read from public, not from the empty trap
    engine = create_engine(trap_database)
    try:
        with engine.begin() as connection:
            for table in ("operations", "delivery_bindings", "events", "runs"):
                connection.execute(text(f"DELETE FROM public.{table}"))
    finally:
        engine.dispose()
    with export.open() as source:
        cadence_store.import_store(trap_database, source)
    assert _where(trap_database, run.run_id) == (1, 0)
