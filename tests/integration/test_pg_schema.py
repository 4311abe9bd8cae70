"""Cadence tables in their own PostgreSQL schema, beside a host's tables in `public`."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from click.testing import CliRunner
from sqlalchemy import Column, Integer, MetaData, Table, Text, create_engine, insert, text
from sqlalchemy.orm import DeclarativeBase, Session

import cadence_store
from cadence_store import (
    InvalidInputError,
    RunRepository,
    RunStore,
    SchemaOutOfDateError,
    StoreFormatError,
    host_include_object,
)
from cadence_store.cli import main as cli_main
from cadence_store.storage.schema import head_revision

pytestmark = pytest.mark.postgres

ROOT = "ab" * 32


def _tables_by_schema(url: str) -> set[tuple[str, str]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT table_schema, table_name FROM information_schema.tables "
                    "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
                )
            )
            return {(row[0], row[1]) for row in rows}
    finally:
        engine.dispose()


def test_upgrade_and_store_in_their_own_schema(pg_database_url: str) -> None:
    host = create_engine(pg_database_url)
    with host.begin() as connection:
        connection.execute(text("CREATE TABLE runs (host_column INTEGER)"))  # a host's own `runs`
    host.dispose()

    assert cadence_store.upgrade(pg_database_url, schema="cadence") == head_revision()
    tables = _tables_by_schema(pg_database_url)
    assert {("cadence", name) for name in cadence_store.OWNED_TABLES} <= tables
    assert ("cadence", "cadence_store_version") in tables
    assert ("public", "runs") in tables  # the host's table is untouched
    assert ("public", "cadence_store_version") not in tables

    with RunStore(pg_database_url, root_hash=ROOT, schema="cadence", pool_size=2) as store:
        run = store.start_run("abel-implement", change="in-a-schema", operation_id="s1")
        run = store.transition(run.run_id, "validating-delivery", operation_id="t1")
        assert store.verify_integrity(run.run_id).sequence == 2
        assert [e.sequence for e in store.list_events(run.run_id)] == [1, 2]

    engine = create_engine(pg_database_url)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM cadence.events")).scalar() == 2
        assert connection.execute(text("SELECT count(*) FROM public.runs")).scalar() == 0
    engine.dispose()

    # upgrading again is a no-op at head
    assert cadence_store.upgrade(pg_database_url, schema="cadence") == head_revision()


def test_a_store_in_the_default_schema_is_not_there(pg_database_url: str) -> None:
    cadence_store.upgrade(pg_database_url, schema="cadence")
    with pytest.raises(SchemaOutOfDateError) as info:
        RunStore(pg_database_url, root_hash=ROOT)
    assert info.value.code == "run-store-upgrade-required"


def test_schema_names_are_checked(pg_database_url: str, sqlite_database_url: str) -> None:
    for bad in ("cadence; DROP TABLE x", "", "1abc", "a" * 64):
        with pytest.raises(InvalidInputError) as info:
            cadence_store.upgrade(pg_database_url, schema=bad)
        assert info.value.code == "invalid-schema-name"
    with pytest.raises(InvalidInputError) as info:
        cadence_store.upgrade(sqlite_database_url, schema="cadence")
    assert info.value.code == "invalid-schema-name"
    assert ("cadence", "runs") not in _tables_by_schema(pg_database_url)


# -- schema= touches only cadence-store's tables --------------------------------------------

host_metadata = MetaData()
outbox = Table(
    "outbox",
    host_metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("message", Text, nullable=False),
)
host_events = Table(  # a host's own table that happens to share a cadence table's name
    "events", host_metadata, Column("id", Integer, primary_key=True), Column("what", Text)
)


class _HostBase(DeclarativeBase):
    metadata = host_metadata


class Outbox(_HostBase):
    __table__ = outbox


def _count(url: str, table: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
    finally:
        engine.dispose()


@pytest.fixture
def schema_store_url(pg_database_url: str) -> str:
    engine = create_engine(pg_database_url)
    host_metadata.create_all(engine)  # the host's tables, in public
    engine.dispose()
    cadence_store.upgrade(pg_database_url, schema="cadence")
    return pg_database_url


def test_host_rows_in_a_unit_of_work_land_in_public(schema_store_url: str) -> None:
    with RunStore(schema_store_url, root_hash=ROOT, schema="cadence") as store:
        run = store.start_run("abel-implement", change="c", operation_id="s1")
        with store.unit_of_work() as uow:
            uow.runs.transition(run.run_id, "validating-delivery", operation_id="t1")
            uow.session.add(Outbox(message="from a unit of work"))
            uow.session.execute(insert(host_events).values(id=1, what="host event"))
        store.transition_atomically(
            run.run_id,
            "approval-needed",
            operation_id="t2",
            write=lambda session: session.add(Outbox(message="from write=")),
        )
        store.bind_delivery_atomically(
            run.run_id,
            "gate-a",
            1,
            "a" * 64,
            operation_id="b1",
            write=lambda session: session.execute(insert(outbox).values(message="bind write=")),
        )
        assert store.verify_integrity(run.run_id).sequence == 4

    assert _count(schema_store_url, "public.outbox") == 3
    assert _count(schema_store_url, "public.events") == 1  # the host's own events table
    assert _count(schema_store_url, "cadence.events") == 4  # the journal
    assert _count(schema_store_url, "cadence.runs") == 1


def test_repository_with_schema_in_a_host_session(schema_store_url: str) -> None:
    engine = create_engine(schema_store_url)
    try:
        with Session(engine) as session, session.begin():
            runs = RunRepository(session, root_hash=ROOT, schema="cadence")
            run = runs.start_run("abel-implement", change="host", operation_id="s1")
            runs.transition(run.run_id, "validating-delivery", operation_id="t1")
            session.add(Outbox(message="host row"))
            assert [e.sequence for e in runs.list_events(run.run_id)] == [1, 2]
        with Session(engine) as session, session.begin():
            runs = RunRepository(session, root_hash=ROOT, schema="cadence")
            runs.transition(run.run_id, "approval-needed", operation_id="t2")
            session.add(Outbox(message="rolled back"))
            session.rollback()
        with Session(engine) as session:
            assert (
                RunRepository(session, schema="cadence").verify_integrity(run.run_id).sequence == 2
            )
    finally:
        engine.dispose()
    assert _count(schema_store_url, "public.outbox") == 1
    assert _count(schema_store_url, "cadence.events") == 2


def test_repository_without_the_schema_is_told_to_upgrade(schema_store_url: str) -> None:
    engine = create_engine(schema_store_url)
    try:
        with Session(engine) as session, pytest.raises(SchemaOutOfDateError) as info:
            RunRepository(session, root_hash=ROOT).status("nope")
        assert "--schema" not in info.value.command
        with Session(engine) as session, pytest.raises(InvalidInputError) as bad:
            RunRepository(session, root_hash=ROOT, schema="no; way")
        assert bad.value.code == "invalid-schema-name"
    finally:
        engine.dispose()


def _autogenerate_tables(url: str, include_object: Any) -> set[tuple[str | None, str]]:
    """Tables a host's autogenerate would propose to drop (present in the database, absent
    from its metadata), after its include_object filter."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={"include_object": include_object, "include_schemas": True},
            )
            diffs = compare_metadata(context, MetaData())
    finally:
        engine.dispose()
    return {(diff[1].schema, diff[1].name) for diff in diffs if diff[0] == "remove_table"}


def test_host_include_object_compares_schema_qualified_names(
    schema_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CADENCE_STORE_SCHEMA", raising=False)
    bound = functools.partial(host_include_object, schema="cadence")
    seen = _autogenerate_tables(schema_store_url, bound)
    assert (None, "events") in seen  # the host's own public.events stays the host's
    assert (None, "outbox") in seen
    assert not {name for schema, name in seen if schema == "cadence"}

    monkeypatch.setenv("CADENCE_STORE_SCHEMA", "cadence")
    assert _autogenerate_tables(schema_store_url, host_include_object) == seen

    # without a schema, cadence tables are those of the default schema
    monkeypatch.delenv("CADENCE_STORE_SCHEMA")
    unbound = _autogenerate_tables(schema_store_url, host_include_object)
    assert (None, "events") not in unbound
    assert ("cadence", "events") in unbound


def test_cli_info_honours_the_schema_setting(
    schema_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    monkeypatch.setenv("CADENCE_STORE_SCHEMA", "cadence")
    result = runner.invoke(cli_main, ["info", "--url", schema_store_url, "--json"])
    assert result.exit_code == 0, result.output
    details = json.loads(result.stdout)
    assert (details["schema"], details["atHead"], details["runs"]) == ("cadence", True, 0)

    monkeypatch.delenv("CADENCE_STORE_SCHEMA")
    result = runner.invoke(cli_main, ["info", "--url", schema_store_url])
    assert result.exit_code == 3  # public has no cadence-store revision
    assert "upgrade required" in result.output

    monkeypatch.setenv("CADENCE_STORE_SCHEMA", "elsewhere")
    result = runner.invoke(cli_main, ["runs", "--url", schema_store_url])
    assert result.exit_code == 3
    assert "--schema elsewhere" in result.output  # the hint carries the option it needs


def test_copy_from_sqlite_into_a_schema_store(
    schema_store_url: str, sqlite_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cadence_store.upgrade(sqlite_database_url)
    with RunStore(sqlite_database_url, root_hash=ROOT) as source:
        source.start_run("abel-implement", change="moved", operation_id="s1")
    monkeypatch.setenv("CADENCE_STORE_SCHEMA", "cadence")
    result = CliRunner().invoke(
        cli_main, ["copy", "--from", sqlite_database_url, "--to", schema_store_url]
    )
    assert result.exit_code == 0, result.output
    assert _count(schema_store_url, "cadence.runs") == 1


def test_a_host_table_named_like_ours_gets_a_safe_hint(pg_database_url: str) -> None:
    engine = create_engine(pg_database_url)
    host_metadata.create_all(engine)
    engine.dispose()
    with pytest.raises(StoreFormatError) as info:
        cadence_store.upgrade(pg_database_url)
    error = info.value
    assert error.code == "run-store-reset-required"
    assert error.clashing_tables == ("events",)
    assert "nothing was changed" in error.hint and "events" in error.hint
    assert "reset" not in error.hint and "remove" not in error.hint
    assert error.recovery["action"] == "keep-cadence-tables-apart"
    assert ("public", "cadence_store_version") not in _tables_by_schema(pg_database_url)

    result = CliRunner().invoke(cli_main, ["upgrade", "--url", pg_database_url])
    assert result.exit_code == 3
    assert "reset (remove)" not in result.output and "events" in result.output
