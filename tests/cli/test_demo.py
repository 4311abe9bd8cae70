"""`cadence-store demo`, and the real console script in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from cadence_store import RunStore
from cadence_store.store.state_root import resolve_state_root


def test_demo_on_an_empty_home(cli: Any, isolated: Any) -> None:
    assert list(isolated.home.iterdir()) == [] and list(isolated.state.iterdir()) == []
    result = cli("demo")
    assert result.exit_code == 0, result.output
    out = result.stdout
    root = resolve_state_root(os.getcwd())
    assert root.database_path.startswith(str(isolated.state))
    assert f"The store lives at {root.database_path}" in out
    for step in (
        "started design run",
        "bound change",
        "bound delivery gate-a revision 1 with approval proof r1",
        "created -> validating-delivery -> ready -> running",
        "then preempted by lease",
        "was fenced: lease-fenced",
        "committed its outcome",
        "verified 2 run(s), 10 event(s)",
    ):
        assert step in out, step
    assert list(isolated.cwd.iterdir()) == []  # nothing left in the current directory
    assert (Path(root.database_path).stat().st_mode & 0o777) == 0o600
    with RunStore.open(root) as store:
        states = sorted(store.status(run_id).state for run_id in store.run_ids())
    assert states == ["completed", "verifying"]

    again = cli("demo")  # a second demo adds its own runs beside the first
    assert again.exit_code == 0, again.output
    assert "verified 4 run(s), 20 event(s)" in again.stdout
    assert list(isolated.cwd.iterdir()) == []


def test_demo_falls_back_to_home_without_xdg(cli: Any, isolated: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv("XDG_STATE_HOME")
    result = cli("demo")
    assert result.exit_code == 0, result.output
    assert str(isolated.home / ".local" / "state" / "abel-cadence") in result.stdout
    assert list(isolated.cwd.iterdir()) == []


def _console_script() -> str:
    found = shutil.which("cadence-store", path=str(Path(sys.executable).parent))
    assert found is not None, "the cadence-store console script is not installed"
    return found


def test_console_script_in_a_subprocess(isolated: Any, tmp_path: Path) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("CADENCE_STORE_URL", "HOME", "XDG_STATE_HOME")
    }
    env.update(HOME=str(isolated.home), XDG_STATE_HOME=str(isolated.state))
    script = _console_script()

    demo = subprocess.run(
        [script, "demo"], cwd=isolated.cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert demo.returncode == 0, demo.stderr
    assert "The store lives at " + str(isolated.state) in demo.stdout
    assert list(isolated.cwd.iterdir()) == []

    missing = subprocess.run(
        [script, "show", "no-such-run"],
        cwd=isolated.cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2
    assert missing.stderr.startswith("error: run-not-found\n")
    assert "Traceback" not in missing.stderr

    helped = subprocess.run(
        [script, "--help"], cwd=isolated.cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert helped.returncode == 0 and "Usage: cadence-store" in helped.stdout


def test_demo_on_a_url(cli: Any, empty_url: str, isolated: Any) -> None:
    result = cli("demo", "--url", empty_url)
    assert result.exit_code == 0, result.output
    assert "verified 2 run(s), 10 event(s)" in result.stdout
    assert f"The store lives at {empty_url}." in result.stdout
    assert list(isolated.state.iterdir()) == []  # the embedded store was not touched
