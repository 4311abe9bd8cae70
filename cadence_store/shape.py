"""The shape check at open: a store at head must still have the tables the models describe.

A database whose owned tables were altered after its last upgrade (a dropped column, index
or table) would otherwise be trusted, and its writes would fail halfway or go through
wrongly. cadence 1.x refused such a store at open with `run-store-reset-required`; so does
this check, naming every difference, before anything is written.

What is compared, per owned table: the columns (type family and nullability), the primary
key, the unique keys, the foreign keys (ON DELETE included) and cadence-store's own
indexes. Extra columns are allowed, as cadence 1.x allowed them, if an insert that does
not name them still works (nullable or with a default). The check reads the catalogue once
per table kind (the inspector's multi-table reads) and is cached per connection pool and
schema, so it runs once per engine.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Final

from sqlalchemy import Connection, Table, inspect
from sqlalchemy.engine.interfaces import ReflectedColumn
from sqlalchemy.pool import Pool
from sqlalchemy.types import Integer, String, TypeEngine

from .engine import is_sqlite
from .errors import StoreFormatError
from .failures import READ, database_errors
from .models import OWNED_TABLES, metadata
from .schema import assert_at_head, database_label, sqlite_foreign_keys, sqlite_unique_keys

_ready: weakref.WeakKeyDictionary[Pool, set[str | None]] = weakref.WeakKeyDictionary()
_ready_lock: Final = threading.Lock()


def _family(type_: TypeEngine[Any]) -> str:
    if isinstance(type_, Integer):
        return "integer"
    if isinstance(type_, String):
        return "text"
    return type(type_).__name__.lower()


def _insertable(column: ReflectedColumn) -> bool:
    return bool(
        column.get("nullable", True)
        or column.get("default") is not None
        or column.get("autoincrement") is True
        or column.get("computed")
        or column.get("identity")
    )


def _column_differences(table: Table, reflected: list[ReflectedColumn]) -> list[str]:
    found = {column["name"]: column for column in reflected}
    differences = []
    for column in table.columns:
        actual = found.pop(column.name, None)
        if actual is None:
            differences.append(f"{table.name}.{column.name} is missing")
            continue
        wanted, got = _family(column.type), _family(actual["type"])
        if wanted != got:
            differences.append(f"{table.name}.{column.name} is {got}, expected {wanted}")
        if not column.primary_key and bool(actual.get("nullable", True)) != column.nullable:
            expected = "nullable" if column.nullable else "NOT NULL"
            differences.append(f"{table.name}.{column.name} is not {expected}")
    differences.extend(
        f"{table.name}.{name} is an extra NOT NULL column without a default"
        for name, column in found.items()
        if not _insertable(column)
    )
    return differences


def _key_differences(
    connection: Connection, table: Table, key: tuple[str | None, str], reflected: dict[str, Any]
) -> list[str]:
    name = table.name
    differences = []
    primary = set(reflected["pk"].get(key, {}).get("constrained_columns") or [])
    if primary != {column.name for column in table.primary_key.columns}:
        differences.append(f"{name}: primary key is {sorted(primary) or 'missing'}")

    if is_sqlite(connection):
        unique_keys = sqlite_unique_keys(connection, name)
        foreign_keys = sqlite_foreign_keys(connection, name)
    else:
        unique_keys = {
            frozenset(constraint["column_names"]) for constraint in reflected["unique"][key]
        } | {
            frozenset(index["column_names"])
            for index in reflected["indexes"][key]
            if index.get("unique")
        }
        foreign_keys = {
            (
                column,
                fk["referred_table"],
                referred,
                str(fk.get("options", {}).get("ondelete") or "NO ACTION").upper(),
            )
            for fk in reflected["fk"][key]
            for column, referred in zip(
                fk["constrained_columns"], fk["referred_columns"], strict=True
            )
        }
    for constraint in table.constraints:
        columns = getattr(constraint, "columns", None)
        if type(constraint).__name__ == "UniqueConstraint" and columns is not None:
            wanted = frozenset(column.name for column in columns)
            if wanted not in unique_keys:
                differences.append(f"{name}: unique key {sorted(wanted)} is missing")
    for foreign_key in table.foreign_key_constraints:
        for element in foreign_key.elements:
            wanted_fk = (
                element.parent.name,
                element.column.table.name,
                element.column.name,
                str(foreign_key.ondelete or "NO ACTION").upper(),
            )
            if wanted_fk not in foreign_keys:
                differences.append(
                    f"{name}: foreign key {wanted_fk[0]} -> {wanted_fk[1]}.{wanted_fk[2]} "
                    f"ON DELETE {wanted_fk[3]} is missing"
                )
    indexed = [tuple(index["column_names"]) for index in reflected["indexes"][key]]
    for index in table.indexes:
        wanted_index = tuple(column.name for column in index.columns)
        if wanted_index not in indexed:
            differences.append(f"{name}: index on {list(wanted_index)} is missing")
    return differences


def shape_differences(connection: Connection, schema: str | None = None) -> list[str]:
    """How the owned tables differ from the models (empty: they match)."""
    inspector = inspect(connection)
    present = sorted(OWNED_TABLES & set(inspector.get_table_names(schema=schema)))
    differences = [f"table {name} is missing" for name in sorted(OWNED_TABLES - set(present))]
    if not present:
        return differences
    options: dict[str, Any] = {"schema": schema, "filter_names": present}
    columns = inspector.get_multi_columns(**options)
    reflected = {
        "pk": inspector.get_multi_pk_constraint(**options),
        "indexes": inspector.get_multi_indexes(**options),
        "unique": {}
        if is_sqlite(connection)
        else inspector.get_multi_unique_constraints(**options),
        "fk": {} if is_sqlite(connection) else inspector.get_multi_foreign_keys(**options),
    }
    for name in present:
        key = (schema, name)
        table = metadata.tables[name]
        differences += _column_differences(table, columns[key])
        differences += _key_differences(connection, table, key, reflected)
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
    with _ready_lock:
        if schema in _ready.get(pool, ()):
            return
    with database_errors(READ):
        assert_at_head(connection, schema)
        assert_store_shape(connection, schema)
    with _ready_lock:
        _ready.setdefault(pool, set()).add(schema)


def forget_store_ready(connection: Connection) -> None:
    """Check the engine again on next use (after an upgrade or downgrade through it)."""
    with _ready_lock:
        _ready.pop(connection.engine.pool, None)


__all__ = ["assert_store_ready", "assert_store_shape", "forget_store_ready", "shape_differences"]
