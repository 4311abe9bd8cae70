"""The error boundary of the async API: every public coroutine of `AsyncRunStore` and
`AsyncRunRepository` fails with a coded `CadenceStoreError` when the database refuses its
statements (here: the owned tables were dropped after the store was opened and checked),
`run-store-read-failed` for reads and `run-store-write-failed` for writes.

The methods are discovered by introspection: a new public method without a row in the
tables below fails `test_every_public_method_has_a_row`.
"""

from __future__ import annotations

import asyncio
import inspect
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from support import ROOT_HASH, FakeClock

import cadence_store
from cadence_store import (
    AsyncRunRepository,
    AsyncRunStore,
    BindDelivery,
    CadenceStoreError,
    OperationLease,
    generate_signer_key,
    upgrade_async,
)
from cadence_store.async_store import async_database_url
from cadence_store.journal.notes import Checkpoint, sign_checkpoint
from cadence_store.storage.models import metadata, runs

SIGNER = generate_signer_key("walk.example")
# a note whose signature verifies: its check goes on to read the store
ONE_LEAF_NOTE = sign_checkpoint(Checkpoint("walk.example", 1, bytes(32)), SIGNER)
READ_FAILED = "run-store-read-failed"
WRITE_FAILED = "run-store-write-failed"
RECEIPT = "a" * 64


@dataclass
class Context:
    """What the calls refer to: a run and a lease taken before the tables were dropped."""

    run_id: str
    lease: OperationLease


Invoke = Callable[[Any, Context], Awaitable[object]]  # (bound method, context)


def _call(*args: Any, **kwargs: Any) -> Invoke:
    """The method called with `args`/`kwargs`; "RUN" and "LEASE" stand for the context's."""

    def substitute(value: Any, context: Context) -> Any:
        if value == "RUN":
            return context.run_id
        return context.lease if value == "LEASE" else value

    async def invoke(method: Any, context: Context) -> object:
        return await method(
            *(substitute(arg, context) for arg in args),
            **{key: substitute(value, context) for key, value in kwargs.items()},
        )

    return invoke


async def _write_nothing(session: AsyncSession) -> None:
    """A `write=` callback; never reached, the journal's statement fails first."""


async def _stream(method: Any, context: Context) -> object:
    return [event async for event in method(context.run_id)]


async def _host_statement_in_unit_of_work(method: Any, context: Context) -> object:
    # a host's own statement failing inside the block: coded by the unit of work's exit
    async with method() as uow:
        await uow.session.execute(select(runs.c.run_id))
    return None


def _deliveries(context: Context) -> list[BindDelivery]:
    return [
        BindDelivery(
            run_id=context.run_id,
            gate="gate-a",
            revision=1,
            receipt_hash=RECEIPT,
            operation_id="bind-2",
        )
    ]


async def _bind_deliveries(method: Any, context: Context) -> object:
    return await method(_deliveries(context))


async def _bind_deliveries_atomically(method: Any, context: Context) -> object:
    return await method(_deliveries(context), write=_write_nothing)


async def _transition_many(method: Any, context: Context) -> object:
    return await method([{"run_id": context.run_id, "to": "paused", "operation_id": "pause-2"}])


async def _run_work(method: Any, context: Context) -> object:
    return await method(lambda repository: repository.status(context.run_id))


# Reading the feed numbers it first on PostgreSQL (a write), not on SQLite: either code.
READ_OR_NUMBERING_FAILED = "read-failed-or-numbering-failed"


async def _follow_once(method: Any, context: Context) -> object:
    looks = iter((False,))  # one look at the feed, then stop
    return [item async for item in method(stop=lambda: next(looks, True))]


def _normalised(outcomes: dict[str, object]) -> dict[str, object]:
    return {
        name: READ_OR_NUMBERING_FAILED
        if name in ("read_feed", "follow") and outcome in (READ_FAILED, WRITE_FAILED)
        else outcome
        for name, outcome in outcomes.items()
    }


# name -> (expected code, how to call it); the rows both classes share come first
COMMON: dict[str, tuple[str, Invoke]] = {
    "start_run": (WRITE_FAILED, _call("abel-implement", operation_id="start-2", change="c")),
    "bind_change": (WRITE_FAILED, _call("RUN", "other-change", operation_id="change-1")),
    "bind_delivery": (WRITE_FAILED, _call("RUN", "gate-a", 1, RECEIPT, operation_id="bind-1")),
    "transition": (WRITE_FAILED, _call("RUN", "paused", operation_id="pause-1")),
    "transition_many": (WRITE_FAILED, _transition_many),
    "acquire_lease": (WRITE_FAILED, _call("RUN", "apply-2", 60_000)),
    "renew_lease": (WRITE_FAILED, _call("LEASE", 60_000)),
    "assert_lease": (WRITE_FAILED, _call("LEASE")),
    "commit_lease": (WRITE_FAILED, _call("LEASE", {"applied": True})),
    "interrupt_lease": (WRITE_FAILED, _call("LEASE")),
    "inspect_operation": (READ_FAILED, _call("RUN", "apply-1")),
    "recover_expired_leases": (WRITE_FAILED, _call()),
    "status": (READ_FAILED, _call("RUN")),
    "list_events": (READ_FAILED, _call("RUN")),
    "rebuild_projection": (READ_FAILED, _call("RUN")),
    "verify_integrity": (READ_FAILED, _call("RUN")),
    "run_ids": (READ_FAILED, _call()),
    "list_runs": (READ_FAILED, _call(stage="abel-implement")),
    "run_detail": (READ_FAILED, _call("RUN")),
    "counts": (READ_FAILED, _call()),
    "read_feed": (READ_OR_NUMBERING_FAILED, _call()),
    "follower_position": (READ_FAILED, _call("walker")),
}

STORE_CALLS: dict[str, tuple[str, Invoke]] = {
    **COMMON,
    "bind_delivery_atomically": (
        WRITE_FAILED,
        _call("RUN", "gate-a", 1, RECEIPT, operation_id="bind-1", write=_write_nothing),
    ),
    "bind_deliveries_atomically": (WRITE_FAILED, _bind_deliveries_atomically),
    "transition_atomically": (
        WRITE_FAILED,
        _call("RUN", "paused", operation_id="pause-1", write=_write_nothing),
    ),
    "iter_events": (READ_FAILED, _stream),
    "follow": (READ_OR_NUMBERING_FAILED, _follow_once),
    # the host's own statement was refused: the host's failure (HostWriteError)
    "unit_of_work": ("run-store-host-write-failed", _host_statement_in_unit_of_work),
    # the transparency tree: a checkpoint numbers the feed first (a write)
    "checkpoint": (WRITE_FAILED, _call(SIGNER)),
    "verify_checkpoint": (READ_FAILED, _call(ONE_LEAF_NOTE, SIGNER.verifier())),
    "inclusion_proof": (READ_FAILED, _call("RUN")),
    "consistency_proof": (READ_FAILED, _call(0, 0)),
    # retention: its checkpoint comes first (a write); the file is never made
    "archive": (
        WRITE_FAILED,
        _call(finished_before_ms=0, to=Path(tempfile.mkdtemp()) / "walk.archive", key=SIGNER),
    ),
}
STORE_WITHOUT_DATABASE_WORK = {"aclose", "open"}  # open: RunStore.open, tested there

REPOSITORY_CALLS: dict[str, tuple[str, Invoke]] = {
    **COMMON,
    "bind_deliveries": (WRITE_FAILED, _bind_deliveries),
    "bind_deliveries_once": (WRITE_FAILED, _bind_deliveries),
    "transition_once": (WRITE_FAILED, _call("RUN", "paused", operation_id="pause-1")),
    "transition_many_once": (WRITE_FAILED, _transition_many),
    "run_sync": (READ_FAILED, _run_work),  # the failure of the work's own read
    "record_position": (WRITE_FAILED, _call("walker", 1)),
}
# validation only, and the constructor of units of work
REPOSITORY_WITHOUT_DATABASE_WORK = {"check_deliveries", "over"}


def _public_methods(cls: type) -> set[str]:
    return {
        name
        for name in dir(cls)
        if not name.startswith("_")
        and not isinstance(inspect.getattr_static(cls, name), property)
        and callable(getattr(cls, name))
    }


@pytest.mark.parametrize(
    ("cls", "rows", "exempt"),
    [
        (AsyncRunStore, STORE_CALLS, STORE_WITHOUT_DATABASE_WORK),
        (AsyncRunRepository, REPOSITORY_CALLS, REPOSITORY_WITHOUT_DATABASE_WORK),
    ],
    ids=["AsyncRunStore", "AsyncRunRepository"],
)
def test_every_public_method_has_a_row(cls: type, rows: dict[str, Any], exempt: set[str]) -> None:
    public = _public_methods(cls)
    assert public - rows.keys() - exempt == set(), "public methods without a row in this test"
    assert (rows.keys() | exempt) - public == set(), "rows for methods that no longer exist"


def _drop_owned_tables(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        owned = [metadata.tables[name] for name in cadence_store.OWNED_TABLES]
        metadata.drop_all(engine, tables=owned)
    finally:
        engine.dispose()


def _failures(outcomes: dict[str, object]) -> dict[str, object]:
    return {name: outcome for name, outcome in outcomes.items() if not isinstance(outcome, str)}


async def _code_of(invoke: Invoke, method: Any, context: Context) -> object:
    """The error code of the call, or what it did instead (a result or a foreign error)."""
    try:
        result = await invoke(method, context)
    except CadenceStoreError as error:
        return error.code
    except Exception as error:  # the boundary let something through
        return error
    return ("returned", result)


def test_every_async_store_method_fails_coded_on_dropped_tables(database_url: str) -> None:
    url = async_database_url(database_url).render_as_string(hide_password=False)

    async def scenario() -> dict[str, object]:
        await upgrade_async(url)
        async with AsyncRunStore(url, root_hash=ROOT_HASH, clock=FakeClock()) as store:
            run = await store.start_run("abel-implement", change="c", operation_id="start-1")
            lease = await store.acquire_lease(run.run_id, "apply-1", 60_000)
            context = Context(run.run_id, lease)
            _drop_owned_tables(database_url)
            return {
                name: await _code_of(invoke, getattr(store, name), context)
                for name, (_, invoke) in STORE_CALLS.items()
            }

    outcomes = _normalised(asyncio.run(scenario()))
    assert _failures(outcomes) == {}
    assert outcomes == {name: code for name, (code, _) in STORE_CALLS.items()}


def test_every_async_repository_method_fails_coded_on_dropped_tables(database_url: str) -> None:
    url = async_database_url(database_url).render_as_string(hide_password=False)
    clock = FakeClock()

    async def scenario() -> dict[str, object]:
        await upgrade_async(url)
        engine = create_async_engine(url)
        try:
            async with AsyncSession(engine) as session, session.begin():
                repository = AsyncRunRepository(session, root_hash=ROOT_HASH, clock=clock)
                run = await repository.start_run(
                    "abel-implement", change="c", operation_id="start-1"
                )
                lease = await repository.acquire_lease(run.run_id, "apply-1", 60_000)
            context = Context(run.run_id, lease)
            _drop_owned_tables(database_url)
            outcomes: dict[str, object] = {}
            for name, (_, invoke) in REPOSITORY_CALLS.items():
                async with AsyncSession(engine) as session:
                    repository = AsyncRunRepository(session, root_hash=ROOT_HASH, clock=clock)
                    outcomes[name] = await _code_of(invoke, getattr(repository, name), context)
            return outcomes
        finally:
            await engine.dispose()

    outcomes = _normalised(asyncio.run(scenario()))
    assert _failures(outcomes) == {}
    assert outcomes == {name: code for name, (code, _) in REPOSITORY_CALLS.items()}
