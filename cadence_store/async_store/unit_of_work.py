"""`AsyncUnitOfWork`: one write transaction, committed or rolled back as a whole.

The transaction is the sync `UnitOfWork`'s (`unit_of_work.open_write_transaction`,
`finish`, `release`), run on the async connection through `run_sync`: the same checks
before a commit, the same refusal of a transaction that cannot keep what it did.
Cancellation never leaves a connection behind: opening and closing run to their end
under `asyncio.shield`, and the cancellation is raised after them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self, TypeVar, Unpack

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from ..errors import StoreUnavailableError
from ..repository.run_repository import RunRepository
from ..repository.transaction import JournalTransaction
from ..storage.failures import WRITE, database_errors, is_database_error, translate_host_error
from ..store.unit_of_work import (
    JournalSettings,
    UnitOfWorkState,
    finish,
    open_write_transaction,
    release,
    rollback_quietly,
)
from ..telemetry import closes_unit_of_work, opens_unit_of_work
from .repository import AsyncRunRepository

T = TypeVar("T")


async def run_to_the_end(
    step: Awaitable[T], undo: Callable[[T], Awaitable[None]] | None = None
) -> T:
    """Await `step` to its end even if the caller is cancelled meanwhile: a connection is
    never left half opened or half closed. Then the cancellation is raised, after
    `undo(result)` has released what the step acquired for a caller that is gone."""
    task = asyncio.ensure_future(step)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True  # the caller's cancellation: the step goes on to its end
    result = task.result()  # the step's own failure, if it failed
    if cancelled:
        if undo is not None:
            await run_to_the_end(undo(result))
        raise asyncio.CancelledError
    return result


class AsyncUnitOfWork(UnitOfWorkState[AsyncEngine, AsyncRunRepository]):
    """One write transaction: `async with store.unit_of_work() as uow:` (see `UnitOfWork`).

    `uow.runs` is an `AsyncRunRepository`, `uow.session` an `AsyncSession` joined to the
    transaction: host rows added to it commit, or roll back, with the journal rows.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        prepare: Callable[[], Awaitable[None]] | None = None,
        **settings: Unpack[JournalSettings],
    ) -> None:
        """`prepare`: awaited before the transaction begins (the store's first-use checks);
        `settings`: `UnitOfWork`'s (root_hash, clock, schema)."""
        super().__init__(engine, **settings)
        self._prepare = prepare
        self._connection: AsyncConnection | None = None
        self._session: AsyncSession | None = None

    @property
    def session(self) -> AsyncSession:
        """An `AsyncSession` joined to this transaction (made on first use)."""
        self._open_transaction().session  # noqa: B018 (makes it, joined to the transaction)
        assert self._session is not None
        return self._session

    def _host_session(self, _connection: Connection) -> Session:
        assert self._connection is not None
        # only this object commits; a session commit() just flushes
        self._session = AsyncSession(
            bind=self._connection, join_transaction_mode="rollback_only", expire_on_commit=False
        )
        return self._session.sync_session

    @opens_unit_of_work
    async def __aenter__(self) -> Self:
        if self._connection is not None:
            raise StoreUnavailableError("unit-of-work-not-reentrant")
        if self._prepare is not None:
            await self._prepare()
        connection, transaction = await run_to_the_end(self._open(), self._abandon)
        self._connection = connection
        self._transaction = transaction
        sync = RunRepository(transaction, root_hash=self._root_hash, clock=self._clock)
        self._runs = AsyncRunRepository.over(sync, connection, lambda: self.session)
        return self

    async def _open(self) -> tuple[AsyncConnection, JournalTransaction]:
        with database_errors(WRITE):
            connection = await self._engine.connect()
        try:

            def begin(sync_connection: Connection) -> JournalTransaction:
                # the host's rows go through an AsyncSession on this connection
                return open_write_transaction(sync_connection, self._schema, self._host_session)

            self._connection = connection  # the host session's bind, once it is made
            return connection, await connection.run_sync(begin)
        except BaseException:
            self._connection = None
            await connection.run_sync(lambda sync: rollback_quietly(None, sync))
            await connection.close()
            raise

    async def _abandon(self, opened: tuple[AsyncConnection, JournalTransaction]) -> None:
        connection, transaction = opened
        self._connection = None
        await self._close(connection, transaction, commit=False)

    @closes_unit_of_work
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        connection, transaction = self._connection, self._transaction
        assert connection is not None and transaction is not None
        self._connection = self._transaction = self._runs = None
        await run_to_the_end(self._close(connection, transaction, commit=exc_type is None))
        if exc is not None and is_database_error(exc):
            # a host's statement in the block failed (journal calls raise coded errors):
            # the host's failure, not an outage
            raise translate_host_error(exc) from exc

    async def _close(
        self, connection: AsyncConnection, transaction: JournalTransaction, *, commit: bool
    ) -> None:
        try:
            await connection.run_sync(lambda sync: finish(transaction, sync, commit=commit))
        finally:
            try:
                await connection.run_sync(lambda sync: release(transaction, sync))
            finally:
                self._session = None
                await connection.close()


__all__ = ["AsyncUnitOfWork"]
