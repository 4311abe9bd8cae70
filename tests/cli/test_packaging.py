"""What a user installing cadence-store expects of the package (issue 23).

The built wheel and sdist are checked by `.ci/run` (step `sdist_tests`): building them
takes a minute, too long for the test command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_python_dash_m_runs_the_command_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.sqlite3'}"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CADENCE_STORE_")}
    upgraded = subprocess.run(
        [sys.executable, "-m", "cadence_store", "upgrade", "--url", url],
        capture_output=True,
        text=True,
        env=environment,
        check=False,
    )
    assert upgraded.returncode == 0, upgraded.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "cadence_store", "--help"],
        capture_output=True,
        text=True,
        env=environment,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("Usage: cadence-store ")  # named as the script is
