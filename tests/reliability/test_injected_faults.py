"""Issue 7: nothing half-written survives a failure.

Faults are injected at every write step of every journal call with database triggers
that raise (SQLite: ``RAISE(ABORT, 'injected')``; PostgreSQL: a plpgsql function that
raises), BEFORE and AFTER each INSERT / UPDATE the call performs:

- the call raises a ``CadenceStoreError`` with a code (never a raw driver error);
- the four owned tables are exactly as they were (snapshot before / after);
- once the trigger is dropped, the very same call succeeds.

Then failures the journal does not control: a deferred foreign key that fails only at
COMMIT (as cadence 1.x tested), a full disk (SQLite ``max_page_count``), and a read-only
database (SQLite ``mode=ro`` / ``query_only``; PostgreSQL ``default_transaction_read_only``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, make_url, text
from support import OWNED, ROOT_HASH, FakeClock, table_snapshot

import cadence_store
from cadence_store import (
    BindDelivery,
    CadenceStoreError,
    OperationLease,
    RunStore,
    StorePermissionError,
    StoreUnavailableError,
)

A, B, C = "a" * 64, "b" * 64, "c" * 64
TABLES = OWNED
snapshot = table_snapshot


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


# Fixtures clock, store_url, db and store: tests/store_fixtures.py


# -- fault triggers ---------------------------------------------------------------------------


class Faults:
    """Creates and drops triggers that make one write step of one table raise."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sqlite = engine.dialect.name == "sqlite"
        if not self.sqlite:
            with engine.begin() as connection:
                connection.exec_driver_sql(
                    "CREATE OR REPLACE FUNCTION cadence_injected_fault() RETURNS trigger "
                    "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected'; END $$"
                )

    @staticmethod
    def name(table: str, timing: str, action: str) -> str:
        return f"fault_{timing}_{action}_{table}".lower()

    def install(self, table: str, timing: str, action: str) -> None:
        # identifiers come from the fixed lists below, never from data
        trigger = self.name(table, timing, action)
        if self.sqlite:
            ddl = (
                f"CREATE TRIGGER {trigger} {timing} {action} ON {table} "
                "BEGIN SELECT RAISE(ABORT, 'injected'); END"
            )
        else:
            ddl = (
                f"CREATE TRIGGER {trigger} {timing} {action} ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION cadence_injected_fault()"
            )
        with self.engine.begin() as connection:
            connection.exec_driver_sql(ddl)

    def drop(self, table: str, timing: str, action: str) -> None:
        trigger = self.name(table, timing, action)
        ddl = f"DROP TRIGGER {trigger}" if self.sqlite else f"DROP TRIGGER {trigger} ON {table}"
        with self.engine.begin() as connection:
            connection.exec_driver_sql(ddl)


# -- scenarios: a prepared state, one call, the write steps that call performs ------------------


@dataclass
class Context:
    store: RunStore
    clock: FakeClock
    n: int  # unique per attempt: names never collide inside one database
    state: dict[str, Any] = field(default_factory=dict)

    def run(self, *, stage: str = "abel-implement") -> str:
        if stage == "abel-design":
            key = hashlib.sha256(f"fault-{self.n}".encode()).hexdigest()
            created = self.store.start_run(
                stage, provisional_key=key, operation_id=f"prep-start-{self.n}"
            )
        else:
            created = self.store.start_run(
                stage, change=f"fault-{self.n}", operation_id=f"prep-start-{self.n}"
            )
        return created.run_id

    def lease(self, run_id: str, ttl: int = 60_000) -> OperationLease:
        return self.store.acquire_lease(run_id, f"prep-lease-{self.n}", ttl)


Prepare = Callable[[Context], None]
Call = Callable[[Context], Any]


@dataclass(frozen=True)
class Scenario:
    name: str
    prepare: Prepare
    call: Call
    steps: tuple[tuple[str, str], ...]  # (table, INSERT | UPDATE)
    check: Callable[[Context, Any], None] = lambda ctx, result: None


def _prep_run(ctx: Context) -> None:
    ctx.state["run"] = ctx.run()


def _prep_design(ctx: Context) -> None:
    ctx.state["run"] = ctx.run(stage="abel-design")


def _prep_terminal_design(ctx: Context) -> None:
    run_id = ctx.run(stage="abel-design")
    ctx.store.transition(run_id, "discarded", operation_id=f"prep-discard-{ctx.n}")
    ctx.state["run"] = run_id


def _prep_bound(ctx: Context) -> None:
    run_id = ctx.run()
    ctx.store.bind_delivery(run_id, "gate-a", 1, A, operation_id=f"prep-bind-{ctx.n}")
    ctx.state["run"] = run_id


def _prep_leased(ctx: Context) -> None:
    run_id = ctx.run()
    ctx.state["run"] = run_id
    ctx.state["lease"] = ctx.lease(run_id)


def _prep_expired(ctx: Context) -> None:
    run_id = ctx.run()
    ctx.state["run"] = run_id
    ctx.state["lease"] = ctx.lease(run_id, ttl=10)
    ctx.clock.advance(11)


def _design_key(ctx: Context) -> str:
    return hashlib.sha256(f"fault-{ctx.n}".encode()).hexdigest()


def _assert_new_run(ctx: Context, result: Any) -> None:
    assert result.sequence == 1
    ctx.store.verify_integrity(result.run_id)


def _assert_appended(sequence: int) -> Callable[[Context, Any], None]:
    def check(ctx: Context, result: Any) -> None:
        assert result.sequence == sequence
        assert ctx.store.verify_integrity(ctx.state["run"]).to_json() == result.to_json()

    return check


def _assert_interrupted(ctx: Context, result: Any) -> None:
    status = ctx.store.inspect_operation(ctx.state["run"], f"prep-lease-{ctx.n}")
    assert status is not None and status.state == "interrupted"


def _noop_write(session: Any) -> None:
    session.flush()


SCENARIOS = [
    Scenario(
        "start_run-new",
        lambda ctx: None,
        lambda ctx: ctx.store.start_run(
            "abel-implement", change=f"fault-{ctx.n}", operation_id=f"start-{ctx.n}"
        ),
        (("runs", "INSERT"), ("events", "INSERT"), ("operations", "INSERT")),
        _assert_new_run,
    ),
    Scenario(
        "start_run-existing-run",
        _prep_run,
        lambda ctx: ctx.store.start_run(
            "abel-implement", change=f"fault-{ctx.n}", operation_id=f"again-{ctx.n}"
        ),
        (("operations", "INSERT"),),
        lambda ctx, result: None if result.run_id == ctx.state["run"] else pytest.fail(),
    ),
    Scenario(
        "start_run-replaces-terminal-design-run",
        _prep_terminal_design,
        lambda ctx: ctx.store.start_run(
            "abel-design", provisional_key=_design_key(ctx), operation_id=f"start-{ctx.n}"
        ),
        (("runs", "UPDATE"), ("runs", "INSERT"), ("events", "INSERT"), ("operations", "INSERT")),
        lambda ctx, result: None if result.run_id != ctx.state["run"] else pytest.fail(),
    ),
    Scenario(
        "bind_change",
        _prep_design,
        lambda ctx: ctx.store.bind_change(
            ctx.state["run"], f"bound-{ctx.n}", operation_id=f"bind-{ctx.n}"
        ),
        (("runs", "UPDATE"), ("events", "INSERT"), ("operations", "INSERT")),
        _assert_appended(2),
    ),
    Scenario(
        "bind_delivery",
        _prep_run,
        lambda ctx: ctx.store.bind_delivery(
            ctx.state["run"],
            "gate-a",
            1,
            A,
            operation_id=f"bind-{ctx.n}",
            approval_proof={"revision": 1, "contract_hash": B, "record_hash": C},
        ),
        (
            ("delivery_bindings", "INSERT"),
            ("events", "INSERT"),
            ("runs", "UPDATE"),
            ("operations", "INSERT"),
        ),
        _assert_appended(2),
    ),
    Scenario(
        "bind_delivery-same-receipt-again",
        _prep_bound,
        lambda ctx: ctx.store.bind_delivery(
            ctx.state["run"], "gate-a", 1, A, operation_id=f"bind-again-{ctx.n}"
        ),
        (("operations", "INSERT"),),
        _assert_appended(2),
    ),
    Scenario(
        "bind_delivery-under-lease",
        _prep_leased,
        lambda ctx: ctx.store.bind_delivery(
            ctx.state["run"], "gate-b", 2, B, operation_id=f"bind-{ctx.n}", lease=ctx.state["lease"]
        ),
        (
            ("delivery_bindings", "INSERT"),
            ("events", "INSERT"),
            ("runs", "UPDATE"),
            ("operations", "INSERT"),
        ),
        _assert_appended(2),
    ),
    Scenario(
        "bind_delivery_atomically",
        _prep_run,
        lambda ctx: ctx.store.bind_delivery_atomically(
            ctx.state["run"], "gate-a", 1, A, operation_id=f"bind-{ctx.n}", write=_noop_write
        ),
        (
            ("delivery_bindings", "INSERT"),
            ("events", "INSERT"),
            ("runs", "UPDATE"),
            ("operations", "INSERT"),
        ),
        _assert_appended(2),
    ),
    Scenario(
        "bind_deliveries_atomically",
        _prep_run,
        lambda ctx: ctx.store.bind_deliveries_atomically(
            [
                BindDelivery(
                    run_id=ctx.state["run"],
                    gate="gate-a",
                    revision=1,
                    receipt_hash=A,
                    operation_id=f"bind-a-{ctx.n}",
                ),
                BindDelivery(
                    run_id=ctx.state["run"],
                    gate="gate-b",
                    revision=1,
                    receipt_hash=B,
                    operation_id=f"bind-b-{ctx.n}",
                ),
            ],
            write=_noop_write,
        ),
        (
            ("delivery_bindings", "INSERT"),
            ("events", "INSERT"),
            ("runs", "UPDATE"),
            ("operations", "INSERT"),
        ),
        _assert_appended(3),
    ),
    Scenario(
        "transition",
        _prep_run,
        lambda ctx: ctx.store.transition(
            ctx.state["run"], "paused", operation_id=f"move-{ctx.n}", code="injected-pause"
        ),
        (("events", "INSERT"), ("runs", "UPDATE"), ("operations", "INSERT")),
        _assert_appended(2),
    ),
    Scenario(
        "transition-to-terminal-under-lease",
        _prep_leased,
        lambda ctx: ctx.store.transition(
            ctx.state["run"], "discarded", operation_id=f"move-{ctx.n}", lease=ctx.state["lease"]
        ),
        (("events", "INSERT"), ("runs", "UPDATE"), ("operations", "INSERT")),
        _assert_appended(2),
    ),
    Scenario(
        "transition_atomically",
        _prep_run,
        lambda ctx: ctx.store.transition_atomically(
            ctx.state["run"], "validating-delivery", operation_id=f"move-{ctx.n}", write=_noop_write
        ),
        (("events", "INSERT"), ("runs", "UPDATE"), ("operations", "INSERT")),
        _assert_appended(2),
    ),
    Scenario(
        "acquire_lease-new",
        _prep_run,
        lambda ctx: ctx.store.acquire_lease(ctx.state["run"], f"lease-{ctx.n}", 60_000),
        (("operations", "INSERT"),),
        lambda ctx, result: ctx.store.assert_lease(result),
    ),
    Scenario(
        "acquire_lease-preempt",
        _prep_leased,
        lambda ctx: ctx.store.acquire_lease(
            ctx.state["run"], f"prep-lease-{ctx.n}", 60_000, preempt=True
        ),
        (("operations", "UPDATE"),),
        lambda ctx, result: None if result.token != ctx.state["lease"].token else pytest.fail(),
    ),
    Scenario(
        "acquire_lease-after-expiry",
        _prep_expired,
        lambda ctx: ctx.store.acquire_lease(
            ctx.state["run"], f"prep-lease-{ctx.n}", 60_000, exclusive=True
        ),
        (("operations", "UPDATE"),),
        lambda ctx, result: ctx.store.assert_lease(result),
    ),
    Scenario(
        "renew_lease",
        _prep_leased,
        lambda ctx: ctx.store.renew_lease(ctx.state["lease"], 120_000),
        (("operations", "UPDATE"),),
        lambda ctx, result: None if result.expires_at == ctx.clock.now + 120_000 else pytest.fail(),
    ),
    Scenario(
        "commit_lease",
        _prep_leased,
        lambda ctx: ctx.store.commit_lease(ctx.state["lease"], {"done": ctx.n}),
        (("operations", "UPDATE"),),
        lambda ctx, result: None if result == {"done": ctx.n} else pytest.fail(),
    ),
    Scenario(
        "interrupt_lease",
        _prep_leased,
        lambda ctx: ctx.store.interrupt_lease(ctx.state["lease"]),
        (("operations", "UPDATE"),),
        _assert_interrupted,
    ),
    Scenario(
        "inspect_operation-expires-a-lease",
        _prep_expired,
        lambda ctx: ctx.store.inspect_operation(ctx.state["run"], f"prep-lease-{ctx.n}"),
        (("operations", "UPDATE"),),
        lambda ctx, result: None if result.state == "interrupted" else pytest.fail(),
    ),
    Scenario(
        "recover_expired_leases",
        _prep_expired,
        lambda ctx: ctx.store.recover_expired_leases(),
        (("operations", "UPDATE"),),
        lambda ctx, result: None if result == 1 else pytest.fail(),
    ),
]

FAULT_COUNT = sum(2 * len(s.steps) for s in SCENARIOS)  # BEFORE and AFTER each step


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_a_fault_at_any_write_step_leaves_nothing_and_the_retry_succeeds(
    store: RunStore, db: Engine, clock: FakeClock, scenario: Scenario
) -> None:
    faults = Faults(db)
    attempt = 0
    for table, action in scenario.steps:
        for timing in ("BEFORE", "AFTER"):
            attempt += 1
            ctx = Context(store, clock, attempt)
            scenario.prepare(ctx)
            where = f"{scenario.name}: {timing} {action} ON {table}"
            faults.install(table, timing, action)
            try:
                before = snapshot(db)
                with pytest.raises(CadenceStoreError) as info:
                    scenario.call(ctx)
                error = info.value
                assert isinstance(error.code, str) and error.code, where
                assert error.code == "run-store-write-failed", (where, error.code)
                assert isinstance(error.__cause__, Exception), where  # the driver error is kept
                assert snapshot(db) == before, f"{where}: a failed call left rows behind"
            finally:
                faults.drop(table, timing, action)
            # the same call, now without the fault, goes through
            result = scenario.call(ctx)
            scenario.check(ctx, result)
            assert snapshot(db) != before, f"{where}: the retried call wrote nothing"
    # every run in the database still verifies
    for run_id in store.run_ids():
        store.verify_integrity(run_id)


# -- a failure at COMMIT: a deferred foreign key ----------------------------------------------


@pytest.fixture
def fk_probe(db: Engine) -> str:
    with db.begin() as connection:
        connection.exec_driver_sql(
            "CREATE TABLE fk_probe (run_id TEXT REFERENCES runs(run_id) "
            "DEFERRABLE INITIALLY DEFERRED)"
        )
    return "fk_probe"


def _probe_rows(db: Engine) -> list[tuple[Any, ...]]:
    with db.connect() as connection:
        return [tuple(row) for row in connection.exec_driver_sql("SELECT run_id FROM fk_probe")]


def test_a_deferred_foreign_key_failing_at_commit_keeps_nothing(
    store: RunStore, db: Engine, fk_probe: str
) -> None:
    run = store.start_run("abel-implement", change="commit-fails", operation_id="s1")
    lease = store.acquire_lease(run.run_id, "apply", 60_000)
    calls: list[int] = []

    def dangling(session: Any) -> None:
        calls.append(1)
        # accepted now (deferred), refused at COMMIT: the run does not exist
        session.execute(text("INSERT INTO fk_probe (run_id) VALUES (:r)"), {"r": "no-such-run"})

    attempts: list[Callable[[], Any]] = [
        lambda: store.transition_atomically(
            run.run_id, "paused", operation_id="t1", write=dangling, code="at-commit"
        ),
        lambda: store.transition_atomically(
            run.run_id, "paused", operation_id="t1", write=dangling, lease=lease
        ),
        lambda: store.bind_delivery_atomically(
            run.run_id, "gate-a", 1, A, operation_id="b1", write=dangling, lease=lease
        ),
        lambda: store.bind_deliveries_atomically(
            [
                {
                    "run_id": run.run_id,
                    "gate": "gate-b",
                    "revision": 3,
                    "receipt_hash": B,
                    "operation_id": "b2",
                }
            ],
            write=dangling,
        ),
    ]
    for number, attempt in enumerate(attempts, 1):
        before = snapshot(db)
        with pytest.raises(CadenceStoreError) as info:
            attempt()
        # the host's row failed its constraint: the host's failure, not an outage
        assert info.value.code == "run-store-host-write-failed", (number, info.value)
        assert snapshot(db) == before, f"attempt {number}: the failed commit kept rows"
        assert _probe_rows(db) == []
    assert calls == [1] * len(attempts)  # a refused commit is not retried
    store.assert_lease(lease)
    assert store.verify_integrity(run.run_id).sequence == 1

    # the same transition with a valid host row commits both
    def valid(session: Any) -> None:
        session.execute(text("INSERT INTO fk_probe (run_id) VALUES (:r)"), {"r": run.run_id})

    moved = store.transition_atomically(run.run_id, "paused", operation_id="t1", write=valid)
    assert moved.sequence == 2
    assert _probe_rows(db) == [(run.run_id,)]


def test_a_deferred_foreign_key_in_a_unit_of_work(store: RunStore, db: Engine, fk_probe: str):
    run = store.start_run("abel-implement", change="uow-commit-fails", operation_id="s1")
    before = snapshot(db)
    with pytest.raises(CadenceStoreError) as info, store.unit_of_work() as uow:
        uow.runs.transition(run.run_id, "paused", operation_id="t1")
        uow.runs.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="b1")
        uow.session.execute(text("INSERT INTO fk_probe (run_id) VALUES ('ghost')"))
    assert info.value.code == "run-store-host-write-failed"
    assert snapshot(db) == before
    assert _probe_rows(db) == []


# -- a full disk (SQLite) -----------------------------------------------------------------------


def _page_limited_engine(url: str, pages: int) -> Engine:
    engine = create_engine(url)

    @event.listens_for(engine, "connect")
    def _limit(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA max_page_count = {int(pages)}")
        cursor.close()

    return engine


def test_a_full_disk_is_unavailable_and_loses_nothing_acknowledged(
    sqlite_database_url: str, clock: FakeClock
) -> None:
    url = sqlite_database_url
    cadence_store.upgrade(url)
    with RunStore(url, root_hash=ROOT_HASH, clock=clock) as seed:
        first = seed.start_run("abel-implement", change="before-full", operation_id="s0")
        seed.transition(first.run_id, "paused", operation_id="t0")
    plain = create_engine(url)
    with plain.connect() as connection:
        pages = connection.exec_driver_sql("PRAGMA page_count").scalar_one()
    limited = _page_limited_engine(url, pages + 6)
    acknowledged: dict[str, int] = {first.run_id: 2}
    error: CadenceStoreError | None = None
    try:
        store = RunStore(limited, root_hash=ROOT_HASH, clock=clock)
        run = store.start_run("abel-design", provisional_key=A, operation_id="s1")
        acknowledged[run.run_id] = 1
        for step in range(5_000):
            before = snapshot(plain)
            try:
                if step % 3 == 2:
                    lease = store.acquire_lease(run.run_id, f"lease-{step}", 60_000)
                    store.commit_lease(lease, {"filler": "x" * 700, "step": step})
                else:
                    moved = store.transition(
                        run.run_id, "paused", operation_id=f"fill-{step}", code="y" * 700
                    )
                    acknowledged[run.run_id] = moved.sequence
            except CadenceStoreError as failure:
                error = failure
                assert snapshot(plain) == before, "a failed append on a full disk left rows"
                break
        store.close()
    finally:
        limited.dispose()
        plain.dispose()
    assert error is not None, "the page limit was never reached"
    assert isinstance(error, StoreUnavailableError), error
    assert error.code == "run-store-unavailable"
    # the file opens normally and every acknowledged append is there and verifies
    with RunStore(url, root_hash=ROOT_HASH, clock=clock) as reopened:
        assert set(reopened.run_ids()) == set(acknowledged)
        for run_id, sequence in acknowledged.items():
            assert reopened.verify_integrity(run_id).sequence == sequence
        # and the store keeps working once there is room again
        again = reopened.transition(run.run_id, "running", operation_id="after-full")
        assert again.sequence == acknowledged[run.run_id] + 1


# -- a read-only database -----------------------------------------------------------------------


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _query_only_engine(url: str) -> Engine:
    engine = create_engine(url)

    @event.listens_for(engine, "connect")
    def _read_only(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA query_only = ON")
        cursor.close()

    return engine


def _writes(store: RunStore, run_id: str, lease: OperationLease) -> list[Callable[[], Any]]:
    return [
        lambda: store.start_run("abel-implement", change="read-only", operation_id="ro-1"),
        lambda: store.transition(run_id, "paused", operation_id="ro-2"),
        lambda: store.bind_delivery(run_id, "gate-a", 1, A, operation_id="ro-3"),
        lambda: store.acquire_lease(run_id, "ro-4", 1_000),
        lambda: store.renew_lease(lease, 5_000),
        lambda: store.commit_lease(lease, {"ok": True}),
        lambda: store.interrupt_lease(lease),
        lambda: store.recover_expired_leases(),
    ]


@pytest.mark.parametrize("how", ["uri-mode-ro", "pragma-query-only"])
def test_a_read_only_sqlite_database_refuses_writes_and_stays_intact(
    sqlite_database_url: str, clock: FakeClock, how: str
) -> None:
    url = sqlite_database_url
    path = Path(make_url(url).database or "")
    cadence_store.upgrade(url)
    with RunStore(url, root_hash=ROOT_HASH, clock=clock) as writer:
        run = writer.start_run("abel-implement", change="frozen", operation_id="s1")
        lease = writer.acquire_lease(run.run_id, "held", 60_000)
    # as root, chmod 0444 would not stop us: the database itself is opened read-only
    assert not os.path.exists(f"{path}-wal") or os.path.getsize(f"{path}-wal") == 0
    digest = _sha256(path)
    if how == "uri-mode-ro":
        engine = create_engine(f"sqlite:///file:{path}?mode=ro&uri=true")
    else:
        engine = _query_only_engine(url)
    try:
        store = RunStore(engine, root_hash=ROOT_HASH, clock=clock)
        assert store.status(run.run_id).sequence == 1  # reading works
        for number, attempt in enumerate(_writes(store, run.run_id, lease)):
            with pytest.raises(CadenceStoreError) as info:
                attempt()
            assert isinstance(info.value, StorePermissionError), (number, info.value)
            assert info.value.code == "run-store-permission-denied", (number, info.value)
            assert not info.value.retryable
        store.verify_integrity(run.run_id)
        store.close()
    finally:
        engine.dispose()
    assert _sha256(path) == digest


def test_a_read_only_url_given_to_the_store_itself(sqlite_database_url: str, clock) -> None:
    path = Path(make_url(sqlite_database_url).database or "")
    cadence_store.upgrade(sqlite_database_url)
    with RunStore(sqlite_database_url, root_hash=ROOT_HASH, clock=clock) as writer:
        run = writer.start_run("abel-implement", change="frozen", operation_id="s1")
    digest = _sha256(path)
    with RunStore(f"sqlite:///file:{path}?mode=ro&uri=true", root_hash=ROOT_HASH) as store:
        with pytest.raises(StorePermissionError) as info:
            store.transition(run.run_id, "paused", operation_id="t1")
        assert info.value.code == "run-store-permission-denied"
        assert store.verify_integrity(run.run_id).sequence == 1
    assert _sha256(path) == digest


@pytest.mark.postgres
def test_a_read_only_postgresql_database_refuses_writes(
    pg_database_url: str, clock: FakeClock
) -> None:
    cadence_store.upgrade(pg_database_url)
    with RunStore(pg_database_url, root_hash=ROOT_HASH, clock=clock) as writer:
        run = writer.start_run("abel-implement", change="frozen", operation_id="s1")
        lease = writer.acquire_lease(run.run_id, "held", 60_000)
    engine = create_engine(pg_database_url)

    @event.listens_for(engine, "connect")
    def _read_only(dbapi_connection: Any, _record: Any) -> None:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET default_transaction_read_only = on")
        dbapi_connection.commit()

    reader = create_engine(pg_database_url)
    try:
        before = snapshot(reader)
        # a read-only transaction (25006) is also what a failover leaves on a standby, and
        # is re-run until failover_timeout_s; this database stays read-only: no re-runs
        store = RunStore(engine, root_hash=ROOT_HASH, clock=clock, failover_timeout_s=0)
        for number, attempt in enumerate(_writes(store, run.run_id, lease)):
            with pytest.raises(CadenceStoreError) as info:
                attempt()
            assert isinstance(info.value, StoreUnavailableError), (number, info.value)
            assert info.value.code == "run-store-unavailable", (number, info.value)
        assert store.verify_integrity(run.run_id).sequence == 1
        store.close()
        assert snapshot(reader) == before
    finally:
        engine.dispose()
        reader.dispose()


def test_upgrade_of_an_unopenable_sqlite_file_is_a_coded_error(tmp_path: Path) -> None:
    with pytest.raises(CadenceStoreError) as info:
        cadence_store.upgrade(f"sqlite:///{tmp_path}/missing-directory/store.sqlite3")
    assert info.value.code == "run-store-unavailable"
