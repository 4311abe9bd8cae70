"""The owned tables as the database's own catalogue describes them (for the shape check).

Read straight from the catalogue — SQLite's PRAGMAs, PostgreSQL's `pg_catalog` in three
queries for all four tables — rather than through SQLAlchemy's reflection, whose queries
are compiled afresh for every new engine (most of a first open's cost on PostgreSQL).
Unique keys and indexes are column sets and tuples, so an adopted cadence 1.x store's
unnamed, inline constraints compare equal to the models' named ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from . import sqlite_pragmas as pragmas
from .engine import is_sqlite
from .sqlite_pragmas import ForeignKey


@dataclass
class Column:
    family: str  # "integer", "text" or the declared type in lower case
    nullable: bool
    has_default: bool


@dataclass
class FoundTable:
    columns: dict[str, Column] = field(default_factory=dict)
    primary_key: frozenset[str] = frozenset()
    unique_keys: set[frozenset[str]] = field(default_factory=set)
    foreign_keys: set[ForeignKey] = field(default_factory=set)
    indexes: set[tuple[str, ...]] = field(default_factory=set)


def type_family(declared: str) -> str:
    """SQLite's affinity rules, which PostgreSQL's type names also fit."""
    text = declared.lower()
    if "int" in text:
        return "integer"
    if "char" in text or "clob" in text or "text" in text:
        return "text"
    if "blob" in text or "bytea" in text:
        return "binary"
    return text


def read_tables(
    connection: Connection, tables: Iterable[str], schema: str | None
) -> dict[str, FoundTable]:
    """The tables of `tables` that exist (in `schema`, else the default schema)."""
    if is_sqlite(connection):
        return _sqlite_tables(connection, sorted(tables))
    return _postgresql_tables(connection, sorted(tables), schema)


def _rows(connection: Connection, sql: str, params: Any = ()) -> list[Sequence[Any]]:
    return list(connection.exec_driver_sql(sql, params).fetchall())


def _sqlite_tables(connection: Connection, tables: list[str]) -> dict[str, FoundTable]:
    query = pragmas.query_of(connection)
    present = pragmas.table_names(query)
    found: dict[str, FoundTable] = {}
    for name in tables:
        if name not in present:
            continue
        table = found[name] = FoundTable()
        info = pragmas.columns(query, name)
        for column in info:
            table.columns[str(column.name)] = Column(
                type_family(str(column.type)), not column.notnull, column.default is not None
            )
        table.primary_key = frozenset(str(column.name) for column in info if column.pk)
        for index in pragmas.indexes(query, name):
            columns = pragmas.index_columns(query, index.name)
            table.indexes.add(columns)
            if index.unique:
                table.unique_keys.add(frozenset(columns))
        table.foreign_keys = pragmas.foreign_keys(query, name)
    return found


_PG_COLUMNS = """
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull,
       a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> ''
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = coalesce(%(schema)s, current_schema()) AND c.relname = ANY(%(tables)s)
  AND c.relkind IN ('r', 'p')
"""

_PG_INDEXES = """
SELECT c.relname, i.indisprimary, i.indisunique,
       array(SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
             ORDER BY k.ord)
FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = coalesce(%(schema)s, current_schema()) AND c.relname = ANY(%(tables)s)
"""

_PG_FOREIGN_KEYS = """
SELECT c.relname, con.confdeltype, r.relname,
       array(SELECT a.attname FROM unnest(con.conkey) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum
             ORDER BY k.ord),
       array(SELECT a.attname FROM unnest(con.confkey) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.attnum
             ORDER BY k.ord)
FROM pg_constraint con
JOIN pg_class c ON c.oid = con.conrelid
JOIN pg_class r ON r.oid = con.confrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE con.contype = 'f' AND n.nspname = coalesce(%(schema)s, current_schema())
  AND c.relname = ANY(%(tables)s)
"""

# pg_constraint.confdeltype
_ON_DELETE = {
    "a": "NO ACTION",
    "r": "RESTRICT",
    "c": "CASCADE",
    "n": "SET NULL",
    "d": "SET DEFAULT",
}


def _postgresql_tables(
    connection: Connection, tables: list[str], schema: str | None
) -> dict[str, FoundTable]:
    params = {"schema": schema, "tables": tables}
    found: dict[str, FoundTable] = {}
    for name, column, declared, nullable, has_default in _rows(connection, _PG_COLUMNS, params):
        table = found.setdefault(str(name), FoundTable())
        table.columns[str(column)] = Column(
            type_family(str(declared)), bool(nullable), bool(has_default)
        )
    for name, primary, unique, columns in _rows(connection, _PG_INDEXES, params):
        indexed = found.get(str(name))
        if indexed is None:
            continue
        key = tuple(str(column) for column in columns)
        indexed.indexes.add(key)
        if primary:
            indexed.primary_key = frozenset(key)
        if unique:
            indexed.unique_keys.add(frozenset(key))
    for name, on_delete, referred, columns, referred_columns in _rows(
        connection, _PG_FOREIGN_KEYS, params
    ):
        referring = found.get(str(name))
        if referring is None:
            continue
        action = _ON_DELETE.get(str(on_delete), str(on_delete))
        referring.foreign_keys |= {
            (str(column), str(referred), str(target), action)
            for column, target in zip(columns, referred_columns, strict=True)
        }
    return found


__all__ = ["Column", "FoundTable", "read_tables", "type_family"]
