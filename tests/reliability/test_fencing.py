"""Fencing that holds across machines (issue 13).

1. Lease time on PostgreSQL is the database server's clock (without an explicit
   `clock=`): a process whose system clock runs 60 s fast cannot take a live lease over
   or recover it; one whose clock runs 60 s slow cannot keep using a lease that has
   really expired. Each such process is a spawned child that skews its own
   `time.time_ns`/`time.time` only (``fencing_workers.skewed_attempts``).
2. The fencing campaign: processes contending for short leases (pauses past the TTL,
   renew, preempt, commit, interrupt) log every acknowledged grant and fenced write in a
   host row of the same transaction; an offline checker (``check_fence_log``) asserts
   that no write is acknowledged after a newer grant was, and that fences never go down
   in commit order. The checker is shown to fail on a deliberately weakened fence.
   A short campaign runs by default; ``--slow`` runs a long one.
"""

from __future__ import annotations

import multiprocessing
import queue
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # the spawned children import `fencing_workers` by this name
    sys.path.insert(0, _HERE)

import fencing_workers  # noqa: E402

import cadence_store  # noqa: E402
from cadence_store import OperationConflictError, RunRepository, RunStore  # noqa: E402

ROOT_HASH = fencing_workers.ROOT_HASH
SKEW_MS = 60_000
PROCESS_TIMEOUT_S = 120


def _server_ms(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return int(
                connection.execute(
                    text("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint")
                ).scalar_one()
            )
    finally:
        engine.dispose()


def _wait_until_server_passes(url: str, instant_ms: int) -> None:
    """Wait (bounded) until the server's clock is past `instant_ms`: a condition, not a
    timing assertion."""
    deadline = time.monotonic() + 30
    while _server_ms(url) <= instant_ms:
        assert time.monotonic() < deadline, "the server clock did not advance"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def skewed() -> Iterator[dict[int, Any]]:
    """A spawned process per offset (+60 s, -60 s) whose system clock is moved by that
    much (its pool initializer patches its own `time` only)."""
    context = multiprocessing.get_context("spawn")
    pools = {
        offset: context.Pool(1, initializer=fencing_workers.skew_clock, initargs=(offset,))
        for offset in (SKEW_MS, -SKEW_MS)
    }
    yield pools
    for pool in pools.values():
        pool.terminate()
        pool.join()


def _in_skewed_process(
    skewed: dict[int, Any], url: str, offset_ms: int, plan: dict[str, Any]
) -> dict[str, Any]:
    result: dict[str, Any] = (
        skewed[offset_ms]
        .apply_async(fencing_workers.skewed_attempts, (url, plan))
        .get(timeout=PROCESS_TIMEOUT_S)
    )
    return result


# -- 1. the database clock judges expiry on PostgreSQL -----------------------------------


@pytest.fixture
def pg_store_url(pg_database_url: str) -> str:
    cadence_store.upgrade(pg_database_url)
    return pg_database_url


def test_a_fast_clock_cannot_take_over_or_recover_a_live_lease(
    pg_store_url: str, skewed: dict[int, Any]
) -> None:
    with RunStore(pg_store_url, root_hash=ROOT_HASH) as store:
        run = store.start_run("abel-implement", change="skewed", operation_id="start")
        held = store.acquire_lease(run.run_id, "held", 30_000)
        also_held = store.acquire_lease(run.run_id, "also-held", 30_000)

    fast = _in_skewed_process(
        skewed, pg_store_url, SKEW_MS, {"run_id": run.run_id, "take_over": "held"}
    )
    assert fast["system_now_ms"] > held.expires_at  # by its own clock the lease has expired
    assert fast["exclusive"] == ["error", "operation-already-running"]
    assert fast["rejoin"][0] == "ok"
    assert (fast["rejoin"][1]["token"], fast["rejoin"][1]["fence"]) == (held.token, held.fence)
    assert fast["recovered"] == 0
    assert fast["status"][1]["state"] == "running"

    with RunStore(pg_store_url, root_hash=ROOT_HASH) as store:
        store.assert_lease(held)  # the holder is undisturbed
        store.assert_lease(also_held)

    # An explicit clock= is used as given (cadence 1.x's semantics): that same skewed
    # clock, passed explicitly, does treat the live lease as expired.
    explicit = _in_skewed_process(
        skewed,
        pg_store_url,
        SKEW_MS,
        {"run_id": run.run_id, "take_over": "also-held", "explicit_clock": True},
    )
    assert explicit["exclusive"][0] == "ok"
    assert explicit["exclusive"][1]["fence"] == also_held.fence + 1


def test_a_slow_clock_cannot_use_a_lease_that_has_really_expired(
    pg_store_url: str, skewed: dict[int, Any]
) -> None:
    with RunStore(pg_store_url, root_hash=ROOT_HASH) as store:
        run = store.start_run("abel-implement", change="skewed", operation_id="start")
        store.transition(run.run_id, "validating-delivery", operation_id="t1")
        stale = store.acquire_lease(run.run_id, "short", 200)
        stale_too = store.acquire_lease(run.run_id, "short-too", 200)
    _wait_until_server_passes(pg_store_url, max(stale.expires_at, stale_too.expires_at))

    slow = _in_skewed_process(
        skewed, pg_store_url, -SKEW_MS, {"run_id": run.run_id, "stale_lease": stale.model_dump()}
    )
    assert slow["system_now_ms"] < stale.expires_at  # by its own clock the lease is live
    for attempt in ("assert", "renew", "transition", "commit"):
        assert slow[attempt] == ["error", "lease-fenced"], attempt
    with RunStore(pg_store_url, root_hash=ROOT_HASH) as store:
        assert store.status(run.run_id).state == "validating-delivery"  # nothing written
        assert store.inspect_operation(run.run_id, "short").state == "interrupted"

    # with its own clock passed explicitly, it is judged by that clock
    explicit = _in_skewed_process(
        skewed,
        pg_store_url,
        -SKEW_MS,
        {"run_id": run.run_id, "stale_lease": stale_too.model_dump(), "explicit_clock": True},
    )
    assert explicit["renew"][0] == "ok"


def test_unit_of_work_and_host_session_use_the_server_clock_too(pg_store_url: str) -> None:
    with RunStore(pg_store_url, root_hash=ROOT_HASH) as store:
        run = store.start_run("abel-implement", change="skewed", operation_id="start")
        held = store.acquire_lease(run.run_id, "held", 30_000)
        fencing_workers.skew_clock(SKEW_MS)  # this process's clock now runs 60 s fast
        with pytest.raises(OperationConflictError) as refused:
            store.acquire_lease(run.run_id, "held", 1_000, exclusive=True)
        assert refused.value.code == "operation-already-running"
        with store.unit_of_work() as uow, pytest.raises(OperationConflictError):
            uow.runs.acquire_lease(run.run_id, "held", 1_000, exclusive=True)
        engine = create_engine(pg_store_url)
        try:
            with Session(engine) as session, session.begin():
                runs = RunRepository(session, root_hash=ROOT_HASH)
                with pytest.raises(OperationConflictError):
                    runs.acquire_lease(run.run_id, "held", 1_000, exclusive=True)
                assert runs.recover_expired_leases() == 0
                status = runs.inspect_operation(run.run_id, "held")
                assert status is not None and status.state == "running"
        finally:
            engine.dispose()
        assert store.recover_expired_leases() == 0
        store.assert_lease(held)


def test_the_server_time_is_read_after_waiting_for_the_row_lock(pg_store_url: str) -> None:
    """A renew that queued behind another transaction's lock on the operation row is
    judged, and extended, from the time the lock was granted, not from when it started
    waiting (a plain SELECT ... FOR UPDATE computes its select list before the wait)."""
    with RunStore(pg_store_url, root_hash=ROOT_HASH) as store:
        run = store.start_run("abel-implement", change="locked", operation_id="start")
        lease = store.acquire_lease(run.run_id, "held", 60_000)
        engine = create_engine(pg_store_url)
        outcome: dict[str, Any] = {}

        def renew() -> None:
            outcome["lease"] = store.renew_lease(lease, 10_000)

        try:
            with engine.connect() as holder:
                holder.execute(
                    text(
                        "SELECT 1 FROM operations WHERE run_id = :r AND operation_id = 'held'"
                        " FOR UPDATE"
                    ),
                    {"r": run.run_id},
                )
                waiter = threading.Thread(target=renew)
                waiter.start()
                deadline = time.monotonic() + 30
                with engine.connect() as observer:
                    while not observer.execute(
                        text(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                            "'Lock' AND datname = current_database()"
                        )
                    ).scalar_one():
                        assert time.monotonic() < deadline, "the renew never queued"
                        observer.rollback()
                        time.sleep(0.01)
                time.sleep(0.2)  # let the server clock move on while the renew waits
                released_at = holder.execute(
                    text("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint")
                ).scalar_one()
                holder.commit()
                waiter.join(timeout=30)
        finally:
            engine.dispose()
        assert outcome["lease"].expires_at >= released_at + 10_000


@pytest.fixture(autouse=True)
def _restore_clock() -> Iterator[None]:
    """`skew_clock` in this test process is undone after each test."""
    time_ns, time_s = time.time_ns, time.time
    yield
    time.time_ns, time.time = time_ns, time_s  # type: ignore[method-assign]


def test_sqlite_keeps_the_system_clock(sqlite_database_url: str) -> None:
    """One machine writes a SQLite file: its system clock judges expiry."""
    cadence_store.upgrade(sqlite_database_url)
    with RunStore(sqlite_database_url, root_hash=ROOT_HASH) as store:
        run = store.start_run("abel-implement", change="skewed", operation_id="start")
        held = store.acquire_lease(run.run_id, "held", 30_000)
        fencing_workers.skew_clock(SKEW_MS)
        taken = store.acquire_lease(run.run_id, "held", 1_000, exclusive=True)
        assert taken.fence == held.fence + 1


# -- 2. the campaign and its checker -----------------------------------------------------


@dataclass(frozen=True)
class LogRow:
    id: int
    kind: str  # grant | renew | write | commit | interrupt
    operation_id: str
    token: str
    fence: int
    worker: int


def check_fence_log(rows: Iterable[LogRow]) -> list[str]:
    """Violations in a campaign's log (ids in commit order for each operation).

    - a new grant (a token not seen before) has a fence above every earlier grant's; a
      rejoin or renew of a grant keeps its fence;
    - every acknowledged write, renew, commit or interrupt is by the newest grant
      acknowledged so far (none after a newer grant), and not after its grant ended;
    - in commit order, the fences of writes never go down.
    """
    violations: list[str] = []
    by_operation: dict[str, list[LogRow]] = {}
    for row in sorted(rows, key=lambda r: r.id):
        by_operation.setdefault(row.operation_id, []).append(row)
    for operation_id, history in by_operation.items():
        fences: dict[str, int] = {}
        newest: LogRow | None = None
        ended: set[str] = set()
        last_write_fence = 0
        for row in history:
            where = f"{operation_id} #{row.id} ({row.kind} by worker {row.worker})"
            known = fences.get(row.token)
            if known is not None and known != row.fence:
                violations.append(f"{where}: token's fence changed from {known} to {row.fence}")
            if row.kind == "grant" and known is None:
                if newest is not None and row.fence <= newest.fence:
                    violations.append(
                        f"{where}: new grant's fence {row.fence} not above {newest.fence}"
                    )
                fences[row.token] = row.fence
                newest = row
                continue
            if known is None:
                violations.append(f"{where}: by a token never granted")
                continue
            assert newest is not None
            if row.token != newest.token:
                violations.append(
                    f"{where}: fence {row.fence} acknowledged after grant {newest.fence} (#"
                    f"{newest.id})"
                )
            if row.token in ended:
                violations.append(f"{where}: after its lease was committed or interrupted")
            if row.kind in ("commit", "interrupt"):
                ended.add(row.token)
            if row.kind == "write":
                if row.fence < last_write_fence:
                    violations.append(
                        f"{where}: write fence {row.fence} below an earlier {last_write_fence}"
                    )
                last_write_fence = max(last_write_fence, row.fence)
    return violations


def _row(id_: int, kind: str, token: str, fence: int, op: str = "op") -> LogRow:
    return LogRow(id_, kind, op, token, fence, 0)


def test_the_checker_passes_a_clean_history_and_names_each_violation() -> None:
    clean = [
        _row(1, "grant", "a", 1),
        _row(2, "write", "a", 1),
        _row(3, "renew", "a", 1),
        _row(4, "grant", "a", 1),  # a rejoin of the live lease
        _row(5, "grant", "b", 2),  # preempted
        _row(6, "write", "b", 2),
        _row(7, "commit", "b", 2),
        _row(8, "grant", "c", 3),
        _row(9, "write", "c", 3),
        _row(10, "grant", "z", 1, op="other"),  # another operation counts on its own
    ]
    assert check_fence_log(clean) == []
    stale_write = [*clean[:6], _row(7, "write", "a", 1)]
    assert any("acknowledged after grant 2" in v for v in check_fence_log(stale_write))
    repeated_fence = [*clean[:5], _row(6, "grant", "d", 2)]
    assert any("not above 2" in v for v in check_fence_log(repeated_fence))
    after_commit = [*clean[:7], _row(8, "write", "b", 2)]
    assert any("after its lease was committed" in v for v in check_fence_log(after_commit))
    changed = [*clean[:3], _row(4, "renew", "a", 5)]
    assert any("fence changed" in v for v in check_fence_log(changed))


@dataclass(frozen=True)
class Campaign:
    workers: int
    seconds: float
    ttl_ms: int
    operations: int


SHORT = Campaign(workers=4, seconds=3.0, ttl_ms=80, operations=3)
LONG = Campaign(workers=8, seconds=45.0, ttl_ms=60, operations=4)


class CampaignPool:
    """`count` spawned contenders (``fencing_workers.serve_campaigns``), reused by the
    campaigns of this module: an interpreter's imports cost about a second each."""

    def __init__(self, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.count = count
        self.barrier = context.Barrier(count)
        self.results = context.Queue()
        self.inboxes = [context.Queue() for _ in range(count)]
        self.jobs = 0
        self.processes = [
            context.Process(
                target=fencing_workers.serve_campaigns,
                args=(index, self.barrier, inbox, self.results),
                name=f"fencing-worker-{index}",
                daemon=True,
            )
            for index, inbox in enumerate(self.inboxes)
        ]
        for process in self.processes:
            process.start()

    def run(self, url: str, params: dict[str, Any]) -> list[Any]:
        self.jobs += 1
        for inbox in self.inboxes:
            inbox.put((self.jobs, url, params))
        reports: dict[int, Any] = {}
        deadline = time.monotonic() + params["seconds"] + PROCESS_TIMEOUT_S
        while len(reports) < self.count:
            try:
                job, index, report = self.results.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                missing = set(range(self.count)) - set(reports)
                raise AssertionError(f"workers {missing} hung") from None
            assert job == self.jobs
            reports[index] = report
        if any("error" in report for report in reports.values()):
            self.barrier.reset()
        return [reports[index] for index in range(self.count)]

    def close(self) -> None:
        for inbox in self.inboxes:
            inbox.put(None)
        for process in self.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()  # that worker's own pid
                process.join(timeout=30)


@pytest.fixture(scope="module")
def campaign_pools() -> Iterator[dict[int, CampaignPool]]:
    """Pools by size, started on first use and closed after the module."""
    pools: dict[int, CampaignPool] = {}
    yield pools
    for pool in pools.values():
        pool.close()


def _run_campaign(
    pools: dict[int, CampaignPool], url: str, campaign: Campaign, *, weakened: bool = False
) -> list[LogRow]:
    cadence_store.upgrade(url)
    log = fencing_workers.fence_log_table()
    engine = create_engine(url)
    try:
        log.metadata.create_all(engine)
        with RunStore(url, root_hash=ROOT_HASH) as store:
            run = store.start_run("abel-implement", change="campaign", operation_id="start")
        params = {
            "run_id": run.run_id,
            "seconds": campaign.seconds,
            "ttl_ms": campaign.ttl_ms,
            "operations": campaign.operations,
            "seed": 13,
            "weakened": weakened,
        }
        if campaign.workers not in pools:
            pools[campaign.workers] = CampaignPool(campaign.workers)
        reports = pools[campaign.workers].run(url, params)
        errors = [report["error"] for report in reports if "error" in report]
        assert not errors, "\n".join(errors)
        with engine.connect() as connection:
            rows = [LogRow(*row) for row in connection.execute(select(log).order_by(log.c.id))]
    finally:
        engine.dispose()
    if not weakened:
        grants = sum(report["grants"] for report in reports)
        writes = sum(1 for row in rows if row.kind == "write")
        refused = sum(report["refused"] for report in reports)
        # the campaign exercised what it claims: grants, writes, and fenced attempts
        assert grants > campaign.workers and writes > campaign.workers and refused > 0, reports
        print(  # shown with -s: the size of the evidence
            f"campaign {campaign}: {grants} grants, {writes} acknowledged fenced writes, "
            f"{refused} refused, {sum(r['stale_refused'] for r in reports)} stale retries refused"
        )
    return rows


@pytest.mark.campaign
@pytest.mark.parametrize(
    "campaign",
    [pytest.param(SHORT, id="short"), pytest.param(LONG, id="long", marks=pytest.mark.slow)],
)
def test_fencing_campaign_has_no_violations(
    campaign_pools: dict[int, CampaignPool], database_url: str, campaign: Campaign
) -> None:
    rows = _run_campaign(campaign_pools, database_url, campaign)
    assert check_fence_log(rows) == []
    kinds = {row.kind for row in rows}
    assert {"grant", "write", "renew"} <= kinds, kinds


@pytest.mark.campaign
def test_the_checker_catches_a_weakened_fence(
    campaign_pools: dict[int, CampaignPool], database_url: str
) -> None:
    """The same campaign with a lease check that ignores the token: stale holders get
    writes acknowledged after a newer grant, and the checker must say so."""
    weakened = Campaign(workers=SHORT.workers, seconds=1.0, ttl_ms=80, operations=2)
    rows = _run_campaign(campaign_pools, database_url, weakened, weakened=True)
    violations = check_fence_log(rows)
    assert any("acknowledged after grant" in v for v in violations), violations
