"""A privilege the database refuses is `run-store-permission-denied` (`StorePermissionError`,
CLI exit 4) with a hint about grants or file permissions, through every way in: a
PostgreSQL role without grants (SQLSTATE 42501) or with SELECT only, a SQLite database
opened read-only. Nothing is written, and the call is never retried as busy or re-run as
a failover."""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session
from support import ROOT_HASH, FakeClock, table_snapshot

import cadence_store
from cadence_store import (
    AsyncRunStore,
    CadenceStoreError,
    RunRepository,
    RunStore,
    StorePermissionError,
    UnitOfWork,
)
from cadence_store.async_store import async_database_url
from cadence_store.cli import main
from cadence_store.storage.failures import sqlstate
from cadence_store.storage.models import OWNED_TABLES

PERMISSION_DENIED = "run-store-permission-denied"


@dataclass
class Refused:
    """A store made by its owner, and the URL of a caller the database refuses."""

    run_id: str
    url: str
    owner: Engine


def _denied(call: Callable[[], Any], engine: str) -> StorePermissionError:
    with pytest.raises(CadenceStoreError) as info:
        call()
    error = info.value
    assert isinstance(error, StorePermissionError), repr(error)
    assert error.code == PERMISSION_DENIED and not error.retryable
    assert error.engine == engine
    assert error.hint in str(error)  # the message itself says what to do
    return error


def _every_entry_point_is_denied(
    refused: Refused, engine: str, *, reads: bool, caplog: pytest.LogCaptureFixture
) -> list[StorePermissionError]:
    """Write (and, unless the caller may read, read) through RunStore, a unit of work,
    RunRepository in a host session, AsyncRunStore: each is refused, nothing changes."""
    before = table_snapshot(refused.owner)
    run_id, clock = refused.run_id, FakeClock()
    caplog.set_level(logging.INFO, logger="cadence_store")
    errors: list[StorePermissionError] = []
    host = create_engine(refused.url)

    def open_store() -> RunStore:
        # failover_timeout_s would re-run a lost connection that long: none is lost here
        return RunStore(refused.url, root_hash=ROOT_HASH, clock=clock, failover_timeout_s=30)

    store = None
    try:
        if reads:
            store = open_store()
            assert store.status(run_id).sequence == 1
            transition = functools.partial(store.transition, run_id, "paused", operation_id="t1")
            errors.append(_denied(transition, engine))
        else:
            errors.append(_denied(open_store, engine))  # it checks the store at once

        def in_a_unit_of_work() -> None:
            unit = (
                store.unit_of_work()
                if store is not None
                else UnitOfWork(host, root_hash=ROOT_HASH, clock=clock)
            )
            with unit as uow:
                uow.runs.transition(run_id, "paused", operation_id="t2")

        errors.append(_denied(in_a_unit_of_work, engine))

        def in_a_host_session(read: bool) -> None:
            with Session(host) as session, session.begin():
                runs = RunRepository(session, root_hash=ROOT_HASH, clock=clock)
                if read:
                    runs.status(run_id)
                else:
                    runs.transition(run_id, "paused", operation_id="t3")

        if not reads:
            errors.append(_denied(lambda: in_a_host_session(True), engine))
        errors.append(_denied(lambda: in_a_host_session(False), engine))
    finally:
        if store is not None:
            store.close()
        host.dispose()

    async def through_the_async_store() -> None:
        async_url = async_database_url(refused.url).render_as_string(hide_password=False)
        async with AsyncRunStore(async_url, root_hash=ROOT_HASH, clock=clock) as async_store:
            await async_store.transition(run_id, "paused", operation_id="t4")

    errors.append(_denied(lambda: asyncio.run(through_the_async_store()), engine))
    assert table_snapshot(refused.owner) == before
    # neither a busy retry nor a failover re-run (each logs a warning)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.records
    return errors


def _cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# -- PostgreSQL: a role without the grants ------------------------------------------------


@pytest.fixture
def role(pg_database_url: str, _pg_admin_engine: Engine) -> Iterator[Refused]:
    """A store made by the superuser, and a login role that was granted nothing on it."""
    cadence_store.upgrade(pg_database_url)
    with RunStore(pg_database_url, root_hash=ROOT_HASH, clock=FakeClock()) as owner_store:
        run = owner_store.start_run("abel-implement", change="granted", operation_id="s1")
    name = f"r_{secrets.token_hex(6)}"
    with _pg_admin_engine.connect() as admin:
        admin.execute(text(f'CREATE ROLE "{name}" LOGIN'))
    owner = create_engine(pg_database_url)
    url = make_url(pg_database_url).set(username=name, password=None)
    try:
        yield Refused(run.run_id, url.render_as_string(hide_password=False), owner)
    finally:
        with owner.begin() as connection:
            connection.execute(text(f'DROP OWNED BY "{name}"'))
        owner.dispose()
        with _pg_admin_engine.connect() as admin:
            admin.execute(text(f'DROP ROLE "{name}"'))


def _grant(role: Refused, statement: str) -> None:
    grantee = make_url(role.url).username
    with role.owner.begin() as connection:
        connection.execute(text(statement.format(role=f'"{grantee}"')))


@pytest.mark.postgres
def test_a_role_without_grants_is_denied_everywhere(
    role: Refused, caplog: pytest.LogCaptureFixture
) -> None:
    _grant(role, "GRANT USAGE ON SCHEMA public TO {role}")
    errors = _every_entry_point_is_denied(role, "postgresql", reads=False, caplog=caplog)
    assert all(sqlstate(e.__cause__) == "42501" for e in errors if e.__cause__)
    assert "GRANT SELECT, INSERT, UPDATE, DELETE" in errors[0].hint
    assert "restore" not in errors[0].hint  # not a missing table


@pytest.mark.postgres
def test_a_role_that_may_only_read_is_denied_its_writes(
    role: Refused, caplog: pytest.LogCaptureFixture
) -> None:
    _grant(role, "GRANT USAGE ON SCHEMA public TO {role}")
    _grant(role, "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    _every_entry_point_is_denied(role, "postgresql", reads=True, caplog=caplog)


@pytest.mark.postgres
def test_the_cli_exits_4_with_the_grants_to_make(role: Refused) -> None:
    before = table_snapshot(role.owner)
    for command in (["show", role.run_id], ["runs"], ["info"]):
        result = _cli(*command, "--url", role.url)
        assert result.exit_code == 4, (command, result.output)
        assert f"error: {PERMISSION_DENIED}" in result.output
        assert "GRANT SELECT, INSERT, UPDATE, DELETE" in result.output
    _grant(role, "GRANT USAGE ON SCHEMA public TO {role}")
    _grant(role, "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    assert _cli("show", role.run_id, "--url", role.url).exit_code == 0
    moved = _cli("transition", role.run_id, "paused", "--operation-id", "t1", "--url", role.url)
    assert moved.exit_code == 4, moved.output
    assert f"error: {PERMISSION_DENIED}" in moved.output
    assert table_snapshot(role.owner) == before


# -- SQLite: a database read-only to this process ----------------------------------------


@pytest.fixture
def read_only_file(sqlite_database_url: str) -> Iterator[Refused]:
    """A store, and a URL that opens its file read-only (as root, a chmod 0444 file
    would still be written: the database itself is opened read-only)."""
    cadence_store.upgrade(sqlite_database_url)
    with RunStore(sqlite_database_url, root_hash=ROOT_HASH, clock=FakeClock()) as owner_store:
        run = owner_store.start_run("abel-implement", change="frozen", operation_id="s1")
    path = Path(make_url(sqlite_database_url).database or "")
    owner = create_engine(sqlite_database_url)
    try:
        yield Refused(run.run_id, f"sqlite:///file:{path}?mode=ro&uri=true", owner)
    finally:
        owner.dispose()


def test_a_read_only_sqlite_file_is_denied_its_writes(
    read_only_file: Refused, caplog: pytest.LogCaptureFixture
) -> None:
    errors = _every_entry_point_is_denied(read_only_file, "sqlite", reads=True, caplog=caplog)
    assert "read-only" in errors[0].hint and "GRANT" not in errors[0].hint


def test_the_cli_exits_4_on_a_read_only_sqlite_file(read_only_file: Refused) -> None:
    before = table_snapshot(read_only_file.owner)
    url, run_id = read_only_file.url, read_only_file.run_id
    assert _cli("show", run_id, "--url", url).exit_code == 0
    moved = _cli("transition", run_id, "paused", "--operation-id", "t1", "--url", url)
    assert moved.exit_code == 4, moved.output
    assert f"error: {PERMISSION_DENIED}" in moved.output
    assert "read-only" in moved.output
    assert table_snapshot(read_only_file.owner) == before


def test_the_hint_names_every_table_cadence_store_owns() -> None:
    assert set(StorePermissionError.TABLES.split(", ")) == OWNED_TABLES
