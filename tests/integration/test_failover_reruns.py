"""`RunStore` re-runs a call whose connection was lost, with the same operation id.

The store talks to PostgreSQL through a TCP proxy (tests/fault_proxy.py) that loses
connections for real: it cuts them, refuses new ones, or forwards a COMMIT and swallows
the server's reply, so the transaction is committed and the client never hears it. That
last case is the hard one: every call must come out exactly as if the acknowledgement
had arrived, with nothing applied twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fault_proxy import FaultProxy, fault_proxy, unix_socket_of
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from support import ROOT_HASH, FakeClock

from cadence_store import (
    LeaseFencedError,
    OperationLease,
    RunStore,
    StoreUnavailableError,
    upgrade,
)
from cadence_store.storage.feed_notifier import flush_notifiers

pytestmark = pytest.mark.postgres

SECRET = "s3cret"
A, B = "a" * 64, "b" * 64


@pytest.fixture
def upgraded_url(pg_database_url: str) -> str:
    upgrade(pg_database_url)
    return pg_database_url


@pytest.fixture
def proxy(upgraded_url: str) -> Iterator[FaultProxy]:
    with fault_proxy(unix_socket_of(upgraded_url)) as running:
        yield running


@pytest.fixture
def proxied_url(upgraded_url: str, proxy: FaultProxy) -> str:
    """The database through the proxy, with a password (trust auth ignores it)."""
    return (
        make_url(upgraded_url)
        .set(password=SECRET, host="127.0.0.1", port=proxy.port, query={})
        .render_as_string(hide_password=False)
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(proxied_url: str, clock: FakeClock) -> Iterator[RunStore]:
    run_store = RunStore(proxied_url, root_hash=ROOT_HASH, clock=clock)
    try:
        yield run_store
    finally:
        run_store.close()


@pytest.fixture
def db(upgraded_url: str) -> Iterator[Engine]:
    engine = create_engine(upgraded_url, pool_size=1)
    yield engine
    engine.dispose()


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    caplog.set_level(logging.WARNING, logger="cadence_store")

    def lines() -> list[str]:
        return [
            record.getMessage()
            for record in caplog.records
            if record.levelno == logging.WARNING and record.name.startswith("cadence_store")
        ]

    return lines


def count(db: Engine, sql: str, **params: Any) -> int:
    with db.connect() as connection:
        return int(connection.execute(text(sql), params).scalar_one())


def assert_one_masked_retry(lines: list[str]) -> None:
    assert len(lines) == 1, lines
    assert SECRET not in lines[0] and "***" in lines[0]


# -- lost connections, no primary ---------------------------------------------------------


def test_a_cut_connection_is_re_run_and_logged_once_with_the_password_masked(
    store: RunStore, proxy: FaultProxy, db: Engine, warnings: Callable[[], list[str]]
) -> None:
    run = store.start_run("abel-implement", change="c1", operation_id="start-1")
    proxy.cut()  # the pooled connection is now dead
    moved = store.transition(run.run_id, "paused", operation_id="pause-1")
    assert moved.state == "paused"
    assert_one_masked_retry(warnings())
    assert count(db, "SELECT count(*) FROM events WHERE run_id = :r", r=run.run_id) == 2


@pytest.mark.parametrize("failover_timeout_s", [30.0, 0.3])
def test_a_host_engines_first_try_hands_a_lost_connection_to_the_re_runs(
    proxied_url: str,
    proxy: FaultProxy,
    db: Engine,
    warnings: Callable[[], list[str]],
    failover_timeout_s: float,
) -> None:
    """On a host's engine no watchdog bounds the first try (`retries.call_with_retries`);
    a lost connection is re-run from there, within the budget counted from the call's
    start, as on the store's own engine."""
    host = create_engine(proxied_url)
    try:
        with RunStore(host, root_hash=ROOT_HASH, failover_timeout_s=failover_timeout_s) as store:
            run = store.start_run("abel-implement", change="c1", operation_id="start-1")
            proxy.cut()  # the host's pooled connection is now dead
            if failover_timeout_s > 1:
                assert store.transition(run.run_id, "paused", operation_id="pause-1").sequence == 2
                assert_one_masked_retry(warnings())
            else:
                proxy.refuse(True)
                with pytest.raises(StoreUnavailableError) as caught:
                    store.transition(run.run_id, "paused", operation_id="pause-1")
                assert caught.value.code == "run-store-unavailable"
                # re-run until the budget ran out, not the first try's own error
                assert "no primary answered within 0.3 s" in str(caught.value)
                assert count(db, "SELECT count(*) FROM events WHERE run_id = :r", r=run.run_id) == 1
                proxy.refuse(False)
                assert store.transition(run.run_id, "paused", operation_id="pause-1").sequence == 2
            assert store.transition(run.run_id, "paused", operation_id="pause-1").sequence == 2
            assert count(db, "SELECT count(*) FROM events WHERE run_id = :r", r=run.run_id) == 2
    finally:
        host.dispose()


def test_no_primary_until_the_timeout_then_unavailable_and_nothing_written(
    proxied_url: str, proxy: FaultProxy, db: Engine, warnings: Callable[[], list[str]]
) -> None:
    with RunStore(proxied_url, root_hash=ROOT_HASH, failover_timeout_s=0.3) as store:
        run = store.start_run("abel-implement", change="c1", operation_id="start-1")
        proxy.refuse(True)
        proxy.cut()
        with pytest.raises(StoreUnavailableError) as caught:
            store.transition(run.run_id, "paused", operation_id="pause-1")
        assert caught.value.code == "run-store-unavailable"
        message = str(caught.value)
        assert "outcome of the call is unknown" in message and "same operation id" in message
        assert SECRET not in message and "***" in message
        assert warnings() and all(SECRET not in line for line in warnings())
        assert count(db, "SELECT count(*) FROM events WHERE run_id = :r", r=run.run_id) == 1

        # once a primary answers, the same operation id goes through, once
        proxy.refuse(False)
        assert store.transition(run.run_id, "paused", operation_id="pause-1").sequence == 2
        assert store.transition(run.run_id, "paused", operation_id="pause-1").sequence == 2
        assert count(db, "SELECT count(*) FROM events WHERE run_id = :r", r=run.run_id) == 2


def test_a_zero_timeout_reports_the_lost_connection_at_once(
    proxied_url: str, proxy: FaultProxy, warnings: Callable[[], list[str]]
) -> None:
    with RunStore(proxied_url, root_hash=ROOT_HASH, failover_timeout_s=0) as store:
        run = store.start_run("abel-implement", change="c1", operation_id="start-1")
        proxy.cut()
        with pytest.raises(StoreUnavailableError) as caught:
            store.transition(run.run_id, "paused", operation_id="pause-1")
        assert caught.value.code == "run-store-unavailable"
        assert warnings() == []


def test_reads_are_re_run_too(
    store: RunStore, proxy: FaultProxy, warnings: Callable[[], list[str]]
) -> None:
    run = store.start_run("abel-implement", change="c1", operation_id="start-1")
    assert store.status(run.run_id) == run  # the pool's connections are a read's now
    proxy.cut()
    assert store.status(run.run_id) == run
    assert_one_masked_retry(warnings())


def test_a_connection_left_read_only_is_re_run_not_reported_as_a_write_failure(
    store: RunStore,
    db: Engine,
    upgraded_url: str,
    caplog: pytest.LogCaptureFixture,
    warnings: Callable[[], list[str]],
) -> None:
    """25006: what a connection that a failover left on a standby gets."""
    run = store.start_run("abel-implement", change="c1", operation_id="start-1")
    database = make_url(upgraded_url).database

    def alter(setting: str) -> None:
        with db.connect().execution_options(isolation_level="AUTOCOMMIT") as admin:
            admin.exec_driver_sql(f'ALTER DATABASE "{database}" {setting}')

    class PrimaryComesBack(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            alter("RESET default_transaction_read_only")

    alter("SET default_transaction_read_only = on")
    # a store whose connections all came after the change: they see the database read-only
    left_on_standby = RunStore(store.engine.url, root_hash=ROOT_HASH)
    handler = PrimaryComesBack(logging.WARNING)
    logging.getLogger("cadence_store").addHandler(handler)
    try:
        moved = left_on_standby.transition(run.run_id, "paused", operation_id="pause-1")
    finally:
        logging.getLogger("cadence_store").removeHandler(handler)
        left_on_standby.close()
    assert moved.sequence == 2
    assert_one_masked_retry(warnings())
    assert "25006" in warnings()[0] or "read-only" in warnings()[0]


# -- an acknowledgement lost in flight: the first attempt committed ------------------------


def test_start_run(store: RunStore, proxy: FaultProxy, db: Engine, warnings: Any) -> None:
    flush_notifiers()  # the feed's numbering commit first: the dropped reply is the call's
    proxy.drop_next_commit_reply()
    run = store.start_run("abel-implement", change="c1", operation_id="start-1")
    assert proxy.commits_dropped == 1
    assert_one_masked_retry(warnings())
    assert count(db, "SELECT count(*) FROM runs") == 1
    assert store.start_run("abel-implement", change="c1", operation_id="start-1") == run


def test_transition_atomically_runs_write_once(
    store: RunStore, proxy: FaultProxy, db: Engine, warnings: Any
) -> None:
    run = store.start_run("abel-implement", change="c1", operation_id="start-1")
    calls: list[object] = []
    flush_notifiers()  # the feed's numbering commit first: the dropped reply is the call's
    proxy.drop_next_commit_reply()
    moved = store.transition_atomically(
        run.run_id, "paused", operation_id="pause-1", write=calls.append
    )
    assert proxy.commits_dropped == 1 and len(calls) == 1
    assert moved.sequence == 2
    assert count(db, "SELECT count(*) FROM events WHERE run_id = :r", r=run.run_id) == 2
    assert_one_masked_retry(warnings())


def test_bind_delivery_atomically_runs_write_once(
    store: RunStore, proxy: FaultProxy, db: Engine, warnings: Any
) -> None:
    run = store.start_run("abel-implement", change="c1", operation_id="start-1")
    calls: list[object] = []
    flush_notifiers()  # the feed's numbering commit first: the dropped reply is the call's
    proxy.drop_next_commit_reply()
    bound = store.bind_delivery_atomically(
        run.run_id, "gate-a", 1, A, operation_id="bind-1", write=calls.append
    )
    assert proxy.commits_dropped == 1 and len(calls) == 1
    assert bound.delivery_revision == 1
    assert count(db, "SELECT count(*) FROM delivery_bindings") == 1
    assert_one_masked_retry(warnings())


def test_bind_deliveries_atomically_runs_write_once(
    store: RunStore, proxy: FaultProxy, db: Engine, warnings: Any
) -> None:
    run = store.start_run("abel-implement", change="c1", operation_id="start-1")
    calls: list[object] = []
    items = [
        {"run_id": run.run_id, "gate": "gate-a", "revision": 1, "receipt_hash": A,
         "operation_id": "bind-1"},
        {"run_id": run.run_id, "gate": "gate-b", "revision": 1, "receipt_hash": B,
         "operation_id": "bind-2"},
    ]  # fmt: skip
    flush_notifiers()  # the feed's numbering commit first: the dropped reply is the call's
    proxy.drop_next_commit_reply()
    bound = store.bind_deliveries_atomically(items, write=calls.append)
    assert proxy.commits_dropped == 1 and len(calls) == 1
    assert bound.sequence == 3
    assert count(db, "SELECT count(*) FROM events WHERE run_id = :r", r=run.run_id) == 3
    assert_one_masked_retry(warnings())


def test_a_leased_transition_is_replayed_even_after_its_lease_expired(
    store: RunStore, proxy: FaultProxy, db: Engine, clock: FakeClock, warnings: Any
) -> None:
    run = store.start_run("abel-implement", change="c1", operation_id="start-1")
    lease = store.acquire_lease(run.run_id, "work-1", ttl_ms=1_000)

    class LeaseRunsOut(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            clock.advance(60_000)  # the failover outlasted the lease

    handler = LeaseRunsOut(logging.WARNING)
    logging.getLogger("cadence_store").addHandler(handler)
    try:
        flush_notifiers()  # the feed's numbering commit first: the dropped reply is the call's
        proxy.drop_next_commit_reply()
        moved = store.transition(run.run_id, "paused", operation_id="pause-1", lease=lease)
    finally:
        logging.getLogger("cadence_store").removeHandler(handler)
    assert moved.sequence == 2  # it committed while the lease was live: not lease-fenced
    assert count(db, "SELECT count(*) FROM events WHERE run_id = :r", r=run.run_id) == 2


def test_an_exclusive_acquire_finds_the_lease_it_took(
    store: RunStore, proxy: FaultProxy, db: Engine, warnings: Any
) -> None:
    run = store.start_run("abel-implement", change="c1", operation_id="start-1")
    flush_notifiers()  # the feed's numbering commit first: the dropped reply is the call's
    proxy.drop_next_commit_reply()
    lease = store.acquire_lease(run.run_id, "work-1", ttl_ms=60_000, exclusive=True)
    assert proxy.commits_dropped == 1
    assert_one_masked_retry(warnings())
    stored = count(
        db,
        "SELECT count(*) FROM operations WHERE operation_id = 'work-1' AND lease_token = :t",
        t=lease.token,
    )
    assert stored == 1  # the token returned is the live one: the caller can use it
    store.assert_lease(lease)


def test_a_preempting_acquire_does_not_preempt_itself(
    store: RunStore, proxy: FaultProxy, db: Engine, warnings: Any
) -> None:
    run = store.start_run("abel-implement", change="c1", operation_id="start-1")
    old = store.acquire_lease(run.run_id, "work-1", ttl_ms=60_000)
    flush_notifiers()  # the feed's numbering commit first: the dropped reply is the call's
    proxy.drop_next_commit_reply()
    lease = store.acquire_lease(run.run_id, "work-1", ttl_ms=60_000, preempt=True)
    assert proxy.commits_dropped == 1 and lease.token != old.token
    store.assert_lease(lease)


def test_renew_commit_and_interrupt_count_a_committed_first_attempt_as_done(
    store: RunStore, proxy: FaultProxy, db: Engine, clock: FakeClock, warnings: Any
) -> None:
    run = store.start_run("abel-implement", change="c1", operation_id="start-1")
    lease = store.acquire_lease(run.run_id, "work-1", ttl_ms=1_000)

    clock.advance(500)
    flush_notifiers()  # the feed's numbering commit first: the dropped reply is the call's
    proxy.drop_next_commit_reply()
    renewed = store.renew_lease(lease, 10_000)
    assert renewed.token == lease.token and renewed.expires_at == clock.now + 10_000

    flush_notifiers()  # the feed's numbering commit first: the dropped reply is the call's

    proxy.drop_next_commit_reply()
    assert store.commit_lease(renewed, {"applied": True, "n": 1.0}) == {"applied": True, "n": 1}
    status = store.inspect_operation(run.run_id, "work-1")
    assert status is not None and status.state == "committed"
    assert status.outcome == {"applied": True, "n": 1}

    other = store.acquire_lease(run.run_id, "work-2", ttl_ms=10_000)
    flush_notifiers()  # the feed's numbering commit first: the dropped reply is the call's
    proxy.drop_next_commit_reply()
    assert store.interrupt_lease(other) is None
    status = store.inspect_operation(run.run_id, "work-2")
    assert status is not None and status.state == "interrupted"
    assert proxy.commits_dropped == 3
    assert len(warnings()) == 3


def test_a_re_run_finishing_a_lease_another_way_is_still_fenced(
    store: RunStore, proxy: FaultProxy, warnings: Any
) -> None:
    """Only the same token finishing the same way counts as done."""
    run = store.start_run("abel-implement", change="c1", operation_id="start-1")
    lease = store.acquire_lease(run.run_id, "work-1", ttl_ms=10_000)
    store.commit_lease(lease, {"applied": True})
    same_token = OperationLease(
        run_id=run.run_id, operation_id="work-1", token=lease.token, expires_at=lease.expires_at
    )
    for finish in (
        lambda: store.commit_lease(same_token, {"applied": False}),
        lambda: store.interrupt_lease(same_token),
    ):
        proxy.cut()  # the first attempt fails, the re-run checks what is recorded
        with pytest.raises(LeaseFencedError):
            finish()
    assert len(warnings()) == 2
