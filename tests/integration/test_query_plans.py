"""The lookups that must not grow with the store: their query plans use the right index.

Speed is measured in benchmarks/, never asserted here; what is asserted is the plan. A
plan that scans every run of a root (which PostgreSQL chose for an EXISTS form of the
start receipt lookup) makes start_run slower as runs accumulate.
"""

from __future__ import annotations

import json

from sqlalchemy import create_engine

import cadence_store
from cadence_store import RunStore
from cadence_store.journal.views import RunListing
from cadence_store.repository.queries import listing_statement
from cadence_store.storage.batch_statements import RECEIPTS_OF_BATCH
from cadence_store.storage.read_statements import (
    EVENTS_OF_RUN_AFTER,
    EVENTS_OF_RUN_BEFORE,
    LEASE_ROWS_OF_RUN,
    OPERATION_COUNT_OF_RUN,
    OPERATION_ROWS_OF_RUN,
    RECEIPT_ROWS_OF_RUN_AFTER,
    RECEIPT_ROWS_OF_RUN_BEFORE,
)
from cadence_store.storage.run_statements import (
    EVENTS_OF_RUN,
    HEAD,
    LOCATED_RECEIPTS_OF_RUN,
    LOCATED_RECEIPTS_OF_RUN_PAGE,
    RUN_BY_KEY,
    START_RECEIPTS,
)
from cadence_store.storage.statements import Statement, compile_statement

ROOT = "ab" * 32
PARAMS = {
    "operation_id": "start-7",
    "root_hash": ROOT,
    "stage": "abel-implement",
    "lookup_key": "change:c-7",
    "run_id": "00000000-0000-4000-8000-000000000000",
    "after": "00000000-0000-4000-8000-000000000000",
    "limit": 50,
    "before": 100,
    "until": 100,
    "rows": json.dumps([{"run_id": f"r-{n}", "operation_id": f"start-{n}"} for n in range(100)]),
}


def _plan_text(url: str, query: Statement, **values: object) -> str:
    params = {**PARAMS, **values}
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            statement = compile_statement(query, connection.dialect)
            if connection.dialect.name == "sqlite":
                arguments = statement.arguments(params)
                rows = connection.exec_driver_sql(
                    "EXPLAIN QUERY PLAN " + statement.text, arguments
                ).all()
                return "\n".join(str(row[-1]) for row in rows)
            connection.exec_driver_sql("ANALYZE")
            rows = connection.exec_driver_sql(
                "EXPLAIN (FORMAT JSON) " + statement.text, statement.arguments(params)
            ).all()
            return json.dumps(rows[0][0])
    finally:
        engine.dispose()


def _store_with_runs(url: str, count: int) -> None:
    cadence_store.upgrade(url)
    with RunStore(url, root_hash=ROOT) as store, store.unit_of_work() as uow:
        for index in range(count):
            uow.runs.start_run("abel-implement", change=f"c-{index}", operation_id=f"start-{index}")


def test_start_receipts_are_found_by_operation_id(database_url: str) -> None:
    _store_with_runs(database_url, 300)
    plan = _plan_text(database_url, START_RECEIPTS)
    assert "ix_operations_operation_id" in plan, plan
    # the runs of the root are never scanned: runs is only reached by primary key
    assert "uq_runs_root_hash_stage_lookup_key" not in plan, plan  # PostgreSQL's name
    assert "root_hash=? AND stage=?" not in plan, plan  # SQLite's autoindex search


def test_run_lookups_use_their_keys(database_url: str) -> None:
    _store_with_runs(database_url, 300)
    by_key = _plan_text(database_url, RUN_BY_KEY)
    assert (
        "uq_runs_root_hash_stage_lookup_key" in by_key
        or "(root_hash=? AND stage=? AND lookup_key=?)" in by_key
    ), by_key
    head = _plan_text(database_url, HEAD)
    assert "pk_runs" in head or "sqlite_autoindex_runs_1" in head, head
    events = _plan_text(database_url, EVENTS_OF_RUN)
    assert "pk_events" in events or "sqlite_autoindex_events_1" in events, events


def test_read_side_lookups_use_their_keys(database_url: str) -> None:
    _store_with_runs(database_url, 300)
    # a page of `list_runs` resumes at its cursor in the primary key, never a full sort
    page = _plan_text(database_url, listing_statement(RunListing(after="x", limit=50)))
    assert "pk_runs" in page or "sqlite_autoindex_runs_1 (run_id>?)" in page, page
    # a run's operations, in the primary key's (run_id, operation_id) order
    receipts = _plan_text(database_url, OPERATION_ROWS_OF_RUN)
    assert "pk_operations" in receipts or "sqlite_autoindex_operations_1" in receipts, receipts


def test_a_run_page_reads_through_the_keys(database_url: str) -> None:
    """The web view's run page and list: a page of a long run's events, its leases and
    a page of its receipts either way, and a page of runs back, each through a primary key (never
    a scan of the store, or a sort of the run's rows)."""
    _store_with_runs(database_url, 300)
    with RunStore(database_url, root_hash=ROOT) as store:
        run_id = store.run_ids()[0]
        store.transition_many(
            [{"run_id": run_id, "to": "paused", "operation_id": f"t-{n}"} for n in range(3000)]
        )
    for query in (EVENTS_OF_RUN_AFTER, EVENTS_OF_RUN_BEFORE):
        plan = _plan_text(database_url, query, run_id=run_id, after=100, limit=100)
        assert "pk_events" in plan or "sqlite_autoindex_events_1" in plan, (query.name, plan)
        assert "TEMP B-TREE" not in plan and '"Sort"' not in plan, (query.name, plan)
    receipt_pages = (RECEIPT_ROWS_OF_RUN_AFTER, RECEIPT_ROWS_OF_RUN_BEFORE)
    cursor = {"after": "p-50", "before": "p-50"}
    for query in (LEASE_ROWS_OF_RUN, *receipt_pages, OPERATION_COUNT_OF_RUN):
        plan = _plan_text(database_url, query, **cursor)
        assert "Seq Scan" not in plan and "SCAN operations" not in plan, (query.name, plan)
        assert "_operations" in plan, (query.name, plan)  # a key of operations
    for query in (LEASE_ROWS_OF_RUN, *receipt_pages):
        plan = _plan_text(database_url, query, **cursor)
        assert "TEMP B-TREE" not in plan and '"Sort"' not in plan, (query.name, plan)
    back = _plan_text(
        database_url, listing_statement(RunListing(after="x", limit=50), backwards=True)
    )
    assert "pk_runs" in back or "sqlite_autoindex_runs_1 (run_id<?)" in back, back
    assert "TEMP B-TREE" not in back and '"Sort"' not in back, back


def test_verification_streams_receipts_in_chain_order_by_their_index(database_url: str) -> None:
    """Issue 27: a run's receipts in sequence order come from the (run_id, sequence)
    index, never a sort of all of them (which would grow with the run)."""
    _store_with_runs(database_url, 300)
    for query in (LOCATED_RECEIPTS_OF_RUN, LOCATED_RECEIPTS_OF_RUN_PAGE):
        located = _plan_text(database_url, query)
        assert "ix_operations_run_id_sequence" in located, (query.name, located)
        assert "TEMP B-TREE" not in located and '"Sort"' not in located, (query.name, located)


def test_a_batch_finds_its_receipts_by_primary_key(database_url: str) -> None:
    """`transition_many` reads its requests' receipts by (run id, operation id): one
    primary-key lookup each, never a scan of the store's receipts."""
    _store_with_runs(database_url, 300)
    with RunStore(database_url, root_hash=ROOT) as store:
        run_id = store.run_ids()[0]
        # a long run: a scan of its receipts (the (run_id, sequence) index) would grow
        store.transition_many(
            [{"run_id": run_id, "to": "paused", "operation_id": f"t-{n}"} for n in range(3000)]
        )
    plan = _plan_text(database_url, RECEIPTS_OF_BATCH)
    if "sqlite_autoindex" in plan or "SEARCH" in plan:  # SQLite: the primary key itself
        assert "sqlite_autoindex_operations_1 (run_id=? AND operation_id=?)" in plan, plan
    else:  # PostgreSQL: an index lookup per pair, by its operation id (or both columns)
        assert '"Node Type": "Nested Loop"' in plan and '"Hash Join"' not in plan, plan
        assert "pk_operations" in plan or "ix_operations_operation_id" in plan, plan
    assert "Seq Scan" not in plan and "SCAN operations" not in plan, plan
    assert "ix_operations_run_id_sequence" not in plan, plan  # never the run's receipts
