"""The shape check at open: a store at head must still have the tables the models describe.

A database whose owned tables were altered after its last upgrade (a dropped column, index
or table) would otherwise be trusted, and its writes would fail halfway or go through
wrongly. cadence 1.x refused such a store at open with `run-store-reset-required`; so does
this check, naming every difference, before anything is written.

What is compared, per owned table: the columns (type family and nullability), the primary
key, the unique keys, the foreign keys (ON DELETE included) and cadence-store's own
indexes. Extra columns are allowed, as cadence 1.x allowed them, if an insert that does
not name them still works (nullable or with a default). The check reads the catalogue
directly (`catalogue.py`: SQLite's PRAGMAs, three `pg_catalog` queries on PostgreSQL) and
is cached per connection pool and schema, so it runs once per engine.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Table, UniqueConstraint
from sqlalchemy.types import Integer, String

from ..errors import StoreFormatError
from .catalogue import FoundTable, read_tables, type_family
from .failures import READ, database_errors
from .models import OWNED_TABLES, metadata
from .readiness import is_store_ready, mark_store_ready
from .schema import assert_at_head, database_label


def _model_family(column: Any) -> str:
    if isinstance(column.type, Integer):
        return "integer"
    if isinstance(column.type, String):
        return "text"
    return type_family(str(column.type))


def _column_differences(table: Table, found: FoundTable) -> list[str]:
    extra = dict(found.columns)
    differences = []
    for column in table.columns:
        actual = extra.pop(column.name, None)
        if actual is None:
            differences.append(f"{table.name}.{column.name} is missing")
            continue
        wanted = _model_family(column)
        if wanted != actual.family:
            differences.append(f"{table.name}.{column.name} is {actual.family}, expected {wanted}")
        if not column.primary_key and actual.nullable != column.nullable:
            expected = "nullable" if column.nullable else "NOT NULL"
            differences.append(f"{table.name}.{column.name} is not {expected}")
    differences.extend(
        f"{table.name}.{name} is an extra NOT NULL column without a default"
        for name, column in extra.items()
        if not (column.nullable or column.has_default)
    )
    return differences


def _key_differences(table: Table, found: FoundTable) -> list[str]:
    name = table.name
    differences = []
    if found.primary_key != {column.name for column in table.primary_key.columns}:
        differences.append(f"{name}: primary key is {sorted(found.primary_key) or 'missing'}")
    for constraint in table.constraints:
        if isinstance(constraint, UniqueConstraint):
            wanted = frozenset(column.name for column in constraint.columns)
            if wanted not in found.unique_keys:
                differences.append(f"{name}: unique key {sorted(wanted)} is missing")
    for foreign_key in table.foreign_key_constraints:
        for element in foreign_key.elements:
            wanted_fk = (
                element.parent.name,
                element.column.table.name,
                element.column.name,
                str(foreign_key.ondelete or "NO ACTION").upper(),
            )
            if wanted_fk not in found.foreign_keys:
                differences.append(
                    f"{name}: foreign key {wanted_fk[0]} -> {wanted_fk[1]}.{wanted_fk[2]} "
                    f"ON DELETE {wanted_fk[3]} is missing"
                )
    for index in table.indexes:
        wanted_index = tuple(column.name for column in index.columns)
        if wanted_index not in found.indexes:
            differences.append(f"{name}: index on {list(wanted_index)} is missing")
    return differences


def shape_differences(connection: Connection, schema: str | None = None) -> list[str]:
    """How the owned tables differ from the models (empty: they match)."""
    found = read_tables(connection, OWNED_TABLES, schema)
    differences = [f"table {name} is missing" for name in sorted(OWNED_TABLES - set(found))]
    for name in sorted(found):
        table = metadata.tables[name]
        differences += _column_differences(table, found[name])
        differences += _key_differences(table, found[name])
    return differences


def assert_store_shape(connection: Connection, schema: str | None = None) -> None:
    differences = shape_differences(connection, schema)
    if differences:
        raise StoreFormatError(
            database_label(connection),
            "the owned tables differ from this version's models: " + "; ".join(differences),
        )


def assert_store_ready(connection: Connection, schema: str | None = None) -> None:
    """At head and shaped as the models (checked once per engine and schema)."""
    pool = connection.engine.pool
    if is_store_ready(pool, schema):
        return
    with database_errors(READ):
        assert_at_head(connection, schema)
        assert_store_shape(connection, schema)
    mark_store_ready(pool, schema)


__all__ = ["assert_store_ready", "assert_store_shape", "shape_differences"]
