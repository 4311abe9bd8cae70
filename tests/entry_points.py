"""The ways a caller reaches the journal, behind `RunStore`'s method names.

The behavioural store suite (tests/integration/test_store_*.py) runs every test through
each entry point, as eventsourcing runs one abstract recorder test case per backend:

- ``store``: `RunStore` itself;
- ``uow``: each call in its own ``with store.unit_of_work() as uow: uow.runs.<method>``;
- ``repository``: each call in its own host transaction, ``with Session(engine) as
  session, session.begin(): RunRepository(session, root_hash=..., clock=...).<method>``
  on the host's own engine;
- ``async``: each call through an `AsyncRunStore` on the host's own `AsyncEngine` (with
  its own connect listener and ``connect_args``), in one event loop of the test's.

A method `RunRepository` shares with `RunStore` (found by introspection, so a new one is
covered without a change here) goes through the entry point. Everything else is delegated
to the real `RunStore` the adapter wraps: `bind_delivery_atomically`,
`bind_deliveries_atomically` and `transition_atomically` (`write=` is RunStore's; in a unit
of work or a host session the caller simply writes in the same transaction),
`unit_of_work`, `close` and plain attributes.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Session

from cadence_store import AsyncRunStore, RunRepository, RunStore
from cadence_store.repository.run_repository import Clock


def _public_methods(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls, callable) if not name.startswith("_")}


# RunStore's methods that a repository offers under the same name and arguments.
SHARED_METHODS = frozenset(_public_methods(RunStore) & _public_methods(RunRepository))


class _Delegating:
    """Falls back to the wrapped `RunStore` for what the entry point has no equivalent of."""

    name = "store"

    def __init__(self, store: RunStore) -> None:
        self.run_store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.run_store, name)

    def _repository(self) -> AbstractContextManager[RunRepository]:
        """A `RunRepository` in a fresh transaction, for one call."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self.name} entry point over {self.run_store!r}>"


def _through_repository(name: str) -> Callable[..., Any]:
    streams = inspect.isgeneratorfunction(getattr(RunRepository, name))
    if streams:

        def stream(self: _Delegating, *args: Any, **kwargs: Any) -> Iterator[Any]:
            with self._repository() as runs:
                yield from getattr(runs, name)(*args, **kwargs)

        stream.__name__ = name
        return stream

    def call(self: _Delegating, *args: Any, **kwargs: Any) -> Any:
        with self._repository() as runs:
            return getattr(runs, name)(*args, **kwargs)

    call.__name__ = name
    return call


class UnitOfWorkEntry(_Delegating):
    """Each call in its own `store.unit_of_work()`, through `uow.runs`."""

    name = "uow"

    @contextmanager
    def _repository(self) -> Iterator[RunRepository]:
        with self.run_store.unit_of_work() as uow:
            yield uow.runs


class RepositoryEntry(_Delegating):
    """Each call in its own host `Session` transaction on the host's own engine."""

    name = "repository"

    def __init__(self, store: RunStore, host_engine: Engine, root_hash: str, clock: Clock) -> None:
        super().__init__(store)
        self.host_engine = host_engine
        self._root_hash = root_hash
        self._clock = clock

    @contextmanager
    def _repository(self) -> Iterator[RunRepository]:
        with Session(self.host_engine) as session, session.begin():
            yield RunRepository(session, root_hash=self._root_hash, clock=self._clock)


class AsyncEntry(_Delegating):
    """Each call through an `AsyncRunStore` on a host's `AsyncEngine`, used as it is."""

    name = "async"

    def __init__(
        self, store: RunStore, host_engine: AsyncEngine, root_hash: str, clock: Clock
    ) -> None:
        super().__init__(store)
        self.host_engine = host_engine
        self.loop = asyncio.new_event_loop()
        self.async_store = AsyncRunStore(host_engine, root_hash=root_hash, clock=clock)
        self.calls = 0

    def run(self, step: Any) -> Any:
        self.calls += 1
        return self.loop.run_until_complete(step)

    def shutdown(self) -> None:
        try:
            self.loop.run_until_complete(self.async_store.aclose())
            self.loop.run_until_complete(self.host_engine.dispose())
        finally:
            self.loop.close()


async def _collected(events: Any) -> list[Any]:
    return [event async for event in events]


def _through_async_store(name: str) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(getattr(RunRepository, name)):

        def stream(self: AsyncEntry, *args: Any, **kwargs: Any) -> Iterator[Any]:
            method = getattr(self.async_store, name)
            yield from self.run(_collected(method(*args, **kwargs)))

        stream.__name__ = name
        return stream

    def call(self: AsyncEntry, *args: Any, **kwargs: Any) -> Any:
        return self.run(getattr(self.async_store, name)(*args, **kwargs))

    call.__name__ = name
    return call


for _name in SHARED_METHODS:
    setattr(UnitOfWorkEntry, _name, _through_repository(_name))
    setattr(RepositoryEntry, _name, _through_repository(_name))
    setattr(AsyncEntry, _name, _through_async_store(_name))
del _name

ENTRY_POINTS = ("store", "uow", "repository", "async")
