"""`AsyncRunRepository`: the journal's rules inside a caller's `AsyncSession` transaction."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from ..journal.values import BindDelivery
from ..repository.run_repository import Clock, RunRepository
from ..storage.failures import WRITE, database_errors
from ..store.forwarding import as_method
from ..telemetry import instrument_forwarding

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def _awaitable(
    method: Callable[Concatenate[RunRepository, P], R],
) -> Callable[Concatenate[AsyncRunRepository, P], Coroutine[Any, Any, R]]:
    """`RunRepository.method` as a coroutine method of `AsyncRunRepository` (its errors
    are already coded: the sync method is behind the error boundary)."""

    async def call(self: AsyncRunRepository, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self.run(lambda runs: method(runs, *args, **kwargs))

    as_method(call, method, "AsyncRunRepository")
    return call


@instrument_forwarding(RunRepository)
class AsyncRunRepository:
    """The journal's rules inside a caller's `AsyncSession` transaction; it never commits.

    Each method is the `RunRepository` method of the same name, run on the session's
    connection through `run_sync`. `schema`: the PostgreSQL schema of cadence-store's
    tables; the session's own statements (a host's rows) are not redirected there.
    """

    def __init__(
        self,
        session: AsyncSession,
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
        schema: str | None = None,
    ) -> None:
        self.sync = RunRepository(
            session.sync_session, root_hash=root_hash, clock=clock, schema=schema
        )
        # whose `run_sync` runs the synchronous repository on the transaction's connection
        self._run_sync_on: AsyncSession | AsyncConnection = session
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
        repository._run_sync_on = connection
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

    async def run(self, work: Callable[[RunRepository], T]) -> T:
        """`work(repository)` on the synchronous repository, inside this transaction.

        The repository's methods fail coded already; a driver error of `work`'s own (a
        host's statement) is coded as a write failure, as in a unit of work."""
        sync = self.sync
        with database_errors(WRITE):
            return await self._run_sync_on.run_sync(lambda _: work(sync))

    def check_deliveries(self, inputs: object) -> list[BindDelivery]:
        """Validate the inputs of `bind_deliveries_atomically` (no database work)."""
        return self.sync.check_deliveries(inputs)

    start_run = _awaitable(RunRepository.start_run)
    bind_change = _awaitable(RunRepository.bind_change)
    bind_delivery = _awaitable(RunRepository.bind_delivery)
    bind_deliveries = _awaitable(RunRepository.bind_deliveries)
    bind_deliveries_once = _awaitable(RunRepository.bind_deliveries_once)
    transition = _awaitable(RunRepository.transition)
    transition_once = _awaitable(RunRepository.transition_once)
    transition_many = _awaitable(RunRepository.transition_many)
    transition_many_once = _awaitable(RunRepository.transition_many_once)
    acquire_lease = _awaitable(RunRepository.acquire_lease)
    renew_lease = _awaitable(RunRepository.renew_lease)
    assert_lease = _awaitable(RunRepository.assert_lease)
    commit_lease = _awaitable(RunRepository.commit_lease)
    interrupt_lease = _awaitable(RunRepository.interrupt_lease)
    inspect_operation = _awaitable(RunRepository.inspect_operation)
    recover_expired_leases = _awaitable(RunRepository.recover_expired_leases)
    status = _awaitable(RunRepository.status)
    list_events = _awaitable(RunRepository.list_events)
    rebuild_projection = _awaitable(RunRepository.rebuild_projection)
    verify_integrity = _awaitable(RunRepository.verify_integrity)
    run_ids = _awaitable(RunRepository.run_ids)
    list_runs = _awaitable(RunRepository.list_runs)
    run_detail = _awaitable(RunRepository.run_detail)
    counts = _awaitable(RunRepository.counts)
    read_feed = _awaitable(RunRepository.read_feed)
    follower_position = _awaitable(RunRepository.follower_position)
    record_position = _awaitable(RunRepository.record_position)


__all__ = ["AsyncRunRepository"]
