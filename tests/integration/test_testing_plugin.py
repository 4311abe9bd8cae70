"""`cadence_store.testing`, the pytest plugin (issue 14).

The sample host project (tests/host_project: no conftest.py, only the plugin's fixtures)
runs in a subprocess on SQLite and on this suite's PostgreSQL server; this suite also
uses the fixtures itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from cadence_store import RunStore
from cadence_store.testing import TEST_ROOT_HASH, FakeClock, assert_chain_intact

HOST_PROJECT = Path(__file__).resolve().parent.parent / "host_project"
FIXTURES = ("cadence_store_url", "cadence_store", "cadence_store_clock")


def _host_pytest(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CADENCE_STORE_TEST_URL"}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args],
        cwd=HOST_PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_host_project_passes_on_sqlite() -> None:
    result = _host_pytest()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 passed" in result.stdout


@pytest.mark.postgres
def test_host_project_passes_on_postgresql_and_drops_its_databases(postgres_url: str) -> None:
    # `-p` as a host would name the plugin without the entry point; both together are fine
    result = _host_pytest("-p", "cadence_store.testing", "--cadence-store-url", postgres_url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 passed" in result.stdout
    engine = create_engine(postgres_url)
    try:
        with engine.connect() as connection:
            left = connection.execute(
                text("SELECT datname FROM pg_database WHERE datname LIKE 'cadence_test_%'")
            ).all()
    finally:
        engine.dispose()
    assert left == []


def test_pytest_fixtures_lists_the_three_fixtures_with_docstrings() -> None:
    result = _host_pytest("--fixtures")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for name in FIXTURES:
        index = next(i for i, line in enumerate(lines) if line.startswith(f"{name} -- "))
        assert lines[index + 1].strip(), f"{name} has no docstring"
    assert "--cadence-store-url" in _host_pytest("--help").stdout


# -- this suite as the plugin's first user -------------------------------------------------------


def test_fixtures_give_an_upgraded_store_with_the_fake_clock(
    cadence_store: RunStore, cadence_store_url: str, cadence_store_clock: FakeClock
) -> None:
    assert cadence_store.root_hash == TEST_ROOT_HASH
    run = cadence_store.start_run("abel-implement", change="plugin", operation_id="start")
    lease = cadence_store.acquire_lease(run.run_id, "op", ttl_ms=10)
    assert lease.expires_at == cadence_store_clock.now + 10
    assert cadence_store_clock.advance(11) == lease.expires_at + 1
    assert cadence_store.inspect_operation(run.run_id, "op").state == "interrupted"
    assert_chain_intact(cadence_store)
    engine = create_engine(cadence_store_url)  # the owned tables under their plain names
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM events")).scalar() == 1
    engine.dispose()


def test_assert_chain_intact_names_run_sequence_and_difference(
    cadence_store: RunStore, cadence_store_url: str
) -> None:
    kept = cadence_store.start_run("abel-implement", change="kept", operation_id="s-1")
    run = cadence_store.start_run("abel-implement", change="tampered", operation_id="s-2")
    for n in range(3):
        cadence_store.transition(run.run_id, "paused", operation_id=f"p-{n}", code=f"c{n}")
    engine = create_engine(cadence_store_url)
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE runs SET state = 'running' WHERE run_id = :r"), {"r": run.run_id}
        )
    engine.dispose()
    assert_chain_intact(cadence_store, kept.run_id)
    with pytest.raises(AssertionError) as info:
        assert_chain_intact(cadence_store)
    message = str(info.value)
    assert message.startswith(f"run {run.run_id}: run-projection-integrity-mismatch")
    assert "'paused'" in message and "'running'" in message
    with pytest.raises(AssertionError, match="run-not-found"):
        assert_chain_intact(cadence_store, "no-such-run")


def test_fake_clock_refuses_going_backwards() -> None:
    clock = FakeClock(5)
    with pytest.raises(ValueError):
        clock.advance(-1)
    assert clock() == 5


def test_collection_alone_touches_no_database(tmp_path: Path) -> None:
    result = _host_pytest("--collect-only", "--basetemp", str(tmp_path / "base"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 tests collected" in result.stdout
    assert not list(tmp_path.rglob("*.sqlite3"))


def test_loading_the_plugin_does_not_import_alembic_or_the_async_api() -> None:
    # every pytest run of an installed environment loads the plugin, hence `cadence_store`
    probe = (
        "import sys, cadence_store.testing; "
        "print(sorted(m for m in ('alembic', 'cadence_store.async_store') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
