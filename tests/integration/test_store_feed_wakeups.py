"""PostgreSQL's feed wake-ups: a NOTIFY after each commit that appended, none otherwise.

The NOTIFY is sent after the commit by the pool's `FeedNotifier` (see
`storage/feed_notifier.py` for why not in the appending transaction). Every test taking
``store`` runs through every entry point (RunStore, a unit of work, a host Session, an
AsyncRunStore on a host's AsyncEngine).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool
from support import ROOT_HASH

from cadence_store import RunRepository, RunStore
from cadence_store.storage.feed_notifier import feed_notifier
from cadence_store.storage.feed_statements import FEED_CHANNEL, LISTEN_TO_FEED


@pytest.fixture
def listener(db: Engine) -> Iterator[Any]:
    """A psycopg connection LISTENing to the feed's channel."""
    if db.dialect.name != "postgresql":
        pytest.skip("SQLite's followers watch the file, nothing is sent")
    pooled = db.raw_connection()
    driver = pooled.dbapi_connection
    assert driver is not None
    driver.autocommit = True
    driver.execute(LISTEN_TO_FEED)
    try:
        yield driver
    finally:
        pooled.invalidate()
        pooled.close()


def _heard(listener: Any, timeout_s: float = 10.0) -> list[str]:
    """The channels of the notifications that arrive: the first within `timeout_s`, then
    whatever follows within 0.2 s of it (empty when none came)."""
    return [note.channel for note in listener.notifies(timeout=timeout_s, stop_after=1)] + [
        note.channel for note in listener.notifies(timeout=0.2)
    ]


def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_committed_append_wakes_listeners(store, listener):
    run = store.start_run("abel-design", provisional_key="a" * 64, operation_id="start-w")
    assert _heard(listener)[:1] == [FEED_CHANNEL]
    store.transition(run.run_id, "paused", operation_id="pause-w", code="p")
    assert _heard(listener)[:1] == [FEED_CHANNEL]


def test_a_rolled_back_append_wakes_nobody(store_url: str, db: Engine, listener):
    store = RunStore(store_url, root_hash=ROOT_HASH)
    try:
        notifier = feed_notifier(store.engine)
        before = notifier.pokes
        with pytest.raises(RuntimeError), store.unit_of_work() as uow:
            uow.runs.start_run("abel-design", provisional_key="b" * 64, operation_id="r1")
            raise RuntimeError("the host changes its mind")
        assert notifier.pokes == before
        with store.unit_of_work() as uow:
            uow.runs.start_run("abel-design", provisional_key="b" * 64, operation_id="r1")
        assert notifier.pokes == before + 1
    finally:
        store.close()


def test_a_host_session_wakes_listeners_on_commit_only(db: Engine, listener):
    notifier = feed_notifier(db)
    before = notifier.pokes
    with Session(db) as session:
        runs = RunRepository(session, root_hash=ROOT_HASH)
        with session.begin():
            runs.start_run("abel-design", provisional_key="c" * 64, operation_id="h1")
            with session.begin_nested():  # a savepoint's end is not the transaction's
                runs.start_run("abel-design", provisional_key="d" * 64, operation_id="i1")
            session.rollback()
        assert notifier.pokes == before
        with session.begin():
            runs.start_run("abel-design", provisional_key="c" * 64, operation_id="h1")
        assert notifier.pokes == before + 1
        with session.begin():  # nothing appended: nothing to wake anyone for
            runs.follower_position("reader")
        assert notifier.pokes == before + 1
    assert _heard(listener)[:1] == [FEED_CHANNEL]


def test_the_notifier_connects_as_the_host_engine_does(store_url: str, listener):
    host = create_engine(store_url, connect_args={"application_name": "host-app-7"})
    try:
        store = RunStore(host, root_hash=ROOT_HASH)
        notifier = feed_notifier(host)
        sent = notifier.sent
        store.start_run("abel-design", provisional_key="e" * 64, operation_id="c1")
        assert _until(lambda: notifier.sent > sent)
        with host.connect() as connection:
            names = connection.execute(
                text(
                    "SELECT application_name FROM pg_stat_activity"
                    " WHERE query LIKE '%pg_notify(''cadence_store_feed''%'"
                    " AND pid <> pg_backend_pid()"
                )
            ).scalars()
            assert "host-app-7" in set(names)
        assert _heard(listener)[:1] == [FEED_CHANNEL]
        store.close()
    finally:
        host.dispose()


def test_a_process_that_ends_right_after_its_commit_still_wakes_listeners(store_url: str, listener):
    script = (
        "import sys\n"
        "from cadence_store import RunStore\n"
        f"store = RunStore(sys.argv[1], root_hash={ROOT_HASH!r})\n"
        "store.start_run('abel-design', provisional_key='f' * 64, operation_id='f1')\n"
        "# no close(): the interpreter's exit must send what the notifier owes\n"
    )
    subprocess.run([sys.executable, "-c", script, store_url], check=True, timeout=60)
    assert _heard(listener)[:1] == [FEED_CHANNEL]


def test_a_one_connection_pool_wakes_listeners_without_a_second_connection(
    store_url: str, listener
):
    host = create_engine(store_url, poolclass=StaticPool)
    connections: list[object] = []
    event.listen(host, "connect", lambda dbapi, _record: connections.append(dbapi))
    try:
        with RunStore(host, root_hash=ROOT_HASH) as store:
            run = store.start_run("abel-design", provisional_key="9" * 64, operation_id="s9")
            assert _heard(listener)[:1] == [FEED_CHANNEL]
            with store.unit_of_work() as uow:
                uow.runs.transition(run.run_id, "paused", operation_id="p9", code="p")
            assert _heard(listener)[:1] == [FEED_CHANNEL]
        assert len(connections) == 1  # the host's one connection, and no other
    finally:
        host.dispose()
