"""Fixtures of the `cadence-store` command tests.

Every test runs in an isolated environment: HOME and XDG_STATE_HOME are fresh temporary
directories (the embedded default store never touches the real home), the current
directory is an empty temporary directory, and CADENCE_STORE_URL is unset.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cadence_store import RunStore, upgrade
from cadence_store.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cadence-1x"


@dataclass
class Env:
    home: Path
    state: Path
    cwd: Path


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    env = Env(tmp_path / "home", tmp_path / "state", tmp_path / "cwd")
    for directory in (env.home, env.state, env.cwd):
        directory.mkdir()
    monkeypatch.setenv("HOME", str(env.home))
    monkeypatch.setenv("XDG_STATE_HOME", str(env.state))
    monkeypatch.delenv("CADENCE_STORE_URL", raising=False)
    monkeypatch.chdir(env.cwd)
    return env


@pytest.fixture
def cli() -> Any:
    """`cli("runs", "--json")` -> click Result (stdout and stderr kept apart)."""
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Result:
        return runner.invoke(main, list(args), input=input, catch_exceptions=False)

    return invoke


@pytest.fixture(scope="session")
def manifest() -> dict[str, Any]:
    data = json.loads((FIXTURES / "manifest.json").read_text(encoding="utf-8"))
    store: dict[str, Any] = next(s for s in data["stores"] if s["file"] == "current.sqlite3")
    return store


@pytest.fixture
def fixture_url(tmp_path: Path) -> str:
    """A copy of cadence 1.x's current.sqlite3, upgraded to head."""
    target = tmp_path / "fixture" / "current.sqlite3"
    target.parent.mkdir()
    shutil.copyfile(FIXTURES / "current.sqlite3", target)
    url = f"sqlite:///{target}"
    upgrade(url)
    return url


@pytest.fixture
def empty_url(tmp_path: Path) -> str:
    """A fresh SQLite database at head."""
    url = f"sqlite:///{tmp_path}/empty.sqlite3"
    upgrade(url)
    return url


def _assert_matches_manifest(url: str, manifest: dict[str, Any]) -> None:
    """Every run's status (key order included) and events equal cadence 1.x's."""
    with RunStore(url, root_hash=manifest["consumerRootHash"]) as store:
        assert sorted(store.run_ids()) == sorted(r["runId"] for r in manifest["runs"])
        for run in manifest["runs"]:
            status = store.status(run["runId"])
            assert list(status.document().items()) == list(run["status"].items()), run["label"]
            assert status.to_json() == json.dumps(run["status"], separators=(",", ":"))
            assert [e.to_dict() for e in store.list_events(run["runId"])] == run["events"]
            store.verify_integrity(run["runId"])


@pytest.fixture
def matches_manifest(manifest: dict[str, Any]) -> Any:
    """`matches_manifest(url)` asserts the database holds exactly the fixture's runs."""

    def check(url: str) -> None:
        _assert_matches_manifest(url, manifest)

    return check
