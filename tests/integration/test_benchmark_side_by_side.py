"""The SQLite side by side (benchmarks/sqlite_gap.py) records what it reports: every
system called once a round, each call's CPU and wait, the WAL frames of each commit, and
every chain it wrote verified (`finish`). Timing itself is never asserted."""

from __future__ import annotations

from pathlib import Path

from benchmarks.sqlite_gap import FLOORS, STORES, bench_sqlite_gap


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
