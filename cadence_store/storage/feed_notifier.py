"""The feed's numbering and wake-up call on PostgreSQL, after the commits that appended:
the events they committed are given their positions (`storage.feed_statements`), then
one NOTIFY wakes the followers.

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

A notifier that cannot send (no server, or no connection slot for it) gives that NOTIFY
up and pauses before its next try, 50 ms doubling up to a second; the events are numbered
by the next numbering, and followers read again within a second.

A pool that holds one connection (`StaticPool`, ...) gets no notifier: a second
connection is what its host ruled out, so each commit there numbers and sends its
NOTIFY itself. A store's `close` ends its pool's notifier (`close_notifier`).

Whatever the commit came through (`RunStore`'s own transactions, a unit of work, a host's
session, the async classes, which drive the same ones), the same notifier sends it.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Final, TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import Dialect
from sqlalchemy.pool import (
    AssertionPool,
    NullPool,
    Pool,
    PoolProxiedConnection,
    SingletonThreadPool,
    StaticPool,
)
from sqlalchemy.util import greenlet_spawn

from .feed_statements import FEED_LOCK_IF_UNNUMBERED, NUMBER_FEED
from .statements import Statements

logger = logging.getLogger(__name__)
T = TypeVar("T")

# one statement, one round trip: the notification, in a transaction of its own that
# commits without waiting for its WAL flush
NOTIFY_FEED: Final = (  # FEED_CHANNEL, a fixed text (tests/unit checks they agree)
    "SELECT set_config('synchronous_commit', 'off', true), pg_notify('cadence_store_feed', '')"
)
# a notifier with nothing to send for this long closes its connection and its thread
IDLE_S: Final = 5.0
# at most one NOTIFY this often per pool and process: the commits in between share it
# (each NOTIFY costs the server a transaction; a follower wakes at most this much later)
NOTIFY_INTERVAL_S: Final = 0.025
# after a NOTIFY that could not be sent, the next tries wait this long, doubling up to
# `MAX_PAUSE_S` (followers read again every second anyway): a server out of connection
# slots is not asked for one on every commit
FIRST_PAUSE_S: Final = 0.05
MAX_PAUSE_S: Final = 1.0
# `too_many_connections`: the server (or the role) has no slot for the notifier's own
# connection, which no call of the store reports. A refused login carries no SQLSTATE
# in libpq's error, only the server's message: "sorry, too many clients already" (at
# `max_connections`) or "too many connections for role ..." (at the role's limit)
TOO_MANY_CONNECTIONS: Final = "53300"
NO_SLOT_MESSAGES: Final = ("too many clients", "too many connections")
# how long closing a store (its notifier's last NOTIFY and its thread's end), or the
# process ending, waits
FLUSH_TIMEOUT_S: Final = 2.0


class FeedNotifier:
    """Sends the feed's NOTIFY for a pool's commits, coalesced, from a thread of its own.

    Its connection comes from a pool of its own, `pool.recreate()`: the host's creator,
    connect arguments and pool events, none of the host's connections. An async driver's
    connection is driven from the thread's own event loop, through SQLAlchemy's greenlet
    (as the async engine itself drives it)."""

    def __init__(self, pool: Pool, dialect: Dialect) -> None:
        self._pool = weakref.ref(pool)
        self._dialect = dialect
        self._is_async = bool(dialect.is_async)
        self._schemas: set[str | None] = set()  # where commits appended since the last
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing: threading.Thread | None = None  # the thread asked to end (`close`)
        self.pokes = 0  # commits that asked for a NOTIFY
        self.served = 0  # of them, those a NOTIFY was sent (or given up on) for since
        self.sent = 0  # NOTIFY statements sent

    def poke(self, schema: str | None = None) -> None:
        """Events committed (in `schema`'s tables): they are numbered, and followers hear
        of them, soon (this returns at once)."""
        with self._changed:
            self.pokes += 1
            self._schemas.add(schema)
            if self._thread is None:  # none running: idle for a while, or just forked
                self._thread = threading.Thread(
                    target=self._serve, name="cadence-store-feed-notifier", daemon=True
                )
                self._thread.start()
            self._changed.notify_all()

    def flush(self, timeout_s: float) -> bool:
        """Wait (at most `timeout_s`) until every poke so far has had its NOTIFY sent:
        a process that ends right after its last commit still wakes the followers."""
        with self._changed:
            target = self.pokes
            return self._changed.wait_for(lambda: self.served >= target, timeout_s)

    def close(self, timeout_s: float) -> None:
        """Send what is owed, then end the thread and close its connection, waiting for
        both (at most `timeout_s`): a store's `close` leaves nothing open behind it. A
        later poke (another store on the same pool) starts another thread."""
        with self._changed:
            thread = self._thread
            if thread is None:
                return
            self._closing = thread
            self._changed.notify_all()
        thread.join(timeout_s)

    def _serve(self) -> None:
        loop = asyncio.new_event_loop() if self._is_async else None
        sender = _Sender(self._pool, self._dialect, loop)
        sent_at = -NOTIFY_INTERVAL_S
        me = threading.current_thread()
        try:
            while True:
                with self._changed:
                    self._changed.wait_for(
                        lambda: self.pokes > self.served or self._closing is me, IDLE_S
                    )
                    if self.pokes == self.served:  # idle for IDLE_S, or closed with none owed
                        self._thread = None
                        return
                    closing = self._closing is me
                if not closing:  # commits that come meanwhile share this NOTIFY
                    time.sleep(max(0.0, NOTIFY_INTERVAL_S - (time.monotonic() - sent_at)))
                with self._changed:
                    upto = self.pokes
                    schemas, self._schemas = self._schemas, set()
                if sender.send(schemas):
                    self.sent += 1
                sent_at = time.monotonic()
                with self._changed:
                    self.served = upto
                    self._changed.notify_all()
        finally:
            with self._changed:
                if self._closing is me:
                    self._closing = None
                if self._thread is me:  # ended by a failure
                    self._thread = None  # the next poke starts another
                    self.served = self.pokes  # and what is left is given up on
                    self._changed.notify_all()
            sender.close()
            if loop is not None:
                loop.close()

    def after_fork_in_child(self) -> None:
        """The parent's thread (and its lock's state) did not come along."""
        self._changed = threading.Condition()
        self._thread = None
        self._closing = None
        self.served = self.pokes  # the parent's commits are the parent's to announce


class _Sender:
    """The notifier thread's connection: made on first use, dropped after a failure."""

    def __init__(
        self, pool: weakref.ref[Pool], dialect: Dialect, loop: asyncio.AbstractEventLoop | None
    ) -> None:
        self._host_pool = pool
        self._dialect = dialect
        self._loop = loop
        self._pool: Pool | None = None
        self._connection: PoolProxiedConnection | None = None
        self._pause_s = 0.0  # while failing (> 0): how long the next tries wait
        self._resume_at = 0.0  # `time.monotonic()` before which no try is made

    def _run(self, work: Callable[[], T]) -> T:
        if self._loop is None:
            return work()
        return self._loop.run_until_complete(greenlet_spawn(work))

    def send(self, schemas: set[str | None]) -> bool:
        """Number the events committed in `schemas`' tables, then one NOTIFY (False when
        it could not be sent: followers read again within a second anyway, and the next
        poke connects again, after a pause that doubles while it fails). A kept
        connection that fails (a failover, a restart, a pooler that closed it) is
        replaced once at once."""
        if time.monotonic() < self._resume_at:
            return False  # pausing after a failure: this poke's followers read soon anyway
        for attempt in range(2):
            kept = self._connection is not None
            try:
                self._send_once(schemas)
                self._pause_s = 0.0
                return True
            except Exception as error:
                self._drop()
                if kept and attempt == 0:
                    continue
                self._report(error)
                break
        self._pause_s = min(MAX_PAUSE_S, max(FIRST_PAUSE_S, self._pause_s * 2))
        self._resume_at = time.monotonic() + self._pause_s
        return False

    def _report(self, error: Exception) -> None:
        """Once per run of failures. INFO: followers only lag (they read every second),
        and a server that is down is reported by the calls that need it. WARNING when
        the server has no connection slot for the notifier: nothing else says so."""
        if self._pause_s > 0:  # not the first failure of this run
            logger.debug("cadence-store: the feed's NOTIFY failed: %s", error)
        elif _no_connection_slot(error):
            logger.warning(
                "cadence-store: the feed notifier found no connection slot (%s); each"
                " store process on PostgreSQL uses one connection for it beside its pool:"
                " raise max_connections (or the role's limit), or put PgBouncer in front."
                " Followers still read every second.",
                str(error).strip().splitlines()[0],
            )
        else:
            logger.info("cadence-store: the feed's NOTIFY failed: %s", error)

    def _send_once(self, schemas: set[str | None]) -> None:
        if self._connection is None:
            host_pool = self._host_pool()
            if host_pool is None:
                return  # the engine is gone, and its followers with it
            if self._pool is None:
                self._pool = host_pool.recreate()
            self._connection = self._run(self._connect)
        connection = self._connection
        self._run(lambda: _number_feed(connection, self._dialect, schemas))
        self._run(lambda: _notify(connection))
        if isinstance(self._pool, NullPool):  # its host keeps no connection between calls
            self._close_connection()

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

    def _close_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.dbapi_connection.autocommit = False  # type: ignore[union-attr]
            self._run(connection.close)

    def close(self) -> None:
        self._drop()
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                self._run(pool.dispose)
            except Exception:
                logger.debug("cadence-store: disposing the feed notifier's pool failed")


def _no_connection_slot(error: Exception) -> bool:
    driver_error = getattr(error, "orig", error)
    if getattr(driver_error, "sqlstate", None) == TOO_MANY_CONNECTIONS:
        return True
    return any(message in str(driver_error) for message in NO_SLOT_MESSAGES)


def _number_feed(
    connection: PoolProxiedConnection | None, dialect: Dialect, schemas: set[str | None]
) -> None:
    """Give the events committed in each of `schemas` their feed positions, each schema
    in a transaction of its own that holds the numbering lock (`storage.feed_statements`)
    and commits durably: a position a follower saw is never given again. A failure is
    logged and left to the next numbering (the next commit's, or a reader's that may
    number): the NOTIFY still goes out."""
    assert connection is not None
    driver: Any = connection.dbapi_connection
    autocommit = driver.autocommit
    driver.autocommit = False
    try:
        for schema in schemas:
            sql = Statements.on_dbapi(dialect, driver, schema)
            try:
                if sql.one(FEED_LOCK_IF_UNNUMBERED) is not None:
                    sql.write(NUMBER_FEED)
                driver.commit()
            except Exception as error:
                driver.rollback()
                logger.info("cadence-store: numbering the feed failed: %s", error)
    finally:
        driver.autocommit = autocommit


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
                notifier = _notifiers[pool] = FeedNotifier(pool, engine.dialect)
    return notifier


def close_notifier(engine: Engine, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
    """Send what `engine`'s notifier still owes, then end its thread and connection, if
    it has one (a store's `close`)."""
    notifier = _notifiers.get(engine.pool)
    if notifier is not None:
        notifier.close(timeout_s)


def flush_notifiers(timeout_s: float = FLUSH_TIMEOUT_S) -> None:
    """Send what every notifier of this process still owes (at exit, and tests)."""
    for notifier in list(_notifiers.values()):
        notifier.flush(timeout_s)


def _after_fork_in_child() -> None:
    global _notifiers_lock
    _notifiers_lock = threading.Lock()
    for notifier in list(_notifiers.values()):
        notifier.after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(flush_notifiers)


def wake_followers(engine: Engine, schema: str | None = None) -> None:
    """After a transaction on `engine` committed events in `schema`'s tables: number them
    and wake the feed's followers."""
    if isinstance(engine.pool, _ONE_CONNECTION_POOLS):
        _notify_at_once(engine, schema)
    else:
        feed_notifier(engine).poke(schema)


# pools that promise the host a single connection: no notifier opens a second one, the
# committing caller sends the NOTIFY itself (one round trip a commit)
_ONE_CONNECTION_POOLS: Final = (StaticPool, SingletonThreadPool, AssertionPool)


def _notify_at_once(engine: Engine, schema: str | None) -> None:
    try:
        pooled = engine.raw_connection()  # the pool's one connection, this transaction's
        try:
            _number_feed(pooled, engine.dialect, {schema})
            driver: Any = pooled.dbapi_connection
            driver.autocommit = True
            try:
                _notify(pooled)
            finally:
                driver.autocommit = False
        finally:
            pooled.close()
    except Exception as error:  # committed already: the followers read again soon
        logger.info("cadence-store: the feed's NOTIFY failed: %s", error)


__all__ = [
    "IDLE_S",
    "NOTIFY_FEED",
    "NOTIFY_INTERVAL_S",
    "FeedNotifier",
    "close_notifier",
    "feed_notifier",
    "flush_notifiers",
    "wake_followers",
]
