"""What a new user tripped over (issue 12, item 6): each point, through the command."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import rich.progress
from sqlalchemy.engine import make_url

import cadence_store.cli.group
from cadence_store import RunStore, upgrade

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class RecordedProgress(rich.progress.Progress):
    """rich's bar, remembering every (description, completed, total) it was moved to."""

    moves: list[tuple[str, float | None, float | None]]

    def update(self, task_id: rich.progress.TaskID, **fields: Any) -> None:
        super().update(task_id, **fields)
        task = self._tasks[task_id]
        self.moves.append((task.description, task.completed, task.total))


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float | None, float | None]]:
    """rich's consoles believe they are on a terminal; the bar's moves are recorded."""
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "120")
    moves: list[tuple[str, float | None, float | None]] = []
    RecordedProgress.moves = moves
    monkeypatch.setattr(cadence_store.cli.group, "Progress", RecordedProgress)
    return moves


def _runs(moves: list[tuple[str, float | None, float | None]], label: str) -> list[float]:
    return [completed for description, completed, _ in moves if description == label and completed]


def test_export_shows_per_run_progress_on_a_terminal(
    cli: Any, fixture_url: str, tmp_path: Path, terminal: list[Any]
) -> None:
    out = tmp_path / "runs.jsonl"
    result = cli("export", "--url", fixture_url, "--out", str(out))
    assert result.exit_code == 0, result.output
    runs = len(out.read_text(encoding="utf-8").splitlines())
    assert _runs(terminal, "exporting runs") == list(range(1, runs + 1))
    drawn = ANSI.sub("", result.stderr)
    assert "exporting runs" in drawn and f"{runs}/{runs}" in drawn


def test_export_to_standard_output_stays_data(
    cli: Any, fixture_url: str, terminal: list[Any]
) -> None:
    result = cli("export", "--url", fixture_url)
    assert result.exit_code == 0, result.output
    for line in result.stdout.splitlines():
        json.loads(line)  # the bar goes to standard error only


def test_copy_advances_per_run_on_a_terminal(
    cli: Any, fixture_url: str, empty_url: str, terminal: list[Any]
) -> None:
    with RunStore(fixture_url) as store:
        runs = len(store.run_ids())
    result = cli("copy", "--from", fixture_url, "--to", empty_url, "--batch-size", "200")
    assert result.exit_code == 0, result.output
    # one batch holds every run, yet the bar moves once per run
    assert _runs(terminal, "copying runs") == list(range(1, runs + 1))
    assert f"{runs}/{runs}" in ANSI.sub("", result.stderr)


def test_progress_is_not_drawn_off_a_terminal(cli: Any, fixture_url: str, tmp_path: Path) -> None:
    result = cli("export", "--url", fixture_url, "--out", str(tmp_path / "runs.jsonl"))
    assert result.exit_code == 0
    assert "exporting runs" not in result.stderr


def test_demo_on_a_url_suggests_commands_with_that_url(cli: Any, empty_url: str) -> None:
    result = cli("demo", "--url", empty_url)
    assert result.exit_code == 0, result.output
    suggestion = result.stdout.strip().splitlines()[-1]
    assert suggestion.startswith("Look around:")
    commands = [part.strip() for part in suggestion.removeprefix("Look around:").split(";")]
    assert commands and all(command.endswith(f"--url {empty_url}") for command in commands)
    run_id = commands[-1].split()[2]
    assert cli(*commands[-1].split()[1:]).exit_code == 0, run_id  # the suggestion works


def test_demo_on_the_embedded_store_suggests_no_url(cli: Any) -> None:
    result = cli("demo")
    assert result.exit_code == 0, result.output
    assert "--url" not in result.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("url", "module"),
    [
        ("postgresql+psycopg2://app@db/cadence", "psycopg2"),
        ("mysql://app:secret-pw@db/cadence", "MySQLdb"),
    ],
)
def test_a_url_without_its_driver_names_module_and_supported_form(
    cli: Any, url: str, module: str
) -> None:
    if make_url(url).get_dialect().driver == "psycopg":
        pytest.skip("this SQLAlchemy reads plain postgresql:// as psycopg, which is installed")
    try:
        __import__(module)
    except ImportError:
        pass
    else:
        pytest.skip(f"{module} is installed here")
    result = cli("runs", "--url", url)
    assert result.exit_code == 2, result.output
    assert "error: database-driver-missing" in result.stderr
    assert repr(module) in result.stderr
    assert "postgresql+psycopg://" in result.stderr
    assert "secret-pw" not in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("command", [["info"], ["runs"], ["verify"], ["export"], ["show", "x"]])
def test_a_read_only_command_creates_no_embedded_store(
    cli: Any, isolated: Any, command: list[str]
) -> None:
    result = cli(*command)
    assert result.exit_code == 3, result.output
    assert "error: run-store-upgrade-required" in result.stderr
    assert "no embedded store exists yet" in result.stderr
    assert "run: cadence-store upgrade" in result.stderr
    assert list(isolated.state.iterdir()) == []  # nothing created
    assert list(isolated.cwd.iterdir()) == []


def test_invalid_change_says_what_is_allowed(cli: Any, empty_url: str) -> None:
    result = cli(
        "start", "--stage", "abel-implement", "--change", "Add Login", "--operation-id", "s1",
        "--url", empty_url,
    )  # fmt: skip
    assert result.exit_code == 2
    assert "error: invalid-change" in result.stderr
    assert "a-z, 0-9 and '-'" in result.stderr


def test_verify_file_names_the_line_once(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "notadb.txt"
    path.write_text("this is not an export\n", encoding="utf-8")
    result = cli("verify", "--file", str(path))
    assert result.exit_code == 1
    assert "line 1: not JSON" in result.stdout
    assert "line 1: line 1:" not in result.stdout


def test_a_second_lease_commit_says_it_was_committed(cli: Any, empty_url: str) -> None:
    url = ["--url", empty_url]
    started = json.loads(
        cli("start", "--stage", "abel-implement", "--change", "c1", "--operation-id", "s1", *url)
        .stdout
    )  # fmt: skip
    lease = cli("lease", "acquire", started["runId"], "apply-1", *url).stdout
    assert cli("lease", "commit", lease, "--outcome", '{"ok": true}', *url).exit_code == 0
    again = cli("lease", "commit", lease, "--outcome", '{"ok": true}', *url)
    assert again.exit_code == 3
    assert "error: lease-fenced" in again.stderr
    assert "already committed" in again.stderr
    assert "expired or was replaced" not in again.stderr


def test_a_replaced_lease_is_still_expired_or_replaced(cli: Any, empty_url: str) -> None:
    url = ["--url", empty_url]
    started = json.loads(
        cli("start", "--stage", "abel-implement", "--change", "c1", "--operation-id", "s1", *url)
        .stdout
    )  # fmt: skip
    first = cli("lease", "acquire", started["runId"], "apply-1", *url).stdout
    second = cli("lease", "acquire", started["runId"], "apply-1", "--preempt", *url).stdout
    assert cli("lease", "commit", second, *url).exit_code == 0
    stale = cli("lease", "commit", first, *url)
    assert stale.exit_code == 3
    assert "expired or was replaced" in stale.stderr
    assert "already committed" not in stale.stderr


def test_help_states_the_exit_code_of_a_fenced_lease(cli: Any) -> None:
    shown = " ".join(cli("--help").stdout.split())
    assert "3 the store refused (a fenced, expired or replaced lease included)" in shown


def test_the_missing_file_check_is_the_api_one(tmp_path: Path) -> None:
    # the CLI's check and RunStore's give the same code for the same case
    url = f"sqlite:///{tmp_path / 'typo.sqlite3'}"
    with pytest.raises(cadence_store.errors.SchemaOutOfDateError):
        cadence_store.cli.group.require_store_file(url)
    upgrade(url)
    cadence_store.cli.group.require_store_file(url)
