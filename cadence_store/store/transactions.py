"""How a store's call becomes a transaction, decided in one place.

A write that runs no host code takes the fast path (`direct_write`) once the store is
checked ready; anything else a `UnitOfWork`. Reads run in one snapshot, on `read_bind`
when given. Every call goes through the one retry loop (`retries.py`: races lost on
PostgreSQL retried whole, a lost connection re-run with the same operation id).
`RunStore` runs every call here, and `AsyncRunStore` runs `RunStore`'s.

After `os.fork()` a child never uses a connection of its parent: the pools are replaced
(SQLAlchemy's `engine.dispose(close=False)`) and the parent's connections are kept
referenced, never closed or reset by the child (either would end the parent's session).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeVar

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from ..errors import StoreUnavailableError
from ..repository.run_repository import Clock, RunRepository
from ..repository.transaction import JournalTransaction
from ..storage.backends import backend_for
from ..storage.call_budget import attempts_bounded, end_idle_watchdog
from ..storage.engine import masked_url, read_snapshot
from ..storage.failures import READ, database_errors, is_database_error
from ..storage.feed_notifier import close_notifier
from ..storage.shape import assert_store_ready
from .direct_write import DirectWrites, fits_direct_writes
from .failover import Failover
from .retries import Work, call_with_retries, pause
from .unit_of_work import UnitOfWork

T = TypeVar("T")


class Transactions:
    """The transactions of one store: its engines, its fast path, and its calls' retry
    loop (`retries.py`)."""

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
        _LIVE.add(self)

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
        backend = backend_for(self.engine)
        if not backend.checkpoints_wal:
            return
        self.release_kept()
        try:
            with self.engine.connect() as connection:
                backend.checkpoint(connection)
        except Exception as error:
            if not is_database_error(error):
                raise
            # checkpointing is housekeeping; the data is already durable

    def close(self) -> None:
        self._closed = True
        self.release_kept()
        close_notifier(self.base_engine)  # followers hear of the last commits first
        end_idle_watchdog()
        _LIVE.discard(self)

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

    def write(self, work: Work[T], rerun: Work[T] | None = None) -> T:
        """`work` in a write transaction of its own, with the retry loop's tries and
        re-runs (`retries.call_with_retries`; `rerun`, if given, replaces `work` after a
        lost connection: the lost try may have committed)."""
        return call_with_retries(self.failover, self._write_once, work, rerun)

    def write_hosting(self, work: Work[T], rerun: Work[T] | None = None) -> T:
        """`write` for work that calls a host's `write(session)`: always in a unit of work,
        whose `Session` it needs."""
        return call_with_retries(self.failover, self._in_unit_of_work, work, rerun)

    def _write_once(self, work: Work[T]) -> T:
        """One try: on the fast path once the store is checked ready on this pool (and the
        engine allows it), else in a unit of work (which checks it)."""
        direct = self._direct
        if direct is not None and not self._closed and direct.ready():
            return direct.write(work)
        return self._in_unit_of_work(work)

    def _in_unit_of_work(self, work: Work[T]) -> T:
        with self.unit_of_work() as uow:
            return work(uow.runs)

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

    def read(self, work: Work[T]) -> T:
        """`work` in one read snapshot, re-run after a lost connection."""
        return call_with_retries(self.failover, self._read_once, work)

    def _read_once(self, work: Work[T]) -> T:
        with self.reading() as runs:
            return work(runs)


# every store's live transactions, for the fork handler; and what children must keep but
# never touch
_LIVE: Final[weakref.WeakSet[Transactions]] = weakref.WeakSet()
_ABANDONED: Final[list[Any]] = []


def _after_fork_in_child() -> None:
    for transactions in list(_LIVE):
        transactions._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = ["Transactions"]
