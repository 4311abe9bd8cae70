"""How a `RunStore` call becomes a transaction.

A write that runs no host code takes the direct path (`direct_write`) once the store is
checked ready, anything else a `UnitOfWork`; a transaction that lost a race on PostgreSQL
(serialization failure, deadlock) is retried whole, with jitter, before it surfaces as
`run-store-busy`; a call whose connection was lost is re-run by `failover.py`. Reads run
in one snapshot, on `read_bind` when given.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final, TypeVar

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from .direct_write import DirectWrites
from .engine import read_snapshot
from .errors import StoreBusyError, StoreUnavailableError
from .failover import Failover
from .failures import READ, database_errors, is_retryable
from .repository import Clock, RunRepository
from .telemetry import record_busy_retry
from .unit_of_work import UnitOfWork

T = TypeVar("T")
MAX_ATTEMPTS: Final = 8

logger = logging.getLogger(__name__)


def log_busy_retry(attempt: int, delay_s: float, error: StoreBusyError) -> None:
    """A transaction that lost a race is retried whole: logged, and a span event."""
    logger.info(
        "cadence-store: transaction lost a race (%s); retrying it whole in %.3f s "
        "(attempt %d of %d)",
        error.code,
        delay_s,
        attempt + 1,
        MAX_ATTEMPTS,
    )
    record_busy_retry(attempt, delay_s)


def log_busy_failure(attempt: int, error: StoreBusyError) -> None:
    if attempt > 1:
        logger.warning(
            "cadence-store: transaction still losing races after %d attempts (%s)",
            attempt,
            error.code,
        )


class StoreTransactions:
    """The transactions of `RunStore` (which sets these attributes up)."""

    root_hash: str | None
    schema: str | None
    engine: Engine
    _base_engine: Engine
    _read_engine: Engine | None
    _clock: Clock | None
    _closed: bool
    _direct: DirectWrites | None
    _failover: Failover

    def _assert_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError("run-store-closed")

    def unit_of_work(self) -> UnitOfWork:
        """One write transaction on the primary: `with store.unit_of_work() as uow: ...`.

        It is the caller's: a lost connection is not re-run (the block may have effects
        outside the database); re-run the whole block with the same operation ids."""
        self._assert_open()
        self._lend_kept_connection()
        return UnitOfWork(
            self._base_engine, root_hash=self.root_hash, clock=self._clock, schema=self.schema
        )

    def _lend_kept_connection(self) -> None:
        """Before taking a connection from the pool, give back the one the direct path
        keeps: with a small pool, a read inside a unit of work could wait for it."""
        if self._direct is not None:
            self._direct.release()

    def _write(
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
        `Session`; other calls take the direct path when the engine allows it."""
        self._assert_open()
        return self._failover.run(
            lambda again: self._write_once(
                rerun if again and rerun is not None else work, host_code
            )
        )

    def _write_once(self, work: Callable[[RunRepository], T], host_code: bool) -> T:
        self._assert_open()
        direct = None if host_code else self._direct
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                if direct is not None and direct.ready():
                    return direct.run(work)
                with self.unit_of_work() as uow:
                    return work(uow.runs)
            except StoreBusyError as error:
                cause = error.__cause__
                if attempt == MAX_ATTEMPTS or not is_retryable(cause or error):
                    log_busy_failure(attempt, error)
                    raise
                delay = random.uniform(0, 0.002 * 2**attempt)
                log_busy_retry(attempt, delay, error)
                time.sleep(delay)
        raise AssertionError("unreachable")

    @contextmanager
    def _reading(self) -> Iterator[RunRepository]:
        """One read snapshot, on `read_bind` when given (it may lag the primary)."""
        self._assert_open()
        self._lend_kept_connection()
        engine = self.engine if self._read_engine is None else self._read_engine
        with (
            database_errors(READ),
            engine.connect() as connection,
            read_snapshot(connection),
        ):
            yield RunRepository.on_connection(
                connection,
                lambda: Session(bind=connection),
                root_hash=self.root_hash,
                clock=self._clock,
                schema=self.schema,
            )

    def _read(self, work: Callable[[RunRepository], T]) -> T:
        def attempt(_again: bool) -> T:
            with self._reading() as repository:
                return work(repository)

        return self._failover.run(attempt)
