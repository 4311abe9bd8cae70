"""Bytes on disk per event for `benchmarks.scale`: each table and index by name, and the
same rows in cadence 1.x's tables.

SQLite: the `dbstat` virtual table (every page of every table and index). PostgreSQL:
`pg_relation_size` of each table (its TOAST included) and of each index. The cadence 1.x
comparison is on SQLite, the only engine 1.x had: its `runs`, `events`, `operations` and
`delivery_bindings` tables are created from the DDL of the cadence 1.x fixture store
(`tests/fixtures/cadence-1x/current.sqlite3`) in a fresh file and filled by SQL with the
same rows (the columns 1.x has), then measured the same way.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import sqlalchemy

from .common import HERE

FIXTURE_1X = HERE.parent / "tests" / "fixtures" / "cadence-1x" / "current.sqlite3"
TABLES_1X = ("runs", "events", "operations", "delivery_bindings")


def sqlite_table_sizes(connection: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    """{table: {"bytes": n, "indexes": {index name: bytes}}} of the main database."""
    owners = dict(
        connection.execute(
            "SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')"
        ).fetchall()
    )
    sizes: dict[str, dict[str, Any]] = {}
    for name, size in connection.execute(
        "SELECT name, SUM(pgsize) FROM dbstat WHERE aggregate = FALSE GROUP BY name"
    ).fetchall():
        table = owners.get(name, name)
        entry = sizes.setdefault(table, {"bytes": 0, "indexes": {}})
        if table == name:
            entry["bytes"] += int(size)
        else:
            entry["indexes"][name] = int(size)
    return sizes


def storage_summary(sizes: dict[str, dict[str, Any]], events: int) -> dict[str, Any]:
    def total(table: str) -> int:
        entry = sizes.get(table, {"bytes": 0, "indexes": {}})
        return int(entry["bytes"]) + int(sum(entry["indexes"].values()))

    everything = sum(total(table) for table in sizes)
    return {
        "tables": sizes,
        "events_table_and_indexes_bytes_per_event": round(total("events") / events, 1),
        "store_bytes_per_event": round(everything / events, 1),
    }


def _events_of(connection: sqlite3.Connection) -> int:
    (count,) = connection.execute("SELECT COUNT(*) FROM events").fetchone()
    return int(count)


def sqlite_storage(path: Path, workdir: Path) -> dict[str, Any]:
    """This store's sizes, and those of the same rows in cadence 1.x's tables."""
    with sqlite3.connect(path) as connection:
        events = _events_of(connection)
        ours = storage_summary(sqlite_table_sizes(connection), events)
    legacy = workdir / "cadence-1x-shaped.sqlite3"
    compact = workdir / "cadence-1x-shaped-compact.sqlite3"
    for stale in (legacy, compact):
        stale.unlink(missing_ok=True)
    fixture = sqlite3.connect(f"file:{FIXTURE_1X}?mode=ro&immutable=1", uri=True)
    ddl = dict(
        fixture.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?, ?)",
            TABLES_1X,
        ).fetchall()
    )
    columns = {
        table: [row[1] for row in fixture.execute(f"PRAGMA table_info({table})")]
        for table in TABLES_1X
    }
    fixture.close()
    connection = sqlite3.connect(legacy)
    try:
        for table in TABLES_1X:
            connection.execute(ddl[table])
        connection.execute("ATTACH DATABASE ? AS store", (str(path),))
        for table in TABLES_1X:
            names = ", ".join(columns[table])
            connection.execute(
                f"INSERT INTO main.{table} ({names}) SELECT {names} FROM store.{table}"
            )
        connection.commit()
        connection.execute("DETACH DATABASE store")
        # a compacted copy, written straight to its own file: a plain VACUUM would need
        # a temporary copy and a rollback journal too (three times the store's size)
        connection.execute("VACUUM INTO ?", (str(compact),))
    finally:
        connection.close()
        legacy.unlink(missing_ok=True)
    try:
        with closing(sqlite3.connect(compact)) as compacted:
            theirs = storage_summary(sqlite_table_sizes(compacted), events)
    finally:
        compact.unlink(missing_ok=True)
    return {
        "events": events,
        "cadence_store": ours,
        "cadence_1x_shaped": theirs,
        "ratio": round(ours["store_bytes_per_event"] / theirs["store_bytes_per_event"], 2),
    }


def postgres_storage(url: str) -> dict[str, Any]:
    """This store's table and index sizes (`pg_relation_size`, TOAST with its table)."""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            events = int(connection.exec_driver_sql("SELECT COUNT(*) FROM events").scalar_one())
            tables = connection.exec_driver_sql(
                "SELECT c.relname, pg_relation_size(c.oid)"
                " + COALESCE(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0)"
                " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = 'public' AND c.relkind = 'r'"
            ).all()
            indexes = connection.exec_driver_sql(
                "SELECT t.relname, i.relname, pg_relation_size(i.oid) FROM pg_index x"
                " JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid"
                " JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = 'public'"
            ).all()
    finally:
        engine.dispose()
    sizes: dict[str, dict[str, Any]] = {
        str(name): {"bytes": int(size), "indexes": {}} for name, size in tables
    }
    for table, index, size in indexes:
        sizes.setdefault(str(table), {"bytes": 0, "indexes": {}})["indexes"][str(index)] = int(size)
    return {"events": events, "cadence_store": storage_summary(sizes, events)}
