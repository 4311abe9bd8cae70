"""The journal for asyncio host applications: `AsyncRunStore`, `AsyncRunRepository`,
`AsyncUnitOfWork` and `upgrade_async` (extra `async`: aiosqlite, greenlet).

One implementation of the rules: every call drives the synchronous `RunRepository` on an
`AsyncConnection` / `AsyncSession` through SQLAlchemy's `run_sync` (greenlet). Inside it the
async drivers' adapted connections (aiosqlite, psycopg's async mode) look like DB-API
connections, so the compiled hot path (`sql.py`) runs unchanged and the event loop is never
blocked: each driver round trip is awaited underneath. What is async-specific here is only
the orchestration: connections, transactions, the `write=` callbacks (which may be
coroutine functions) and PostgreSQL's whole-transaction retries, which wait with
`asyncio.sleep`.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import random
import uuid
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

from sqlalchemy import Connection, event
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, DBAPIError, InvalidRequestError, NoSuchModuleError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session
from sqlalchemy.util import greenlet_spawn

from .engine import (
    _set_session_pragmas,
    begin_write,
    enable_wal,
    is_sqlite,
    parse_url,
    read_snapshot,
)
from .errors import InvalidInputError, SchemaOutOfDateError, StoreBusyError, StoreUnavailableError
from .failures import is_database_error, is_retryable, translate_database_error
from .journal import OperationLease, RunEvent, RunProjection
from .journal.validation import (
    require_callable,
    require_clock,
    require_operation_id,
    require_root_hash,
)
from .journal.values import ApprovalProof, BindDelivery
from .repository import EVENT_BATCH, Clock, RunRepository, check_delivery
from .schema import assert_at_head, schema_options, upgrade, upgrade_command
from .store import MAX_ATTEMPTS, _missing_sqlite_file
from .unit_of_work import UnitOfWork

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

AsyncWrite = Callable[[AsyncSession], object]  # may return an awaitable (a coroutine function)

# A synchronous driver's URL names the async driver of the same database.
_ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+pysqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
}


def async_database_url(url: str | URL) -> URL:
    """`url` with an async driver: `sqlite` → `sqlite+aiosqlite`, `postgresql` →
    `postgresql+psycopg` (psycopg 3 serves both; SQLAlchemy picks its async mode)."""
    parsed = parse_url(url)
    driver = _ASYNC_DRIVERS.get(parsed.drivername)
    return parsed if driver is None else parsed.set(drivername=driver)


def create_async_store_engine(url: str | URL, **engine_options: Any) -> AsyncEngine:
    """An `AsyncEngine` for cadence-store's own use (the SQLite pragmas of
    `create_store_engine`, set on each new connection)."""
    try:
        engine = create_async_engine(async_database_url(url), **engine_options)
    except (ImportError, NoSuchModuleError, ArgumentError, InvalidRequestError, TypeError) as error:
        # an unknown dialect, a driver that is not installed or not async, bad options
        raise InvalidInputError("invalid-database-url", type(error).__name__) from None
    if is_sqlite(engine.sync_engine):

        def on_connect(dbapi_connection: Any, _record: Any) -> None:
            _set_session_pragmas(dbapi_connection, wal=False)

        event.listen(engine.sync_engine, "connect", on_connect)
    return engine


async def _completed(result: object) -> None:
    """Await what a `write` callback returned, if it is awaitable (a coroutine function)."""
    if inspect.isawaitable(result):
        await result


# -- the repository ------------------------------------------------------------------------


def _awaitable(
    method: Callable[Concatenate[RunRepository, P], R],
) -> Callable[Concatenate[AsyncRunRepository, P], Coroutine[Any, Any, R]]:
    """`RunRepository.method` as a coroutine method of `AsyncRunRepository`."""

    async def call(self: AsyncRunRepository, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self.run(lambda runs: method(runs, *args, **kwargs))

    call.__name__ = method.__name__
    call.__qualname__ = f"AsyncRunRepository.{method.__name__}"
    call.__doc__ = method.__doc__
    return call


class AsyncRunRepository:
    """The journal's rules inside a caller's `AsyncSession` transaction; it never commits.

    Each method is the `RunRepository` method of the same name, run on the session's
    connection through `run_sync`.
    """

    def __init__(
        self,
        session: AsyncSession,
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
        schema: str | None = None,
    ) -> None:
        # `schema=` reaches RunRepository once it takes one (issue "schemas"); until then a
        # host session maps the schema itself (schema_translate_map)
        extra: dict[str, Any] = {} if schema is None else {"schema": schema}
        self._session: AsyncSession | None = session
        self._session_factory: Callable[[], AsyncSession] | None = None
        self._runner: AsyncSession | AsyncConnection = session
        self.sync = RunRepository(session.sync_session, root_hash=root_hash, clock=clock, **extra)

    @classmethod
    def on_connection(
        cls,
        connection: AsyncConnection,
        session_factory: Callable[[], AsyncSession],
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
    ) -> AsyncRunRepository:
        """A repository on a connection whose transaction its owner (a unit of work)
        manages; the `AsyncSession` is made only if someone asks for `.session`."""
        repository = cls.__new__(cls)
        repository._session = None
        repository._session_factory = session_factory
        repository._runner = connection
        sync_connection = connection.sync_connection
        assert sync_connection is not None  # a started connection
        repository.sync = RunRepository.on_connection(
            sync_connection,
            lambda: session_factory().sync_session,
            root_hash=root_hash,
            clock=clock,
        )
        return repository

    @property
    def session(self) -> AsyncSession:
        if self._session is None:
            assert self._session_factory is not None
            self._session = self._session_factory()
        return self._session

    @property
    def root_hash(self) -> str | None:
        return self.sync.root_hash

    async def run(self, work: Callable[[RunRepository], T]) -> T:
        """`work(repository)` on the synchronous repository, inside this transaction."""
        sync = self.sync
        return await self._runner.run_sync(lambda _: work(sync))

    def check_deliveries(self, inputs: object) -> list[BindDelivery]:
        """Validate the inputs of `bind_deliveries_atomically` (no database work)."""
        return self.sync.check_deliveries(inputs)

    start_run = _awaitable(RunRepository.start_run)
    bind_change = _awaitable(RunRepository.bind_change)
    bind_delivery = _awaitable(RunRepository.bind_delivery)
    bind_deliveries = _awaitable(RunRepository.bind_deliveries)
    transition = _awaitable(RunRepository.transition)
    transition_once = _awaitable(RunRepository.transition_once)
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


# -- the unit of work ----------------------------------------------------------------------


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
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._engine = engine
        self._root_hash = root_hash
        self._clock = clock
        self._prepare = prepare
        self._connection: AsyncConnection | None = None
        self._session: AsyncSession | None = None
        self._runs: AsyncRunRepository | None = None
        self._dbapi = engine.dialect.loaded_dbapi

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

    async def __aenter__(self) -> Self:
        if self._connection is not None:
            raise StoreUnavailableError("unit-of-work-not-reentrant")
        if self._prepare is not None:
            await self._prepare()
        try:
            connection = await self._engine.connect()
        except DBAPIError as error:
            raise translate_database_error(error) from error
        try:
            await connection.run_sync(begin_write)
        except Exception as error:
            await connection.close()
            if is_database_error(error, self._dbapi):
                raise translate_database_error(error) from error
            raise
        self._connection = connection
        self._runs = AsyncRunRepository.on_connection(
            connection, lambda: self.session, root_hash=self._root_hash, clock=self._clock
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        connection, session = self._connection, self._session
        assert connection is not None
        self._connection = self._session = self._runs = None
        try:
            if exc_type is None:
                try:
                    if session is not None:
                        await session.flush()
                    await connection.commit()
                except Exception as error:
                    await _rollback_quietly(session, connection)
                    if is_database_error(error, self._dbapi):
                        raise translate_database_error(error) from error
                    raise
            else:
                await _rollback_quietly(session, connection)
                if isinstance(exc, Exception) and is_database_error(exc, self._dbapi):
                    raise translate_database_error(exc) from exc
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


# -- the store -----------------------------------------------------------------------------


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


class AsyncRunStore:
    """`RunStore` for asyncio applications: every method a coroutine with the same name,
    arguments, results and error codes.

    `bind` is a URL (`sqlite+aiosqlite:///…`, `postgresql+psycopg://…`; a plain `sqlite:` or
    `postgresql:` URL gets the async driver) or a host's `AsyncEngine` (never altered). The
    schema check runs on first use (or on `async with`): a database not at head raises
    `SchemaOutOfDateError` from that call.
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
        self._owns_engine = not isinstance(bind, AsyncEngine)
        self._base_engine = (
            bind
            if isinstance(bind, AsyncEngine)
            else create_async_store_engine(bind, **engine_options)
        )
        options = schema_options(schema)
        # an option engine shares the pool; the host's own engine is left as it was
        self.engine: AsyncEngine = (
            self._base_engine.execution_options(**options) if options else self._base_engine
        )
        self._closed = False
        self._ready = False
        self._ready_lock = asyncio.Lock()
        missing = _missing_sqlite_file(self.engine.sync_engine)
        if missing is not None:
            # connecting would create an empty file; there is no store to use here
            command = upgrade_command(self.engine.url)
            raise SchemaOutOfDateError(f"{missing} does not exist; run: {command}", command=command)

    # -- lifecycle -------------------------------------------------------------------------

    async def _ensure_ready(self) -> None:
        """The schema check of `RunStore.__init__`, once, before the first transaction."""
        self._assert_open()
        if self._ready:
            return
        async with self._ready_lock:
            if self._ready:
                return
            try:
                async with self.engine.connect() as connection:
                    await connection.run_sync(self._check_schema)
            except DBAPIError as error:
                raise translate_database_error(error) from error
            self._ready = True

    def _check_schema(self, connection: Connection) -> None:
        assert_at_head(connection)
        connection.rollback()
        if self._owns_engine and is_sqlite(connection):
            enable_wal(connection)

    async def aclose(self) -> None:
        """Release the store's connections (a host's engine is left to the host)."""
        if self._closed:
            return
        self._closed = True
        if self._owns_engine and self._ready and is_sqlite(self.engine.sync_engine):
            try:
                async with self.engine.connect() as connection:
                    await connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            except DBAPIError:
                pass  # checkpointing is housekeeping; the data is already durable
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
            self.engine, root_hash=self.root_hash, clock=self._clock, prepare=self._ensure_ready
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
                    raise
                await asyncio.sleep(random.uniform(0, 0.002 * 2**attempt))
        raise AssertionError("unreachable")

    async def _write(self, work: Callable[[AsyncUnitOfWork], Awaitable[T]]) -> T:
        """Run `work` in its own async unit of work (for calls with host callbacks)."""

        async def once() -> T:
            async with self.unit_of_work() as uow:
                return await work(uow)

        return await self._retrying(once)

    async def _write_repository(self, work: Callable[[RunRepository], T]) -> T:
        """A call without host callbacks: the sync `UnitOfWork` itself (connect, begin,
        the repository, commit) in one greenlet. Measured cheaper than an AsyncUnitOfWork,
        whose every step is a greenlet switch of its own."""
        await self._ensure_ready()
        return await self._retrying(lambda: greenlet_spawn(self._unit_of_work_sync, work))

    def _unit_of_work_sync(self, work: Callable[[RunRepository], T]) -> T:
        engine = self.engine.sync_engine
        with UnitOfWork(engine, root_hash=self.root_hash, clock=self._clock) as uow:
            return work(uow.runs)

    async def _read(self, work: Callable[[RunRepository], T]) -> T:
        await self._ensure_ready()
        root_hash, clock = self.root_hash, self._clock

        def read(connection: Connection) -> T:
            with read_snapshot(connection):
                return work(
                    RunRepository.on_connection(
                        connection,
                        lambda: Session(bind=connection),
                        root_hash=root_hash,
                        clock=clock,
                    )
                )

        try:
            async with self.engine.connect() as connection:
                return await connection.run_sync(read)
        except Exception as error:
            if is_database_error(error, self.engine.dialect.loaded_dbapi):
                raise translate_database_error(error) from error
            raise

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
        same transaction."""
        check_delivery(run_id, gate, revision, receipt_hash, operation_id, approval_proof, lease)
        require_callable(write, "delivery-binding-write-invalid")

        async def work(uow: AsyncUnitOfWork) -> RunProjection:
            projection = await uow.runs.bind_delivery(
                run_id,
                gate,
                revision,
                receipt_hash,
                operation_id=operation_id,
                approval_proof=approval_proof,
                lease=lease,
            )
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
            projection = await uow.runs.bind_deliveries(requests)
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
        token = str(uuid.uuid4())
        return await self._write_repository(
            lambda runs: runs.acquire_lease(
                run_id,
                operation_id,
                ttl_ms,
                preempt=preempt,
                exclusive=exclusive,
                lease_token=token,
            )
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
        root_hash, clock = self.root_hash, self._clock
        dbapi = self.engine.dialect.loaded_dbapi
        with ExitStack() as snapshot:

            def start(connection: Connection) -> Iterator[RunEvent]:
                snapshot.enter_context(read_snapshot(connection))
                repository = RunRepository.on_connection(
                    connection, lambda: Session(bind=connection), root_hash=root_hash, clock=clock
                )
                return repository.iter_events(run_id)

            try:
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
            except Exception as error:
                if is_database_error(error, dbapi):
                    raise translate_database_error(error) from error
                raise


def _finish_stream(_: Connection, events: Iterator[RunEvent], snapshot: ExitStack) -> None:
    close = getattr(events, "close", None)  # a generator: release its server-side cursor
    if close is not None:
        close()
    snapshot.close()


async def upgrade_async(
    bind: str | URL | AsyncEngine, revision: str = "heads", *, schema: str | None = None
) -> str | None:
    """`cadence_store.upgrade` on an async URL or `AsyncEngine`: the same migrations (and
    cadence 1.x adoption), run through the async driver without blocking the event loop."""
    engine = bind if isinstance(bind, AsyncEngine) else create_async_store_engine(bind)
    try:
        return await greenlet_spawn(upgrade, engine.sync_engine, revision, schema=schema)
    finally:
        if engine is not bind:
            await engine.dispose()


__all__ = [
    "AsyncRunRepository",
    "AsyncRunStore",
    "AsyncUnitOfWork",
    "async_database_url",
    "create_async_store_engine",
    "upgrade_async",
]
