"""Helpers shared by the test suites (importable: `tests/` is on sys.path)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, select

from cadence_store.storage.models import delivery_bindings, events, operations, runs
from cadence_store.testing import (
    CLOCK_START_MS,
    FakeClock,
)  # the plugin's clock: this suite is its first user

ROOT_HASH = "ab" * 32
# A realistic epoch-milliseconds start: lease expiries exceed 32-bit integers (BIGINT).
START_MS = CLOCK_START_MS

__all__ = ["OWNED", "ROOT_HASH", "START_MS", "FakeClock", "Snapshot", "table_snapshot"]

OWNED = {
    "runs": runs,
    "events": events,
    "operations": operations,
    "delivery_bindings": delivery_bindings,
}

Snapshot = dict[str, list[tuple[Any, ...]]]


def table_snapshot(engine: Engine) -> Snapshot:
    """Every row of the four owned tables, in primary-key order."""
    with engine.connect() as connection:
        taken = {
            name: [
                tuple(row)
                for row in connection.execute(select(table).order_by(*table.primary_key.columns))
            ]
            for name, table in OWNED.items()
        }
        connection.rollback()
    return taken
