"""The behavioural store suite again, through the async API.

The test functions of tests/integration/test_store_*.py are collected here a second time
with `store` overridden: an `AsyncRunStore` (sqlite+aiosqlite, psycopg's async mode)
behind the `RunStore` interface, each call run to completion on a private event loop. Same
calls, same assertions, same error codes; `rejected(...)` still checks nothing was written.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import pytest
from integration import (
    test_store_atomic,
    test_store_bindings,
    test_store_cadence1x_parity,
    test_store_leases,
    test_store_reading,
    test_store_start_run,
    test_store_transitions,
    test_store_validation,
)
from support import ROOT_HASH, FakeClock

from cadence_store import AsyncRunStore
from cadence_store.async_store import AsyncUnitOfWork, async_database_url

# Tests whose `write=` callbacks or unit-of-work blocks make a sync Session's blocking
# calls (`session.execute(...)`, `session.flush()`): the async store hands them an
# AsyncSession, whose calls are coroutines. Their async counterparts are in
# test_async_store.py.
SYNC_ONLY = {
    "test_store_atomic": {
        "test_transition_atomically_commits_the_host_write_with_the_journal",
        "test_bind_deliveries_atomically_binds_all_in_one_transaction",
        "test_a_raising_write_rolls_back_event_binding_and_receipt",
        "test_a_host_flush_failing_inside_the_block_or_write_is_the_hosts",
        "test_exception_in_unit_of_work_rolls_back_everything",
        "test_a_replayed_transition_atomically_writes_the_host_row_once",
        "test_a_replayed_bind_delivery_atomically_writes_the_host_row_once",
        "test_a_bind_of_an_already_stored_receipt_does_not_run_write",
        "test_a_replayed_bind_deliveries_atomically_writes_the_host_row_once",
    },
}


class _Blocking:
    """Runs the coroutine methods of `target` to completion on `loop`."""

    def __init__(self, target: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._target = target
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run_until_complete(attribute(*args, **kwargs))

        return call


class _BlockingUnitOfWork:
    def __init__(self, unit: AsyncUnitOfWork, loop: asyncio.AbstractEventLoop) -> None:
        self._unit = unit
        self._loop = loop

    def __enter__(self) -> _BlockingUnitOfWork:
        self._loop.run_until_complete(self._unit.__aenter__())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._loop.run_until_complete(self._unit.__aexit__(exc_type, exc, traceback))

    @property
    def runs(self) -> Any:
        return _Blocking(self._unit.runs, self._loop)

    @property
    def session(self) -> Any:
        return self._unit.session


class BlockingAsyncStore(_Blocking):
    """`AsyncRunStore` behind the `RunStore` interface."""

    def __init__(self, url: str, **options: Any) -> None:
        loop = asyncio.new_event_loop()
        target = AsyncRunStore(async_database_url(url), **options)
        super().__init__(target, loop)
        loop.run_until_complete(target.__aenter__())

    def unit_of_work(self) -> _BlockingUnitOfWork:
        return _BlockingUnitOfWork(self._target.unit_of_work(), self._loop)

    def iter_events(self, run_id: str) -> Iterator[Any]:
        async def collect() -> list[Any]:
            return [event async for event in self._target.iter_events(run_id)]

        return iter(self._loop.run_until_complete(collect()))

    def close(self) -> None:
        self._loop.run_until_complete(self._target.aclose())
        self._loop.close()

    def __enter__(self) -> BlockingAsyncStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def store(store_url: str, clock: FakeClock) -> Iterator[BlockingAsyncStore]:
    blocking = BlockingAsyncStore(store_url, root_hash=ROOT_HASH, clock=clock)
    try:
        yield blocking
    finally:
        blocking.close()


def _is_fixture(value: object) -> bool:
    return type(value).__name__ == "FixtureFunctionDefinition"


for _module in (
    test_store_atomic,
    test_store_bindings,
    test_store_cadence1x_parity,
    test_store_leases,
    test_store_reading,
    test_store_start_run,
    test_store_transitions,
    test_store_validation,
):
    _short = _module.__name__.rsplit(".", 1)[-1]
    for _name, _value in vars(_module).items():
        if _name.startswith("test_") and callable(_value):
            if _name not in SYNC_ONLY.get(_short, set()):
                globals()[f"{_name}__{_short.removeprefix('test_')}"] = _value
        elif _is_fixture(_value) and _name != "store":
            # the module's own fixtures (e.g. a host engine), shared by name
            globals().setdefault(_name, _value)
