"""A run and its rows read as plain mappings, column names as keys: the export record
(`transfer.record`) and the runs an archive writes (`store/retention.py`) both read
them here. Stored TEXT is kept verbatim; a store's own columns are left out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy import Connection, Table, select

from .models import delivery_bindings, events, operations, runs

Row = dict[str, Any]

# a store's own columns, never exported: an event's place in this store's feed (the
# store it is imported or copied into gives it a place in its own)
STORE_LOCAL_COLUMNS: Final = frozenset({"feed_position"})
CHILD_ORDER: Final[dict[str, tuple[str, ...]]] = {
    "events": ("sequence",),
    "operations": ("operation_id",),
    "deliveryBindings": ("gate", "revision"),
}
CHILD_TABLES: Final[dict[str, Table]] = {
    "events": events,
    "operations": operations,
    "deliveryBindings": delivery_bindings,
}


def column_names(table: Table) -> tuple[str, ...]:
    return tuple(column.name for column in table.c if column.name not in STORE_LOCAL_COLUMNS)


RUN_COLUMNS: Final = column_names(runs)


def row_of(mapping: Any, columns: Sequence[str]) -> Row:
    return {name: mapping[name] for name in columns}


def _children(connection: Connection, key: str, run_id: str) -> list[Row]:
    table = CHILD_TABLES[key]
    columns = column_names(table)
    order = [table.c[name] for name in CHILD_ORDER[key]]
    result = connection.execute(select(table).where(table.c.run_id == run_id).order_by(*order))
    return [row_of(row._mapping, columns) for row in result]


def run_record(connection: Connection, run_row: Row) -> dict[str, Any]:
    """`{"run", "events", "operations", "deliveryBindings"}` of the run whose `runs` row
    (`RUN_COLUMNS`) is `run_row`, children in `CHILD_ORDER`."""
    run_id = run_row["run_id"]
    return {"run": run_row, **{key: _children(connection, key, run_id) for key in CHILD_TABLES}}


def read_run_record(connection: Connection, run_id: str) -> dict[str, Any] | None:
    """One run and its rows (None when the run is absent)."""
    row = connection.execute(select(runs).where(runs.c.run_id == run_id)).first()
    if row is None:
        return None
    return run_record(connection, row_of(row._mapping, RUN_COLUMNS))


__all__ = [
    "CHILD_ORDER",
    "RUN_COLUMNS",
    "STORE_LOCAL_COLUMNS",
    "Row",
    "column_names",
    "read_run_record",
    "row_of",
    "run_record",
]
