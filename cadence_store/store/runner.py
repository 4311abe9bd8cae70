"""How a store's call becomes a transaction, decided in one place.

A write that runs no host code takes the fast path (`direct_write`) once the store is
checked ready; anything else a `UnitOfWork`. A transaction that lost a race on
PostgreSQL (serialization failure, deadlock, lock timeout) is retried whole, with jitter,
before it surfaces as `run-store-busy`; a call whose connection was lost is re-run by
`failover.py` with the same operation id. Reads run in one snapshot, on `read_bind` when
given. `RunStore` runs every call here, and `AsyncRunStore` runs `RunStore`'s.

After `os.fork()` a child never uses a connection of its parent: the pools are replaced
(SQLAlchemy's `engine.dispose(close=False)`) and the parent's connections are kept
referenced, never closed or reset by the child (either would end the parent's session).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeVar

from sqlalchemy import Engine
from sqlalchemy.orm import Session
from sqlalchemy.util.concurrency import await_only, in_greenlet

from ..errors import CadenceStoreError, StoreBusyError, StoreUnavailableError
from ..repository.run_repository import Clock, RunRepository
from ..repository.transaction import JournalTransaction
from ..storage.call_budget import attempts_bounded, end_idle_watchdog
from ..storage.dialects import profile_of
from ..storage.engine import masked_url, read_snapshot
from ..storage.failures import READ, database_errors, is_database_error, is_retryable
from ..storage.feed_notifier import close_notifier
from ..storage.shape import assert_store_ready
from ..telemetry import record_busy_retry
from .direct_write import DirectWrites, fits_direct_writes
from .failover import Failover
from .unit_of_work import UnitOfWork

T = TypeVar("T")
MAX_ATTEMPTS: Final = 8

logger = logging.getLogger(__name__)


def pause(seconds: float) -> None:
    """Wait `seconds` without holding up an event loop: inside SQLAlchemy's asyncio
    greenlet (an `AsyncRunStore` on a host's `AsyncEngine`) the loop does the waiting."""
    if in_greenlet():
        await_only(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


class Runner:
    """The transactions of one store: its engines, fast path, retries and re-runs."""

    def __init__(
        self,
        base_engine: Engine,
        engine: Engine,
        *,
        root_hash: str | None,
        clock: Clock | None,
        schema: str | None,
        failover_timeout_s: float,
        read_engine: Engine | None,
        keep_connection: bool,
    ) -> None:
        """`base_engine`: units of work and the fast path run here (a host's rows stay in
        the host's schema); `engine`: the same pool with the schema option, for reads."""
        self.base_engine = base_engine
        self.engine = engine
        self.read_engine = read_engine
        self.root_hash = root_hash
        self.schema = schema
        self._clock = clock
        self.failover = Failover(
            failover_timeout_s,
            database=masked_url(engine.url),
            forget_connections=self.forget_connections,
            sleep=pause,
            interrupts=attempts_bounded(base_engine),
        )
        self._closed = False
        self._direct = (
            DirectWrites(
                base_engine,
                root_hash=root_hash,
                clock=clock,
                schema=schema,
                keep_one=keep_connection,
            )
            if fits_direct_writes(base_engine)
            else None
        )
        # the fast path where `write` may make a call's first try itself: no watchdog
        # bounds its attempts (the failover loop enters the call's budget first)
        self._unwatched_direct = None if self.failover.interrupts else self._direct
        self._monotonic = self.failover.monotonic
        _RUNNERS.add(self)

    # -- lifecycle -------------------------------------------------------------------------

    def assert_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError("run-store-closed")

    def release_kept(self) -> None:
        """Before taking a connection from the pool, give back the one the fast path
        keeps: with a small pool, a read inside a unit of work could wait for it."""
        if self._direct is not None:
            self._direct.release()

    def forget_connections(self) -> None:
        """Drop idle pooled connections: they may point at a primary that is gone."""
        if self._direct is not None:
            self._direct.release(discard=True)
        self.base_engine.pool.dispose()
        if self.read_engine is not None:
            self.read_engine.pool.dispose()

    def checkpoint(self) -> None:
        """SQLite: fold the WAL back into the database file (housekeeping at close)."""
        if not profile_of(self.engine.dialect).checkpoints_wal:
            return
        self.release_kept()
        try:
            with self.engine.connect() as connection:
                connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        except Exception as error:
            if not is_database_error(error):
                raise
            # checkpointing is housekeeping; the data is already durable

    def close(self) -> None:
        self._closed = True
        self.release_kept()
        close_notifier(self.base_engine)  # followers hear of the last commits first
        end_idle_watchdog()
        _RUNNERS.discard(self)

    def _after_fork_in_child(self) -> None:
        if self._direct is not None:
            self._direct.abandon()
        for engine in (self.base_engine, self.read_engine):
            if engine is not None:
                _ABANDONED.append(engine.pool)  # the parent's connections: never closed here
                engine.dispose(close=False)

    # -- writes ----------------------------------------------------------------------------

    def unit_of_work(self) -> UnitOfWork:
        """One write transaction on the primary (see `RunStore.unit_of_work`)."""
        self.assert_open()
        self.release_kept()
        return UnitOfWork(
            self.base_engine, root_hash=self.root_hash, clock=self._clock, schema=self.schema
        )

    def write(
        self,
        work: Callable[[RunRepository], T],
        rerun: Callable[[RunRepository], T] | None = None,
        *,
        host_code: bool = False,
    ) -> T:
        """Run `work` in its own transaction, retrying whole transactions that lost a race,
        and re-running the call across a failover (`rerun`, if given, replaces `work` on
        attempts after a lost connection: the first one may have committed).

        `host_code`: `work` calls a host's `write(session)`, so it needs a unit of work's
        `Session`; other calls take the fast path when the engine allows it."""
        if self._closed:
            raise StoreUnavailableError("run-store-closed")
        direct = self._unwatched_direct
        if direct is None or host_code or not direct.ready():
            return self.failover.run(self._write_once, work, rerun, host_code)
        # The common call, with no frame of the retry loops while nothing fails: its
        # first attempt here, the loops' own steps after a failure (`_after_first_try`).
        started = self._monotonic()
        try:
            return direct.run(work)
        except CadenceStoreError as error:
            return self._after_first_try(error, started, work, rerun)

    def _after_first_try(
        self,
        error: CadenceStoreError,
        started: float,
        work: Callable[[RunRepository], T],
        rerun: Callable[[RunRepository], T] | None,
    ) -> T:
        """What `failover.run(self._write_once, ...)` does once the first try of its
        first attempt failed with `error`: a lost race goes on in that attempt's loop, a
        lost connection re-runs the call."""
        if isinstance(error, StoreBusyError):
            try:
                return self._write_once(False, work, rerun, False, error)
            except CadenceStoreError as later:
                error = later
        return self.failover.rerun_after(error, started, self._write_once, work, rerun, False)

    def _write_once(
        self,
        again: bool,
        work: Callable[[RunRepository], T],
        rerun: Callable[[RunRepository], T] | None,
        host_code: bool,
        lost_race: StoreBusyError | None = None,
    ) -> T:
        """One attempt of a call: its transaction, retried whole while it loses races.
        `lost_race`: the attempt's first try, made by `write`, lost one."""
        if again:  # after a lost connection and a wait: the store may be closed by now
            self.assert_open()
            if rerun is not None:
                work = rerun
        direct = None if host_code else self._direct
        attempt = 0
        if lost_race is not None:
            attempt = 1
            pause(busy_retry_delay(lost_race, attempt))
            del lost_race  # not held by this frame while the loop goes on
        while True:
            attempt += 1
            try:
                if direct is not None and direct.ready():
                    return direct.run(work)
                with self.unit_of_work() as uow:
                    return work(uow.runs)
            except StoreBusyError as error:
                pause(busy_retry_delay(error, attempt))

    # -- reads -----------------------------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[RunRepository]:
        """One read snapshot, on `read_bind` when given (it may lag the primary)."""
        self.assert_open()
        self.release_kept()
        engine = self.engine if self.read_engine is None else self.read_engine
        with (
            database_errors(READ),
            engine.connect() as connection,
            read_snapshot(connection),
        ):
            assert_store_ready(connection, self.schema)  # once per pool (a standby's too)
            transaction = JournalTransaction.on_connection(
                connection, self.schema, Session, host_statements=False
            )
            yield RunRepository(transaction, root_hash=self.root_hash, clock=self._clock)

    def read(self, work: Callable[[RunRepository], T]) -> T:
        def attempt(_again: bool) -> T:
            with self.reading() as repository:
                return work(repository)

        return self.failover.run(attempt)


def busy_retry_delay(error: StoreBusyError, attempt: int) -> float:
    """The jittered wait before re-trying a whole transaction that lost a race on its
    `attempt`-th try (logged, and a span event); raises `error` when it is not to be
    retried (not a race, or the attempts are spent)."""
    if attempt >= MAX_ATTEMPTS or not is_retryable(error.__cause__ or error):
        if attempt > 1:
            logger.warning(
                "cadence-store: transaction still losing races after %d attempts (%s)",
                attempt,
                error.code,
            )
        raise error
    delay = random.uniform(0, 0.002 * 2**attempt)
    logger.info(
        "cadence-store: transaction lost a race (%s); retrying it whole in %.3f s "
        "(attempt %d of %d)",
        error.code,
        delay,
        attempt + 1,
        MAX_ATTEMPTS,
    )
    record_busy_retry(attempt, delay)
    return delay


# every live runner, for the fork handler; and what children must keep but never touch
_RUNNERS: Final[weakref.WeakSet[Runner]] = weakref.WeakSet()
_ABANDONED: Final[list[Any]] = []


def _after_fork_in_child() -> None:
    for runner in list(_RUNNERS):
        runner._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = ["MAX_ATTEMPTS", "Runner", "busy_retry_delay", "pause"]
