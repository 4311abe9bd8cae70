"""The SQLite side by side (benchmarks/sqlite_gap.py) records what it reports: every
system called once a round, each call's CPU and wait, the WAL frames of each commit, and
every chain it wrote verified (`finish`). Timing itself is never asserted."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.common import open_store, paused_run
from benchmarks.floor import _contract_event
from benchmarks.no_otel import ABSENT, ENVIRONMENT
from benchmarks.sqlite_gap import FLOOR_OF, FLOORS, STORES, bench_sqlite_gap
from cadence_store import telemetry

ROOT = Path(__file__).resolve().parents[2]


def test_sqlite_side_by_side_times_every_system_by_clock_and_cpu(tmp_path: Path) -> None:
    result = bench_sqlite_gap(tmp_path, rounds=4)
    assert result["samples"] == 4
    systems = set(result["median_ms"])
    assert {*FLOORS, *STORES, "fsync"} <= systems
    assert set(result["cpu_ms"]) == set(result["wait_ms"]) == systems
    assert all(result["cpu_ms"][name] > 0 for name in systems)
    assert all(result["wait_ms"][name] >= 0 for name in systems)
    assert all(result["wal_frames_per_commit"][name] > 0 for name in (*FLOORS, *STORES))
    assert result["synchronous"]["store_engine"] == 2  # FULL, like the store's own engine
    # each way of opening the store has its like-for-like floor (a host engine's: pooled)
    assert all(f"{store}/{floor}" in result["ratios"] for store, floor in FLOOR_OF.items())
    # this process's cadence_store, which the one-process side by side measured
    assert result["opentelemetry"] is telemetry.OTEL_AVAILABLE


def _otel_seen_by_the_library(environment: dict[str, str]) -> str:
    probe = "import benchmarks, cadence_store.telemetry as t; print(t.OTEL_AVAILABLE)"
    return subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_the_benchmarks_measure_the_library_as_installed_without_the_otel_extra() -> None:
    """`CADENCE_BENCH_OTEL=absent` (what `python -m benchmarks` re-runs itself with) hides
    opentelemetry from cadence_store in that process; without it the library sees the
    API this environment has."""
    hidden = {**os.environ, ENVIRONMENT: ABSENT}
    shown = {key: value for key, value in os.environ.items() if key != ENVIRONMENT}
    assert _otel_seen_by_the_library(hidden) == "False"
    installed = importlib.util.find_spec("opentelemetry.trace") is not None
    assert _otel_seen_by_the_library(shown) == str(installed)


def test_the_contract_floor_computes_what_the_store_writes(tmp_path: Path) -> None:
    """`floor_contract` is the store's own work by hand: from the same head, the event and
    projection it computes are the bytes the store writes."""
    store = open_store(f"sqlite:///{tmp_path / 'contract.sqlite3'}")
    try:
        run_id = paused_run(store, "contract")
        before = store.status(run_id)
        assert before is not None
        store.transition(run_id, "paused", operation_id="op-contract", code="bench")
        with store.engine.connect() as connection:
            payload_json, event_hash = connection.exec_driver_sql(
                "SELECT payload_json, event_hash FROM events WHERE run_id = ? "
                "ORDER BY sequence DESC LIMIT 1",
                (run_id,),
            ).one()
            (projection_json,) = connection.exec_driver_sql(
                "SELECT projection_json FROM runs WHERE run_id = ?", (run_id,)
            ).one()
    finally:
        store.close()
    sequence, floor_payload, prior, digest, _, outcome = _contract_event(
        run_id, "op-contract", before.document(), "paused", "bench"
    )
    assert sequence == before.sequence + 1
    assert prior == before.event_hash
    assert (floor_payload, digest, outcome) == (payload_json, event_hash, projection_json)
