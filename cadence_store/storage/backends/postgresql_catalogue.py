"""PostgreSQL's catalogue of the owned tables: `pg_catalog` in three queries for all.

Read straight from the catalogue rather than through SQLAlchemy's reflection, whose
queries are compiled afresh for every new engine (most of a first open's cost).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import Connection

if TYPE_CHECKING:
    from ..catalogue import FoundTable


def _names_of(keys: str, relation: str) -> str:
    """The attribute names of `relation` at the positions `keys`, in their order."""
    return f"""array(SELECT a.attname FROM unnest({keys}) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = {relation} AND a.attnum = k.attnum
             ORDER BY k.ord)"""  # noqa: S608 (fixed texts, never a caller's value)


_IN_SCHEMA: Final = "n.nspname = coalesce(%(schema)s, current_schema())"
_COLUMNS: Final = f"""
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull,
       a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> ''
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE {_IN_SCHEMA} AND c.relname = ANY(%(tables)s)
  AND c.relkind IN ('r', 'p')
"""  # noqa: S608
_INDEXES: Final = f"""
SELECT c.relname, i.indisprimary, i.indisunique, {_names_of("i.indkey", "c.oid")}
FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE {_IN_SCHEMA} AND c.relname = ANY(%(tables)s)
"""  # noqa: S608
_FOREIGN_KEYS: Final = f"""
SELECT c.relname, con.confdeltype, r.relname,
       {_names_of("con.conkey", "con.conrelid")},
       {_names_of("con.confkey", "con.confrelid")}
FROM pg_constraint con
JOIN pg_class c ON c.oid = con.conrelid
JOIN pg_class r ON r.oid = con.confrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE con.contype = 'f' AND {_IN_SCHEMA}
  AND c.relname = ANY(%(tables)s)
"""  # noqa: S608
# pg_constraint.confdeltype
_ON_DELETE: Final = {
    "a": "NO ACTION",
    "r": "RESTRICT",
    "c": "CASCADE",
    "n": "SET NULL",
    "d": "SET DEFAULT",
}


def _rows(connection: Connection, sql: str, params: Any) -> list[Sequence[Any]]:
    return list(connection.exec_driver_sql(sql, params).fetchall())


def read_tables(
    connection: Connection, tables: list[str], schema: str | None
) -> dict[str, FoundTable]:
    """The tables of `tables` that exist in `schema` (else the current schema)."""
    from ..catalogue import Column, FoundTable, type_family

    params = {"schema": schema, "tables": tables}
    found: dict[str, FoundTable] = {}
    for name, column, declared, nullable, has_default in _rows(connection, _COLUMNS, params):
        table = found.setdefault(str(name), FoundTable())
        table.columns[str(column)] = Column(
            type_family(str(declared)), bool(nullable), bool(has_default)
        )
    for name, primary, unique, columns in _rows(connection, _INDEXES, params):
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
        connection, _FOREIGN_KEYS, params
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


__all__ = ["read_tables"]
