"""`AsyncRunRepository`: the journal's rules inside a caller's `AsyncSession` transaction.

Its journal methods are generated as source from `RunRepository`'s signatures in
`calls.py`, those it shares with `AsyncRunStore` in their common base
(`tools/generate_methods.py`, checked in CI).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, Unpack

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from ..journal.values import BindDelivery
from ..repository.run_repository import RunRepository
from ..storage.failures import WRITE, database_errors
from ..store.run_store import RunStore
from ..store.unit_of_work import JournalSettings
from .calls import AsyncRunRepositoryCalls

T = TypeVar("T")


class AsyncRunRepository(AsyncRunRepositoryCalls):
    """The journal's rules inside a caller's `AsyncSession` transaction; it never commits.

    Each method is the `RunRepository` method of the same name, run on the session's
    connection through `run_sync`. `schema`: the PostgreSQL schema of cadence-store's
    tables; the session's own statements (a host's rows) are not redirected there.
    """

    def __init__(self, session: AsyncSession, **settings: Unpack[JournalSettings]) -> None:
        """`settings`: `RunRepository`'s (root_hash, clock, schema)."""
        self.sync = RunRepository(session.sync_session, **settings)
        self._greenlet_of: AsyncSession | AsyncConnection = session  # runs `run_sync`
        self._session_of: Callable[[], AsyncSession] = lambda: session

    @classmethod
    def over(
        cls,
        sync: RunRepository,
        connection: AsyncConnection,
        session_of: Callable[[], AsyncSession],
    ) -> AsyncRunRepository:
        """The repository of an `AsyncUnitOfWork`: `sync` on the unit of work's
        transaction, run on `connection`; `session_of()` gives its `AsyncSession`."""
        repository = cls.__new__(cls)
        repository.sync = sync
        repository._greenlet_of = connection
        repository._session_of = session_of
        return repository

    @property
    def session(self) -> AsyncSession:
        """The `AsyncSession` whose transaction the journal's rows join."""
        return self._session_of()

    @property
    def dialect_name(self) -> str | None:
        """The engine's name (`sqlite`, `postgresql`), None while not known yet."""
        return self.sync.dialect_name

    @property
    def root_hash(self) -> str | None:
        """The root hash of runs this repository starts (None: it starts none)."""
        return self.sync.root_hash

    @property
    def schema(self) -> str | None:
        """The PostgreSQL schema of cadence-store's tables (None: the default)."""
        return self.sync.schema

    async def run_sync(self, work: Callable[[RunRepository], T]) -> T:
        """`work(repository)` on the synchronous repository, inside this transaction.

        The repository's methods fail coded already; a driver error of `work`'s own (a
        host's statement) is coded as a write failure, as in a unit of work."""
        sync = self.sync
        with database_errors(WRITE):
            return await self._greenlet_of.run_sync(lambda _: work(sync))

    async def _on_sync(self, work: Callable[[RunStore | RunRepository], T]) -> T:
        """`work(repository)`, inside this transaction (`run_sync`)."""
        return await self.run_sync(work)

    def check_deliveries(self, inputs: object) -> list[BindDelivery]:
        """Validate the inputs of `bind_deliveries_atomically` (no database work)."""
        return self.sync.check_deliveries(inputs)


__all__ = ["AsyncRunRepository"]
