"""Atomicity: the *_atomically methods, UnitOfWork, and RunRepository in a host Session."""

from __future__ import annotations

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, Text, create_engine, func, select
from sqlalchemy.exc import IntegrityError as HostIntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.pool import NullPool

from cadence_store import (
    BindDelivery,
    CadenceStoreError,
    HostWriteError,
    InvalidInputError,
    LeaseFencedError,
    OperationConflictError,
    RunNotFoundError,
    RunRepository,
    RunStore,
    StoreBusyError,
    StoreUnavailableError,
    configure_engine,
)
from cadence_store.storage.models import events, runs

# RunStore-only: these tests are about RunStore's `*_atomically` methods (every adapter
# delegates them to RunStore anyway) and about units of work and host sessions that the
# tests build themselves, with `store` as the outside observer.
pytestmark = pytest.mark.run_store_only

A = "a" * 64
B = "b" * 64
C = "c" * 64
D = "d" * 64
ROOT_HASH = "ab" * 32


class HostBase(DeclarativeBase):
    metadata = MetaData()


class HostRow(HostBase):
    """A host application's own table, committed together with the journal rows."""

    __tablename__ = "host_audit"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    note: Mapped[str] = mapped_column(Text)


host_audit: Table = HostRow.__table__  # type: ignore[assignment]

# a second host table declared with Core only
core_metadata = MetaData()
host_outbox = Table(
    "host_outbox",
    core_metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("message", Text),
)


class Boom(Exception):
    pass


@pytest.fixture
def host_tables(db):
    HostBase.metadata.create_all(db)
    core_metadata.create_all(db)

    def count(table: Table = host_audit) -> int:
        with db.connect() as connection:
            return connection.execute(select(func.count()).select_from(table)).scalar_one()

    return count


def counts(snapshot):
    taken = snapshot()
    return {name: len(rows) for name, rows in taken.items()}


# ---------------------------------------------------------------------------------------
# transition_atomically / bind_delivery_atomically / bind_deliveries_atomically
# ---------------------------------------------------------------------------------------


def test_transition_atomically_commits_the_host_write_with_the_journal(
    store, host_tables, table_rows
):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    seen = []

    def write(session):
        assert isinstance(session, Session)
        # the write runs inside the transaction that just appended the event
        seen.append(
            session.execute(
                select(func.count()).select_from(events).where(events.c.run_id == run.run_id)
            ).scalar_one()
        )
        session.add(HostRow(id=1, note="moved"))
        session.execute(host_outbox.insert().values(id=1, message="paused"))

    moved = store.transition_atomically(run.run_id, "paused", operation_id="t1", write=write)
    assert moved.state == "paused"
    assert seen == [2]
    assert host_tables(host_audit) == 1
    assert host_tables(host_outbox) == 1
    assert store.status(run.run_id).to_json() == moved.to_json()
    assert {r["operation_id"] for r in table_rows("operations")} == {"s1", "t1"}


def test_bind_delivery_atomically_commits_the_host_write_with_the_journal(
    store, host_tables, table_rows
):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    calls = []

    def write(session):
        calls.append(session)
        session.add(HostRow(id=7, note="bound"))

    bound = store.bind_delivery_atomically(
        run.run_id,
        "gate-a",
        1,
        A,
        operation_id="b1",
        approval_proof={"revision": 1, "contractHash": C, "recordHash": D},
        write=write,
    )
    assert len(calls) == 1
    assert bound.delivery_revision == 1
    assert host_tables() == 1
    assert len(table_rows("delivery_bindings")) == 1
    assert store.verify_integrity(run.run_id).to_json() == bound.to_json()


def test_a_raising_write_rolls_back_event_binding_and_receipt(store, host_tables, snapshot):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    lease = store.acquire_lease(run.run_id, "apply-1", 60_000)
    before = snapshot()
    before_counts = counts(snapshot)
    error = Boom("host failed")

    def failing(session):
        session.add(HostRow(id=1, note="never"))
        session.flush()  # the host row reached the database inside the transaction
        raise error

    attempts = [
        lambda: store.transition_atomically(
            run.run_id, "paused", operation_id="t1", write=failing, lease=lease
        ),
        lambda: store.bind_delivery_atomically(
            run.run_id, "gate-a", 1, A, operation_id="b1", write=failing, lease=lease
        ),
        lambda: store.bind_deliveries_atomically(
            [
                BindDelivery(
                    run_id=run.run_id,
                    gate="gate-a",
                    revision=1,
                    receipt_hash=A,
                    operation_id="b1",
                    lease=lease,
                ),
                {
                    "runId": run.run_id,
                    "gate": "gate-b",
                    "revision": 1,
                    "receiptHash": B,
                    "operationId": "b2",
                    "lease": lease.to_dict(),
                },
            ],
            write=failing,
        ),
    ]
    for attempt in attempts:
        with pytest.raises(Boom) as info:
            attempt()
        assert info.value is error
        assert snapshot() == before
        assert counts(snapshot) == before_counts  # events, bindings, receipts unchanged
        assert host_tables() == 0
    # the lease is untouched and the same calls then succeed
    store.assert_lease(lease)
    assert (
        store.transition_atomically(
            run.run_id, "paused", operation_id="t1", write=lambda s: None, lease=lease
        ).sequence
        == 2
    )


def test_a_failing_host_flush_rolls_back_the_journal(store, host_tables, snapshot, request):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    store.transition_atomically(
        run.run_id, "paused", operation_id="t1", write=lambda s: s.add(HostRow(id=1, note="a"))
    )
    before = snapshot()

    # in a unit of work: the host's failing flush rolls the journal calls back; the
    # failure is the host's (a distinct class and code carrying the driver's error), not
    # an outage whose outcome is unknown
    with pytest.raises(CadenceStoreError) as info, store.unit_of_work() as uow:
        uow.runs.transition(run.run_id, "validating-delivery", operation_id="t2")
        uow.session.add(HostRow(id=1, note="duplicate primary key"))
    assert snapshot() == before
    assert_host_integrity_error(info.value)
    calls = []

    def duplicate(session):
        calls.append(1)
        session.add(HostRow(id=1, note="duplicate primary key"))  # fails at flush/commit

    with pytest.raises(CadenceStoreError) as info:
        store.transition_atomically(
            run.run_id, "validating-delivery", operation_id="t2", write=duplicate
        )
    assert snapshot() == before
    assert host_tables() == 1
    # the database refused the host's write: not a busy store, and write() ran once
    assert calls == [1], (len(calls), info.value.code)
    assert_host_integrity_error(info.value)


def test_a_host_flush_failing_inside_the_block_or_write_is_the_hosts(store, host_tables, snapshot):
    """The host flushes itself (a sync Session): its IntegrityError is `HostWriteError`."""
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    store.transition_atomically(
        run.run_id, "paused", operation_id="t1", write=lambda s: s.add(HostRow(id=1, note="a"))
    )
    before = snapshot()
    with pytest.raises(CadenceStoreError) as info, store.unit_of_work() as uow:
        uow.runs.transition(run.run_id, "validating-delivery", operation_id="t2")
        uow.session.add(HostRow(id=1, note="duplicate primary key"))
        uow.session.flush()
    assert snapshot() == before
    assert_host_integrity_error(info.value)
    calls = []

    def duplicate_flushed(session):
        calls.append(1)
        session.add(HostRow(id=1, note="duplicate primary key"))
        session.flush()  # fails inside write()

    with pytest.raises(CadenceStoreError) as info:
        store.bind_delivery_atomically(
            run.run_id, "gate-a", 1, A, operation_id="b2", write=duplicate_flushed
        )
    assert snapshot() == before
    assert calls == [1]
    assert_host_integrity_error(info.value)


def assert_host_integrity_error(error: CadenceStoreError) -> None:
    assert type(error) is HostWriteError, type(error)
    assert not isinstance(error, StoreUnavailableError | StoreBusyError)
    assert error.code == "run-store-host-write-failed"
    assert isinstance(error.host_error, HostIntegrityError)
    assert error.__cause__ is not None


def test_transition_atomically_replay_does_not_run_write_again(store, host_tables, request):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    calls = []

    def write(session):
        calls.append(1)

    first = store.transition_atomically(run.run_id, "paused", operation_id="t1", write=write)
    replay = store.transition_atomically(run.run_id, "paused", operation_id="t1", write=write)
    assert replay.to_json() == first.to_json()
    assert calls == [1]


def test_bind_deliveries_atomically_binds_all_in_one_transaction(store, host_tables, table_rows):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    lease = store.acquire_lease(run.run_id, "apply-1", 60_000)
    calls = []

    def write(session):
        calls.append(1)
        session.execute(host_outbox.insert().values(id=1, message="bound two"))

    projection = store.bind_deliveries_atomically(
        [
            BindDelivery(
                run_id=run.run_id,
                gate="gate-b",
                revision=2,
                receipt_hash=B,
                operation_id="b1",
                lease=lease,
            ),
            {
                "run_id": run.run_id,
                "gate": "gate-a",
                "revision": 1,
                "receipt_hash": A,
                "operation_id": "b2",
                "approval_proof": {"revision": 1, "contract_hash": C, "record_hash": D},
                "lease": lease,
            },
        ],
        write=write,
    )
    assert calls == [1]
    assert projection.sequence == 3  # the last binding's projection
    assert [(b.gate, b.revision) for b in projection.delivery_bindings] == [
        ("gate-a", 1),
        ("gate-b", 2),
    ]
    assert projection.delivery_revision == 2
    assert [e.payload["gate"] for e in store.list_events(run.run_id)[1:]] == ["gate-b", "gate-a"]
    assert host_tables(host_outbox) == 1
    receipts = {r["operation_id"]: r for r in table_rows("operations")}
    assert receipts["b2"]["outcome_json"] == projection.to_json()
    assert receipts["b1"]["outcome_json"] != projection.to_json()

    # the same binding twice in one batch: the second only records its receipt
    again = store.bind_deliveries_atomically(
        [
            {
                "runId": run.run_id,
                "gate": "gate-a",
                "revision": 3,
                "receiptHash": A,
                "operationId": "b3",
            },
            {
                "runId": run.run_id,
                "gate": "gate-a",
                "revision": 3,
                "receiptHash": A,
                "operationId": "b4",
            },
        ],
        write=lambda session: None,
    )
    assert again.sequence == 4
    receipts = {r["operation_id"]: r for r in table_rows("operations")}
    assert receipts["b3"]["outcome_json"] == receipts["b4"]["outcome_json"] == again.to_json()
    assert len(table_rows("delivery_bindings")) == 3


def test_bind_deliveries_atomically_rules(store, host_tables, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    other = store.start_run("abel-implement", change="other", operation_id="s2")
    lease = store.acquire_lease(run.run_id, "apply-1", 60_000)
    store.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="existing")

    def item(**fields):
        base = {
            "run_id": run.run_id,
            "gate": "gate-b",
            "revision": 1,
            "receipt_hash": B,
            "operation_id": "b1",
        }
        return {**base, **fields}

    def write(session):
        session.add(HostRow(id=1, note="never"))

    with rejected(InvalidInputError, "delivery-binding-empty"):
        store.bind_deliveries_atomically([], write=write)
    with rejected(InvalidInputError, "delivery-binding-empty"):
        store.bind_deliveries_atomically([], write=None)
    with rejected(InvalidInputError, "delivery-binding-write-invalid"):
        store.bind_deliveries_atomically(
            [item(), item(run_id=other.run_id, operation_id="b2")], write=write
        )
    with rejected(InvalidInputError, "delivery-binding-write-invalid"):
        store.bind_deliveries_atomically([item(lease=lease), item(operation_id="b2")], write=write)
    with rejected(InvalidInputError, "delivery-binding-write-invalid"):
        store.bind_deliveries_atomically([item()], write=None)
    with rejected(InvalidInputError, "delivery-binding-write-invalid"):
        store.bind_deliveries_atomically([item()], write="not callable")
    with rejected(InvalidInputError, "invalid-delivery-binding"):
        store.bind_deliveries_atomically([item(), item(gate="gate-c")], write=write)
    with rejected(InvalidInputError, "invalid-delivery-binding"):
        store.bind_deliveries_atomically([item(unexpected=1)], write=write)
    with rejected(InvalidInputError, "invalid-operation-id"):
        store.bind_deliveries_atomically([item(operation_id="b 1")], write=write)
    # the second binding conflicts: the first one is rolled back with it
    with rejected(OperationConflictError, "delivery-revision-conflict"):
        store.bind_deliveries_atomically(
            [item(), item(gate="gate-a", receipt_hash=B, operation_id="b2")], write=write
        )
    with rejected(RunNotFoundError, "run-not-found"):
        store.bind_deliveries_atomically([item(run_id="no-such-run")], write=write)
    store.acquire_lease(run.run_id, "apply-1", 60_000, preempt=True)
    with rejected(LeaseFencedError, "lease-fenced"):
        store.bind_deliveries_atomically(
            [item(lease=lease), item(gate="gate-a", revision=2, operation_id="b2", lease=lease)],
            write=write,
        )
    assert host_tables() == 0


def test_atomic_write_must_be_callable(store, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    with rejected(InvalidInputError, "state-transition-write-invalid"):
        store.transition_atomically(run.run_id, "paused", operation_id="t1", write=None)
    with rejected(InvalidInputError, "delivery-binding-write-invalid"):
        store.bind_delivery_atomically(run.run_id, "gate-a", 1, A, operation_id="b1", write=42)


def test_atomic_input_errors_precede_the_write_check(store, rejected):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    # cadence 1.x validated the operation and binding before looking at `write`
    with rejected(InvalidInputError, "invalid-operation-id"):
        store.transition_atomically(run.run_id, "paused", operation_id="bad id", write=None)
    with rejected(InvalidInputError, "invalid-delivery-binding"):
        store.bind_delivery_atomically(run.run_id, "gate-z", 1, A, operation_id="b1", write=None)


# ---------------------------------------------------------------------------------------
# UnitOfWork
# ---------------------------------------------------------------------------------------


def test_unit_of_work_commits_host_rows_with_journal_rows(store, host_tables, table_rows):
    with store.unit_of_work() as uow:
        run = uow.runs.start_run("abel-implement", change="ship-it", operation_id="s1")
        uow.runs.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="b1")
        uow.session.add(HostRow(id=1, note="with the journal"))
        # a refused call inside the block writes nothing, the block goes on
        with pytest.raises(CadenceStoreError) as info:
            uow.runs.transition(run.run_id, "completed", operation_id="bad")
        assert info.value.code == "invalid-run-transition:created:completed"
        final = uow.runs.transition(run.run_id, "validating-delivery", operation_id="t1")
        # nothing is visible outside the transaction before the commit
        with pytest.raises(RunNotFoundError):
            store.status(run.run_id)
        assert host_tables() == 0

    assert store.status(run.run_id).to_json() == final.to_json()
    assert [e.type for e in store.list_events(run.run_id)] == [
        "run-created",
        "delivery-bound",
        "state-transitioned",
    ]
    assert host_tables() == 1
    assert {r["operation_id"] for r in table_rows("operations")} == {"s1", "b1", "t1"}
    store.verify_integrity(run.run_id)

    with pytest.raises(StoreUnavailableError) as info:
        _ = uow.runs
    assert info.value.code == "unit-of-work-not-active"


def test_exception_in_unit_of_work_rolls_back_everything(store, host_tables, snapshot):
    existing = store.start_run("abel-implement", change="existing", operation_id="s0")
    before = snapshot()
    with pytest.raises(Boom), store.unit_of_work() as uow:
        run = uow.runs.start_run("abel-implement", change="ship-it", operation_id="s1")
        uow.runs.transition(existing.run_id, "paused", operation_id="t1")
        uow.runs.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="b1")
        uow.session.add(HostRow(id=1, note="rolled back"))
        uow.session.flush()
        raise Boom
    assert snapshot() == before
    assert host_tables() == 0
    with pytest.raises(RunNotFoundError):
        store.status(run.run_id)
    assert store.status(existing.run_id).state == "created"

    # a CadenceStoreError escaping the block rolls back the earlier calls too
    with pytest.raises(OperationConflictError), store.unit_of_work() as uow:
        uow.runs.transition(existing.run_id, "paused", operation_id="t1")
        uow.session.add(HostRow(id=2, note="rolled back"))
        uow.runs.bind_delivery(existing.run_id, "gate-a", 1, A, operation_id="s0")
    assert snapshot() == before
    assert host_tables() == 0


def test_unit_of_work_is_not_reentrant(store):
    uow = store.unit_of_work()
    with uow:
        with pytest.raises(StoreUnavailableError) as info, uow:
            pass
        assert info.value.code == "unit-of-work-not-reentrant"


# ---------------------------------------------------------------------------------------
# RunRepository inside a host Session
# ---------------------------------------------------------------------------------------


@pytest.fixture
def host_engine(store_url):
    engine = create_engine(store_url, poolclass=NullPool)
    yield engine
    engine.dispose()


def test_repository_never_commits_host_rollback_discards_journal_rows(
    store, host_engine, host_tables, snapshot, clock
):
    existing = store.start_run("abel-implement", change="existing", operation_id="s0")
    before = snapshot()
    with Session(host_engine) as session:
        repository = RunRepository(session, root_hash=ROOT_HASH, clock=clock)
        run = repository.start_run("abel-implement", change="ship-it", operation_id="s1")
        repository.bind_delivery(run.run_id, "gate-a", 1, A, operation_id="b1")
        repository.transition(existing.run_id, "paused", operation_id="t1")
        lease = repository.acquire_lease(existing.run_id, "apply-1", 1_000)
        session.add(HostRow(id=1, note="host"))
        session.flush()
        # the session sees its own uncommitted rows
        assert repository.status(run.run_id).sequence == 2
        assert repository.verify_integrity(run.run_id).sequence == 2
        repository.assert_lease(lease)
        # nobody else does: the repository did not commit
        assert snapshot() == before
        with pytest.raises(RunNotFoundError):
            store.status(run.run_id)
        session.rollback()
    assert snapshot() == before
    assert host_tables() == 0


def test_repository_rows_commit_with_the_host_session(
    store, host_engine, host_tables, clock, table_rows
):
    configure_engine(host_engine)  # the host's opt-in (SQLite); a no-op on PostgreSQL
    with Session(host_engine) as session:
        repository = RunRepository(session, root_hash=ROOT_HASH, clock=clock)
        run = repository.start_run("abel-design", provisional_key="e" * 64, operation_id="s1")
        repository.bind_change(run.run_id, "named", operation_id="c1")
        moved = repository.transition(run.run_id, "paused", operation_id="t1", code="wait")
        session.add(HostRow(id=1, note="host"))
        session.commit()
    assert host_tables() == 1
    assert store.status(run.run_id).to_json() == moved.to_json()
    assert store.verify_integrity(run.run_id).to_json() == moved.to_json()
    assert {r["operation_id"] for r in table_rows("operations")} == {"s1", "c1", "t1"}


def test_repository_and_store_accept_a_host_engine(store_url, host_engine, clock, rejected):
    with Session(host_engine) as session, pytest.raises(InvalidInputError) as info:
        RunRepository(session, root_hash="not-a-hash", clock=clock)
    assert info.value.code == "invalid-root-hash"

    with RunStore(host_engine, root_hash=ROOT_HASH, clock=clock) as on_host:
        run = on_host.start_run("abel-implement", change="ship-it", operation_id="s1")
    # closing the store leaves the host's engine usable
    with host_engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(events)).scalar_one() == 1
    with RunStore(host_engine, root_hash=ROOT_HASH, clock=clock) as again:
        assert again.status(run.run_id).run_id == run.run_id


def test_repository_reports_a_held_store_as_busy(store, store_url, clock, db, request):
    """Inside a host Session, a store held by another writer is a coded failure too."""
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    postgresql = "postgresql" in request.node.callspec.id
    # short waits so that the test does not sit out a 5-10 s busy timeout
    connect_args = {"options": "-c lock_timeout=100"} if postgresql else {"timeout": 0.05}
    impatient = create_engine(store_url, poolclass=NullPool, connect_args=connect_args)
    try:
        with db.connect() as holder:
            if postgresql:  # another transaction holds the run row
                holder.execute(
                    select(runs.c.run_id).where(runs.c.run_id == run.run_id).with_for_update()
                )
            else:  # another connection holds the write lock
                holder.exec_driver_sql("BEGIN IMMEDIATE")
            with Session(impatient) as session:
                repository = RunRepository(session, root_hash=ROOT_HASH, clock=clock)
                with pytest.raises(Exception) as info:
                    repository.transition(run.run_id, "paused", operation_id="t1")
                session.rollback()
            holder.rollback()
    finally:
        impatient.dispose()
    assert isinstance(info.value, StoreBusyError), repr(info.value)
    assert info.value.code == "run-store-busy"
    assert store.status(run.run_id).sequence == 1


# ---------------------------------------------------------------------------------------
# replays never run `write` again (issue 11: nothing twice)
# ---------------------------------------------------------------------------------------


def _counting_write(calls: list[int]):
    def write(session):
        calls.append(1)
        session.execute(host_outbox.insert().values(id=len(calls), message="sent"))

    return write


def test_a_replayed_transition_atomically_writes_the_host_row_once(store, host_tables):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    calls: list[int] = []
    results = [
        store.transition_atomically(
            run.run_id, "paused", operation_id="t1", write=_counting_write(calls)
        )
        for _ in range(3)
    ]
    assert calls == [1]
    assert host_tables(host_outbox) == 1
    assert {r.to_json() for r in results} == {results[0].to_json()}


def test_a_replayed_bind_delivery_atomically_writes_the_host_row_once(store, host_tables):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    calls: list[int] = []
    results = [
        store.bind_delivery_atomically(
            run.run_id, "gate-a", 1, A, operation_id="b1", write=_counting_write(calls)
        )
        for _ in range(3)
    ]
    assert calls == [1]
    assert host_tables(host_outbox) == 1
    assert {r.to_json() for r in results} == {results[0].to_json()}
    assert len(store.list_events(run.run_id)) == 2


def test_a_bind_of_an_already_stored_receipt_does_not_run_write(store, host_tables):
    """A new operation id for a binding stored with the same receipt appends nothing."""
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    calls: list[int] = []
    write = _counting_write(calls)
    store.bind_delivery_atomically(run.run_id, "gate-a", 1, A, operation_id="b1", write=write)
    again = store.bind_delivery_atomically(
        run.run_id, "gate-a", 1, A, operation_id="b2", write=write
    )
    assert calls == [1]
    assert again.sequence == 2
    assert store.inspect_operation(run.run_id, "b2").state == "committed"


def test_a_replayed_bind_deliveries_atomically_writes_the_host_row_once(store, host_tables):
    run = store.start_run("abel-implement", change="ship-it", operation_id="s1")
    calls: list[int] = []
    write = _counting_write(calls)
    first = {"run_id": run.run_id, "gate": "gate-a", "revision": 1, "receipt_hash": A}
    second = {"run_id": run.run_id, "gate": "gate-b", "revision": 1, "receipt_hash": B}
    batch = [{**first, "operation_id": "b1"}, {**second, "operation_id": "b2"}]
    results = [store.bind_deliveries_atomically(batch, write=write) for _ in range(3)]
    assert calls == [1]
    assert {r.to_json() for r in results} == {results[0].to_json()}

    # some inputs replay, one is new: the write runs once for the call
    third = {"run_id": run.run_id, "gate": "gate-a", "revision": 2, "receipt_hash": C}
    mixed = store.bind_deliveries_atomically([*batch, {**third, "operation_id": "b3"}], write=write)
    assert calls == [1, 1]
    assert mixed.sequence == 4
    # every input replays (or finds its binding stored): no write
    store.bind_deliveries_atomically(
        [{**third, "operation_id": "b3"}, {**third, "operation_id": "b4"}], write=write
    )
    assert calls == [1, 1]
    assert host_tables(host_outbox) == 2
    assert len(store.list_events(run.run_id)) == 4
