"""cadence-store's Alembic history (issue 3): graph, stairway, no drift, offline SQL."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from integration.conftest_migrations import (
    ADOPTABLE,
    OWNED,
    VERSION_TABLE,
    alembic,
    copy_fixture,
    drift,
    sqlite_url,
)
from sqlalchemy import create_engine, inspect

import cadence_store
from cadence_store.storage import schema
from cadence_store.storage.legacy import describe_table

LEGACY_REVISIONS = ["cadence1x_v2", "cadence1x_v4", "cadence1x_current"]
OFFLINE_URL = "postgresql+psycopg://u@localhost/db"


def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(schema.alembic_config())


def _revisions_in_order() -> list[str]:
    return [revision.revision for revision in reversed(list(_script().walk_revisions()))]


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return set(inspect(connection).get_table_names())
    finally:
        engine.dispose()


def _revision_of(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return schema.current_revision(connection)
    finally:
        engine.dispose()


def _drift_of(url: str) -> list[object]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return drift(connection)
    finally:
        engine.dispose()


# ---------------------------------------------------------------------------------------------
# The revision graph
# ---------------------------------------------------------------------------------------------


def test_single_head_and_fixed_revision_ids() -> None:
    script = _script()
    heads = script.get_heads()
    assert heads == [schema.head_revision()]
    order = _revisions_in_order()
    assert order[:3] == LEGACY_REVISIONS
    assert order[-1] == schema.head_revision()
    assert script.get_base() == "cadence1x_v2"
    for previous, revision in zip(order, order[1:], strict=False):
        assert script.get_revision(revision).down_revision == previous
    assert script.get_revision("cadence1x_v2").branch_labels == {"cadence_store"}
    assert script.get_revision("cadence_store@head").revision == schema.head_revision()
    assert schema.VERSION_TABLE == VERSION_TABLE == "cadence_store_version"
    assert schema.BRANCH_LABEL == "cadence_store"


def test_script_location_is_the_source_tree_here() -> None:
    location = Path(schema.script_location())
    assert (location / "env.py").is_file()
    assert {p.stem for p in (location / "versions").glob("*.py")} >= set(LEGACY_REVISIONS)


def test_revisions_freeze_their_tables() -> None:
    """Revisions never import the live models (a later model change must not rewrite them)."""
    versions = Path(schema.script_location()) / "versions"
    for path in versions.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(from|import)\s+cadence_store", text, re.M), path.name


# ---------------------------------------------------------------------------------------------
# A fresh database: owned tables only, our version table, no drift
# ---------------------------------------------------------------------------------------------


def test_fresh_upgrade_creates_owned_tables_and_our_version_table(database_url: str) -> None:
    assert cadence_store.upgrade(database_url) == schema.head_revision()
    assert _tables(database_url) == set(OWNED) | {VERSION_TABLE}
    assert "alembic_version" not in _tables(database_url)
    assert _revision_of(database_url) == schema.head_revision()


def test_fresh_upgrade_has_no_drift(database_url: str) -> None:
    cadence_store.upgrade(database_url)
    assert _drift_of(database_url) == []


def test_the_comparison_still_sees_real_drift(tmp_path: Path) -> None:
    """The filter that forgives adopted stores' unnamed keys forgives nothing else: a
    unique key or ON DELETE CASCADE that the database does not enforce is reported."""
    url = sqlite_url(tmp_path / "drifted.sqlite3")
    cadence_store.upgrade(url)
    with sqlite3.connect(tmp_path / "drifted.sqlite3") as connection:
        connection.executescript(
            """
            PRAGMA foreign_keys = OFF;
            CREATE TABLE events_copy (
              run_id TEXT NOT NULL REFERENCES runs(run_id), sequence INTEGER NOT NULL,
              type TEXT NOT NULL, payload_json TEXT NOT NULL, prior_hash TEXT NOT NULL,
              event_hash TEXT NOT NULL, PRIMARY KEY (run_id, sequence)
            ) STRICT;
            DROP TABLE events;
            ALTER TABLE events_copy RENAME TO events;
            """
        )
    differences = _drift_of(url)
    flat = [d for item in differences for d in (item if isinstance(item, list) else [item])]
    kinds = {(d[0], getattr(d[1], "table", None) is not None and d[1].table.name) for d in flat}
    assert ("add_index", "events") in kinds  # the missing unique index on feed_position
    assert ("add_fk", "events") in kinds  # ON DELETE CASCADE is not enforced


@pytest.mark.parametrize("file", ADOPTABLE)
def test_adopted_store_has_no_drift(file: str, tmp_path: Path) -> None:
    url = sqlite_url(copy_fixture(file, tmp_path))
    cadence_store.upgrade(url)
    assert _drift_of(url) == []


@pytest.mark.parametrize("file", ADOPTABLE)
def test_adopted_owned_tables_have_the_fresh_shape(file: str, tmp_path: Path) -> None:
    """What the database enforces (PRAGMA level) is the same after adoption as fresh:
    columns (type, NOT NULL, default, pk), foreign keys with ON DELETE, unique keys, STRICT,
    and the index cadence-store adds."""
    adopted = copy_fixture(file, tmp_path)
    fresh = tmp_path / "fresh.sqlite3"
    cadence_store.upgrade(sqlite_url(adopted))
    cadence_store.upgrade(sqlite_url(fresh))

    def shapes(path: Path) -> dict[str, object]:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:

            def run(sql: str, params: object) -> list[tuple[object, ...]]:
                return connection.execute(sql, tuple(params)).fetchall()  # type: ignore[arg-type]

            described: dict[str, object] = {t: describe_table(run, t) for t in sorted(OWNED)}
            described["indexes"] = sorted(
                (row[0], row[1])
                for row in connection.execute(
                    "SELECT tbl_name, sql FROM sqlite_master"
                    " WHERE type = 'index' AND sql IS NOT NULL"
                )
            )
            return described
        finally:
            connection.close()

    assert shapes(adopted) == shapes(fresh)


# ---------------------------------------------------------------------------------------------
# Stairway: every revision up, down, up again
# ---------------------------------------------------------------------------------------------


def test_stairway(database_url: str) -> None:
    order = _revisions_in_order()
    previous = "base"
    for revision in order:
        assert schema.upgrade(database_url, revision) == revision
        tables_up = _tables(database_url)
        assert schema.downgrade(database_url, previous) == (
            None if previous == "base" else previous
        )
        assert _revision_of(database_url) == (None if previous == "base" else previous)
        assert schema.upgrade(database_url, revision) == revision
        assert _tables(database_url) == tables_up
        previous = revision
    assert _revision_of(database_url) == schema.head_revision()
    assert _tables(database_url) == set(OWNED) | {VERSION_TABLE}
    assert "alembic_version" not in _tables(database_url)


def test_downgrade_to_base_and_back_is_clean(database_url: str) -> None:
    cadence_store.upgrade(database_url)
    assert schema.downgrade(database_url, "base") is None
    assert _tables(database_url) - {VERSION_TABLE} == set()
    assert cadence_store.upgrade(database_url) == schema.head_revision()
    assert _tables(database_url) == set(OWNED) | {VERSION_TABLE}


def test_stairway_with_alembic_command_on_a_connection(sqlite_database_url: str) -> None:
    """The same walk through `alembic.command` on a connection we hold (env.py reuses it)."""
    from alembic import command

    engine = create_engine(sqlite_database_url)
    try:
        order = _revisions_in_order()
        for index, revision in enumerate(order):
            with engine.connect() as connection:
                connection.exec_driver_sql("BEGIN IMMEDIATE")
                config = schema.alembic_config(connection)
                command.upgrade(config, revision)
                command.downgrade(config, order[index - 1] if index else "base")
                command.upgrade(config, revision)
                assert schema.current_revision(connection) == revision
                connection.commit()
    finally:
        engine.dispose()
    assert _revision_of(sqlite_database_url) == schema.head_revision()


# ---------------------------------------------------------------------------------------------
# Offline: `alembic upgrade head --sql` for PostgreSQL, no server
# ---------------------------------------------------------------------------------------------


def _assert_postgresql_ddl(sql: str) -> None:
    assert re.search(r"CREATE TABLE runs\b", sql)
    for table in ("delivery_bindings", "events", "operations"):
        assert re.search(rf"CREATE TABLE {table}\b", sql), table
    assert re.search(r"sequence BIGINT NOT NULL", sql)
    assert re.search(r"lease_expires_at BIGINT", sql)
    assert "STRICT" not in sql
    assert re.search(r"CREATE TABLE cadence_store_version\b", sql)
    assert "INSERT INTO cadence_store_version" in sql
    assert f"UPDATE cadence_store_version SET version_num='{schema.head_revision()}'" in sql
    assert "alembic_version" not in sql
    assert "ALTER TABLE delivery_bindings ADD COLUMN approval_revision BIGINT" in sql
    assert "CREATE INDEX ix_operations_operation_id ON operations (operation_id)" in sql
    assert "ALTER TABLE operations ADD COLUMN lease_fence BIGINT" in sql
    assert "UPDATE operations SET lease_fence=1 WHERE operations.kind = 'lease'" in sql
    assert "BEGIN;" in sql
    assert sql.rstrip().endswith("COMMIT;")


def test_offline_sql_for_postgresql() -> None:
    result = alembic("-x", f"url={OFFLINE_URL}", "upgrade", "head", "--sql")
    assert result.returncode == 0, result.stderr
    _assert_postgresql_ddl(result.stdout)


def test_offline_sql_takes_the_url_from_the_environment() -> None:
    import os

    result = alembic(
        "upgrade", "head", "--sql", env={**os.environ, "CADENCE_STORE_URL": OFFLINE_URL}
    )
    assert result.returncode == 0, result.stderr
    _assert_postgresql_ddl(result.stdout)
