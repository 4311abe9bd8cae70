"""Helpers shared by the test suites (importable: `tests/` is on sys.path)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine, select

from cadence_store.storage.feed_notifier import flush_notifiers
from cadence_store.storage.models import (
    archived_operations,
    archived_runs,
    checkpoints,
    delivery_bindings,
    events,
    follower_positions,
    kept_leaves,
    operations,
    runs,
    tree_tiles,
)
from cadence_store.testing import (
    CLOCK_START_MS,
    FakeClock,
)  # the plugin's clock: this suite is its first user

ROOT_HASH = "ab" * 32
# A realistic epoch-milliseconds start: lease expiries exceed 32-bit integers (BIGINT).
START_MS = CLOCK_START_MS

__all__ = [
    "OWNED",
    "ROOT_HASH",
    "START_MS",
    "FakeClock",
    "Snapshot",
    "adopted_operation",
    "table_snapshot",
]

OWNED = {
    "runs": runs,
    "events": events,
    "operations": operations,
    "delivery_bindings": delivery_bindings,
    "follower_positions": follower_positions,
    "tree_tiles": tree_tiles,
    "checkpoints": checkpoints,
    "kept_leaves": kept_leaves,
    "archived_runs": archived_runs,
    "archived_operations": archived_operations,
}

Snapshot = dict[str, list[tuple[Any, ...]]]


def adopted_operation(row: dict[str, Any]) -> dict[str, Any]:
    """A cadence 1.x operations row as adoption leaves it: cadence 1.x's columns, plus the
    fence given to each lease (cs0002) and the sequence a receipt's text names (cs0005)."""
    lease = row["kind"] == "lease"
    return {
        **row,
        "lease_fence": 1 if lease else None,
        "sequence": None if lease else json.loads(row["outcome_json"])["sequence"],
    }


def table_snapshot(engine: Engine) -> Snapshot:
    """Every row of the owned tables, in primary-key order, once this process's feed
    notifiers have numbered what committed (PostgreSQL numbers the feed just after each
    commit: a snapshot taken meanwhile would see `feed_position` change under it)."""
    flush_notifiers()
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


def signer_seed(signer_text: str) -> str:
    """The base64 seed of `PRIVATE+KEY+<name>+<key id>+<seed>`; the seed itself may hold '+'."""
    return signer_text.split("+", 4)[4]
