"""First use from anywhere: `demo` from the home directory (whose embedded store would live
inside it) uses a temporary store and says where; `demo --url` and `copy --to` create a
SQLite file that does not exist yet; every other command run there without --url says
what the refusal means and what to do."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from cadence_store import RunStore

# the child imports this checkout's cadence_store (it runs in the home directory)
CHILD_PATH = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def in_home(isolated: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current directory is the home directory, state under ~/.local/state (inside
    it), and temporary directories under tmp_path/tmp."""
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.chdir(isolated.home)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return scratch


def _store_url(output: str) -> str:
    """The `--url` of the demo's suggested follow-up command."""
    suggestion = output.strip().splitlines()[-1]
    return suggestion.split("--url ", 1)[1].split(";")[0].strip()


def test_demo_from_the_home_directory_uses_a_temporary_store(
    cli: Any, isolated: Any, in_home: Path
) -> None:
    result = cli("demo")
    assert result.exit_code == 0, result.output
    assert "using a temporary store" in result.stdout
    url = _store_url(result.stdout)
    path = Path(make_url(url).database or "")
    assert path.is_file() and path.parent.parent == in_home  # a directory of its own
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    assert f"The store lives at {url}." in result.stdout
    assert "verified 2 run(s), 10 event(s)" in result.stdout
    assert list(isolated.home.iterdir()) == []  # nothing in the home directory
    listed = cli("runs", "--json", "--url", url)  # the suggested command works
    assert listed.exit_code == 0 and len(listed.stdout.splitlines()) == 2


def test_the_console_script_demo_runs_from_the_home_directory(
    isolated: Any, tmp_path: Path
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "XDG_STATE_HOME"}
    env.update(HOME=str(isolated.home), TMPDIR=str(scratch), PYTHONPATH=CHILD_PATH)
    demo = subprocess.run(
        [sys.executable, "-m", "cadence_store", "demo"],
        cwd=isolated.home,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert demo.returncode == 0, demo.stderr
    assert str(scratch) in _store_url(demo.stdout)
    assert list(isolated.home.iterdir()) == []


@pytest.mark.parametrize(
    "command",
    [
        ["upgrade"],
        ["info"],
        ["runs"],
        ["show", "some-run"],
        ["events", "some-run"],
        ["verify"],
        ["export"],
        ["import", "-"],
        ["start", "--stage", "abel-implement", "--change", "c1", "--operation-id", "s1"],
        ["transition", "some-run", "paused", "--operation-id", "p1"],
        ["lease", "status", "some-run", "apply-1"],
        ["follow"],
    ],
    ids=lambda command: command[0] if command[0] != "lease" else "lease status",
)
def test_a_command_without_url_from_the_home_directory_says_what_to_do(
    cli: Any, isolated: Any, in_home: Path, command: list[str]
) -> None:
    result = cli(*command, input="")
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith("error: state-root-inside-consumer\n")
    assert f"embedded store of the current directory ({isolated.home})" in result.stderr
    assert "inside this directory" in result.stderr
    assert "project's directory" in result.stderr and "--url sqlite:///PATH" in result.stderr
    assert list(isolated.home.iterdir()) == []


def test_demo_creates_the_sqlite_file_of_its_url(cli: Any, isolated: Any) -> None:
    result = cli("demo", "--url", "sqlite:///new.db")
    assert result.exit_code == 0, result.output
    assert "verified 2 run(s), 10 event(s)" in result.stdout
    with RunStore("sqlite:///new.db") as store:
        assert len(store.run_ids()) == 2
    assert [path.name for path in isolated.cwd.iterdir() if path.suffix == ".db"] == ["new.db"]


def test_copy_creates_its_target_file(
    cli: Any, fixture_url: str, tmp_path: Path, matches_manifest: Any
) -> None:
    target = f"sqlite:///{tmp_path / 'new.db'}"
    copied = cli("copy", "--from", fixture_url, "--to", target)
    assert copied.exit_code == 0, copied.output
    matches_manifest(target)


def test_copy_from_a_missing_file_creates_no_target(cli: Any, tmp_path: Path) -> None:
    source, target = tmp_path / "typo.db", tmp_path / "new.db"
    copied = cli("copy", "--from", f"sqlite:///{source}", "--to", f"sqlite:///{target}")
    assert copied.exit_code == 3
    assert "error: run-store-upgrade-required" in copied.stderr
    assert not source.exists() and not target.exists()
