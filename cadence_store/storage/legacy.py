"""Recognising a cadence 1.x store, exactly as cadence 1.x's own opener did.

Only reads (PRAGMAs and SELECTs): this runs before anything may change the file. The
reference shapes come from cadence 1.x's schema text, executed in a private in-memory
SQLite database and described the way cadence 1.x's `matchesSqliteSchema` described
them: per table the columns (name, type, notnull, default, pk) — extra columns allowed —
the foreign keys, the unique keys and the STRICT flag, all ten tables of the run schema.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..journal.canonical import canonical_json
from . import sqlite_pragmas as pragmas
from .sqlite_pragmas import Query

PROOF_COLUMNS: Final = ("approval_revision", "contract_hash", "record_hash")

# cadence 1.x `RUN_SCHEMA` (storage-schema.ts), the current and v4 run schema.
RUN_SCHEMA_CURRENT: Final = """
CREATE TABLE runs (
  run_id TEXT PRIMARY KEY, root_hash TEXT NOT NULL, stage TEXT NOT NULL,
  lookup_key TEXT NOT NULL, change_name TEXT, provisional_key TEXT, state TEXT NOT NULL,
  sequence INTEGER NOT NULL, event_hash TEXT NOT NULL, delivery_revision INTEGER,
  projection_json TEXT NOT NULL, terminal_tombstone TEXT,
  UNIQUE (root_hash, stage, lookup_key)
) STRICT;
CREATE TABLE delivery_bindings (
  run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, gate TEXT NOT NULL,
  revision INTEGER NOT NULL, receipt_hash TEXT NOT NULL, approval_revision INTEGER,
  contract_hash TEXT, record_hash TEXT, operation_id TEXT NOT NULL,
  PRIMARY KEY (run_id, gate, revision), UNIQUE (run_id, operation_id)
) STRICT;
CREATE TABLE events (
  run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, sequence INTEGER NOT NULL,
  type TEXT NOT NULL, payload_json TEXT NOT NULL, prior_hash TEXT NOT NULL,
  event_hash TEXT NOT NULL, PRIMARY KEY (run_id, sequence), UNIQUE (run_id, event_hash)
) STRICT;
CREATE TABLE tasks (
  run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, task_id TEXT NOT NULL,
  state TEXT NOT NULL, phase TEXT, projection_json TEXT NOT NULL,
  PRIMARY KEY (run_id, task_id)
) STRICT;
CREATE TABLE operations (
  run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  operation_id TEXT NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL, outcome_json TEXT,
  lease_token TEXT, lease_expires_at INTEGER, PRIMARY KEY (run_id, operation_id)
) STRICT;
CREATE TABLE route_health (
  route_fingerprint TEXT PRIMARY KEY, state TEXT NOT NULL, next_half_open_at INTEGER,
  projection_json TEXT NOT NULL
) STRICT;
CREATE TABLE artifacts (
  content_hash TEXT PRIMARY KEY, size_bytes INTEGER NOT NULL, seal_state TEXT NOT NULL,
  owner_run_id TEXT REFERENCES runs(run_id) ON DELETE CASCADE,
  reference_count INTEGER NOT NULL
) STRICT;
CREATE TABLE workspace_revisions (
  revision_id TEXT PRIMARY KEY,
  owner_run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  parent_revision_id TEXT, manifest_hash TEXT NOT NULL
) STRICT;
CREATE TABLE apply_transactions (
  transaction_id TEXT PRIMARY KEY,
  owner_run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  state TEXT NOT NULL, intent_json TEXT NOT NULL, recovery_json TEXT
) STRICT;
CREATE TABLE bootstrap_handoffs (
  handoff_id TEXT PRIMARY KEY,
  owner_run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  receipt_hash TEXT NOT NULL UNIQUE, state TEXT NOT NULL, facts_json TEXT NOT NULL
) STRICT;
"""

# cadence 1.x `LEGACY_RUN_SCHEMA_V2`: the run schema without the approval-proof columns.
RUN_SCHEMA_V2: Final = RUN_SCHEMA_CURRENT.replace(
    " approval_revision INTEGER,\n  contract_hash TEXT, record_hash TEXT,", ""
)

LEGACY_TABLES: Final = (
    "runs",
    "delivery_bindings",
    "events",
    "tasks",
    "operations",
    "route_health",
    "artifacts",
    "workspace_revisions",
    "apply_transactions",
    "bootstrap_handoffs",
)

# Names whose presence marks a database as (once) a cadence run store.
CADENCE_TABLE_NAMES: Final = frozenset(
    {"runs", "events", "operations", "delivery_bindings", "schema_meta"}
)

# The Alembic revision a recognised cadence 1.x store is stamped at.
REVISION_FOR_VERSION: Final[dict[int | None, str]] = {
    2: "cadence1x_v2",
    4: "cadence1x_v4",
    None: "cadence1x_current",
}


@dataclass(frozen=True)
class TableShape:
    columns: frozenset[str]
    foreign_keys: str
    unique_keys: str
    strict: int


def describe_table(query: Query, table: str) -> TableShape:
    """cadence 1.x `describeTable`, through any read-only query function."""
    unique_keys = [
        canonical_json(
            {
                "partial": index.partial,
                "fields": [
                    {"name": key.name, "coll": key.coll, "desc": key.desc}
                    for key in pragmas.index_keys(query, index.name)
                ],
            }
        )
        for index in pragmas.indexes(query, table)
        if index.unique == 1
    ]
    strict_rows = query(
        "SELECT strict FROM pragma_table_list WHERE schema = 'main' AND name = ?", (table,)
    )
    return TableShape(
        columns=frozenset(
            canonical_json(
                {
                    "name": c.name,
                    "type": c.type,
                    "notnull": c.notnull,
                    "dflt_value": c.default,
                    "pk": c.pk,
                }
            )
            for c in pragmas.columns(query, table)
        ),
        foreign_keys=canonical_json(
            sorted(
                canonical_json(
                    {
                        "target": fk[2],
                        "from": fk[3],
                        "to": fk[4],
                        "on_update": fk[5],
                        "on_delete": fk[6],
                        "match": fk[7],
                        "seq": fk[1],
                    }
                )
                for fk in pragmas.foreign_key_rows(query, table)
            )
        ),
        unique_keys=canonical_json(sorted(unique_keys)),
        strict=int(strict_rows[0][0]) if strict_rows and strict_rows[0][0] is not None else 0,
    )


@functools.cache
def reference_shapes(schema: str) -> dict[str, TableShape]:
    reference = sqlite3.connect(":memory:")
    try:
        reference.executescript(schema)

        def query(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            return reference.execute(sql, tuple(params)).fetchall()

        return {table: describe_table(query, table) for table in LEGACY_TABLES}
    finally:
        reference.close()


def matches_schema(query: Query, schema: str) -> bool:
    """cadence 1.x `matchesSqliteSchema`: every table, key and STRICT flag; extra columns ok."""
    return schema_difference(query, schema) is None


def schema_difference(query: Query, schema: str) -> str | None:
    """The first way the store differs from `schema` (as `matches_schema` judges), or None."""
    for table, expected in reference_shapes(schema).items():
        actual = describe_table(query, table)
        if actual.strict != expected.strict:
            return f"table {table}: STRICT is {actual.strict}, expected {expected.strict}"
        if not expected.columns <= actual.columns:
            missing = sorted(str(column) for column in expected.columns - actual.columns)
            return f"table {table}: columns differ ({', '.join(missing)} not found)"
        if actual.foreign_keys != expected.foreign_keys:
            return f"table {table}: foreign keys differ"
        if actual.unique_keys != expected.unique_keys:
            return f"table {table}: unique keys differ"
    return None


def column_names(query: Query, table: str) -> list[str]:
    return [str(column.name) for column in pragmas.columns(query, table)]


def legacy_revision(query: Query, tables: set[str]) -> str | None:
    """The revision a cadence 1.x store is stamped at, or None when it is not one.

    Mirrors cadence 1.x `hasCurrentSchema` and `supportedLegacyVersion`.
    """
    return assess_legacy(query, tables)[0]


def assess_legacy(query: Query, tables: set[str]) -> tuple[str | None, str]:
    """`legacy_revision`, and why a store that is not one is not (for the log)."""
    if "schema_meta" not in tables:
        difference = schema_difference(query, RUN_SCHEMA_CURRENT)
        if difference is not None:
            return None, f"no schema_meta, and not the current schema: {difference}"
        return REVISION_FOR_VERSION[None], ""
    if column_names(query, "schema_meta") != ["version"]:
        return None, "schema_meta does not have exactly one column, version"
    rows = query("SELECT version FROM schema_meta", ())
    if len(rows) != 1:
        return None, f"schema_meta has {len(rows)} rows, expected 1"
    version = rows[0][0]
    if type(version) is not int or version not in (2, 4):
        return None, f"schema_meta.version {version!r} is neither 2 nor 4"
    difference = schema_difference(query, RUN_SCHEMA_V2 if version == 2 else RUN_SCHEMA_CURRENT)
    if difference is not None:
        return None, f"schema_meta.version {version}, but {difference}"
    # A v2 store cannot already hold proof columns: never repair an ambiguous upgrade.
    if version == 2 and any(c in PROOF_COLUMNS for c in column_names(query, "delivery_bindings")):
        return None, "schema_meta.version 2 with approval-proof columns"
    return REVISION_FOR_VERSION[version], ""
