"""`cadence_store.testing`: a pytest plugin for host applications' own tests.

Registered under the `pytest11` entry point, so installing cadence-store is enough:

- `cadence_store_url`: a fresh database at head, one per test (a SQLite file under
  `tmp_path`; on PostgreSQL, with `--cadence-store-url URL` or `CADENCE_STORE_TEST_URL`,
  a database of its own created on that server and dropped afterwards);
- `cadence_store`: a `RunStore` on it, with a root hash, closed afterwards;
- `cadence_store_async_url` / `async_cadence_store`: the same database with its async
  driver, and an `AsyncRunStore` on it (used in the test's own event loop);
- `cadence_store_clock`: the store's fake clock (integer milliseconds, `.advance(ms)`);
- `assert_chain_intact(store, run_id=None)`: every run's chain (or one run's) verified,
  an `AssertionError` naming the run, the sequence and what differs otherwise.

Nothing happens at import or collection: the database work is in the fixtures, and the
modules that do it are imported by the fixtures that need them.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from .async_store.store import AsyncRunStore
    from .store.run_store import RunStore

URL_OPTION: Final = "--cadence-store-url"
URL_ENVIRONMENT: Final = "CADENCE_STORE_TEST_URL"
# The root hash of `cadence_store`'s runs (any sha256 hex would do; this one is fixed).
TEST_ROOT_HASH: Final = "c0" * 32
# A realistic epoch in milliseconds: lease expiries exceed 32-bit integers, as in production.
CLOCK_START_MS: Final = 1_768_469_475_000


class FakeClock:
    """A clock for `RunStore(clock=...)`: `clock()` is `clock.now`, integer milliseconds,
    moved only by `clock.advance(ms)` (or by assigning `clock.now`)."""

    def __init__(self, now: int = CLOCK_START_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        """Move the clock `ms` milliseconds forward; returns the new time."""
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise ValueError("advance(ms) takes a non-negative int of milliseconds")
        self.now += ms
        return self.now


def assert_chain_intact(store: RunStore, run_id: str | None = None) -> None:
    """Verify the hash chain and stored projection of `run_id`, or of every run.

    Raises `AssertionError` naming the run, the first bad sequence and what differs.
    """
    from .errors import CadenceStoreError

    run_ids = store.run_ids() if run_id is None else [run_id]
    for checked in run_ids:
        try:
            store.verify_integrity(checked)
        except CadenceStoreError as error:
            where = getattr(error, "sequence", None)
            message = f"run {checked}: {error.code}"
            if where is not None:
                message += f" at sequence {where}"
            if error.detail:
                message += f" ({error.detail})"
            raise AssertionError(message) from error


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cadence-store")
    group.addoption(
        URL_OPTION,
        dest="cadence_store_url",
        default=None,
        metavar="URL",
        help=(
            "PostgreSQL server for the cadence_store fixtures: each test gets a database of "
            f"its own there, dropped afterwards (default: ${URL_ENVIRONMENT}, else a SQLite "
            "file under tmp_path)"
        ),
    )


def _server_url(config: pytest.Config) -> URL | None:
    from sqlalchemy.engine import make_url

    from .storage.backends import backend_of_url

    given = config.getoption("cadence_store_url") or os.environ.get(URL_ENVIRONMENT)
    if not given:
        return None
    url = make_url(given)
    backend = backend_of_url(url)
    if backend is None:
        raise pytest.UsageError(f"{URL_OPTION}: PostgreSQL or SQLite URL expected")
    if backend.embedded:
        return None  # SQLite: a file under tmp_path all the same
    if "+" not in url.drivername:
        url = url.set(drivername=backend.sync_drivername)  # the driver cadence-store ships with
    return url


@contextmanager
def _fresh_postgresql_database(server: URL) -> Iterator[str]:
    """A new database on `server` for one test; dropped (WITH FORCE) afterwards."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    name = f"cadence_test_{secrets.token_hex(8)}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
        try:
            yield server.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as connection:
                connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


@pytest.fixture
def cadence_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """URL of a fresh cadence-store database at head, for this test only.

    A SQLite file under ``tmp_path`` by default; with ``--cadence-store-url URL`` (or
    ``CADENCE_STORE_TEST_URL``) naming a PostgreSQL server, a database of its own created
    there and dropped after the test. The owned tables (``runs``, ``events``,
    ``operations``, ``delivery_bindings``) have their plain names, for raw SQL.
    """
    from .storage.schema import upgrade

    server = _server_url(request.config)
    if server is None:
        url = f"sqlite:///{tmp_path / 'cadence-store.sqlite3'}"
        upgrade(url)
        yield url
        return
    with _fresh_postgresql_database(server) as url:
        upgrade(url)
        yield url


@pytest.fixture
def cadence_store_clock() -> FakeClock:
    """The fake clock of ``cadence_store``: integer milliseconds, ``.advance(ms)``."""
    return FakeClock()


@pytest.fixture
def cadence_store(cadence_store_url: str, cadence_store_clock: FakeClock) -> Iterator[RunStore]:
    """A ``RunStore`` on ``cadence_store_url`` with a root hash (runs can be started) and
    ``cadence_store_clock`` as its clock; closed after the test."""
    from .store.run_store import RunStore

    store = RunStore(cadence_store_url, root_hash=TEST_ROOT_HASH, clock=cadence_store_clock)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def cadence_store_async_url(cadence_store_url: str) -> str:
    """``cadence_store_url`` with its async driver (``sqlite+aiosqlite``,
    ``postgresql+psycopg``): the same database, for ``AsyncRunStore`` or a host's
    ``create_async_engine``."""
    from .async_store.engine import async_database_url

    return async_database_url(cadence_store_url).render_as_string(hide_password=False)


@pytest.fixture
def async_cadence_store(
    cadence_store_async_url: str, cadence_store_clock: FakeClock
) -> Iterator[AsyncRunStore]:
    """An ``AsyncRunStore`` on ``cadence_store_async_url`` with a root hash and
    ``cadence_store_clock``; use it in the test's own event loop (``asyncio.run``,
    pytest-asyncio, anyio). Closed after the test (in a loop of its own, unless the test
    closed it)."""
    from .async_store.store import AsyncRunStore

    store = AsyncRunStore(
        cadence_store_async_url, root_hash=TEST_ROOT_HASH, clock=cadence_store_clock
    )
    try:
        yield store
    finally:
        asyncio.run(store.aclose())


__all__ = [
    "CLOCK_START_MS",
    "TEST_ROOT_HASH",
    "FakeClock",
    "assert_chain_intact",
    "async_cadence_store",
    "cadence_store",
    "cadence_store_async_url",
    "cadence_store_clock",
    "cadence_store_url",
]
