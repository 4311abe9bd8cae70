"""cadence-store behind PgBouncer in transaction mode, with the store's default settings.

A private PostgreSQL server (tests/pg_cluster.py) and a private PgBouncer in front of it
(tests/pg_bouncer.py: transaction pooling, 4 server connections, `server_login_retry=1`,
`query_wait_timeout=10`). Writer processes (pooler_writer.py: `RunStore`, `AsyncRunStore`,
a `schema=` store) write through the pooler; then, on the server:

- with no outage: not one failed call, nothing lost or doubled, every chain verifies;
- across a server restart, and an outage longer than `failover_timeout_s`: every call is
  acknowledged or coded `run-store-unavailable` within `failover_timeout_s` + 1 s, none
  `run-store-write-failed`; nothing lost or doubled;
- a lease's fence holds through the pooler;
- every CLI command works through the pooler;
- a store with `schema=None` writes to `public` whatever `search_path` another client of
  the pool left on the server connection, through every entry point.

Short by default; ``--slow`` writes for longer.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result
from deployment import ROOT_HASH, check_journal, figures, prepare_runs, run_writers
from pg_bouncer import (
    Bouncer,
    pgbouncer_available,
    pgbouncer_in_front,
    restart_server,
    start_server,
    stop_server,
)
from pg_cluster import pg_available, throwaway_cluster
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

import cadence_store
from cadence_store import AsyncRunStore, CadenceStoreError, RunStore
from cadence_store.cli import main

pytestmark = [pytest.mark.postgres, pytest.mark.campaign]

TIMEOUT_S = 3.0  # the writers' failover_timeout_s in the outage campaigns
SLACK_S = 1.0


def _require(available: tuple[bool, str]) -> None:
    ok, reason = available
    if not ok:
        if os.environ.get("CI", "").strip().lower() in {"true", "1"}:
            pytest.fail(f"required under CI: {reason}", pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    _require(pg_available())
    _require(pgbouncer_available())
    with throwaway_cluster() as url:
        cadence_store.upgrade(url)
        cadence_store.upgrade(url, schema="tenant")
        cadence_store.upgrade(url, schema="trap")
        yield url


@pytest.fixture(scope="module")
def bouncer(server: str) -> Iterator[Bouncer]:
    with pgbouncer_in_front(server) as running:
        yield running


def _seconds(request: pytest.FixtureRequest, short: float, long: float) -> float:
    return long if request.config.getoption("--slow") else short


def _report(capsys: pytest.CaptureFixture[str], name: str, values: dict[str, object]) -> None:
    with capsys.disabled():
        print(f"\n{name}: " + ", ".join(f"{key}={value}" for key, value in values.items()))


def test_writers_through_transaction_pooling_fail_no_call(
    server: str,
    bouncer: Bouncer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    plans = prepare_runs(server, ["sync"] * 4 + ["async", "schema:tenant"], "pool")
    logs = run_writers(
        bouncer.url,
        plans,
        tmp_path,
        failover_timeout_s=30,  # the default
        during=lambda: time.sleep(_seconds(request, 3.0, 30.0)),
    )
    counts = figures(logs) | check_journal(server, plans, logs)
    _report(capsys, "transaction pooling", counts)
    assert counts["failed"] == 0, counts
    assert counts["lost"] == 0 and counts["doubled"] == 0, counts
    assert all(log.transitions() for log in logs)  # sync, async and schema= all wrote


def test_stores_sharing_server_connections_fail_no_call(server: str) -> None:
    """Three stores (one `schema=`) take turns on a pool of two server connections: each
    finds the others' session state there (psycopg's defaults prepare a statement after
    five uses on one connection: "_pg3_0 already exists", or "does not exist")."""
    with pgbouncer_in_front(server, pool_size=2) as pooler:
        stores = [
            RunStore(pooler.url, root_hash=ROOT_HASH),
            RunStore(pooler.url, root_hash=ROOT_HASH),
            RunStore(pooler.url, root_hash=ROOT_HASH, schema="tenant"),
        ]
        try:
            runs = [
                store.start_run("abel-implement", change=f"shared-{n}", operation_id=f"sh-{n}")
                for n, store in enumerate(stores)
            ]
            for number in range(60):
                index = number % 3
                stores[index].transition(
                    runs[index].run_id, "paused", operation_id=f"sh-{index}-{number}"
                )
            for number in range(12):
                index = number % 3
                lease = stores[index].acquire_lease(runs[index].run_id, f"sh-l{number}", 60_000)
                stores[index].commit_lease(lease, {"n": number})
            for store, run in zip(stores, runs, strict=True):
                assert store.verify_integrity(run.run_id).sequence >= 20
        finally:
            for store in stores:
                store.close()


def test_async_stores_sharing_server_connections_fail_no_call(server: str) -> None:
    """The same for `AsyncRunStore`: its calls, streams, reads and units of work."""

    async def take_turns(url: str) -> None:
        stores = [AsyncRunStore(url, root_hash=ROOT_HASH) for _ in range(3)]
        try:
            runs = [
                (await s.start_run("abel-implement", change=f"as-{n}", operation_id=f"as-{n}"))
                for n, s in enumerate(stores)
            ]
            for number in range(36):
                store, run_id = stores[number % 3], runs[number % 3].run_id
                await store.transition(run_id, "paused", operation_id=f"as-t{number}")
                assert [event async for event in store.iter_events(run_id)]
                async with store.unit_of_work() as uow:
                    await uow.runs.transition(run_id, "paused", operation_id=f"as-u{number}")
            for store, run in zip(stores, runs, strict=True):
                await store.verify_integrity(run.run_id)
        finally:
            for store in stores:
                await store.aclose()

    with pgbouncer_in_front(server, pool_size=2) as pooler:
        asyncio.run(take_turns(pooler.url))


def test_a_server_restart_and_an_outage_behind_the_pooler_end_every_call_in_time(
    server: str,
    bouncer: Bouncer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A restart (about 1 s down), then an outage longer than `failover_timeout_s`."""
    outage_s = TIMEOUT_S + 1.5

    def outages() -> None:
        time.sleep(1.0)
        restart_server(server)
        time.sleep(1.5)
        restart_server(server, down_s=outage_s)
        time.sleep(1.5)

    plans = prepare_runs(server, ["sync"] * 4, "outage")
    logs = run_writers(bouncer.url, plans, tmp_path, failover_timeout_s=TIMEOUT_S, during=outages)
    counts = figures(logs) | check_journal(server, plans, logs)
    slowest = max(
        (elapsed for log in logs for _at, elapsed, *_ in log.failed.values()), default=0.0
    )
    _report(capsys, "pooler, server restarted and down", counts | {"slowest_failure_s": slowest})
    codes = {code for log in logs for *_, code in log.failed.values()}
    assert codes <= {"run-store-unavailable"}, counts
    for log in logs:
        for (kind, op), (_at, elapsed, _code) in log.failed.items():
            assert elapsed <= TIMEOUT_S + SLACK_S, (kind, op, elapsed)
        for (kind, op), (_at, elapsed) in log.acknowledged.items():
            assert elapsed <= TIMEOUT_S + SLACK_S, (kind, op, elapsed)
    assert counts["lost"] == 0 and counts["doubled"] == 0, counts
    assert counts["failed"] > 0  # the outage outlasted the budget: calls gave up in time


def test_a_call_waiting_in_the_pooler_ends_within_its_budget(server: str, tmp_path: Path) -> None:
    # PgBouncer's own defaults: it holds a query up to 120 s while it retries the server
    settings = {"query_wait_timeout": "120", "server_login_retry": "15"}
    with (
        pgbouncer_in_front(server, settings=settings) as slow_pooler,
        RunStore(slow_pooler.url, root_hash=ROOT_HASH, failover_timeout_s=2) as store,
    ):
        run = store.start_run("abel-implement", change="budget", operation_id="budget-start")
        stop_server(server)
        try:
            started = time.monotonic()
            with pytest.raises(CadenceStoreError) as caught:
                store.transition(run.run_id, "paused", operation_id="budget-pause")
            elapsed = time.monotonic() - started
        finally:
            start_server(server)
    assert caught.value.code == "run-store-unavailable"
    assert "outcome of the call is unknown" in str(caught.value)
    assert elapsed <= 2 + SLACK_S


def test_a_lease_fence_holds_through_the_pooler(server: str, bouncer: Bouncer) -> None:
    with (
        RunStore(bouncer.url, root_hash=ROOT_HASH) as first,
        RunStore(bouncer.url, root_hash=ROOT_HASH) as second,
    ):
        run = first.start_run("abel-implement", change="fence", operation_id="fence-start")
        stale = first.acquire_lease(run.run_id, "fence-op", 60_000)
        fresh = second.acquire_lease(run.run_id, "fence-op", 60_000, preempt=True)
        with pytest.raises(CadenceStoreError) as caught:
            first.commit_lease(stale, {"by": "stale"})
        assert caught.value.code.startswith("lease-")
        assert second.commit_lease(fresh, {"by": "fresh"}) == {"by": "fresh"}


def _cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _psycopg_conninfo(bouncer: Bouncer) -> str:
    return f"host=127.0.0.1 port={bouncer.port} dbname=cadence_test user=postgres"


def test_every_cli_command_works_through_the_pooler(
    server: str, bouncer: Bouncer, tmp_path: Path
) -> None:
    url = bouncer.url
    with RunStore(server, root_hash=ROOT_HASH) as store:
        run_ids = [
            store.start_run("abel-implement", change=f"cli-{n}", operation_id=f"cli-{n}").run_id
            for n in range(8)
        ]
        design = store.start_run(
            "abel-design", provisional_key="cd" * 32, operation_id="cli-design"
        ).run_id
    export = tmp_path / "export.jsonl"
    copy_target = tmp_path / "copy.sqlite3"
    cadence_store.upgrade(f"sqlite:///{copy_target}")
    # another client of the pool, with psycopg's defaults, has prepared its statements on
    # the server connections the CLI's transactions land on
    with psycopg.connect(_psycopg_conninfo(bouncer), autocommit=True) as neighbour:
        for _ in range(10):
            neighbour.execute("SELECT count(*) FROM public.runs WHERE run_id = %s", [run_ids[0]])
        run = run_ids[0]
        commands = [
            ["info", "--url", url],
            ["runs", "--url", url],
            ["show", run, "--url", url],
            ["events", run, "--url", url],
            ["verify", "--url", url],
            ["verify", "--jobs", "2", "--url", url],
            ["export", "--url", url, "--out", str(export)],
            ["bind-change", design, "cli-change", "--url", url, "--operation-id", "cli-bind"],
            ["lease", "acquire", run, "cli-lease", "--url", url],
            ["copy", "--from", url, "--to", f"sqlite:///{copy_target}"],
        ]
        for command in commands:
            result = _cli(*command)
            assert result.exit_code == 0, (command, result.output)
        lease = tmp_path / "lease.json"
        lease.write_text(_cli("lease", "acquire", run, "cli-lease-2", "--url", url).stdout)
        for command in (
            ["upgrade", "--url", url],
            ["lease", "renew", f"@{lease}", "--url", url],
            ["lease", "status", run, "cli-lease-2", "--url", url],
            ["lease", "commit", f"@{lease}", "--outcome", '{"ok": true}', "--url", url],
            ["lease", "acquire", run, "cli-lease-3", "--url", url],
        ):
            result = _cli(*command)
            assert result.exit_code == 0, (command, result.output)
        target = tmp_path / "import.sqlite3"
        cadence_store.upgrade(f"sqlite:///{target}")
        assert _cli("import", str(export), "--url", f"sqlite:///{target}").exit_code == 0
        typed = _cli(
            "runs", "--url", f"{url}?prepare_threshold=none&connect_timeout=5&sslmode=disable"
        )
        assert typed.exit_code == 0, typed.output
        bad = _cli("runs", "--url", f"{url}?prepare_threshold=soon")
        assert bad.exit_code == 2 and "invalid-database-url" in bad.output, bad.output


def _trap(bouncer: Bouncer) -> psycopg.Connection:
    """A client of the pool that leaves `search_path = trap` on its server connection."""
    neighbour = psycopg.connect(_psycopg_conninfo(bouncer), autocommit=True)
    neighbour.execute("SET search_path TO trap")
    return neighbour


def _counts(server: str, run_id: str) -> tuple[int, int]:
    engine = create_engine(server)
    try:
        with engine.connect() as connection:
            return tuple(  # type: ignore[return-value]
                connection.execute(
                    text(f"SELECT count(*) FROM {schema}.runs WHERE run_id = :run"),
                    {"run": run_id},
                ).scalar_one()
                for schema in ("public", "trap")
            )
    finally:
        engine.dispose()


# the unit of work and a host's Session: tests/integration/test_pooler_safety.py
@pytest.mark.parametrize("entry", ["store", "async"])
def test_schema_none_writes_to_public_whatever_the_search_path(server: str, entry: str) -> None:
    # one server connection: every transaction lands where the neighbour left its SET
    with pgbouncer_in_front(server, pool_size=1) as pooler, _trap(pooler):
        change = f"trap-{entry}"
        if entry == "async":

            async def start() -> str:
                async with AsyncRunStore(pooler.url, root_hash=ROOT_HASH) as store:
                    run = await store.start_run(
                        "abel-implement", change=change, operation_id=change
                    )
                    return run.run_id

            run_id = asyncio.run(start())
        else:
            with RunStore(pooler.url, root_hash=ROOT_HASH) as store:
                run = store.start_run("abel-implement", change=change, operation_id=change)
                run_id = run.run_id
    assert _counts(server, run_id) == (1, 0)


def test_session_pooling_starves_no_store_opened_with_a_null_pool(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """In session mode a client connection holds its server connection until it closes:
    each open store's pool (and the connection its direct path keeps) pins one, and so
    does the feed notifier's connection for a few seconds after the store's last append;
    a store beyond the pool waits in PgBouncer's queue until `query_wait_timeout`. With
    `poolclass=NullPool` a store holds no connection between calls, nor does its
    notifier between NOTIFYs."""
    measured: dict[str, object] = {}
    settings = {"query_wait_timeout": "3"}
    with pgbouncer_in_front(server, pool_mode="session", pool_size=2, settings=settings) as pooler:
        for label, options in (("nullpool", {"poolclass": NullPool}), ("default", {})):
            stores: list[RunStore] = []
            try:
                for number in range(2):
                    try:
                        stores.append(RunStore(pooler.url, root_hash=ROOT_HASH, **options))
                        stores[-1].start_run(
                            "abel-implement",
                            change=f"{label}-{number}",
                            operation_id=f"{label}{number}",
                        )
                    except CadenceStoreError as error:
                        if label == "nullpool":
                            raise
                        # the first default store pins its kept and its notifier's
                        measured[f"{label}_store_{number}"] = error.code
                started = time.monotonic()
                try:
                    stores.append(RunStore(pooler.url, root_hash=ROOT_HASH, **options))
                    stores[-1].start_run(
                        "abel-implement", change=f"{label}-third", operation_id=f"{label}-3"
                    )
                    measured[f"{label}_third_store"] = "acknowledged"
                except CadenceStoreError as error:
                    measured[f"{label}_third_store"] = error.code
                measured[f"{label}_waited_s"] = round(time.monotonic() - started, 2)
            finally:
                for store in stores:
                    store.close()
    _report(capsys, "session pooling, pool of 2, third store", measured)
    assert measured["nullpool_third_store"] == "acknowledged"
    assert measured["nullpool_waited_s"] < 1.0  # type: ignore[operator]
    # the default pools starve it: it waits for PgBouncer's query_wait_timeout, coded
    assert measured["default_third_store"] in {"acknowledged", "run-store-unavailable"}
