"""Helpers shared by the test suites (importable: `tests/` is on sys.path)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, select

from cadence_store.models import delivery_bindings, events, operations, runs

ROOT_HASH = "ab" * 32
# A realistic epoch-milliseconds start: lease expiries exceed 32-bit integers (BIGINT).
START_MS = 1_768_469_475_000

OWNED = {
    "runs": runs,
    "events": events,
    "operations": operations,
    "delivery_bindings": delivery_bindings,
}

Snapshot = dict[str, list[tuple[Any, ...]]]


class FakeClock:
    """A controllable clock: ``clock()`` returns ``clock.now`` (int milliseconds)."""

    def __init__(self, now: int = START_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


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
