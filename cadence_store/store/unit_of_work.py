"""`UnitOfWork`: one transaction, committed or rolled back as a whole.

Entering begins a write transaction on its own connection (BEGIN IMMEDIATE on SQLite, so
concurrent writers queue instead of failing halfway; row locks on PostgreSQL are taken by
the repository). `uow.session` is an ordinary SQLAlchemy `Session` on that transaction:
host rows added to it commit atomically with the journal rows. Leaving the block without
an exception commits; an exception — or a failing commit — rolls everything back.

A transaction that can no longer keep what it acknowledged (a statement failed on
PostgreSQL, SQLite rolled it back by itself, a journal call failed halfway; see
`transaction.py`) is never committed: leaving the block raises `TransactionAbortedError`
and nothing of it is kept, even when the block caught the first error and went on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Self, TypedDict, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session

from ..errors import StoreUnavailableError
from ..journal.validation import require_clock, require_root_hash
from ..repository.run_repository import Clock, RunRepository
from ..repository.transaction import JournalTransaction
from ..storage.backends import backend_for
from ..storage.engine import begin_write
from ..storage.failures import (
    WRITE,
    database_errors,
    host_errors,
    is_database_error,
    translate_host_error,
)
from ..storage.schema import require_schema_name
from ..storage.shape import assert_store_ready
from ..telemetry import closes_unit_of_work, opens_unit_of_work

EngineT = TypeVar("EngineT", bound=Any)  # an Engine or an AsyncEngine
RunsT = TypeVar("RunsT")


def host_session(connection: Connection) -> Session:
    """The `Session` for a unit of work's host rows: only the unit of work commits, so a
    session commit() just flushes."""
    return Session(bind=connection, join_transaction_mode="rollback_only", expire_on_commit=False)


def open_write_transaction(
    connection: Connection,
    schema: str | None,
    session_factory: Callable[[Connection], Session] = host_session,
) -> JournalTransaction:
    """Begin a write transaction on `connection` (IMMEDIATE on SQLite), refuse a store
    not at head or drifted (once per engine), and hand it to a `JournalTransaction`."""
    with database_errors(WRITE):
        begin_write(connection)
        assert_store_ready(connection, schema)
    return JournalTransaction.on_connection(connection, schema, session_factory)


def finish(transaction: JournalTransaction, connection: Connection, *, commit: bool) -> None:
    """Commit (after checking the transaction can keep what it did) or roll back."""
    session = transaction.made_session
    try:
        if commit:
            transaction.assert_open()
            # the session holds only the host's rows, and a constraint that fails at
            # commit is a host's deferred one (cadence's are immediate)
            with host_errors():
                if session is not None:
                    session.flush()
            transaction.assert_open()
            with host_errors():
                connection.commit()
            transaction.committed(connection.engine)
            return
    except BaseException:
        rollback_quietly(session, connection)
        raise
    rollback_quietly(session, connection)


def rollback_quietly(session: Session | None, connection: Connection) -> None:
    # The failure that got us here stays authoritative.
    try:
        if session is not None:
            session.rollback()
    except Exception:
        pass
    try:
        connection.rollback()
    except Exception:
        pass


def release(transaction: JournalTransaction, connection: Connection) -> None:
    """Close the session and the connection (after `finish`)."""
    transaction.close()
    session = transaction.made_session
    try:
        if session is not None:
            session.close()
    finally:
        connection.close()


class JournalSettings(TypedDict, total=False):
    """The settings of a journal on a transaction (`RunRepository`'s keywords): a unit of
    work's (`UnitOfWorkState`) and an `AsyncRunRepository`'s."""

    root_hash: str | None
    clock: Clock | None
    schema: str | None


class UnitOfWorkState(Generic[EngineT, RunsT]):
    """What a unit of work holds, sync or async: the engine and the journal's settings,
    and while it is open its transaction and journal (`runs`)."""

    def __init__(
        self,
        engine: EngineT,
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
        schema: str | None = None,
    ) -> None:
        """`schema`: the PostgreSQL schema of cadence-store's tables; the session's own
        statements (a host's rows) are not redirected there."""
        self._engine = engine
        self._root_hash = None if root_hash is None else require_root_hash(root_hash)
        self._clock = require_clock(clock)
        self._schema = require_schema_name(schema)
        self._transaction: JournalTransaction | None = None
        self._runs: RunsT | None = None

    def _open_transaction(self) -> JournalTransaction:
        if self._transaction is None:
            raise StoreUnavailableError("unit-of-work-not-active")
        return self._transaction

    @property
    def dialect_name(self) -> str:
        """The engine's name (`sqlite`, `postgresql`)."""
        return backend_for(self._engine).name

    @property
    def runs(self) -> RunsT:
        """The journal inside this unit of work's transaction."""
        if self._runs is None:
            raise StoreUnavailableError("unit-of-work-not-active")
        return self._runs


class UnitOfWork(UnitOfWorkState[Engine, RunRepository]):
    """One transaction for journal calls (`uow.runs`) and a host's rows (`uow.session`).

    `with store.unit_of_work() as uow:` commits both on leaving the block, or rolls both
    back on an exception. On SQLite the transaction begins IMMEDIATE."""

    _connection: Connection | None = None  # while open

    @property
    def session(self) -> Session:
        """A `Session` joined to this transaction (made on first use)."""
        return self._open_transaction().session

    @opens_unit_of_work
    def __enter__(self) -> Self:
        if self._connection is not None:
            raise StoreUnavailableError("unit-of-work-not-reentrant")
        with database_errors(WRITE):
            connection = self._engine.connect()
        try:
            transaction = open_write_transaction(connection, self._schema)
        except BaseException:
            rollback_quietly(None, connection)
            connection.close()
            raise
        self._connection = connection
        self._transaction = transaction
        self._runs = RunRepository(transaction, root_hash=self._root_hash, clock=self._clock)
        return self

    @closes_unit_of_work
    def __exit__(self, _type: object, exc: BaseException | None, _traceback: object) -> None:
        connection, transaction = self._connection, self._transaction
        assert connection is not None and transaction is not None
        self._connection = self._transaction = self._runs = None
        try:
            finish(transaction, connection, commit=exc is None)
            if exc is not None and is_database_error(exc):
                # a host's statement in the block failed (journal calls raise coded
                # errors): the host's failure, not an outage
                raise translate_host_error(exc) from exc
        finally:
            release(transaction, connection)
