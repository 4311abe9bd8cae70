"""A PostgreSQL store whose feed notifier finds no connection slot (a role limited to one
connection, as a server at `max_connections` is): the writes commit, the events are
numbered by the next reader that may, one WARNING says why followers are not woken,
and the notifier pauses between its tries instead of asking on every commit."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from pg_roles import login_role
from support import ROOT_HASH

from cadence_store import RunStore
from cadence_store.storage.feed_notifier import feed_notifier, flush_notifiers

pytestmark = pytest.mark.postgres


@pytest.fixture
def one_slot_url(pg_database_url: str) -> Iterator[str]:
    """The URL of a role that may write the store but open only one connection."""
    import cadence_store

    cadence_store.upgrade(pg_database_url)
    with login_role(pg_database_url, "one_slot", "ALL", connection_limit=1) as url:
        yield url


def test_a_notifier_without_a_slot_warns_once_and_nothing_is_lost(
    one_slot_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="cadence_store.storage.feed_notifier")
    store = RunStore(one_slot_url, root_hash=ROOT_HASH)
    try:
        run = store.start_run("abel-design", provisional_key="a" * 64, operation_id="s-1")
        for index in range(30):
            store.transition(run.run_id, "paused", operation_id=f"p-{index}", code="p")
            flush_notifiers()  # each commit's poke served (sent, or given up on) in turn
        notifier = feed_notifier(store.engine)
        assert notifier.pokes >= 31 and notifier.sent == 0
        records = [r for r in caplog.records if "feed" in r.getMessage()]
        warnings = [r for r in records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "no connection slot" in warnings[0].getMessage()
        assert "max_connections" in warnings[0].getMessage()
        # paused between tries: far fewer connection attempts than commits
        assert len(records) < notifier.pokes
        # nothing lost: the store's own read numbers what the notifier could not
        items = store.read_feed(after=0)
        assert [(item.run_id, item.event.sequence) for item in items] == [
            (run.run_id, sequence) for sequence in range(1, 32)
        ]
        assert store.verify_integrity(run.run_id).sequence == 31  # raises if broken
    finally:
        store.close()
