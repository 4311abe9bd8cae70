"""SQLite's catalogue, read through its PRAGMAs: the one place that builds them.

Table and index names come from `sqlite_master` or the fixed table lists and are quoted
here (doubled quotes), never formatted raw into a PRAGMA. Every reader takes a read-only
query function, so the same code serves the shape check, the cadence 1.x adoption (which
must only read) and the migrations' comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection

Query = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]
ForeignKey = tuple[str, str, str, str]  # (column, referred table, referred column, ON DELETE)


class ColumnInfo(NamedTuple):  # table_info
    cid: int
    name: str
    type: str
    notnull: int
    default: Any
    pk: int


class IndexInfo(NamedTuple):  # index_list
    seq: int
    name: str
    unique: int
    origin: str
    partial: int


class IndexKey(NamedTuple):  # index_xinfo: the index's columns, keys and the row id
    seqno: int
    cid: int
    name: str | None
    desc: int
    coll: str | None
    key: int


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def query_of(connection: Connection) -> Query:
    """A query function on a SQLAlchemy connection (in its current transaction)."""

    def query(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in connection.exec_driver_sql(sql, tuple(params)).fetchall()]

    return query


def table_names(query: Query) -> set[str]:
    return {str(row[0]) for row in query("SELECT name FROM sqlite_master WHERE type = 'table'", ())}


def columns(query: Query, table: str) -> list[ColumnInfo]:
    return [ColumnInfo(*row) for row in query(f"PRAGMA table_info({quote(table)})", ())]


def indexes(query: Query, table: str) -> list[IndexInfo]:
    return [IndexInfo(*row) for row in query(f"PRAGMA index_list({quote(table)})", ())]


def index_keys(query: Query, index: str) -> list[IndexKey]:
    """The index's key columns in order (index_xinfo without the row id and extras)."""
    rows = query(f"PRAGMA index_xinfo({quote(index)})", ())
    return [key for key in (IndexKey(*row) for row in rows) if key.key == 1]


def index_columns(query: Query, index: str) -> tuple[str, ...]:
    return tuple(str(key.name) for key in index_keys(query, index))


def unique_keys(query: Query, table: str) -> set[frozenset[str]]:
    return {
        frozenset(index_columns(query, index.name))
        for index in indexes(query, table)
        if index.unique == 1
    }


def foreign_keys(query: Query, table: str) -> set[ForeignKey]:
    # foreign_key_list: id, seq, table, from, to, on_update, on_delete, match
    rows = query(f"PRAGMA foreign_key_list({quote(table)})", ())
    return {(str(r[3]), str(r[2]), str(r[4]), str(r[6]).upper()) for r in rows}


def foreign_key_rows(query: Query, table: str) -> list[tuple[Any, ...]]:
    """foreign_key_list as SQLite answers it (cadence 1.x compared it whole)."""
    return query(f"PRAGMA foreign_key_list({quote(table)})", ())
