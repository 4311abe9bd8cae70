"""Following the journal feed: `RunStore.read_feed` and `RunStore.follow`.

`follow` yields every committed event once, in feed order, as it commits:

1. it arms a waker first (PostgreSQL: LISTEN on a connection of its own, autocommit;
   SQLite: the connection's `PRAGMA data_version` is noted), so that a commit after
   this point wakes it;
2. it reads the feed after its position (`read_feed_rows`) and yields each item, made
   from its row as it is yielded, moving its position on after each one;
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
from ..repository.feed import feed_item
from ..repository.run_repository import RunRepository
from ..storage.backends import backend_for
from ..storage.failures import READ, database_errors
from ..storage.feed_statements import LISTEN_TO_FEED
from ..storage.follower_names import FollowerNameHold
from ..storage.rows import FeedRow
from .transactions import Transactions

DEFAULT_POLL_S: Final = 0.02
FEED_BATCH: Final = 500  # items read per page while following
# after a lost connection: the first retry at once, then `poll_s`, doubling to this
MAX_RETRY_S: Final = 2.0
# with no wake-up, read again anyway after this many polls (an import sends no NOTIFY)
_POLLS_PER_READ: Final = 50
# NULL on a primary; on a standby, how far it has replayed (it changes as commits arrive)
_REPLAYED: Final = "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() END"

Stop = threading.Event | Callable[[], bool] | None


def read_feed(
    runner: Transactions, *, after: int = 0, limit: int | None = None, run_id: str | None = None
) -> list[FeedItem]:
    """Committed events with a position above `after`, in feed order (`limit` of them
    at most; `run_id`: that run's only).

    In a read snapshot (on `read_bind` when given), which needs no write: writers number
    their events (`RunRepository.read_feed`). Only when some event is still unnumbered
    and this store's role may number it does it read in a write transaction on the
    primary instead, which numbers first."""
    return list(map(feed_item, read_feed_rows(runner, after=after, limit=limit, run_id=run_id)))


def read_feed_rows(
    runner: Transactions, *, after: int, limit: int | None, run_id: str | None
) -> list[FeedRow]:
    """`read_feed`'s rows (`RunRepository.read_feed_rows`), for a follower that makes
    each `FeedItem` as it yields it."""

    def work(runs: RunRepository) -> list[FeedRow]:
        return runs.read_feed_rows(after=after, limit=limit, run_id=run_id)

    def numbered_only(runs: RunRepository) -> list[FeedRow] | None:
        unnumbered = runs.feed_unnumbered()
        return None if unnumbered is not None and unnumbered.role_may_number else work(runs)

    rows = runner.read(numbered_only)
    return runner.write(work) if rows is None else rows


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
    """PostgreSQL: LISTEN on a connection of its own; woken by a NOTIFY at commit. On a
    standby (which takes no LISTEN, and hears no NOTIFY) it polls instead for replayed
    WAL (`pg_last_wal_replay_lsn()`, every `poll_s`)."""

    _replayed: Any = None  # on a standby: the replay position the last read saw

    def arm(self) -> None:
        if self._pooled is not None and self._replayed is None:
            return  # listening already: every NOTIFY since is queued on the connection
        driver = self._driver()
        try:
            with database_errors(READ):
                driver.autocommit = True
                self._replayed = driver.execute(_REPLAYED).fetchone()[0]
                if self._replayed is None:  # a primary
                    driver.execute(LISTEN_TO_FEED)
        except CadenceStoreError:
            self.drop()
            raise

    def wait(self) -> None:
        driver = self._driver()
        try:
            with database_errors(READ):
                if self._replayed is not None:
                    self._wait_for_replay(driver)
                    return
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

    def _wait_for_replay(self, driver: Any) -> None:
        for _ in range(_POLLS_PER_READ):
            self.pause(self._poll_s)
            if self._stopped() or driver.execute(_REPLAYED).fetchone()[0] != self._replayed:
                return


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
    return _follow(runner, position, run_id, require_poll_s(poll_s), stop_check(stop), follower)


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
    follower: str | None,
) -> Iterator[FeedItem]:
    engine = runner.base_engine
    waker_type = _ListeningWaker if backend_for(engine.dialect).notifies else _PollingWaker
    waker = waker_type(engine, poll_s, stopped)
    name = None if follower is None else FollowerNameHold(engine, follower)
    retry_s = 0.0
    lost = False
    try:
        if name is not None:
            name.take()  # `follower-in-use` while another follow holds it
        while not stopped():
            try:
                if lost and name is not None:
                    name.reaffirm()  # a lost connection may have taken the name with it
                waker.arm()
                batch = read_feed_rows(runner, after=position, limit=FEED_BATCH, run_id=run_id)
            except CadenceStoreError as error:
                if not error.retryable:
                    raise
                waker.drop()  # lost: listened again, and caught up, on the next turn
                lost = True
                waker.pause(retry_s)
                retry_s = min(MAX_RETRY_S, max(poll_s, retry_s * 2))
                continue
            retry_s = 0.0
            lost = False
            for row in batch:  # each made as it is yielded: see `read_feed_rows`
                item = feed_item(row)
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
                    lost = True
    finally:
        waker.drop()
        if name is not None:
            name.release()
