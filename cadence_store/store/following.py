"""Following the journal feed: `RunStore.read_feed` and `RunStore.follow`.

`follow` yields every committed event once, in feed order, as it commits:

1. it arms a waker first (PostgreSQL: LISTEN on a connection of its own, autocommit;
   SQLite: the connection's `PRAGMA data_version` is noted), so that a commit after
   this point wakes it;
2. it reads the feed after its position (`read_feed`) and yields each item, moving its
   position on after each one;
3. with nothing left to read it waits for the waker: a NOTIFY, which PostgreSQL
   delivers only when the appending transaction commits, or a new `data_version`,
   polled every `poll_s`; `stop` is checked every `poll_s`, and without a wake-up it
   reads again anyway after 50 polls (an import, say, sends no NOTIFY).

A lost connection (the waker's or a read's) is dropped, and the loop starts again at 1
from its position: it re-listens and catches up, and yields nothing twice, since it
only reads after the last position it yielded.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any, Final

from sqlalchemy import Engine
from sqlalchemy.pool import PoolProxiedConnection

from ..errors import CadenceStoreError, InvalidInputError
from ..journal.feed import FeedItem, require_feed_position
from ..journal.validation import require_run_id_text
from ..repository.run_repository import RunRepository
from ..storage.dialects import profile_of
from ..storage.failures import READ, database_errors
from ..storage.feed_statements import LISTEN_TO_FEED
from .transactions import Transactions

DEFAULT_POLL_S: Final = 0.02
FEED_BATCH: Final = 500  # items read per page while following
# after a lost connection: the first retry at once, then `poll_s`, doubling to this
MAX_RETRY_S: Final = 2.0
# with no wake-up, read again anyway after this many polls (an import sends no NOTIFY)
_POLLS_PER_READ: Final = 50

Stop = threading.Event | Callable[[], bool] | None


def read_feed(
    runner: Transactions, *, after: int = 0, limit: int | None = None, run_id: str | None = None
) -> list[FeedItem]:
    """Committed events with a position above `after`, in feed order (`limit` of them
    at most; `run_id`: that run's only).

    PostgreSQL: in a write transaction of its own (the fast path, committed at once),
    which numbers what committed since the last reader did. SQLite: in a read snapshot
    (an append numbers its own event, and a write transaction would take the lock), or,
    when some imported events have no position yet, after a write that numbers them."""

    def work(runs: RunRepository) -> list[FeedItem]:
        return runs.read_feed(after=after, limit=limit, run_id=run_id)

    def numbered_only(runs: RunRepository) -> list[FeedItem] | None:
        return None if runs.feed_unnumbered() else work(runs)

    if profile_of(runner.base_engine.dialect).feed_numbered_by_readers:
        return runner.write(work)
    items = runner.read(numbered_only)
    return runner.write(work) if items is None else items


def stop_check(stop: Stop) -> Callable[[], bool]:
    """`stop` as a function: an event's `is_set`, a callable as it is, never for None."""
    if stop is None:
        return lambda: False
    if isinstance(stop, threading.Event):
        return stop.is_set
    if callable(stop):
        return lambda: bool(stop())
    raise InvalidInputError("invalid-stop", "stop is a threading.Event or a callable")


def require_poll_s(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 3600:
        raise InvalidInputError("invalid-poll-interval", "poll_s is seconds, > 0 and <= 3600")
    return float(value)


class _Waker(ABC):
    """Wakes a follower when something may have committed (each engine its own way)."""

    def __init__(self, engine: Engine, poll_s: float, stopped: Callable[[], bool]) -> None:
        self._engine = engine
        self._poll_s = poll_s
        self._stopped = stopped
        self._pooled: PoolProxiedConnection | None = None

    @abstractmethod
    def arm(self) -> None:
        """Before a read: any commit from now on ends the next `wait`."""

    @abstractmethod
    def wait(self) -> None:
        """Until a commit may have happened, `stop` is set, or it is time to read anyway."""

    def _driver(self) -> Any:
        if self._pooled is None:
            with database_errors(READ):
                self._pooled = self._engine.raw_connection()
        return self._pooled.dbapi_connection

    def drop(self) -> None:
        """Close the waker's connection for good (never handed back to the pool: it may
        be listening, or lost)."""
        pooled, self._pooled = self._pooled, None
        if pooled is not None:
            try:
                pooled.invalidate()
            finally:
                pooled.close()

    def pause(self, seconds: float) -> None:
        """Sleep `seconds`, or less when stopped meanwhile."""
        deadline = time.monotonic() + seconds
        while not self._stopped() and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, self._poll_s))


class _ListeningWaker(_Waker):
    """PostgreSQL: LISTEN on a connection of its own; woken by a NOTIFY at commit."""

    def arm(self) -> None:
        if self._pooled is not None:
            return  # listening already: every NOTIFY since is queued on the connection
        driver = self._driver()
        try:
            with database_errors(READ):
                driver.autocommit = True
                driver.execute(LISTEN_TO_FEED)
        except CadenceStoreError:
            self.drop()
            raise

    def wait(self) -> None:
        driver = self._driver()
        try:
            with database_errors(READ):
                for _ in range(_POLLS_PER_READ):
                    if any(True for _ in driver.notifies(timeout=self._poll_s, stop_after=1)):
                        for _ in driver.notifies(timeout=0):  # the rest: one read for all
                            pass
                        return
                    if self._stopped():
                        return
        except CadenceStoreError:
            self.drop()  # re-listened on the next `arm`, and caught up
            raise


class _PollingWaker(_Waker):
    """SQLite: `PRAGMA data_version` on a connection of its own, which changes when any
    other connection commits."""

    _version: Any = None

    def _data_version(self) -> Any:
        driver = self._driver()
        with database_errors(READ):
            cursor = driver.cursor()
            try:
                cursor.execute("PRAGMA data_version")
                return cursor.fetchone()[0]
            finally:
                cursor.close()

    def arm(self) -> None:
        self._version = self._data_version()

    def wait(self) -> None:
        for _ in range(_POLLS_PER_READ):
            self.pause(self._poll_s)
            if self._stopped() or self._data_version() != self._version:
                return


def follow(
    runner: Transactions,
    *,
    after: int = 0,
    run_id: str | None = None,
    follower: str | None = None,
    poll_s: float = DEFAULT_POLL_S,
    stop: Stop = None,
) -> Iterator[FeedItem]:
    """Every committed event after `after` (or after `follower`'s recorded position,
    if later), once, in feed order, then each new one as it commits, until `stop` (a
    `threading.Event`, or a callable) is set. Arguments are checked at the call."""
    position = start_position(runner, after, follower)
    if run_id is not None:
        require_run_id_text(run_id)
    return _follow(runner, position, run_id, require_poll_s(poll_s), stop_check(stop))


def start_position(runner: Transactions, after: int, follower: str | None) -> int:
    """Where a follower starts: after `after`, or after `follower`'s recorded position
    if that is later. Read on the primary: a standby (`read_bind`) may lag behind the
    position that committed, and starting before it would hand the host items again."""
    position = require_feed_position(after)
    if follower is None:
        return position
    return max(position, runner.write(lambda runs: runs.follower_position(follower)))


def _follow(
    runner: Transactions,
    position: int,
    run_id: str | None,
    poll_s: float,
    stopped: Callable[[], bool],
) -> Iterator[FeedItem]:
    engine = runner.base_engine
    waker_type = _ListeningWaker if profile_of(engine.dialect).notifies else _PollingWaker
    waker = waker_type(engine, poll_s, stopped)
    retry_s = 0.0
    try:
        while not stopped():
            try:
                waker.arm()
                batch = read_feed(runner, after=position, limit=FEED_BATCH, run_id=run_id)
            except CadenceStoreError as error:
                if not error.retryable:
                    raise
                waker.drop()  # lost: listened again, and caught up, on the next turn
                waker.pause(retry_s)
                retry_s = min(MAX_RETRY_S, max(poll_s, retry_s * 2))
                continue
            retry_s = 0.0
            for item in batch:
                yield item
                position = item.position
                if stopped():
                    return
            if len(batch) < FEED_BATCH:
                try:
                    waker.wait()
                except CadenceStoreError as error:
                    if not error.retryable:
                        raise
    finally:
        waker.drop()
