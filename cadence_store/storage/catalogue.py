"""The owned tables as the database's own catalogue describes them (for the shape check).

Read straight from the catalogue by the engine's backend (`Backend.read_catalogue`:
SQLite's PRAGMAs, PostgreSQL's `pg_catalog` in three queries for all four tables) rather
than through SQLAlchemy's reflection, whose queries are compiled afresh for every new
engine (most of a first open's cost on PostgreSQL).
Unique keys and indexes are column sets and tuples, so an adopted cadence 1.x store's
unnamed, inline constraints compare equal to the models' named ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import Connection

from .backends import backend_for
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
    return backend_for(connection).read_catalogue(connection, sorted(tables), schema)


__all__ = ["Column", "FoundTable", "read_tables", "type_family"]
