"""`AsyncUnitOfWork`: one write transaction, committed or rolled back as a whole."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from ..engine import begin_write
from ..errors import StoreUnavailableError
from ..failures import WRITE, database_errors, is_database_error, translate_database_error
from ..repository import Clock
from ..schema import require_schema_name
from ..shape import assert_store_ready
from ..telemetry import instrument_unit_of_work
from ..unit_of_work import refuse_unfinished
from .repository import AsyncRunRepository


@instrument_unit_of_work
class AsyncUnitOfWork:
    """One write transaction: `async with store.unit_of_work() as uow:` (see `UnitOfWork`).

    `uow.runs` is an `AsyncRunRepository`, `uow.session` an `AsyncSession` joined to the
    transaction: host rows added to it commit, or roll back, with the journal rows.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
        schema: str | None = None,
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`schema`: the PostgreSQL schema of cadence-store's tables; the session's own
        statements (a host's rows) are not redirected there. `prepare`: awaited before
        the transaction begins (the store's first-use checks)."""
        self._engine = engine
        self._root_hash = root_hash
        self._clock = clock
        self._schema = require_schema_name(schema)
        self._prepare = prepare
        self._connection: AsyncConnection | None = None
        self._session: AsyncSession | None = None
        self._runs: AsyncRunRepository | None = None

    @property
    def session(self) -> AsyncSession:
        """An `AsyncSession` joined to this transaction (made on first use)."""
        if self._connection is None:
            raise StoreUnavailableError("unit-of-work-not-active")
        if self._session is None:
            # only this object commits; a session commit() just flushes
            self._session = AsyncSession(
                bind=self._connection,
                join_transaction_mode="rollback_only",
                expire_on_commit=False,
            )
        return self._session

    @property
    def runs(self) -> AsyncRunRepository:
        if self._runs is None:
            raise StoreUnavailableError("unit-of-work-not-active")
        return self._runs

    def _begin(self, connection: Connection) -> None:
        begin_write(connection)
        # once per engine: a store not at head, or drifted, is refused before use
        assert_store_ready(connection, self._schema)

    async def __aenter__(self) -> Self:
        if self._connection is not None:
            raise StoreUnavailableError("unit-of-work-not-reentrant")
        if self._prepare is not None:
            await self._prepare()
        with database_errors(WRITE):
            connection = await self._engine.connect()
        try:
            with database_errors(WRITE):
                await connection.run_sync(self._begin)
        except BaseException:
            await _rollback_quietly(None, connection)
            await connection.close()
            raise
        self._connection = connection
        self._runs = AsyncRunRepository.on_connection(
            connection,
            lambda: self.session,
            root_hash=self._root_hash,
            clock=self._clock,
            schema=self._schema,
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        connection, session, runs = self._connection, self._session, self._runs
        assert connection is not None and runs is not None
        self._connection = self._session = self._runs = None
        try:
            if exc_type is None:
                try:
                    refuse_unfinished(runs.sync)
                    with database_errors(WRITE):
                        if session is not None:
                            await session.flush()
                        await connection.commit()
                except BaseException:
                    await _rollback_quietly(session, connection)
                    raise
            else:
                await _rollback_quietly(session, connection)
                if exc is not None and is_database_error(exc):
                    # a host's statement in the block failed: coded, like cadence-store's
                    raise translate_database_error(exc, WRITE) from exc
        finally:
            if session is not None:
                await session.close()
            await connection.close()


async def _rollback_quietly(session: AsyncSession | None, connection: AsyncConnection) -> None:
    # The failure that got us here stays authoritative.
    try:
        if session is not None:
            await session.rollback()
    except Exception:
        pass
    try:
        await connection.rollback()
    except Exception:
        pass


__all__ = ["AsyncUnitOfWork"]
