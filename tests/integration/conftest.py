"""The behavioural store suite (tests/integration/test_store_*.py).

Its fixtures (``clock``, ``store_url``, ``store``, ``db``, ``table_rows``, ``snapshot``,
``rejected``) come from the shared plugin tests/store_fixtures.py; every store test takes
``database_url`` (tests/conftest.py), so it runs once on SQLite and once on PostgreSQL,
each time on a fresh database.

Every test of those modules that takes ``store`` also runs once per entry point (ids like
``[sqlite-uow]``): ``store`` is then an adapter with RunStore's method names (see
tests/entry_points.py). A test marked ``@pytest.mark.run_store_only`` (it inspects what
only `RunStore` has: retries, close, its ``write=`` callbacks...) runs through `RunStore`
alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from entry_points import ENTRY_POINTS, AsyncEntry, RepositoryEntry, UnitOfWorkEntry
from sqlalchemy import create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from support import ROOT_HASH, FakeClock

from cadence_store import RunStore
from cadence_store.async_store import async_database_url


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store" not in metafunc.fixturenames:
        return
    if not Path(str(metafunc.definition.fspath)).name.startswith("test_store_"):
        return
    only_store = metafunc.definition.get_closest_marker("run_store_only") is not None
    metafunc.fixturenames.append("entry_point")
    metafunc.parametrize(
        "entry_point", ["store"] if only_store else list(ENTRY_POINTS), indirect=True
    )


@pytest.fixture
def entry_point(request: pytest.FixtureRequest) -> str:
    """How ``store`` calls the library (``store`` unless the test is parametrized)."""
    return str(getattr(request, "param", "store"))


@pytest.fixture
def store(run_store: RunStore, entry_point: str, store_url: str, clock: FakeClock) -> Iterator[Any]:
    if entry_point == "store":
        yield run_store
    elif entry_point == "uow":
        yield UnitOfWorkEntry(run_store)
    elif entry_point == "async":
        yield from _async_entry(run_store, store_url, clock)
    else:
        host_engine = create_engine(store_url)  # the host's own engine, as it made it
        try:
            yield RepositoryEntry(run_store, host_engine, ROOT_HASH, clock)
        finally:
            host_engine.dispose()


def _async_entry(run_store: RunStore, store_url: str, clock: FakeClock) -> Iterator[AsyncEntry]:
    """An `AsyncRunStore` on the host's own `AsyncEngine`: its connect listener must see
    the store's connections, and its connect_args reach the driver."""
    postgresql = make_url(store_url).get_backend_name() == "postgresql"
    connect_args: dict[str, Any] = (
        {"prepare_threshold": None, "application_name": "host-async-engine"}
        if postgresql
        else {"timeout": 30}
    )
    host_engine = create_async_engine(async_database_url(store_url), connect_args=connect_args)
    connected: list[object] = []

    @event.listens_for(host_engine.sync_engine, "connect")
    def _host_listener(dbapi_connection: Any, _record: Any) -> None:
        connected.append(dbapi_connection)

    entry = AsyncEntry(run_store, host_engine, ROOT_HASH, clock)
    try:
        yield entry
    finally:
        entry.shutdown()
    if entry.calls:
        assert connected, "the store's calls did not use the host's AsyncEngine"
