"""The feed's channel is written out in three fixed texts: they must name the same one."""

from __future__ import annotations

from cadence_store.storage.feed_notifier import NOTIFY_FEED
from cadence_store.storage.feed_statements import FEED_CHANNEL, LISTEN_TO_FEED


def test_listen_and_notify_name_the_feed_channel() -> None:
    assert f"LISTEN {FEED_CHANNEL}" == LISTEN_TO_FEED
    assert f"pg_notify('{FEED_CHANNEL}', '')" in NOTIFY_FEED
