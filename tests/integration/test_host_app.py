"""Embedding cadence-store in a host application that has its own Alembic history (issue 3).

The host here is a tiny but real Alembic project written under tmp_path: its own env.py
(default `alembic_version` table, `include_object=cadence_store.host_include_object`)
and one revision creating its own table, in the same database as cadence-store.
"""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from integration.conftest_migrations import OWNED, REPO_ROOT, VERSION_TABLE
from sqlalchemy import Connection, Engine, create_engine, inspect
from sqlalchemy.pool import StaticPool

import cadence_store
from cadence_store import RunStore
from cadence_store.storage import schema

HOST_METADATA = sa.MetaData()
HOST_NOTES = sa.Table(
    "host_notes",
    HOST_METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("body", sa.Text, nullable=False),
)

HOST_ENV = """
from alembic import context
import sqlalchemy as sa

import cadence_store

target_metadata = sa.MetaData()
sa.Table(
    "host_notes",
    target_metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("body", sa.Text, nullable=False),
)

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=target_metadata,
    include_object=cadence_store.host_include_object,
)
with context.begin_transaction():
    context.run_migrations()
"""

HOST_REVISION = '''
"""host notes

Revision ID: host0001
Revises:
"""
import sqlalchemy as sa
from alembic import op

revision = "host0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "host_notes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("body", sa.Text, nullable=False),
    )


def downgrade():
    op.drop_table("host_notes")
'''


@pytest.fixture
def host_scripts(tmp_path: Path) -> Path:
    directory = tmp_path / "host_migrations"
    (directory / "versions").mkdir(parents=True)
    (directory / "env.py").write_text(textwrap.dedent(HOST_ENV), encoding="utf-8")
    (directory / "versions" / "host0001_notes.py").write_text(HOST_REVISION, encoding="utf-8")
    return directory


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = create_engine(database_url)
    yield engine
    engine.dispose()


def _host_upgrade(engine: Engine, scripts: Path) -> None:
    config = Config()
    config.set_main_option("script_location", str(scripts))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def _versions(engine: Engine, table: str) -> list[str]:
    with engine.connect() as connection:
        return [row[0] for row in connection.exec_driver_sql(f"SELECT version_num FROM {table}")]


def _tables(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(inspect(connection).get_table_names())


def test_owned_tables_are_the_ten() -> None:
    assert (
        frozenset(
            {
                "runs",
                "events",
                "operations",
                "delivery_bindings",
                "follower_positions",
                "tree_tiles",
                "checkpoints",
                "kept_leaves",
                "archived_runs",
                "archived_operations",
            }
        )
        == cadence_store.OWNED_TABLES
    )
    assert frozenset(OWNED) == cadence_store.OWNED_TABLES


@pytest.mark.parametrize("order", ["host-first", "cadence-first"])
def test_both_histories_upgrade_independently(
    order: str, engine: Engine, host_scripts: Path
) -> None:
    if order == "host-first":
        _host_upgrade(engine, host_scripts)
        with engine.begin() as connection:
            connection.execute(HOST_NOTES.insert().values(id=1, body="before cadence"))
        assert cadence_store.upgrade(engine) == schema.head_revision()
    else:
        assert cadence_store.upgrade(engine) == schema.head_revision()
        _host_upgrade(engine, host_scripts)
        with engine.begin() as connection:
            connection.execute(HOST_NOTES.insert().values(id=1, body="before cadence"))

    assert _tables(engine) == {"host_notes", "alembic_version", VERSION_TABLE, *OWNED}
    assert _versions(engine, "alembic_version") == ["host0001"]
    assert _versions(engine, VERSION_TABLE) == [schema.head_revision()]

    # Re-running either history is a no-op for the other one.
    _host_upgrade(engine, host_scripts)
    assert cadence_store.upgrade(engine) == schema.head_revision()
    assert _versions(engine, "alembic_version") == ["host0001"]
    assert _versions(engine, VERSION_TABLE) == [schema.head_revision()]

    # A host row and a run commit in one transaction on the same database.
    store = RunStore(engine, root_hash="cd" * 32, clock=lambda: 1_000)
    try:
        with store.unit_of_work() as uow:
            run = uow.runs.start_run("abel-implement", operation_id="host-start", change="c1")
            uow.session.execute(HOST_NOTES.insert().values(id=2, body=run.run_id))
        assert store.verify_integrity(run.run_id).sequence == 1
    finally:
        store.close()
    with engine.connect() as connection:
        rows = connection.execute(sa.select(HOST_NOTES).order_by(HOST_NOTES.c.id)).all()
    assert [tuple(row) for row in rows] == [(1, "before cadence"), (2, run.run_id)]


def _host_autogenerate(connection: Connection, include: bool) -> list[Any]:
    opts: dict[str, Any] = {"compare_type": True}
    if include:
        opts["include_object"] = cadence_store.host_include_object
    return list(compare_metadata(MigrationContext.configure(connection, opts=opts), HOST_METADATA))


def test_host_autogenerate_ignores_cadence_tables(engine: Engine, host_scripts: Path) -> None:
    cadence_store.upgrade(engine)
    _host_upgrade(engine, host_scripts)
    with engine.connect() as connection:
        assert _host_autogenerate(connection, include=True) == []
        # Control: without the filter the host would propose dropping every cadence table.
        removed = {
            diff[1].name
            for diff in _host_autogenerate(connection, include=False)
            if isinstance(diff, tuple) and diff[0] == "remove_table"
        }
    assert removed == {*OWNED, VERSION_TABLE}


def test_host_include_object_filters_tables_and_their_parts() -> None:
    from cadence_store.storage import models

    include = cadence_store.host_include_object
    for name in (*OWNED, VERSION_TABLE):
        assert include(None, name, "table", True, None) is False
    assert include(None, "host_notes", "table", True, None) is True
    column = models.runs.c.run_id
    assert include(column, "run_id", "column", False, None) is False
    index = next(iter(models.operations.indexes))
    assert include(index, index.name, "index", False, None) is False
    assert include(HOST_NOTES.c.body, "body", "column", False, None) is True


# ---------------------------------------------------------------------------------------------
# env.py on a host's connection: the host's transaction, engine and logging
# ---------------------------------------------------------------------------------------------


def _begin(connection: Connection) -> None:
    if connection.dialect.name == "sqlite":
        connection.exec_driver_sql("BEGIN IMMEDIATE")  # pysqlite would autocommit DDL
    else:
        connection.begin()


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_env_reuses_the_callers_connection_and_transaction(outcome: str, engine: Engine) -> None:
    pool = engine.pool
    with engine.connect() as connection:
        _begin(connection)
        command.upgrade(schema.alembic_config(connection), "heads")
        assert connection.in_transaction()
        assert set(inspect(connection).get_table_names()) == {*OWNED, VERSION_TABLE}
        assert schema.current_revision(connection) == schema.head_revision()
        if engine.dialect.name == "postgresql":
            with engine.connect() as other:  # not committed: nobody else sees it yet
                assert set(inspect(other).get_table_names()) == set()
        if outcome == "commit":
            connection.commit()
        else:
            connection.rollback()
    expected = {*OWNED, VERSION_TABLE} if outcome == "commit" else set()
    assert _tables(engine) == expected
    assert engine.pool is pool  # never disposed


def test_upgrade_never_disposes_a_callers_engine(engine: Engine) -> None:
    pool = engine.pool
    assert cadence_store.upgrade(engine) == schema.head_revision()
    assert engine.pool is pool
    store = RunStore(engine, root_hash="ef" * 32, clock=lambda: 5)
    store.close()
    assert engine.pool is pool
    with engine.connect() as connection:
        assert schema.current_revision(connection) == schema.head_revision()


def test_in_memory_database_survives_upgrade_on_its_engine() -> None:
    """A disposed StaticPool would lose the in-memory database: it must still be there."""
    engine = create_engine(
        "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
    )
    try:
        assert cadence_store.upgrade(engine) == schema.head_revision()
        store = RunStore(engine, root_hash="12" * 32, clock=lambda: 7)
        run = store.start_run("abel-design", operation_id="mem-1", change="in-memory")
        assert store.status(run.run_id).sequence == 1
        store.close()
        with engine.connect() as connection:
            count = connection.exec_driver_sql("SELECT count(*) FROM runs").scalar_one()
        assert count == 1
    finally:
        engine.dispose()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


LOGGERS = (
    "",
    "alembic",
    "alembic.runtime.migration",
    "sqlalchemy",
    "sqlalchemy.engine",
    "host.app",
)


def _logging_state() -> dict[str, Any]:
    state: dict[str, Any] = {"disable": logging.root.manager.disable}
    for name in LOGGERS:
        logger = logging.getLogger(name)
        state[name] = (logger.level, tuple(logger.handlers), logger.propagate, logger.disabled)
    return state


@pytest.fixture
def host_logging() -> Iterator[_Records]:
    saved = {
        name: (lg.level, list(lg.handlers), lg.propagate, lg.disabled)
        for name in LOGGERS
        for lg in [logging.getLogger(name)]
    }
    handler = _Records()
    logging.getLogger("").setLevel(logging.WARNING)
    logging.getLogger("").addHandler(handler)
    logging.getLogger("alembic").setLevel(logging.ERROR)
    logging.getLogger("sqlalchemy.engine").setLevel(logging.ERROR)
    logging.getLogger("host.app").setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for name, (level, handlers, propagate, disabled) in saved.items():
            logger = logging.getLogger(name)
            logger.setLevel(level)
            logger.handlers[:] = handlers
            logger.propagate = propagate
            logger.disabled = disabled


def test_env_leaves_the_hosts_logging_alone(
    host_logging: _Records, engine: Engine, tmp_path: Path
) -> None:
    before = _logging_state()

    assert cadence_store.upgrade(engine) == schema.head_revision()
    assert _logging_state() == before

    # A host that points Alembic at the shipped alembic.ini and hands over its connection.
    with engine.connect() as connection:
        _begin(connection)
        config = Config(str(REPO_ROOT / "alembic.ini"))
        config.attributes["connection"] = connection
        command.downgrade(config, "cadence1x_current")
        command.upgrade(config, "heads")
        connection.commit()
    assert _logging_state() == before

    # The embedded state-root store too.
    from cadence_store.store.state_root import resolve_state_root

    consumer = tmp_path / "consumer"
    consumer.mkdir()
    RunStore.open(resolve_state_root(consumer, xdg_state_home=str(tmp_path / "state"))).close()
    assert _logging_state() == before

    # The host's levels were honoured: nothing below ERROR from alembic reached its handler.
    assert not [r for r in host_logging.records if r.name.startswith("alembic")]
    logging.getLogger("host.app").warning("still mine")
    assert [r.getMessage() for r in host_logging.records if r.name == "host.app"] == ["still mine"]
