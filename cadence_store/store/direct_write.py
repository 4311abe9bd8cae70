"""RunStore's own write path: one transaction on a pooled DB-API connection.

A `UnitOfWork` wraps its transaction in a SQLAlchemy `Connection` (and a `Session` for a
host's rows). A `RunStore` call that runs no host code needs neither: here the repository
runs on the DB-API connection the pool hands out, in the transaction of the hand-written
floor (`benchmarks/floor.py`): checkout, BEGIN (IMMEDIATE on SQLite), the same statements
under the same locks, COMMIT, checkin. Errors are coded as everywhere else, and a failed
statement or commit rolls the whole transaction back.

It is used only where it changes nothing a host could see: on an engine with no
connection-level event listeners or execution options (a host's `begin` hook or isolation
level belongs to `Connection`s), and on a store already checked at head and in shape
(otherwise the unit of work runs, and checks it).

On an engine the store made itself, one connection stays checked out between calls
(`keep_one`): checking it out of the pool and back in cost as much as the rest of the
wrapping (measured: about 20 of the 50 µs above the floor). Only a connection whose
transaction committed is kept; the pool gets it back on `release()` (before the store
takes another connection for a unit of work or a read, after a lost connection, and at
close). None is kept when the pool checks connections at checkout (`pool_pre_ping`,
`pool_recycle`) or holds fewer than two.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from sqlalchemy import Engine
from sqlalchemy.pool import Pool, PoolProxiedConnection, QueuePool

from ..repository.run_repository import Clock, RunRepository
from ..repository.transaction import JournalTransaction, RunHead
from ..storage.backends import backend_for
from ..storage.call_budget import attempts_bounded, watch_connection
from ..storage.failures import WRITE, database_errors
from ..storage.readiness import FORGETS, is_store_ready
from ..storage.statements import Statements

T = TypeVar("T")
KNOWN_HEADS: Final = 1024  # runs whose last head a store remembers
_WRITE_ERRORS: Final = database_errors(WRITE)  # stateless: one serves every call

# the `Connection` events a direct transaction would not fire (a host's cursor listeners
# among them: they must see the store's statements)
_CONNECTION_EVENTS: Final = (
    "engine_connect",
    "begin",
    "commit",
    "rollback",
    "set_connection_execution_options",
    "before_cursor_execute",
    "after_cursor_execute",
    "before_execute",
    "after_execute",
)


def fits_direct_writes(engine: Engine) -> bool:
    """Whether a transaction on `engine`'s pooled DB-API connections is indistinguishable
    from one on its `Connection`s: no connection or statement events, no execution
    options."""
    if engine.get_execution_options():
        return False
    return not any(getattr(engine.dispatch, name) for name in _CONNECTION_EVENTS)


class DirectWrites:
    """Runs repository work in one transaction on a pooled DB-API connection."""

    __slots__ = (
        "_clock",
        "_engine",
        "_kept",
        "_keeping",
        "_ready_as_of",
        "_info_key",
        "_known",
        "_lock",
        "_root_hash",
        "_schema",
        "_profile",
        "_watched",
    )

    def __init__(
        self,
        engine: Engine,
        *,
        root_hash: str | None,
        clock: Clock | None,
        schema: str | None,
        keep_one: bool = False,
    ) -> None:
        self._engine = engine
        self._root_hash = root_hash
        self._clock = clock
        self._schema = schema
        self._profile = backend_for(engine.dialect)
        # a kept connection skips the pool's checkout, whose listener watches it for the
        # call's budget (`call_budget`): where that is done, this does it
        self._watched = attempts_bounded(engine)
        self._keeping = keep_one
        # the store's own connection between its writes, with the repository (and its
        # transaction) made on it once: each write begins that transaction again
        self._kept: _Kept | None = None
        self._lock = threading.Lock()
        # the heads this store's commits left runs at, newest last (`remember`)
        self._known: dict[str, RunHead] = {}
        self._ready_as_of = -1  # `FORGETS.count` when the pool was last seen ready
        # where a connection keeps its statements for a store of this schema (`_checkout`)
        self._info_key = ("cadence_store.direct_writes", schema)

    def ready(self) -> bool:
        """The store was checked (head revision, shape) on this pool, and still counts."""
        count = FORGETS.count  # read first: a forget during the check is not missed
        if self._ready_as_of == count:
            return True
        if not is_store_ready(self._engine.pool, self._schema):
            return False
        self._ready_as_of = count
        return True

    def release(self, *, discard: bool = False) -> None:
        """Give the kept connection back to the pool; `discard`: close it instead (it may
        point at a primary that is gone)."""
        with self._lock:
            kept, self._kept = self._kept, None
        if kept is None:
            return
        pooled = kept[0][0]
        if discard:
            pooled.invalidate()
        pooled.close()

    def abandon(self) -> None:
        """In a child after `fork()`: forget the kept connection without closing it (it is
        the parent's), and the lock a parent's thread may have held."""
        kept, self._kept = self._kept, None
        if kept is not None:
            _ABANDONED.append(kept)
        self._lock = threading.Lock()

    def _checkout(self) -> _Checkout:
        """A pooled connection and the statements on it (`write` takes the kept one, if
        there is one, itself). A connection's
        statements are made once in its life and kept in its `info`, which the pool
        clears when it replaces the connection: a host's pool lends its connections
        afresh for every call, and making them cost a tenth of a call's own work."""
        try:
            pooled = self._engine.raw_connection()
        except BaseException as error:
            _WRITE_ERRORS.raise_coded(error)
            raise
        info = pooled.info
        statements = info.get(self._info_key)
        if statements is None:
            dbapi_connection = pooled.dbapi_connection
            assert dbapi_connection is not None  # a connection just checked out
            statements = Statements.on_dbapi(self._engine.dialect, dbapi_connection, self._schema)
            info[self._info_key] = statements
        return pooled, statements

    def _after_commit(self, kept: _Kept, heads: list[RunHead]) -> None:
        """Keep the heads the commit left runs at, for the next write to start from
        (`JournalTransaction.known_head`), and the connection if none is kept (else it
        goes back to the pool). A head that is stale by then (another writer, a commit
        whose outcome was lost) only costs that write a read of the row: its
        compare-and-set names the whole head."""
        with self._lock:
            if heads:
                known = self._known
                for head in heads:
                    known.pop(head.run_id, None)
                    known[head.run_id] = head
                while len(known) > KNOWN_HEADS:
                    del known[next(iter(known))]
            if self._keeping and self._kept is None:
                self._kept = kept
                return
        kept[0][0].close()

    def write(self, work: Callable[[RunRepository], T]) -> T:
        """`work` in one transaction on a pooled connection (the kept one, if any),
        committed, or rolled back when it fails."""
        kept = None
        if self._keeping:
            with self._lock:
                kept, self._kept = self._kept, None
        if kept is None:
            checkout, repository = self._checkout(), None
        else:
            checkout, repository = kept
            if self._watched:
                watch_connection(checkout[0].dbapi_connection)
        pooled, statements = checkout
        dbapi_connection = pooled.dbapi_connection
        assert dbapi_connection is not None  # checked out, not yet closed
        try:
            if self._profile.begins_immediate:
                # take the write lock first: a concurrent writer waits in SQLite's busy
                # handler instead of failing the read-then-write halfway
                self._profile.begin_write_on_driver(dbapi_connection)
            if repository is None:
                transaction = JournalTransaction.on_pooled(
                    self._profile, dbapi_connection, statements, self._schema, self._known
                )
                repository = RunRepository(
                    transaction, root_hash=self._root_hash, clock=self._clock
                )
            else:
                transaction = repository.transaction
                transaction.begin_again()
            result = work(repository)
            dbapi_connection.commit()
            if transaction.commit_pending:
                transaction.committed(self._engine)
        except BaseException as error:
            # The failure that got us here stays authoritative (the journal's own calls
            # are coded already; BEGIN's and COMMIT's are coded here).
            try:
                dbapi_connection.rollback()
            except Exception:
                pooled.invalidate()  # a connection that cannot roll back is not reused
            pooled.close()
            _WRITE_ERRORS.raise_coded(error)
            raise
        self._after_commit((checkout, repository), transaction.heads_left())
        return result


# a pooled connection and the statements on it
_Checkout = tuple[PoolProxiedConnection, Statements]
# a checkout a store keeps between its writes, and the repository made on it
_Kept = tuple[_Checkout, RunRepository]


def lends_freely(pool: Pool, engine_options: Mapping[str, Any]) -> bool:
    """Whether keeping one connection of a store's own pool idle starves nobody and skips
    no check asked for: a queue pool of two connections or more, made without
    `pool_pre_ping` or `pool_recycle` (a kept connection would bypass both)."""
    recycle = engine_options.get("pool_recycle")
    return (
        isinstance(pool, QueuePool)
        and pool.size() >= 2
        and not engine_options.get("pool_pre_ping")
        and (recycle is None or recycle < 0)
    )


# connections a forked child keeps referenced, never closed (they are its parent's)
_ABANDONED: Final[list[Any]] = []
