"""`AsyncRunStore`: `RunStore` for asyncio applications, one coroutine per method."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import random
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
)
from contextlib import ExitStack
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from sqlalchemy import Connection
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session
from sqlalchemy.util import greenlet_spawn

from ..engine import enable_wal, is_sqlite, missing_sqlite_file, read_snapshot
from ..errors import InvalidInputError, SchemaOutOfDateError, StoreBusyError, StoreUnavailableError
from ..failures import READ, database_errors, is_database_error, is_retryable
from ..journal import OperationLease, RunEvent, RunProjection
from ..journal.validation import (
    require_callable,
    require_clock,
    require_operation_id,
    require_root_hash,
)
from ..journal.values import ApprovalProof, BindDelivery
from ..repository import EVENT_BATCH, Clock, RunRepository, check_delivery
from ..schema import require_schema_name, schema_options, upgrade_command
from ..shape import assert_store_ready
from ..store import RunStore
from ..store_leases import lease_grant
from ..store_transactions import MAX_ATTEMPTS, log_busy_failure, log_busy_retry
from ..telemetry import instrument
from ..unit_of_work import UnitOfWork
from .engine import create_async_store_engine, sync_twin_url
from .unit_of_work import AsyncUnitOfWork

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

AsyncWrite = Callable[[AsyncSession], object]  # may return an awaitable (a coroutine function)


async def _completed(result: object) -> None:
    """Await what a `write` callback returned, if it is awaitable (a coroutine function)."""
    if inspect.isawaitable(result):
        await result


def _in_transaction(
    method: Callable[Concatenate[RunRepository, P], R],
) -> Callable[Concatenate[AsyncRunStore, P], Coroutine[Any, Any, R]]:
    """`RunStore.method`: the repository method in its own (retried) transaction."""

    async def call(self: AsyncRunStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._write_repository(lambda runs: method(runs, *args, **kwargs))

    call.__name__ = method.__name__
    call.__qualname__ = f"AsyncRunStore.{method.__name__}"
    call.__doc__ = method.__doc__
    return call


def _in_snapshot(
    method: Callable[Concatenate[RunRepository, P], R],
) -> Callable[Concatenate[AsyncRunStore, P], Coroutine[Any, Any, R]]:
    """`RunStore.method`: the repository method in one read snapshot."""

    async def call(self: AsyncRunStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._read(lambda runs: method(runs, *args, **kwargs))

    call.__name__ = method.__name__
    call.__qualname__ = f"AsyncRunStore.{method.__name__}"
    call.__doc__ = method.__doc__
    return call


@instrument
class AsyncRunStore:
    """`RunStore` for asyncio applications: every method a coroutine with the same name,
    arguments, results and error codes.

    `bind` is a URL (`sqlite+aiosqlite:///…`, `postgresql+psycopg://…`; a plain `sqlite:` or
    `postgresql:` URL gets the async driver) or a host's `AsyncEngine` (never altered).
    `schema`: the PostgreSQL schema of cadence-store's tables (a host's rows in a unit of
    work or a `write=` callback stay where they are). The schema check runs on first use
    (or on `async with`): a database not at head raises `SchemaOutOfDateError` from that
    call.
    """

    def __init__(
        self,
        bind: str | URL | AsyncEngine,
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
        schema: str | None = None,
        **engine_options: Any,
    ) -> None:
        self.root_hash = None if root_hash is None else require_root_hash(root_hash)
        self._clock = require_clock(clock)
        self.schema = require_schema_name(schema)
        self._owns_engine = not isinstance(bind, AsyncEngine)
        self._base_engine = (
            bind
            if isinstance(bind, AsyncEngine)
            else create_async_store_engine(bind, **engine_options)
        )
        options = schema_options(self.schema)
        # For connections that touch only cadence-store's tables (reads): an option engine
        # shares the pool, and the host's own engine is left as it was. Units of work run on
        # the plain engine, so a host's rows in them stay where they belong (as RunStore).
        self.engine: AsyncEngine = (
            self._base_engine.execution_options(**options) if options else self._base_engine
        )
        self._closed = False
        self._ready = False
        self._ready_lock = asyncio.Lock()
        # the sync store that serves calls without host callbacks, from a worker thread
        self._worker: RunStore | None = None
        if self.schema is not None and is_sqlite(self.engine.sync_engine):
            # nothing connected yet: the engine holds no connection to release
            raise InvalidInputError("invalid-schema-name", "a schema name needs PostgreSQL")
        missing = missing_sqlite_file(self.engine.sync_engine)
        if missing is not None:
            # connecting would create an empty file; there is no store to use here
            command = upgrade_command(self.engine.url)
            raise SchemaOutOfDateError(f"{missing} does not exist; run: {command}", command=command)

    # -- lifecycle -------------------------------------------------------------------------

    async def _ensure_ready(self) -> None:
        """The checks of `RunStore.__init__`, once, before the first transaction."""
        self._assert_open()
        if self._ready:
            return
        async with self._ready_lock:
            if self._ready:
                return
            with database_errors(READ):
                async with self.engine.connect() as connection:
                    await connection.run_sync(self._check_store)
            twin = sync_twin_url(self._base_engine.url)
            if twin is not None:
                self._worker = await asyncio.to_thread(
                    RunStore,
                    twin,
                    root_hash=self.root_hash,
                    clock=self._clock,
                    schema=self.schema,
                    failover_timeout_s=0,  # as the rest of the async API: no re-runs
                )
            self._ready = True

    def _check_store(self, connection: Connection) -> None:
        assert_store_ready(connection, self.schema)
        connection.rollback()
        if self._owns_engine and is_sqlite(connection):
            enable_wal(connection)

    async def aclose(self) -> None:
        """Release the store's connections (a host's engine is left to the host)."""
        if self._closed:
            return
        self._closed = True
        if self._worker is not None:
            await asyncio.to_thread(self._worker.close)
        if self._owns_engine and self._ready and is_sqlite(self.engine.sync_engine):
            try:
                async with self.engine.connect() as connection:
                    await connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            except Exception as error:
                if not is_database_error(error):
                    raise
                # checkpointing is housekeeping; the data is already durable
        if self._owns_engine:
            await self._base_engine.dispose()

    async def __aenter__(self) -> Self:
        try:
            await self._ensure_ready()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _assert_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError("run-store-closed")

    # -- transactions ------------------------------------------------------------------------

    def unit_of_work(self) -> AsyncUnitOfWork:
        """One write transaction: `async with store.unit_of_work() as uow: await uow.runs....`."""
        self._assert_open()
        return AsyncUnitOfWork(
            self._base_engine,
            root_hash=self.root_hash,
            clock=self._clock,
            schema=self.schema,
            prepare=self._ensure_ready,
        )

    async def _retrying(self, attempt_once: Callable[[], Awaitable[T]]) -> T:
        """Retry whole transactions that lost a race (PostgreSQL 40001/40P01), as RunStore."""
        self._assert_open()
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                return await attempt_once()
            except StoreBusyError as error:
                cause = error.__cause__
                if attempt == MAX_ATTEMPTS or not is_retryable(cause or error):
                    log_busy_failure(attempt, error)
                    raise
                delay = random.uniform(0, 0.002 * 2**attempt)
                log_busy_retry(attempt, delay, error)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _write(self, work: Callable[[AsyncUnitOfWork], Awaitable[T]]) -> T:
        """Run `work` in its own async unit of work (for calls with host callbacks)."""

        async def once() -> T:
            async with self.unit_of_work() as uow:
                return await work(uow)

        return await self._retrying(once)

    async def _write_repository(self, work: Callable[[RunRepository], T]) -> T:
        """A call without host callbacks: the sync store's own transaction (the same
        repository, retries and error boundary) in a worker thread, on the sync driver of
        the same database. Measured (`python -m benchmarks.async_transition`): the async
        drivers' round trips through the event loop cost 1.7-2.6x a sync call; a worker
        thread 1.2x. Without a sync twin of the URL, the sync `UnitOfWork` runs in one
        greenlet on the async driver."""
        await self._ensure_ready()
        if self._worker is not None:
            return await asyncio.to_thread(self._worker._write, work)
        return await self._retrying(lambda: greenlet_spawn(self._unit_of_work_sync, work))

    def _unit_of_work_sync(self, work: Callable[[RunRepository], T]) -> T:
        engine = self._base_engine.sync_engine
        with UnitOfWork(
            engine, root_hash=self.root_hash, clock=self._clock, schema=self.schema
        ) as uow:
            return work(uow.runs)

    def _reader(self, connection: Connection) -> RunRepository:
        return RunRepository.on_connection(
            connection,
            lambda: Session(bind=connection),
            root_hash=self.root_hash,
            clock=self._clock,
            schema=self.schema,
        )

    async def _read(self, work: Callable[[RunRepository], T]) -> T:
        await self._ensure_ready()
        if self._worker is not None:
            return await asyncio.to_thread(self._worker._read, work)

        def read(connection: Connection) -> T:
            with read_snapshot(connection):
                return work(self._reader(connection))

        with database_errors(READ):
            async with self.engine.connect() as connection:
                return await connection.run_sync(read)

    # -- runs and their journal ------------------------------------------------------------

    async def start_run(
        self,
        stage: str,
        *,
        operation_id: str,
        change: str | None = None,
        provisional_key: str | None = None,
        provisional_aliases: Iterable[str] | None = None,
    ) -> RunProjection:
        aliases = provisional_aliases
        if aliases is not None and not isinstance(aliases, str | bytes | Mapping):
            # a retried transaction must see the same aliases (an iterator is read once)
            aliases = list(aliases) if isinstance(aliases, Iterable) else aliases
        return await self._write_repository(
            lambda runs: runs.start_run(
                stage,
                operation_id=operation_id,
                change=change,
                provisional_key=provisional_key,
                provisional_aliases=aliases,
            )
        )

    bind_change = _in_transaction(RunRepository.bind_change)
    bind_delivery = _in_transaction(RunRepository.bind_delivery)
    transition = _in_transaction(RunRepository.transition)

    async def bind_delivery_atomically(
        self,
        run_id: str,
        gate: str,
        revision: int,
        receipt_hash: str,
        *,
        operation_id: str,
        write: AsyncWrite,
        approval_proof: ApprovalProof | Mapping[str, Any] | None = None,
        lease: OperationLease | Mapping[str, Any] | None = None,
    ) -> RunProjection:
        """`bind_delivery`, and `write(session)` (awaited if it returns an awaitable) in the
        same transaction; `write` runs only when the event is appended (not on a replay)."""
        request = check_delivery(
            run_id, gate, revision, receipt_hash, operation_id, approval_proof, lease
        )
        require_callable(write, "delivery-binding-write-invalid")

        async def work(uow: AsyncUnitOfWork) -> RunProjection:
            projection, appended = await uow.runs.bind_deliveries_once([request])
            if appended:
                await _completed(write(uow.session))
            return projection

        return await self._write(work)

    async def bind_deliveries_atomically(
        self, inputs: Iterable[BindDelivery | Mapping[str, Any]], *, write: AsyncWrite
    ) -> RunProjection:
        """Several bindings of one run (one lease), and `write(session)`, in one transaction."""
        items = (
            list(inputs)
            if isinstance(inputs, Iterable) and not isinstance(inputs, str | bytes | Mapping)
            else inputs
        )

        async def work(uow: AsyncUnitOfWork) -> RunProjection:
            requests = uow.runs.check_deliveries(items)
            require_callable(write, "delivery-binding-write-invalid")
            projection, appended = await uow.runs.bind_deliveries_once(requests)
            if appended:  # not when every input replays
                await _completed(write(uow.session))
            return projection

        return await self._write(work)

    async def transition_atomically(
        self,
        run_id: str,
        to: str,
        *,
        operation_id: str,
        write: AsyncWrite,
        code: str | None = None,
        lease: OperationLease | Mapping[str, Any] | None = None,
    ) -> RunProjection:
        """`transition`, and `write(session)` in the same transaction; a replayed operation
        id returns its recorded projection without calling `write`."""
        require_operation_id(operation_id)
        require_callable(write, "state-transition-write-invalid")

        async def work(uow: AsyncUnitOfWork) -> RunProjection:
            projection, appended = await uow.runs.transition_once(
                run_id, to, operation_id=operation_id, code=code, lease=lease
            )
            if appended:
                await _completed(write(uow.session))
            return projection

        return await self._write(work)

    # -- leases ------------------------------------------------------------------------------

    async def acquire_lease(
        self,
        run_id: str,
        operation_id: str,
        ttl_ms: int,
        *,
        preempt: bool = False,
        exclusive: bool = False,
    ) -> OperationLease:
        # as RunStore: one token per call, whatever the attempts
        return await self._write_repository(
            lease_grant(run_id, operation_id, ttl_ms, preempt, exclusive)
        )

    renew_lease = _in_transaction(RunRepository.renew_lease)
    assert_lease = _in_transaction(RunRepository.assert_lease)
    commit_lease = _in_transaction(RunRepository.commit_lease)
    interrupt_lease = _in_transaction(RunRepository.interrupt_lease)
    inspect_operation = _in_transaction(RunRepository.inspect_operation)
    recover_expired_leases = _in_transaction(RunRepository.recover_expired_leases)

    # -- reading (one snapshot each) ---------------------------------------------------------

    status = _in_snapshot(RunRepository.status)
    list_events = _in_snapshot(RunRepository.list_events)
    rebuild_projection = _in_snapshot(RunRepository.rebuild_projection)
    verify_integrity = _in_snapshot(RunRepository.verify_integrity)
    run_ids = _in_snapshot(RunRepository.run_ids)
    list_runs = _in_snapshot(RunRepository.list_runs)
    run_detail = _in_snapshot(RunRepository.run_detail)
    counts = _in_snapshot(RunRepository.counts)

    async def iter_events(self, run_id: str) -> AsyncIterator[RunEvent]:
        """The run's events, streamed in batches from one snapshot (`async for`)."""
        await self._ensure_ready()
        with ExitStack() as snapshot:

            def start(connection: Connection) -> Iterator[RunEvent]:
                snapshot.enter_context(read_snapshot(connection))
                return self._reader(connection).iter_events(run_id)

            with database_errors(READ):
                async with self.engine.connect() as connection:
                    events = await connection.run_sync(start)
                    try:
                        # the sync generator resumes in each run_sync's greenlet
                        while batch := await connection.run_sync(
                            lambda _: list(itertools.islice(events, EVENT_BATCH))
                        ):
                            for event in batch:
                                yield event
                    finally:
                        await connection.run_sync(_finish_stream, events, snapshot)


def _finish_stream(_: Connection, events: Iterator[RunEvent], snapshot: ExitStack) -> None:
    close = getattr(events, "close", None)  # a generator: release its server-side cursor
    if close is not None:
        close()
    snapshot.close()


__all__ = ["AsyncRunStore", "AsyncWrite"]
