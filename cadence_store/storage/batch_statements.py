"""The statements of a batch of appends (`repository/batches.py`): its receipts read at
once, and its runs' heads, its events and its receipts each written at once.

A batch's rows are bound as one parameter, a JSON array of row objects
(`statements.json_rows`, read as rows by `Backend.row_set`). On PostgreSQL a write of
them is one statement over `json_to_recordset`, whatever the batch's size: one round
trip and one parse and plan, where a statement per row costs the server a parse and plan
each (the store prepares nothing: safe behind a transaction pooler), and psycopg's text
arrays cost an escape per element. On SQLite a write is the one-row statement stepped by
`executemany`. JSON keeps every stored text exact: a string decodes to the very
characters it encoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy import BigInteger, and_, column, literal, select, true, update
from sqlalchemy.sql import ClauseElement

from ..journal.vocabulary import COMMITTED
from .append_statements import (
    ADVANCE_RUN,
    ADVANCED_COLUMNS,
    INSERT_EVENT,
    INSERT_RECEIPT,
    not_before,
)
from .backends import Backend
from .models import events, operations, runs
from .rows import BatchReceiptRow
from .statements import Query, RowsWrite

EVENT_FIELDS: Final = ("run_id", "sequence", "type", "payload_json", "prior_hash", "event_hash")
RECEIPT_FIELDS: Final = ("run_id", "operation_id", "kind", "outcome_json", "sequence")
PAIR_FIELDS: Final = ("run_id", "operation_id")
ADVANCE_FIELDS: Final = ("run_id", "prior_sequence", "prior_hash", "now", *ADVANCED_COLUMNS)
# the head an advance names, as the run columns it is compared with
_FIELD_COLUMNS: Final = {"prior_sequence": "sequence", "prior_hash": "event_hash"}


def _recordset(backend: Backend, table: Any, fields: Sequence[str], alias: str) -> Any:
    """The rows of the JSON parameter `rows`, each field typed as the column of `table`
    it names (`_FIELD_COLUMNS`: a field named otherwise)."""
    return backend.row_set([column(name, _column_type(table, name)) for name in fields], alias)


def _column_type(table: Any, field: str) -> Any:
    if field == "now":
        return BigInteger()  # milliseconds, as `append_time`'s
    return table.c[_FIELD_COLUMNS.get(field, field)].type


def _advance_runs(backend: Backend) -> ClauseElement:
    """ADVANCE_RUN for many runs: each row's head moved on, only from the head it names
    (the count of runs advanced says whether every one was)."""
    if not backend.binds_row_sets:
        return ADVANCE_RUN.build(backend)
    batch = _recordset(backend, runs, ADVANCE_FIELDS, "batch")
    return (
        update(runs)
        .where(
            runs.c.run_id == batch.c.run_id,
            runs.c.sequence == batch.c.prior_sequence,
            runs.c.event_hash == batch.c.prior_hash,
        )
        .values(
            updated_at=not_before(backend, runs.c.updated_at, batch.c.now),
            **{name: batch.c[name] for name in ADVANCED_COLUMNS},
        )
    )


def _insert_events(backend: Backend) -> ClauseElement:
    if not backend.binds_row_sets:
        return INSERT_EVENT.build(backend)
    batch = _recordset(backend, events, EVENT_FIELDS, "batch")
    # as INSERT_EVENT: written after its run row, stamped with that row's time
    stamped = select(runs.c.updated_at).where(runs.c.run_id == batch.c.run_id).scalar_subquery()
    return events.insert().from_select(
        [*EVENT_FIELDS, "recorded_at", "feed_position"],
        select(
            *(batch.c[name] for name in EVENT_FIELDS),
            stamped,
            backend.feed_position_on_insert(),
        ),
    )


def _insert_receipts(backend: Backend) -> ClauseElement:
    if not backend.binds_row_sets:
        return INSERT_RECEIPT.build(backend)
    batch = _recordset(backend, operations, RECEIPT_FIELDS, "batch")
    return operations.insert().from_select(
        [*RECEIPT_FIELDS, "state"],
        select(
            *(batch.c[name] for name in RECEIPT_FIELDS),
            literal(COMMITTED, type_=operations.c.state.type),
        ),
    )


_RECEIPT_COLUMNS: Final = (
    operations.c.run_id,
    operations.c.operation_id,
    operations.c.kind,
    operations.c.state,
    operations.c.outcome_json,
)


def _receipts_of_batch(backend: Backend) -> ClauseElement:
    """The receipts of a batch's (run id, operation id) pairs (the JSON parameter
    `rows`): one primary-key lookup each, never a scan of the store's receipts. Where the
    engine has them, each lookup is a LATERAL subquery that the planner cannot flatten
    into a join: joined, PostgreSQL hashes the whole table while the table is small (its
    plans then grow with the store)."""
    pairs = _recordset(backend, operations, PAIR_FIELDS, "wanted")
    match = and_(
        operations.c.run_id == pairs.c.run_id,
        operations.c.operation_id == pairs.c.operation_id,
    )
    if not backend.lateral_lookups:
        return select(*_RECEIPT_COLUMNS).select_from(pairs).join(operations, match)
    found = (
        select(*_RECEIPT_COLUMNS)
        .where(match)
        .limit(1)  # at most one (the primary key); and a limit keeps it a subquery
        .lateral("found")
    )
    return select(*found.c).select_from(pairs.join(found, true()))


ADVANCE_RUNS: Final = RowsWrite("advance_runs", _advance_runs, ADVANCE_FIELDS)
INSERT_EVENTS: Final = RowsWrite("insert_events", _insert_events, EVENT_FIELDS)
INSERT_RECEIPTS: Final = RowsWrite("insert_receipts", _insert_receipts, RECEIPT_FIELDS)
RECEIPTS_OF_BATCH: Final = Query("receipts_of_batch", _receipts_of_batch, BatchReceiptRow)
