"""The feed's wake-up call on PostgreSQL: one NOTIFY after the commits that appended.

Why not in the appending transaction: PostgreSQL serialises the commits of transactions
that sent a NOTIFY (one lock, held until each has flushed its commit to the WAL), which
takes group commit away from concurrent writers. Measured with 4 writer processes
(`benchmarks.feed`): +14 % per append with the NOTIFY in the transaction.

So a commit that appended events pokes its pool's `FeedNotifier` once it has committed,
and the notifier sends one NOTIFY for all the pokes since its last, from a thread and a
connection of its own, in an autocommit statement whose commit does not wait for the
disk (`synchronous_commit` off for that transaction only: it writes no data, and a lost
NOTIFY only delays followers, who read again every second anyway). The appender pays a
`threading.Event.set()`; only a commit wakes anyone, since the poke comes after it.

Whatever the commit came through (`RunStore`'s own transactions, a unit of work, a host's
session, the async classes, which drive the same ones), the same notifier sends it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Final, TypeVar

from sqlalchemy import Engine
from sqlalchemy.pool import Pool, PoolProxiedConnection
from sqlalchemy.util import greenlet_spawn

from .feed_statements import FEED_CHANNEL

logger = logging.getLogger(__name__)
T = TypeVar("T")

# one statement, one round trip: the notification, in a transaction of its own that
# commits without waiting for its WAL flush
NOTIFY_FEED: Final = (
    f"SELECT set_config('synchronous_commit', 'off', true), pg_notify('{FEED_CHANNEL}', '')"
)
# a notifier with nothing to send for this long closes its connection and its thread
IDLE_S: Final = 5.0


class FeedNotifier:
    """Sends the feed's NOTIFY for a pool's commits, coalesced, from a thread of its own.

    Its connection comes from a pool of its own, `pool.recreate()`: the host's creator,
    connect arguments and pool events, none of the host's connections. An async driver's
    connection is driven from the thread's own event loop, through SQLAlchemy's greenlet
    (as the async engine itself drives it)."""

    def __init__(self, pool: Pool, is_async: bool) -> None:
        self._pool = weakref.ref(pool)
        self._is_async = is_async
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self.pokes = 0  # commits that asked for a NOTIFY (tests, benchmarks)
        self.sent = 0  # NOTIFY statements sent

    def poke(self) -> None:
        """Events committed: followers hear of them soon (this returns at once)."""
        self._wanted.set()
        with self._lock:
            self.pokes += 1
            if self._thread is None or self._pid != os.getpid():
                # none running (idle, or the parent's, which a fork does not bring along)
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._serve, name="cadence-store-feed-notifier", daemon=True
                )
                self._thread.start()

    def _serve(self) -> None:
        loop = asyncio.new_event_loop() if self._is_async else None
        sender = _Sender(self._pool, loop)
        try:
            while True:
                if not self._wanted.wait(IDLE_S):
                    with self._lock:
                        if not self._wanted.is_set():
                            self._thread = None
                            return
                self._wanted.clear()
                if sender.send():
                    self.sent += 1
        finally:
            sender.close()
            if loop is not None:
                loop.close()


class _Sender:
    """The notifier thread's connection: made on first use, dropped after a failure."""

    def __init__(self, pool: weakref.ref[Pool], loop: asyncio.AbstractEventLoop | None) -> None:
        self._host_pool = pool
        self._loop = loop
        self._pool: Pool | None = None
        self._connection: PoolProxiedConnection | None = None

    def _run(self, work: Callable[[], T]) -> T:
        if self._loop is None:
            return work()
        return self._loop.run_until_complete(greenlet_spawn(work))

    def send(self) -> bool:
        """One NOTIFY (False when it could not be sent: followers read again within a
        second anyway, and the next poke connects again)."""
        try:
            if self._connection is None:
                host_pool = self._host_pool()
                if host_pool is None:
                    return False  # the engine is gone, and its followers with it
                if self._pool is None:
                    self._pool = host_pool.recreate()
                self._connection = self._run(self._connect)
            self._run(lambda: _notify(self._connection))
            return True
        except Exception as error:
            logger.warning("cadence-store: the feed's NOTIFY failed: %s", error)
            self._drop()
            return False

    def _connect(self) -> PoolProxiedConnection:
        assert self._pool is not None
        connection = self._pool.connect()
        connection.dbapi_connection.autocommit = True  # type: ignore[union-attr]
        return connection

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                self._run(connection.invalidate)
            except Exception:  # lost already: nothing to close
                logger.debug("cadence-store: closing the feed notifier's connection failed")

    def close(self) -> None:
        self._drop()
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                self._run(pool.dispose)
            except Exception:
                logger.debug("cadence-store: disposing the feed notifier's pool failed")


def _notify(connection: PoolProxiedConnection | None) -> None:
    assert connection is not None
    cursor = connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(NOTIFY_FEED)
    finally:
        cursor.close()


_notifiers: weakref.WeakKeyDictionary[Pool, FeedNotifier] = weakref.WeakKeyDictionary()
_notifiers_lock = threading.Lock()


def feed_notifier(engine: Engine) -> FeedNotifier:
    """The notifier of `engine`'s pool (engines that share a pool share it)."""
    pool = engine.pool
    notifier = _notifiers.get(pool)
    if notifier is None:
        with _notifiers_lock:
            notifier = _notifiers.get(pool)
            if notifier is None:
                notifier = _notifiers[pool] = FeedNotifier(pool, engine.dialect.is_async)
    return notifier


def wake_followers(engine: Engine) -> None:
    """After a transaction on `engine` committed events: wake the feed's followers."""
    feed_notifier(engine).poke()


__all__ = ["IDLE_S", "NOTIFY_FEED", "FeedNotifier", "feed_notifier", "wake_followers"]
