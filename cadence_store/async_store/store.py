"""`AsyncRunStore`: `RunStore` for asyncio applications, one coroutine per method.

It is a proxy, not a second store: every call without host code is the same `RunStore`
call (the same runner, retries, failover re-runs, `read_bind` and `schema=`), run

- in a worker thread, on the sync driver of the same URL with the same engine options,
  when the store was given a URL (measured, `python -m benchmarks.async_transition`: the
  async drivers' round trips through the event loop cost 1.7-2.6x a sync call, a worker
  thread about 1.2x); or
- in SQLAlchemy's asyncio greenlet on the caller's own `AsyncEngine` (its pool, connect
  arguments and listeners, as they are), like `AsyncSession` runs `Session`.

Calls with host code (`unit_of_work()`, the `*_atomically` methods, whose `write` may be
a coroutine function) run in an `AsyncUnitOfWork` on the async engine, from the call
descriptions `RunStore` uses (`store/host_calls.py`), through the async side of the same
retry loop (`store/retries.py`).

The proxies are generated as source from `RunStore`'s and `host_calls`' signatures in
`calls.py`, those it shares with `AsyncRunRepository` in their common base
(`tools/generate_methods.py`, checked in CI).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from sqlalchemy.engine import URL, Engine
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.util import greenlet_spawn

from ..errors import InvalidInputError, SchemaOutOfDateError, StoreUnavailableError
from ..journal import RunEvent
from ..journal.feed import FeedItem
from ..journal.validation import require_clock, require_root_hash
from ..repository.run_repository import EVENT_BATCH, Clock, RunRepository
from ..storage.backends import backend_for
from ..storage.engine import missing_sqlite_file
from ..storage.failures import READ, database_errors
from ..storage.schema import require_schema_name, schema_options, upgrade_command
from ..storage.shape import assert_store_ready
from ..store.failover import DEFAULT_FAILOVER_TIMEOUT_S, require_failover_timeout
from ..store.host_calls import HostCall
from ..store.retries import call_with_retries_async
from ..store.run_store import RunStore
from ..store.state_root import StateRoot
from .calls import AsyncRunStoreCalls
from .engine import async_database_url, create_async_store_engine, sync_twin_url
from .following import follow_async
from .unit_of_work import AsyncUnitOfWork

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

AsyncWrite = Callable[[AsyncSession], object]  # may return an awaitable (a coroutine function)


async def _completed(result: object) -> None:
    """Await what a `write` callback returned, if it is awaitable (a coroutine function)."""
    if inspect.isawaitable(result):
        await result


class AsyncRunStore(AsyncRunStoreCalls):
    """`RunStore` for asyncio applications: every method a coroutine with the same name,
    arguments, results and error codes.

    `bind` is a URL (`sqlite+aiosqlite:///…`, `postgresql+psycopg://…`; a plain `sqlite:` or
    `postgresql:` URL gets the async driver) or a host's `AsyncEngine`, used as it is.
    `engine_options` go to the engines the store makes (both drivers of a URL get the same
    ones). `schema`, `failover_timeout_s` and `read_bind` are `RunStore`'s. The schema check
    runs on first use (or on `async with`): a database not at head raises
    `SchemaOutOfDateError` from that call.
    """

    def __init__(
        self,
        bind: str | URL | AsyncEngine,
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
        schema: str | None = None,
        failover_timeout_s: float = DEFAULT_FAILOVER_TIMEOUT_S,
        read_bind: str | URL | AsyncEngine | None = None,
        **engine_options: Any,
    ) -> None:
        self.root_hash = None if root_hash is None else require_root_hash(root_hash)
        self._clock = require_clock(clock)
        self._failover_timeout_s = require_failover_timeout(failover_timeout_s)
        self.schema = require_schema_name(schema)
        self._owned: list[AsyncEngine] = []
        self._base_engine = self._async_engine(bind, engine_options)
        options = schema_options(self.schema)
        self.engine: AsyncEngine = (
            self._base_engine.execution_options(**options) if options else self._base_engine
        )
        self._closed = False
        self._store: RunStore | None = None
        self._making: asyncio.Future[RunStore] | None = None
        self.state_root: StateRoot | None = None
        # where RunStore's calls run: a thread on the sync driver of the same URL, or the
        # asyncio greenlet on this async engine (a host's engine, an in-memory database)
        twin = None if isinstance(bind, AsyncEngine) else sync_twin_url(self._base_engine.url)
        if isinstance(read_bind, AsyncEngine):
            twin = None  # its pool is the host's: reads must run on it
        self._threaded = twin is not None
        self._sync_bind: str | URL | Engine = (
            self._base_engine.sync_engine if twin is None else twin
        )
        self._sync_options = engine_options if self._threaded else {}
        self._sync_read_bind: str | URL | Engine | None = None
        try:
            if read_bind is not None:
                self._sync_read_bind = (
                    sync_twin_url(async_database_url(read_bind))
                    if self._threaded and not isinstance(read_bind, AsyncEngine)
                    else self._async_engine(read_bind, engine_options).sync_engine
                )
            if self.schema is not None and not backend_for(self.engine).named_schemas:
                raise InvalidInputError("invalid-schema-name", "a schema name needs PostgreSQL")
            missing = missing_sqlite_file(self.engine.sync_engine)
            if missing is not None:
                # connecting would create an empty file; there is no store to use here
                command = upgrade_command(self.engine.url)
                raise SchemaOutOfDateError(
                    f"{missing} does not exist; run: {command}", command=command
                )
        except BaseException:
            for engine in self._owned:
                engine.sync_engine.dispose()  # nothing connected yet: no I/O to await
            raise

    def _async_engine(self, bind: str | URL | AsyncEngine, options: dict[str, Any]) -> AsyncEngine:
        if isinstance(bind, AsyncEngine):
            return bind
        engine = create_async_store_engine(bind, **options)
        self._owned.append(engine)
        return engine

    @property
    def dialect_name(self) -> str:
        """The engine's name (`sqlite`, `postgresql`)."""
        return backend_for(self.engine).name

    @classmethod
    async def open(cls, root: StateRoot, *, clock: Clock | None = None) -> AsyncRunStore:
        """The owner-private embedded store of a state root, as `RunStore.open` opens it
        (directories 0700, database 0600, upgraded, expired leases recovered)."""
        store = await asyncio.to_thread(RunStore.open, root, clock=clock)
        prepared = store.state_root
        assert prepared is not None
        async_store = cls(prepared.database_url, root_hash=store.root_hash, clock=clock)
        async_store._store = store  # the store RunStore.open made is this one's
        async_store.state_root = prepared
        return async_store

    # -- lifecycle -------------------------------------------------------------------------

    async def _ready_store(self) -> RunStore:
        """The `RunStore` behind this one, made (and the database checked) on first use.

        It is made by a task of its own: a caller cancelled meanwhile leaves it to finish,
        and it is kept (a store made and dropped would leave its connections open)."""
        if self._closed:
            raise StoreUnavailableError("run-store-closed")
        store = self._store
        if store is not None:
            return store
        if self._making is None:
            self._making = asyncio.ensure_future(self._make_store())
        return await asyncio.shield(self._making)

    async def _make_store(self) -> RunStore:
        make = functools.partial(
            RunStore,
            self._sync_bind,
            root_hash=self.root_hash,
            clock=self._clock,
            schema=self.schema,
            failover_timeout_s=self._failover_timeout_s,
            read_bind=self._sync_read_bind,
            **self._sync_options,
        )
        try:
            store = await self._off_the_loop(make)
            if self._threaded:
                # the units of work's pool is this engine's: checked once too, as RunStore's
                try:
                    with database_errors(READ):
                        async with self.engine.connect() as connection:
                            await connection.run_sync(assert_store_ready, self.schema)
                except BaseException:
                    await asyncio.to_thread(store.close)
                    raise
            self._store = store
        except BaseException:
            self._making = None  # the next call tries again
            raise
        return store

    async def _off_the_loop(self, call: Callable[[], T]) -> T:
        if self._threaded:
            return await asyncio.to_thread(call)
        return await greenlet_spawn(call)

    async def aclose(self) -> None:
        """Release the store's connections (a host's engine is left to the host)."""
        if self._closed:
            return
        self._closed = True
        if self._making is not None and not self._making.done():
            await asyncio.wait([self._making])  # a store being made is closed too
        store, self._store = self._store, None
        try:
            if store is not None:
                await self._off_the_loop(store.close)
        finally:
            for engine in self._owned:
                await engine.dispose()

    async def __aenter__(self) -> Self:
        try:
            await self._ready_store()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    # -- transactions ------------------------------------------------------------------------

    def unit_of_work(self) -> AsyncUnitOfWork:
        """One write transaction: `async with store.unit_of_work() as uow: await uow.runs....`.

        It is the caller's: a lost connection is not re-run (see `RunStore.unit_of_work`)."""
        if self._closed:
            raise StoreUnavailableError("run-store-closed")
        return AsyncUnitOfWork(
            self._base_engine,
            root_hash=self.root_hash,
            clock=self._clock,
            schema=self.schema,
            prepare=self._prepare_unit_of_work,
        )

    async def _prepare_unit_of_work(self) -> None:
        store = await self._ready_store()
        await self._off_the_loop(store.transactions.release_kept)

    async def _on_store(
        self, method: Callable[Concatenate[RunStore, P], R], /, *args: P.args, **kwargs: P.kwargs
    ) -> R:
        """`method` of the `RunStore` behind this one, run off the event loop."""
        store = await self._ready_store()
        return await self._off_the_loop(functools.partial(method, store, *args, **kwargs))

    async def _on_sync(self, work: Callable[[RunStore | RunRepository], R]) -> R:
        """`work(store)` on the `RunStore` behind this one, run off the event loop."""
        return await self._on_store(work)

    async def _host_call(self, host: HostCall[T]) -> T:
        """A call with host code, in its own unit of work, through the one retry loop
        (`retries.call_with_retries_async`): retried whole after a lost race, re-run after
        a lost connection, replaying what an earlier attempt committed."""
        store = await self._ready_store()

        async def in_unit_of_work(work: Callable[[AsyncUnitOfWork], Awaitable[T]]) -> T:
            async with self.unit_of_work() as uow:
                return await work(uow)

        async def work(uow: AsyncUnitOfWork) -> T:
            result, appended = await uow.runs.run_sync(host.journal)
            if appended:
                await _completed(host.write(uow.session))
            return result

        async def rerun(uow: AsyncUnitOfWork) -> T:
            recorded = await uow.runs.run_sync(host.recorded)
            return await work(uow) if recorded is None else recorded

        return await call_with_retries_async(
            store.transactions.failover, in_unit_of_work, work, rerun
        )

    # -- the journal feed, streamed ----------------------------------------------------------

    async def _follow(self, **arguments: Any) -> AsyncGenerator[FeedItem, None]:
        """`follow_async` on the `RunStore` behind this one, with `follow`'s arguments."""
        store = await self._ready_store()
        following = follow_async(
            store, threaded=self._threaded, run=self._off_the_loop, **arguments
        )
        async with aclosing(following) as items:  # its name is released before this returns
            async for item in items:
                yield item

    async def iter_events(self, run_id: str) -> AsyncIterator[RunEvent]:
        """The run's events, streamed in batches from one snapshot (`async for`)."""
        store = await self._ready_store()
        events = store.iter_events(run_id)  # a generator: close() ends its snapshot
        try:
            while batch := await self._off_the_loop(
                lambda: list(itertools.islice(events, EVENT_BATCH))
            ):
                for event in batch:
                    yield event
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                await self._off_the_loop(close)


__all__ = ["AsyncRunStore", "AsyncWrite"]
