"""The backend protocol (`storage.backends.base.Backend`), exercised against each real
engine: one abstract test case, `BackendContract`, subclassed per engine. A new engine's
backend passes when its subclass (the engine's fixtures, and how a second connection is
told not to wait long for a lock) passes the same tests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    String,
    bindparam,
    column,
    literal,
    select,
    text,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from cadence_store.errors import (
    CadenceStoreError,
    StoreBusyError,
    StorePermissionError,
    StoreUnavailableError,
)
from cadence_store.storage.backends import (
    POSTGRESQL,
    SQLITE,
    Backend,
    backend_for,
    backend_of_url,
)
from cadence_store.storage.engine import create_store_engine
from cadence_store.storage.failures import translate_database_error
from cadence_store.storage.models import OWNED_TABLES, follower_positions


def _record(backend: Backend, follower: str, position: int) -> Any:
    statement = backend.upsert_insert(follower_positions).values(
        follower=follower, position=position
    )
    return statement.on_conflict_do_update(
        index_elements=[follower_positions.c.follower],
        set_={"position": statement.excluded.position},
    )


def _positions(connection: Connection) -> dict[str, int]:
    rows = connection.execute(select(follower_positions.c.follower, follower_positions.c.position))
    return {str(follower): int(position) for follower, position in rows}


def _raised(call: Any) -> BaseException:
    try:
        call()
    except Exception as error:  # the driver's own (wrapped by SQLAlchemy or bare)
        return error
    raise AssertionError("expected the database to refuse")


class BackendContract:
    """What every backend must do on its real engine."""

    backend: ClassVar[Backend]
    # a statement that needs the database itself (not only a connection)
    probe: ClassVar[str] = "SELECT 1"

    @pytest.fixture
    def url(self) -> str:
        raise NotImplementedError  # each engine's subclass: a database at head

    @pytest.fixture
    def engine(self, url: str) -> Iterator[Engine]:
        engine = create_store_engine(url)
        yield engine
        engine.dispose()

    def wait_briefly(self, connection: Connection) -> None:
        """Make `connection` give up on a held lock at once (instead of waiting)."""
        raise NotImplementedError

    def unreachable_url(self, tmp_path: Path) -> str:
        """A URL whose database cannot be used at all."""
        raise NotImplementedError

    # -- the registry ------------------------------------------------------------------

    def test_the_registry_finds_the_backend(self, engine: Engine, url: str) -> None:
        assert backend_for(engine) is self.backend
        assert backend_for(engine.dialect) is self.backend
        with engine.connect() as connection:
            assert backend_for(connection) is self.backend
        assert backend_of_url(make_url(url)) is self.backend

    # -- statement pieces --------------------------------------------------------------

    def test_the_upsert_inserts_then_updates(self, engine: Engine) -> None:
        with engine.begin() as connection:
            connection.execute(_record(self.backend, "f", 3))
        with engine.begin() as connection:
            assert _positions(connection) == {"f": 3}
            connection.execute(_record(self.backend, "f", 7))
        with engine.connect() as connection:
            assert _positions(connection) == {"f": 7}

    def test_the_append_time_is_the_clock_given(self, engine: Engine) -> None:
        now = bindparam("now", type_=BigInteger)
        with engine.connect() as connection:
            given = connection.execute(select(self.backend.append_time(now)), {"now": 1234})
            assert given.scalar_one() == 1234

    def test_without_a_clock_the_append_time_is_the_servers(self, engine: Engine) -> None:
        now = bindparam("now", type_=BigInteger)
        with engine.connect() as connection:
            found = connection.execute(select(self.backend.append_time(now)), {"now": None})
            stamped = found.scalar_one()
            if not self.backend.server_clock:
                assert stamped is None  # the caller's clock is the only one
                return
            # the server's clock: between two readings of it around the statement
            server = text("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)")
            after = connection.execute(server).scalar_one()
        assert 0 < stamped <= after

    def test_later_of_takes_the_later_and_ignores_null(self, engine: Engine) -> None:
        def later(value: int, previous: int | None) -> Any:
            expression = self.backend.later_of(
                literal(value, BigInteger), literal(previous, BigInteger)
            )
            with engine.connect() as connection:
                return connection.execute(select(expression)).scalar_one()

        assert later(5, 3) == 5
        assert later(3, 5) == 5
        assert later(3, None) == 3

    def test_an_appended_event_is_numbered_by_its_insert_or_later(self, engine: Engine) -> None:
        with engine.connect() as connection:
            position = connection.execute(select(self.backend.feed_position_on_insert()))
            numbered = position.scalar_one()
        # numbered after commit (by readers), else the next position of an empty feed
        assert numbered == (None if self.backend.feed_numbered_by_readers else 1)

    def test_a_row_set_reads_the_json_rows(self, engine: Engine) -> None:
        pairs = self.backend.row_set(
            [column("follower", String()), column("position", BigInteger())],
            "wanted",
        )
        rows = '[{"follower": "a", "position": 1}, {"follower": "b", "position": 2}]'
        with engine.connect() as connection:
            found = connection.execute(
                select(pairs.c.follower, pairs.c.position).order_by(pairs.c.follower),
                {"rows": rows},
            ).all()
        assert [tuple(row) for row in found] == [("a", 1), ("b", 2)]

    # -- transactions ----------------------------------------------------------------

    def test_a_write_transaction_holds_off_a_second_writer(self, engine: Engine) -> None:
        with engine.connect() as first, engine.connect() as second:
            self.wait_briefly(second)
            self.backend.begin_write(first)
            first.execute(_record(self.backend, "w", 1))

            def write_again() -> None:
                self.backend.begin_write(second)
                second.execute(_record(self.backend, "w", 2))

            refused = _raised(write_again)
            assert self.backend.owns_error(_driver(refused))
            assert isinstance(self.backend.classify(refused), StoreBusyError)
            second.rollback()
            first.commit()
        with engine.connect() as connection:
            assert _positions(connection) == {"w": 1}

    def test_the_raw_connection_reports_its_transaction(self, engine: Engine) -> None:
        with engine.connect() as connection:
            connection.rollback()
            raw = connection.connection.dbapi_connection
            assert not self.backend.in_transaction(raw)
            self.backend.begin_write(connection)
            connection.execute(_record(self.backend, "t", 1))
            assert self.backend.in_transaction(raw)
            assert self.backend.transaction_trouble(raw) is None
            connection.rollback()

    def test_a_read_snapshot_does_not_see_a_later_commit(self, engine: Engine) -> None:
        with engine.begin() as connection:
            connection.execute(_record(self.backend, "before", 1))
        with engine.connect() as reader, engine.connect() as writer:
            with self.backend.read_snapshot(reader):
                assert _positions(reader) == {"before": 1}
                with writer.begin():
                    writer.execute(_record(self.backend, "after", 2))
                assert _positions(reader) == {"before": 1}  # still the snapshot's
            reader.rollback()
            assert _positions(reader) == {"before": 1, "after": 2}

    def test_the_migration_lock_excludes_a_second_migrator(self, engine: Engine) -> None:
        with engine.connect() as first, engine.connect() as second:
            self.wait_briefly(second)
            first.begin()
            self.backend.lock_migration(first, None)

            def migrate_too() -> None:
                second.begin()
                self.backend.lock_migration(second, None)

            refused = _raised(migrate_too)
            assert isinstance(self.backend.classify(refused), StoreBusyError)
            second.rollback()
            first.rollback()
        with engine.connect() as connection:  # released with the first's transaction
            connection.begin()
            self.backend.lock_migration(connection, None)
            connection.rollback()

    # -- the catalogue ----------------------------------------------------------------

    def test_the_catalogue_lists_the_owned_tables(self, engine: Engine) -> None:
        with engine.connect() as connection:
            found = self.backend.read_catalogue(connection, [*OWNED_TABLES, "no_such"], None)
        assert set(found) == set(OWNED_TABLES)
        assert found["runs"].primary_key == frozenset({"run_id"})
        assert found["events"].columns["sequence"].family == "integer"
        assert ("run_id", "runs", "run_id", "CASCADE") in found["events"].foreign_keys

    # -- errors ----------------------------------------------------------------------

    def test_an_unusable_database_is_unavailable(self, tmp_path: Path) -> None:
        engine = create_store_engine(self.unreachable_url(tmp_path))
        try:
            refused = _raised(lambda: engine.connect().execute(text(self.probe)))
        finally:
            engine.dispose()
        assert self.backend.owns_error(_driver(refused))
        assert isinstance(self.backend.classify(refused), StoreUnavailableError)

    def test_a_refused_statement_is_no_outage(self, engine: Engine) -> None:
        with engine.connect() as connection:
            refused = _raised(lambda: connection.execute(text("SELECT * FROM no_such_table")))
        assert self.backend.owns_error(_driver(refused))
        assert self.backend.classify(refused) is None  # the call's own failure
        assert translate_database_error(refused).code == "run-store-write-failed"

    def test_a_permission_error_carries_the_backends_hint(self) -> None:
        refused = StorePermissionError(
            "run-store-permission-denied",
            engine=self.backend.name,
            hint=self.backend.permission_hint,
        )
        assert refused.hint == (self.backend.permission_hint or StorePermissionError().hint)

    # -- the async driver and the URL forms -------------------------------------------

    def test_the_async_driver_url_connects(self, url: str) -> None:
        async_url = self.backend.async_url(make_url(url))
        assert async_url.drivername == self.backend.async_drivername

        async def select_one() -> int:
            engine = create_async_engine(async_url)
            try:
                async with engine.connect() as connection:
                    assert backend_for(connection) is self.backend
                    return int((await connection.execute(text("SELECT 1"))).scalar_one())
            finally:
                await engine.dispose()

        assert asyncio.run(select_one()) == 1
        twin = self.backend.sync_twin(async_url)
        assert twin is not None and twin.drivername == self.backend.sync_drivername


def _driver(error: BaseException) -> BaseException:
    return getattr(error, "orig", None) or error


class TestSQLiteBackend(BackendContract):
    backend = SQLITE
    probe = "SELECT count(*) FROM sqlite_master"

    @pytest.fixture
    def url(self, sqlite_database_url: str, head_copies: set[str]) -> str:
        return sqlite_database_url

    def wait_briefly(self, connection: Connection) -> None:
        connection.exec_driver_sql("PRAGMA busy_timeout = 0")
        connection.commit()

    def unreachable_url(self, tmp_path: Path) -> str:
        path = tmp_path / "not-a-database.sqlite3"
        path.write_bytes(b"this is no SQLite database file, only text" * 100)
        return f"sqlite:///{path}"

    def test_a_memory_database_has_no_sync_twin(self) -> None:
        assert SQLITE.memory_only(make_url("sqlite://"))
        assert SQLITE.sync_twin(make_url("sqlite+aiosqlite://")) is None


@pytest.mark.postgres
class TestPostgreSQLBackend(BackendContract):
    backend = POSTGRESQL

    @pytest.fixture
    def url(self, pg_database_url: str, head_copies: set[str]) -> str:
        return pg_database_url

    def wait_briefly(self, connection: Connection) -> None:
        connection.exec_driver_sql("SET lock_timeout = '50ms'")
        connection.commit()

    def unreachable_url(self, tmp_path: Path) -> str:
        # a port no server listens on (connecting is refused at once)
        return "postgresql+psycopg://nobody@127.0.0.1:9/cadence?connect_timeout=2"

    def test_a_serialization_failure_is_busy(self, engine: Engine) -> None:
        with engine.begin() as connection:
            connection.execute(_record(POSTGRESQL, "s", 1))
        with engine.connect() as first, engine.connect() as second:
            for each in (first, second):
                each.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
                assert _positions(each) == {"s": 1}
            first.execute(_record(POSTGRESQL, "s", 2))
            first.commit()
            refused = _raised(lambda: second.execute(_record(POSTGRESQL, "s", 3)))
            second.rollback()
        assert isinstance(POSTGRESQL.classify(refused), StoreBusyError)
        assert translate_database_error(refused).code == "run-store-busy"


def test_an_engine_cadence_store_does_not_serve_is_refused_with_a_code() -> None:
    with pytest.raises(CadenceStoreError) as info:
        backend_for(mysql.dialect())
    assert info.value.code == "unsupported-engine"
    assert backend_of_url(make_url("mysql://u@h/db")) is None
