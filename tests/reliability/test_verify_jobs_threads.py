"""Issue 26: ``verify --jobs 2`` on SQLite in a process whose other threads write.

Forking a threaded process can leave a worker deadlocked in ``sqlite3.connect`` (a lock
another thread held at the fork), and a parent that waits with no timeout then hangs
forever. tests/reliability/verify_with_writers.py runs ``verify_runs(store, jobs=2)``
repeatedly while writer threads append; the whole process must finish within a generous
bound (a hang, not slowness, is what the bound catches: a healthy attempt takes about a
second). The default suite makes 10 attempts (before the fix, about half of all runs
hung within 5), ``--slow`` the issue's 50.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import cadence_store

SCRIPT = Path(__file__).resolve().parent / "verify_with_writers.py"
SECONDS_PER_ATTEMPT = 8  # several times a healthy attempt on a loaded 2-core machine
ATTEMPTS = [
    pytest.param(10, id="10-attempts"),
    pytest.param(50, id="50-attempts", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("attempts", ATTEMPTS)
def test_verify_with_two_jobs_and_writer_threads_never_hangs(
    sqlite_database_url: str, attempts: int
) -> None:
    cadence_store.upgrade(sqlite_database_url)
    budget = 15 + attempts * SECONDS_PER_ATTEMPT
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), sqlite_database_url, str(attempts)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the forked workers too, so that a hang is killed whole
    )
    try:
        stdout, stderr = process.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        done = stdout.strip().splitlines()[-1:] if stdout.strip() else ["nothing"]
        pytest.fail(f"verify --jobs 2 hung (no end within {budget} s; last line: {done[0]})")
    assert process.returncode == 0, stderr[-3000:]
    lines = stdout.splitlines()
    assert lines[-1] == "done" and len(lines) == attempts + 1, stdout[-2000:]
