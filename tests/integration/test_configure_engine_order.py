"""A host's engine: `configure_engine(engine)` and `upgrade(engine)` in either order, on
both engines, then a `RunStore` on that engine writes and verifies.

On SQLite, configuring first used to break the upgrade (its BEGIN IMMEDIATE inside the
configured engine's own), and upgrading first left the connection the upgrade pooled
unconfigured (no foreign keys)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Engine, create_engine
from support import ROOT_HASH

from cadence_store import RunStore, configure_engine, upgrade
from cadence_store.storage.schema import head_revision


def _configure_then_upgrade(engine: Engine) -> str | None:
    configure_engine(engine)
    return upgrade(engine)


def _upgrade_then_configure(engine: Engine) -> str | None:
    reached = upgrade(engine)
    configure_engine(engine)
    return reached


@pytest.fixture
def host_engine(database_url: str) -> Iterator[Engine]:
    engine = create_engine(database_url)  # the host's own engine, its default pool
    yield engine
    engine.dispose()


@pytest.mark.parametrize(
    "prepare",
    [_configure_then_upgrade, _upgrade_then_configure],
    ids=["configure-then-upgrade", "upgrade-then-configure"],
)
def test_configure_engine_and_upgrade_in_either_order(
    host_engine: Engine, prepare: Callable[[Engine], str | None]
) -> None:
    assert prepare(host_engine) == head_revision()
    if host_engine.dialect.name == "sqlite":
        # the next connection is the one the upgrade pooled: configured all the same
        with host_engine.connect() as connection:
            pragma = connection.exec_driver_sql
            assert pragma("PRAGMA foreign_keys").scalar() == 1
            assert pragma("PRAGMA journal_mode").scalar() == "wal"
    with RunStore(host_engine, root_hash=ROOT_HASH) as store:
        run = store.start_run("abel-implement", change="host-order", operation_id="start-1")
        store.transition(run.run_id, "paused", code="waiting", operation_id="pause-1")
        assert store.verify_integrity(run.run_id).sequence == 2
    assert upgrade(host_engine) == head_revision()  # again: at head, nothing to do
