"""Heads a store remembers between calls: the head its last committed write left a run at.

`RunStore`'s own write path computes the next event from that head without reading the
run row again; its compare-and-set names the whole head (sequence, event hash and the
stored projection), so the write lands only if the row is still exactly that head.
Anything else (another store moved the run, a row rewritten behind the journal, a replay,
a move the remembered state would not allow) falls back to the read-the-head path and
answers as it did before. Every test runs through each entry point on both engines
(conftest.py); the statement trace is SQLite's.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import event, select, update
from support import ROOT_HASH

from cadence_store import InvalidTransitionError, OperationConflictError, RunStore
from cadence_store.storage.models import runs


def _events_of(store, run_id):
    return [(e.sequence, e.payload.get("to")) for e in store.list_events(run_id)]


def test_a_head_another_store_moved_is_read_again(store, store_url):
    run = store.start_run("abel-implement", change="moved-by-other", operation_id="s1")
    store.transition(run.run_id, "validating-delivery", operation_id="t1")
    other = RunStore(store_url, root_hash=ROOT_HASH)
    try:
        other.transition(run.run_id, "ready", operation_id="o1")
    finally:
        other.close()
    # from the head this store wrote (validating-delivery) `queued` is not a legal move;
    # from the stored head (ready) it is
    moved = store.transition(run.run_id, "queued", operation_id="t2")
    assert (moved.sequence, moved.state) == (4, "queued")
    assert _events_of(store, run.run_id) == [
        (1, None),
        (2, "validating-delivery"),
        (3, "ready"),
        (4, "queued"),
    ]
    assert store.verify_integrity(run.run_id).to_json() == moved.to_json()


def test_a_stored_projection_rewritten_behind_the_journal_is_read_again(store, db):
    run = store.start_run("abel-implement", change="rewritten", operation_id="s1")
    store.transition(run.run_id, "validating-delivery", operation_id="t1")
    with db.begin() as connection:
        stored = connection.execute(
            select(runs.c.projection_json).where(runs.c.run_id == run.run_id)
        ).scalar_one()
        document = json.loads(stored)
        document["changeName"] = "renamed-behind"  # same sequence and event hash
        connection.execute(
            update(runs)
            .where(runs.c.run_id == run.run_id)
            .values(projection_json=json.dumps(document, separators=(",", ":")))
        )
    moved = store.transition(run.run_id, "ready", operation_id="t2")
    assert moved.sequence == 3
    with db.connect() as connection:
        written = connection.execute(
            select(runs.c.projection_json).where(runs.c.run_id == run.run_id)
        ).scalar_one()
    # built on the row as stored, not on the head the store wrote
    assert json.loads(written)["changeName"] == "renamed-behind"


def test_a_replay_after_a_remembered_head_writes_nothing(store, table_rows):
    run = store.start_run("abel-implement", change="replayed", operation_id="s1")
    first = store.transition(run.run_id, "paused", operation_id="t1", code="c1")
    again = store.transition(run.run_id, "paused", operation_id="t1", code="c2")
    assert again.to_json() == first.to_json()
    with pytest.raises(OperationConflictError) as conflict:
        store.transition(run.run_id, "paused", operation_id="s1")
    assert conflict.value.code == "operation-id-conflict"
    assert len(table_rows("events")) == 2
    assert store.transition(run.run_id, "ready", operation_id="t2").sequence == 3


def test_an_illegal_move_from_a_remembered_head_is_refused_and_writes_nothing(store, rejected):
    run = store.start_run("abel-implement", change="illegal", operation_id="s1")
    store.transition(run.run_id, "validating-delivery", operation_id="t1")
    with rejected(InvalidTransitionError, "invalid-run-transition:validating-delivery:queued"):
        store.transition(run.run_id, "queued", operation_id="t2")
    assert store.transition(run.run_id, "ready", operation_id="t2").sequence == 3


@pytest.mark.run_store_only
def test_a_run_store_sends_no_head_read_for_a_head_it_wrote(store, store_url):
    if not store_url.startswith("sqlite"):
        pytest.skip("the statement trace is sqlite3's")
    run = store.start_run("abel-implement", change="traced", operation_id="s1")
    store.transactions.release_kept()  # the next write checks a connection out (and traces it)
    sent: list[str] = []
    event.listen(store.engine, "checkout", lambda dbapi, *_: dbapi.set_trace_callback(sent.append))
    store.transition(run.run_id, "paused", operation_id="t1")
    del sent[:]
    store.transition(run.run_id, "ready", operation_id="t2")
    assert [statement.split()[0] for statement in sent] == [
        "BEGIN",
        "UPDATE",
        "INSERT",
        "INSERT",
        "COMMIT",
    ]
    assert store.verify_integrity(run.run_id).sequence == 3
