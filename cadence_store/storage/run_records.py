"""A run and its rows read as plain mappings, column names as keys: the export record
(`transfer.record`) and the runs an archive writes (`store/retention.py`) both read
them here. Stored TEXT is kept verbatim; a store's own columns are left out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy import Connection, Table, bindparam, select

from .models import delivery_bindings, events, operations, runs
from .statements import Query, Statements

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

RECORD_KEYS: Final = ("run", *CHILD_TABLES)


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


def _plain(*columns: Any) -> tuple[Any, ...]:
    return columns


def _rows_of_run(name: str, table: Table, order: Sequence[str]) -> Query[tuple[Any, ...]]:
    columns = [table.c[column] for column in column_names(table)]
    return Query(
        name,
        lambda _: (
            select(*columns)
            .where(table.c.run_id == bindparam("run_id"))
            .order_by(*[table.c[column] for column in order])
        ),
        _plain,
    )


# the same rows as typed statements, for a journal transaction (`record_in`)
_RUN_ROW: Final = _rows_of_run("record_run", runs, ())
_CHILD_ROWS: Final = {
    key: _rows_of_run(f"record_{key}", table, CHILD_ORDER[key])
    for key, table in CHILD_TABLES.items()
}


def record_in(sql: Statements, run_id: str) -> dict[str, Any] | None:
    """`read_run_record` in a journal transaction's statements (one query per table)."""
    found = sql.raw_rows(_RUN_ROW, run_id=run_id)
    if not found:
        return None
    record: dict[str, Any] = {"run": dict(zip(RUN_COLUMNS, found[0], strict=True))}
    for key, query in _CHILD_ROWS.items():
        names = column_names(CHILD_TABLES[key])
        record[key] = [
            dict(zip(names, row, strict=True)) for row in sql.raw_rows(query, run_id=run_id)
        ]
    return record


__all__ = [
    "CHILD_ORDER",
    "RECORD_KEYS",
    "RUN_COLUMNS",
    "STORE_LOCAL_COLUMNS",
    "Row",
    "column_names",
    "read_run_record",
    "record_in",
    "row_of",
    "run_record",
]
