"""Store fixtures shared by the integration and reliability suites (a pytest plugin,
registered in tests/conftest.py), each defined once:

- ``clock``: a `FakeClock` (int milliseconds) the test moves by hand;
- ``store_url``: the ``database_url`` after ``cadence_store.upgrade`` (a copy of a
  database the session upgraded once: see ``head_copies`` in tests/conftest.py);
- ``run_store`` / ``store``: ``RunStore(store_url, root_hash=ROOT_HASH, clock=clock)``,
  closed afterwards (tests/integration/conftest.py overrides ``store`` to run its suite
  through every entry point);
- ``db``: a plain SQLAlchemy engine on the same database, for reading or tampering with
  rows directly;
- ``table_rows`` / ``snapshot``: the rows of the four owned tables;
- ``rejected(error_class, code)``: a context manager asserting that its block raises
  exactly that class with exactly that ``.code`` and writes nothing (all four tables are
  compared before and after).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, select
from support import OWNED, ROOT_HASH, FakeClock, Snapshot, table_snapshot

import cadence_store
from cadence_store import CadenceStoreError, RunStore
from cadence_store.storage.feed_notifier import flush_notifiers


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store_url(database_url: str, head_copies: set[str]) -> str:
    # a copy of the session's database at head (tests/conftest.py) is already upgraded
    if database_url not in head_copies:
        cadence_store.upgrade(database_url)
    return database_url


@pytest.fixture
def run_store(store_url: str, clock: FakeClock) -> Iterator[RunStore]:
    store = RunStore(store_url, root_hash=ROOT_HASH, clock=clock)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def store(run_store: RunStore) -> RunStore:
    return run_store


@pytest.fixture
def db(store_url: str) -> Iterator[Engine]:
    engine = create_engine(store_url, pool_size=1, max_overflow=2)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def table_rows(db: Engine) -> Callable[[str], list[dict[str, Any]]]:
    """``table_rows("operations")``: the table's rows as dicts, in primary-key order."""

    def read(name: str) -> list[dict[str, Any]]:
        table = OWNED[name]
        flush_notifiers()  # what committed is numbered (see `support.table_snapshot`)
        with db.connect() as connection:
            result = connection.execute(select(table).order_by(*table.primary_key.columns))
            return [dict(row._mapping) for row in result]

    return read


@pytest.fixture
def snapshot(db: Engine) -> Callable[[], Snapshot]:
    """``snapshot()``: every row of the four owned tables."""

    def take() -> Snapshot:
        return table_snapshot(db)

    return take


@pytest.fixture
def rejected(
    snapshot: Callable[[], Snapshot],
) -> Callable[[type[CadenceStoreError], str], AbstractContextManager[Any]]:
    """``with rejected(InvalidInputError, "invalid-change"): store.start_run(...)``."""

    @contextmanager
    def expect(error_class: type[CadenceStoreError], code: str) -> Iterator[Any]:
        before = snapshot()
        with pytest.raises(CadenceStoreError) as info:
            yield info
        assert type(info.value) is error_class, (type(info.value), info.value)
        assert info.value.code == code, info.value
        assert snapshot() == before, f"{code}: a rejected call changed the database"

    return expect
