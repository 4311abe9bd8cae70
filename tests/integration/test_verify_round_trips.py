"""verify_integrity's first reads go together: on PostgreSQL a short run's five reads
are one round trip (psycopg's pipeline mode), where one by one they cost five (a
whole-store verification of short runs is mostly round trips). Counted in the protocol
itself: libpq's trace of the messages the client sends."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event
from sqlalchemy.orm import Session
from support import ROOT_HASH

from cadence_store import RunRepository, RunStore, upgrade
from cadence_store.repository.run_repository import EVENT_BATCH
from cadence_store.storage.run_statements import (
    BINDINGS_OF_RUN,
    EVENTS_OF_RUN_PAGE,
    LOCATED_RECEIPTS_OF_RUN_PAGE,
    UNLOCATED_OPERATIONS_OF_RUN_PAGE,
    VERIFY_COLUMNS,
)
from cadence_store.storage.statements import Statements

KEY = "c" * 64


def _short_run(url: str) -> str:
    upgrade(url)
    with RunStore(url, root_hash=ROOT_HASH) as store:
        run = store.start_run("abel-design", provisional_key=KEY, operation_id="s")
        for n in range(5):
            store.transition(run.run_id, "paused", operation_id=f"t{n}", code=f"c{n}")
        store.bind_delivery(run.run_id, "gate-a", 1, KEY, operation_id="b")
        return run.run_id


def test_the_reads_sent_together_answer_as_one_by_one(database_url: str) -> None:
    """`raw_rows_of_each` answers each query what `raw_rows` answers it, in order, on
    both engines (pipelined on PostgreSQL, one by one on SQLite)."""
    run_id = _short_run(database_url)
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            sql = Statements(connection)
            values = {"run_id": run_id, "limit": EVENT_BATCH}
            queries = (
                VERIFY_COLUMNS,
                UNLOCATED_OPERATIONS_OF_RUN_PAGE,
                LOCATED_RECEIPTS_OF_RUN_PAGE,
                EVENTS_OF_RUN_PAGE,
                BINDINGS_OF_RUN,
            )
            together = sql.raw_rows_of_each([(query, values) for query in queries])
            one_by_one = [sql.raw_rows(query, **values) for query in queries]
            assert together == one_by_one
            assert [len(rows) for rows in together] == [1, 0, 7, 7, 1]
            assert sql.raw_rows_of_each([]) == []
    finally:
        engine.dispose()


def _client_syncs(trace: Path) -> int:
    """Sync messages the client sent, each the end of a round trip (libpq trace lines:
    `<time> TAB F TAB <length> TAB Sync`)."""
    return sum(
        1
        for line in trace.read_text().splitlines()
        if line.split("\t")[1:2] == ["F"] and line.split("\t")[3:4] == ["Sync"]
    )


@pytest.mark.parametrize("listened", [False, True], ids=["plain", "host-listens"])
def test_a_short_run_verifies_in_one_round_trip_on_postgresql(
    pg_database_url: str, listened: bool
) -> None:
    """A host `Session`'s `RunRepository.verify_integrity` of a short run sends its
    reads in one pipeline: one Sync. With a host listening to the engine's statements,
    they go one by one through the `Connection`, so the host sees each."""
    run_id = _short_run(pg_database_url)
    engine = create_engine(pg_database_url)
    seen: list[str] = []
    if listened:
        event.listen(engine, "before_cursor_execute", lambda *args: seen.append(args[2]))
    try:
        with Session(engine) as session, tempfile.TemporaryDirectory() as directory:
            runs = RunRepository(session)
            runs.status(run_id)  # the transaction has begun: only verification is traced
            raw = session.connection().connection.dbapi_connection
            trace = Path(directory) / "trace"
            with trace.open("w") as out:
                raw.pgconn.trace(out.fileno())
                try:
                    assert runs.verify_integrity(run_id).sequence == 7
                finally:
                    raw.pgconn.untrace()
            syncs = _client_syncs(trace)
            session.rollback()
    finally:
        engine.dispose()
    if listened:
        assert syncs == 5 and sum("FROM public.events" in text for text in seen) == 1, seen
    else:
        assert syncs == 1
