"""Cadence tables in their own PostgreSQL schema, beside a host's tables in `public`."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

import cadence_store
from cadence_store import InvalidInputError, RunStore, SchemaOutOfDateError
from cadence_store.schema import head_revision

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
