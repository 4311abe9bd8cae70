"""The async API (issue 14) on sqlite+aiosqlite and PostgreSQL (psycopg's async mode).

The same scripted calls run through `RunStore` and through `AsyncRunStore` on one database
(wiped in between), with a fixed clock and deterministic ids: results, error classes and
codes, every owned row and the events' `to_dict()` JSON must be identical. Then the async
specifics: concurrent transitions with `asyncio.gather`, coroutine `write=` callbacks,
`AsyncRunRepository` in a host's own `AsyncSession` transaction, lifecycle and errors.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine, create_engine, delete, select
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase
from support import ROOT_HASH, FakeClock, table_snapshot

import cadence_store
import cadence_store.repository.leases
import cadence_store.repository.starts
from cadence_store import (
    AsyncRunRepository,
    AsyncRunStore,
    CadenceStoreError,
    HostWriteError,
    RunStore,
    SchemaOutOfDateError,
    StoreUnavailableError,
    upgrade_async,
)
from cadence_store.async_store import async_database_url
from cadence_store.storage.models import delivery_bindings, events, operations, runs

HOST = sa.MetaData()
HOST_ROWS = sa.Table(
    "host_rows",
    HOST,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("note", sa.Text, nullable=False),
)


class _HostBase(DeclarativeBase):
    metadata = HOST


class HostRow(_HostBase):
    __table__ = HOST_ROWS


@pytest.fixture
def async_url(database_url: str) -> str:
    url = async_database_url(database_url).render_as_string(hide_password=False)
    asyncio.run(upgrade_async(url))
    return url


@pytest.fixture
def db(async_url: str, database_url: str) -> Iterator[Engine]:
    engine = create_engine(database_url, pool_size=1, max_overflow=2)
    HOST.create_all(engine)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def deterministic_ids(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Run ids and lease tokens from a counter; calling the result restarts it."""
    counter = itertools.count()

    class Ids:
        @staticmethod
        def uuid4() -> uuid.UUID:
            return uuid.UUID(int=next(counter))

    def restart() -> None:
        nonlocal counter
        counter = itertools.count(1)

    restart()
    # run ids come from the repository, lease tokens from one function every store calls
    monkeypatch.setattr(cadence_store.repository.starts, "new_run_id", lambda: str(Ids.uuid4()))
    monkeypatch.setattr(cadence_store.repository.leases, "uuid", Ids)
    return restart


# -- one script, two APIs --------------------------------------------------------------------

RUN = "$run"
LEASE = "$lease"
ADVANCE = "advance"

# (method, args, kwargs); RUN/LEASE stand for the run started first and the last lease.
SCRIPT: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("start_run", ("abel-implement",), {"change": "durable-control", "operation_id": "s-1"}),
    ("start_run", ("abel-implement",), {"change": "durable-control", "operation_id": "s-1"}),
    ("start_run", ("abel-implement",), {"change": "", "operation_id": "s-2"}),
    ("start_run", ("abel-nowhere",), {"operation_id": "s-3"}),
    ("start_run", ("abel-design",), {"change": "design-change", "operation_id": "s-4"}),
    ("bind_change", (RUN, "other-change"), {"operation_id": "s-1"}),
    ("transition", ("no-such-run", "paused"), {"operation_id": "t-0"}),
    ("transition", (RUN, "validating-delivery"), {"operation_id": "t-1"}),
    ("transition", (RUN, "validating-delivery"), {"operation_id": "t-1"}),
    ("transition", (RUN, "bogus"), {"operation_id": "t-2"}),
    ("transition", (RUN, "completed"), {"operation_id": "t-3"}),
    (
        "bind_delivery",
        (RUN, "gate-a", 1, "a" * 64),
        {
            "operation_id": "b-1",
            "approval_proof": {"revision": 1, "contract_hash": "b" * 64, "record_hash": "c" * 64},
        },
    ),
    ("bind_delivery", (RUN, "gate-a", 1, "d" * 64), {"operation_id": "b-2"}),
    ("bind_delivery", (RUN, "gate-b", True, "d" * 64), {"operation_id": "b-3"}),
    ("transition_atomically", (RUN, "ready"), {"operation_id": "t-4"}),
    ("transition_atomically", (RUN, "ready"), {"operation_id": "t-4"}),
    ("bind_delivery_atomically", (RUN, "gate-b", 1, "e" * 64), {"operation_id": "b-4"}),
    (
        "bind_deliveries_atomically",
        (
            [
                {
                    "run_id": RUN,
                    "gate": "gate-a",
                    "revision": 2,
                    "receipt_hash": "f" * 64,
                    "operation_id": "b-5",
                },
                {
                    "run_id": RUN,
                    "gate": "gate-b",
                    "revision": 2,
                    "receipt_hash": "1" * 64,
                    "operation_id": "b-6",
                },
            ],
        ),
        {},
    ),
    ("bind_deliveries_atomically", ([],), {}),
    ("acquire_lease", (RUN, "apply-1", 60_000), {"exclusive": True}),
    ("acquire_lease", (RUN, "apply-1", 60_000), {"exclusive": True}),
    ("acquire_lease", (RUN, "apply-1", 60_000), {"preempt": "yes"}),
    ("renew_lease", (LEASE, 120_000), {}),
    ("assert_lease", (LEASE,), {}),
    ("transition", (RUN, "running"), {"operation_id": "t-5", "lease": LEASE}),
    ("inspect_operation", (RUN, "apply-1"), {}),
    ("commit_lease", (LEASE, {"applied": True, "n": 1.0}), {}),
    ("commit_lease", (LEASE, {"applied": True}), {}),
    ("acquire_lease", (RUN, "apply-2", 1_000), {}),
    (ADVANCE, (5_000,), {}),
    ("transition", (RUN, "paused"), {"operation_id": "t-6", "lease": LEASE}),
    ("interrupt_lease", (LEASE,), {}),
    ("acquire_lease", (RUN, "apply-3", 1_000), {}),
    (ADVANCE, (5_000,), {}),
    ("recover_expired_leases", (), {}),
    ("inspect_operation", (RUN, "apply-3"), {}),
    ("inspect_operation", (RUN, "never"), {}),
    ("status", (RUN,), {}),
    ("status", ("no-such-run",), {}),
    ("rebuild_projection", (RUN,), {}),
    ("verify_integrity", (RUN,), {}),
    ("run_ids", (), {}),
]

# every call above that must fail, with its code (so the script really covers failures)
EXPECTED_FAILURES = {
    2: "invalid-change",
    5: "operation-id-conflict",
    6: "run-not-found",
    9: "event-integrity-state-mismatch",
    10: "invalid-run-transition:validating-delivery:completed",
    20: "operation-already-running",
    21: "invalid-lease-option",
    27: "lease-fenced",
    30: "lease-fenced",
    38: "run-not-found",
}


def _plain(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _substitute(value: Any, context: dict[str, Any]) -> Any:
    if isinstance(value, str) and value in context:
        return context[value]
    if isinstance(value, list):
        return [_substitute(item, context) for item in value]
    if isinstance(value, tuple):
        return tuple(_substitute(item, context) for item in value)
    if isinstance(value, dict):
        return {key: _substitute(item, context) for key, item in value.items()}
    return value


def _host_write(step: int, asynchronous: bool) -> Callable[[Any], Any]:
    """A `write=` callback adding one host row (a coroutine function for the async store)."""
    statement = sa.insert(HOST_ROWS).values(id=step, note=f"step {step}")

    def write(session: Any) -> None:
        session.execute(statement)

    async def write_async(session: AsyncSession) -> None:
        await session.execute(statement)

    return write_async if asynchronous else write


def _arguments(
    step: int, args: Any, kwargs: Any, context: dict[str, Any], asynchronous: bool
) -> tuple[Any, Any]:
    args, kwargs = _substitute(args, context), _substitute(kwargs, context)
    if SCRIPT[step][0].endswith("_atomically"):
        kwargs = {**kwargs, "write": _host_write(step, asynchronous)}
    return args, kwargs


def _record(step: int, result: Any, context: dict[str, Any], outcomes: list[Any]) -> None:
    if step == 0:
        context[RUN] = result.run_id
    if hasattr(result, "token"):
        context[LEASE] = result
    outcomes.append(("ok", _plain(result)))


def _wipe(db: Engine) -> None:
    with db.begin() as connection:
        for table in (delivery_bindings, operations, events, runs, HOST_ROWS):
            connection.execute(delete(table))


def _events_json(store: RunStore) -> str:
    return json.dumps(
        {run_id: [e.to_dict() for e in store.list_events(run_id)] for run_id in store.run_ids()}
    )


def _run_sync(url: str, db: Engine) -> list[Any]:
    clock, context, outcomes = FakeClock(), {}, []
    with RunStore(url, root_hash=ROOT_HASH, clock=clock) as store:
        for step, (method, args, kwargs) in enumerate(SCRIPT):
            if method == ADVANCE:
                clock.advance(args[0])
                outcomes.append((ADVANCE,))
                continue
            before = table_snapshot(db)
            call_args, call_kwargs = _arguments(step, args, kwargs, context, False)
            try:
                result = getattr(store, method)(*call_args, **call_kwargs)
            except CadenceStoreError as error:
                assert table_snapshot(db) == before, f"step {step} failed but wrote"
                outcomes.append(("error", type(error).__name__, error.code))
                continue
            _record(step, result, context, outcomes)
    return outcomes


async def _run_async(url: str, db: Engine) -> list[Any]:
    clock, context, outcomes = FakeClock(), {}, []
    async with AsyncRunStore(url, root_hash=ROOT_HASH, clock=clock) as store:
        for step, (method, args, kwargs) in enumerate(SCRIPT):
            if method == ADVANCE:
                clock.advance(args[0])
                outcomes.append((ADVANCE,))
                continue
            before = table_snapshot(db)
            call_args, call_kwargs = _arguments(step, args, kwargs, context, True)
            try:
                result = await getattr(store, method)(*call_args, **call_kwargs)
            except CadenceStoreError as error:
                assert table_snapshot(db) == before, f"step {step} failed but wrote"
                outcomes.append(("error", type(error).__name__, error.code))
                continue
            _record(step, result, context, outcomes)
    return outcomes


def test_async_api_matches_the_sync_store_call_for_call(
    database_url: str, async_url: str, db: Engine, deterministic_ids: Callable[[], None]
) -> None:
    sync_outcomes = _run_sync(database_url, db)
    for step, code in EXPECTED_FAILURES.items():
        assert sync_outcomes[step][2] == code, (step, sync_outcomes[step])
    sync_rows = table_snapshot(db)
    with RunStore(database_url, root_hash=ROOT_HASH) as reader:
        sync_events = _events_json(reader)
    _wipe(db)

    deterministic_ids()
    async_outcomes = asyncio.run(_run_async(async_url, db))
    assert async_outcomes == sync_outcomes
    assert table_snapshot(db) == sync_rows
    with RunStore(database_url, root_hash=ROOT_HASH) as reader:
        assert _events_json(reader) == sync_events  # byte-identical
        assert len(json.loads(sync_events)) == len(async_outcomes[-1][1])


# -- concurrency -------------------------------------------------------------------------------


async def _gather_transitions(url: str, stores: int) -> tuple[str, list[Any]]:
    opened = [AsyncRunStore(url, root_hash=ROOT_HASH) for _ in range(stores)]
    try:
        first = opened[0]
        run = await first.start_run("abel-implement", change="gathered", operation_id="start")
        await first.transition(run.run_id, "paused", operation_id="pause")
        projections = await asyncio.gather(
            *(
                opened[n % stores].transition(
                    run.run_id, "paused", operation_id=f"op-{n}", code=f"c-{n}"
                )
                for n in range(50)
            )
        )
        verified = await first.verify_integrity(run.run_id)
        listed = await first.list_events(run.run_id)
        assert verified.sequence == 52
        return run.run_id, [sorted(p.sequence for p in projections), listed]
    finally:
        for store in opened:
            await store.aclose()


@pytest.mark.parametrize("stores", [1, 2])
def test_gathered_transitions_on_one_run_lose_nothing(async_url: str, stores: int) -> None:
    _, (sequences, listed) = asyncio.run(_gather_transitions(async_url, stores))
    assert sequences == list(range(3, 53))  # each call appended exactly one event
    codes = sorted(event.payload.get("code", "") for event in listed[2:])
    assert codes == sorted(f"c-{n}" for n in range(50))


def test_a_raising_write_coroutine_leaves_nothing_written(async_url: str, db: Engine) -> None:
    async def scenario() -> None:
        async with AsyncRunStore(async_url, root_hash=ROOT_HASH) as store:
            run = await store.start_run("abel-implement", change="c", operation_id="start")
            before = table_snapshot(db)

            async def write(session: AsyncSession) -> None:
                await session.execute(sa.insert(HOST_ROWS).values(id=7, note="doomed"))
                raise RuntimeError("host failure")

            with pytest.raises(RuntimeError, match="host failure"):
                await store.transition_atomically(
                    run.run_id, "paused", operation_id="pause", write=write
                )
            with pytest.raises(RuntimeError, match="host failure"):
                await store.bind_delivery_atomically(
                    run.run_id, "gate-a", 1, "a" * 64, operation_id="bind", write=write
                )
            assert table_snapshot(db) == before

            async def good(session: AsyncSession) -> None:
                session.add_all([])  # an AsyncSession, joined to the journal's transaction
                await session.execute(sa.insert(HOST_ROWS).values(id=8, note="kept"))

            await store.transition_atomically(
                run.run_id, "paused", operation_id="pause", write=good
            )

    asyncio.run(scenario())
    with db.connect() as connection:
        assert connection.execute(select(HOST_ROWS.c.id)).scalars().all() == [8]


def test_a_host_integrity_error_is_the_hosts_not_an_outage(async_url: str, db: Engine) -> None:
    """A host row that fails its constraint, in a `write=` coroutine or a unit of work:
    `HostWriteError` (not `StoreUnavailableError`), carrying the host's exception; nothing
    kept, the callback not re-run."""
    calls: list[str] = []

    async def scenario() -> None:
        async with AsyncRunStore(async_url, root_hash=ROOT_HASH) as store:
            run = await store.start_run("abel-implement", change="c", operation_id="start")
            async with store.unit_of_work() as uow:
                await uow.session.execute(sa.insert(HOST_ROWS).values(id=1, note="taken"))
            before = table_snapshot(db)

            async def duplicate(session: AsyncSession) -> None:
                calls.append("write")
                await session.execute(sa.insert(HOST_ROWS).values(id=1, note="again"))

            failures = []
            with pytest.raises(CadenceStoreError) as info:
                await store.transition_atomically(
                    run.run_id, "paused", operation_id="pause", write=duplicate
                )
            failures.append(info.value)
            with pytest.raises(CadenceStoreError) as info:
                async with store.unit_of_work() as uow:
                    await uow.runs.transition(run.run_id, "paused", operation_id="pause")
                    uow.session.add(HostRow(id=1, note="again"))
            failures.append(info.value)
            for failure in failures:
                assert type(failure) is HostWriteError
                assert not isinstance(failure, StoreUnavailableError)
                assert failure.code == "run-store-host-write-failed"
                assert isinstance(failure.host_error, sa.exc.IntegrityError)
            assert table_snapshot(db) == before

    asyncio.run(scenario())
    assert calls == ["write"]
    with db.connect() as connection:
        assert connection.execute(select(HOST_ROWS.c.note)).scalars().all() == ["taken"]


def test_replayed_atomic_calls_run_the_write_coroutine_once(async_url: str, db: Engine) -> None:
    """Nothing twice, through the async API: a replayed operation id (or a binding already
    stored with the same receipt) never runs the host's write again."""
    calls: list[str] = []

    def counting(label: str) -> Callable[[AsyncSession], Any]:
        async def write(session: AsyncSession) -> None:
            calls.append(label)
            await session.execute(sa.insert(HOST_ROWS).values(id=len(calls), note=label))

        return write

    async def scenario() -> None:
        async with AsyncRunStore(async_url, root_hash=ROOT_HASH) as store:
            run = await store.start_run("abel-implement", change="c", operation_id="start")
            for _ in range(3):
                await store.transition_atomically(
                    run.run_id, "paused", operation_id="pause", write=counting("transition")
                )
                await store.bind_delivery_atomically(
                    run.run_id, "gate-a", 1, "a" * 64, operation_id="b1", write=counting("bind")
                )
                await store.bind_deliveries_atomically(
                    [
                        {
                            "run_id": run.run_id,
                            "gate": "gate-b",
                            "revision": 1,
                            "receipt_hash": "b" * 64,
                            "operation_id": "b2",
                        },
                        {
                            "run_id": run.run_id,
                            "gate": "gate-a",
                            "revision": 1,
                            "receipt_hash": "a" * 64,
                            "operation_id": "b1",
                        },
                    ],
                    write=counting("binds"),
                )
            # the same binding under a new operation id appends nothing: no write either
            await store.bind_delivery_atomically(
                run.run_id, "gate-a", 1, "a" * 64, operation_id="b3", write=counting("again")
            )

    asyncio.run(scenario())
    assert calls == ["transition", "bind", "binds"]
    with db.connect() as connection:
        assert connection.execute(select(HOST_ROWS.c.note)).scalars().all() == calls


# -- a host's own AsyncSession -----------------------------------------------------------------


def test_host_async_session_commits_or_rolls_back_journal_and_host_rows_together(
    async_url: str, db: Engine
) -> None:
    async def scenario() -> str:
        async with AsyncRunStore(async_url, root_hash=ROOT_HASH) as store:
            run = await store.start_run("abel-implement", change="host", operation_id="start")
        engine = create_async_engine(async_url)
        try:
            async with AsyncSession(engine) as session, session.begin():
                repository = AsyncRunRepository(session, root_hash=ROOT_HASH)
                await repository.transition(run.run_id, "paused", operation_id="p-1", code="op")
                await session.execute(sa.insert(HOST_ROWS).values(id=1, note="with p-1"))
            before = table_snapshot(db)
            with pytest.raises(ZeroDivisionError):
                async with AsyncSession(engine) as session, session.begin():
                    repository = AsyncRunRepository(session, root_hash=ROOT_HASH)
                    await repository.transition(run.run_id, "running", operation_id="p-2")
                    await session.execute(sa.insert(HOST_ROWS).values(id=2, note="with p-2"))
                    _ = 1 / 0
            assert table_snapshot(db) == before
            async with AsyncSession(engine) as session, session.begin():
                repository = AsyncRunRepository(session, root_hash=ROOT_HASH)
                assert (await repository.verify_integrity(run.run_id)).state == "paused"
                with pytest.raises(CadenceStoreError) as info:
                    await repository.transition(run.run_id, "applying", operation_id="p-3")
                assert info.value.code == "invalid-run-transition:paused:applying"
        finally:
            await engine.dispose()
        return run.run_id

    asyncio.run(scenario())
    with db.connect() as connection:
        assert connection.execute(select(HOST_ROWS.c.note)).scalars().all() == ["with p-1"]


def test_unit_of_work_exposes_async_repository_and_session(async_url: str, db: Engine) -> None:
    async def scenario() -> None:
        async with AsyncRunStore(async_url, root_hash=ROOT_HASH) as store:
            run = await store.start_run("abel-implement", change="uow", operation_id="start")
            async with store.unit_of_work() as uow:
                assert isinstance(uow.runs, AsyncRunRepository)
                assert isinstance(uow.session, AsyncSession)
                await uow.runs.transition(run.run_id, "paused", operation_id="p-1")
                await uow.session.execute(sa.insert(HOST_ROWS).values(id=3, note="uow"))
            before = table_snapshot(db)
            with pytest.raises(KeyError):
                async with store.unit_of_work() as uow:
                    await uow.runs.transition(run.run_id, "running", operation_id="p-2")
                    raise KeyError("abandon")
            assert table_snapshot(db) == before
            assert (await store.status(run.run_id)).state == "paused"

    asyncio.run(scenario())


# -- lifecycle and errors ------------------------------------------------------------------------


def test_a_database_not_at_head_is_refused_on_first_use(database_url: str) -> None:
    url = async_database_url(database_url).render_as_string(hide_password=False)

    async def scenario() -> None:
        store = AsyncRunStore(url, root_hash=ROOT_HASH)
        with pytest.raises(SchemaOutOfDateError) as info:
            await store.status("run")
        assert info.value.code == "run-store-upgrade-required"
        await store.aclose()
        with pytest.raises(StoreUnavailableError) as closed:
            await store.status("run")
        assert closed.value.code == "run-store-closed"

    if database_url.startswith("sqlite"):
        # the file does not exist yet: refused at once, as RunStore does
        with pytest.raises(SchemaOutOfDateError):
            AsyncRunStore(url, root_hash=ROOT_HASH)
        create_engine(database_url).connect().close()
    asyncio.run(scenario())


def test_a_host_async_engine_is_left_open(async_url: str) -> None:
    async def scenario() -> None:
        engine = create_async_engine(async_url)
        async with AsyncRunStore(engine, root_hash=ROOT_HASH) as store:
            await store.start_run("abel-implement", change="x", operation_id="s")
        async with engine.connect() as connection:  # still usable
            assert (
                await connection.execute(select(sa.func.count()).select_from(runs))
            ).scalar() == 1
        await engine.dispose()

    asyncio.run(scenario())


def test_async_names_are_exported_lazily() -> None:
    assert cadence_store.AsyncRunStore is AsyncRunStore
    assert {"AsyncRunStore", "AsyncRunRepository", "upgrade_async"} <= set(cadence_store.__all__)
    with pytest.raises(AttributeError):
        _ = cadence_store.NoSuchName  # type: ignore[attr-defined]


# -- PostgreSQL retries ------------------------------------------------------------------------

FAIL_FIRST_INSERTS = """
CREATE SEQUENCE insert_attempts;
CREATE FUNCTION fail_first_inserts() RETURNS trigger AS $$
BEGIN
  -- a sequence is not transactional: the count survives the rolled-back attempts
  IF nextval('insert_attempts') <= {failures} THEN
    RAISE EXCEPTION 'injected' USING ERRCODE = '{sqlstate}';
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER fail_first_inserts BEFORE INSERT ON events
  FOR EACH ROW EXECUTE FUNCTION fail_first_inserts();
"""


@pytest.mark.postgres
@pytest.mark.parametrize("sqlstate", ["40001", "40P01"])
def test_postgresql_serialization_failures_and_deadlocks_are_retried(
    pg_database_url: str, sqlstate: str
) -> None:
    url = async_database_url(pg_database_url).render_as_string(hide_password=False)
    asyncio.run(upgrade_async(url))
    with RunStore(pg_database_url, root_hash=ROOT_HASH) as store:
        run = store.start_run("abel-implement", change="retried", operation_id="start")
    engine = create_engine(pg_database_url)
    with engine.begin() as connection:
        connection.exec_driver_sql(FAIL_FIRST_INSERTS.format(failures=2, sqlstate=sqlstate))

    def attempts() -> int:
        with engine.connect() as connection:
            return connection.exec_driver_sql("SELECT last_value FROM insert_attempts").scalar()

    async def scenario() -> None:
        async with AsyncRunStore(url, root_hash=ROOT_HASH) as store:
            projection = await store.transition(run.run_id, "paused", operation_id="pause")
            assert projection.sequence == 2
            assert attempts() == 3  # two lost races, then the whole transaction again
            with engine.begin() as connection:  # from now on every attempt loses
                connection.exec_driver_sql(
                    "ALTER SEQUENCE insert_attempts MINVALUE -1000 RESTART WITH -1000"
                )
            before = table_snapshot(engine)
            with pytest.raises(cadence_store.StoreBusyError) as info:
                await store.transition(run.run_id, "running", operation_id="resume")
            assert info.value.code == "run-store-busy"
            assert attempts() == -1000 + 8 - 1  # MAX_ATTEMPTS, then it surfaces
            assert table_snapshot(engine) == before

    try:
        asyncio.run(scenario())
    finally:
        engine.dispose()


def test_iter_events_streams_the_chain_from_one_snapshot(async_url: str) -> None:
    async def scenario() -> None:
        async with AsyncRunStore(async_url, root_hash=ROOT_HASH) as store:
            run = await store.start_run("abel-implement", change="stream", operation_id="s")
            async with store.unit_of_work() as uow:
                for n in range(2_100):  # more than two batches
                    await uow.runs.transition(run.run_id, "paused", operation_id=f"p-{n}")
            streamed = [event async for event in store.iter_events(run.run_id)]
            assert streamed == await store.list_events(run.run_id)
            assert [e.sequence for e in streamed] == list(range(1, 2_102))
            partial = store.iter_events(run.run_id)
            assert (await anext(partial)).sequence == 1
            await partial.aclose()  # an abandoned stream releases its connection
            with pytest.raises(cadence_store.RunNotFoundError):
                _ = [event async for event in store.iter_events("no-such-run")]

    asyncio.run(scenario())


def test_without_the_async_extra_import_works_and_the_url_is_refused() -> None:
    probe = """
import sys
sys.modules["aiosqlite"] = None  # as if the `async` extra were not installed
import cadence_store
from cadence_store import AsyncRunStore, InvalidInputError
try:
    AsyncRunStore("sqlite+aiosqlite:///nowhere.sqlite3")
except InvalidInputError as error:
    print(error.code)
"""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "invalid-database-url"


def test_async_database_url_names_the_async_driver() -> None:
    assert async_database_url("sqlite:///a.db").drivername == "sqlite+aiosqlite"
    assert async_database_url("postgresql://u@h/d").drivername == "postgresql+psycopg"
    assert async_database_url("postgresql+psycopg://u@h/d").drivername == "postgresql+psycopg"
    assert async_database_url("sqlite+aiosqlite:///a.db").drivername == "sqlite+aiosqlite"
