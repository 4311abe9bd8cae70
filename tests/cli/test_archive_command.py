"""`archive --before TIME --to FILE`: its summary, the runs it leaves and the ones it
archives (`run-archived`, exit 2, through the commands that name a run), `verify` of the
store after it, and its refusals."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from cadence_store import RunStore, upgrade
from cadence_store.cli.retention import parse_time


@pytest.fixture
def finished_url(database_url: str) -> tuple[str, list[str], str]:
    """A store at head with two discarded runs and one active run."""
    upgrade(database_url)
    with RunStore(database_url, root_hash="ab" * 32) as store:
        done = []
        for i in range(2):
            run = store.start_run("abel-implement", change=f"cli-{i}", operation_id=f"s-{i}")
            store.transition(run.run_id, "discarded", operation_id=f"t-{i}")
            done.append(run.run_id)
        active = store.start_run("abel-implement", change="active", operation_id="s-a").run_id
    return database_url, done, active


def test_archive_then_the_runs_answer_run_archived_and_the_store_verifies(
    cli: Any, finished_url: tuple[str, list[str], str], tmp_path: Path
) -> None:
    url, done, active = finished_url
    key_file = tmp_path / "runs.key"
    vkey = cli("keygen", "example.com/runs", "--out", str(key_file)).stdout.strip()
    archive = tmp_path / "old.archive"
    before = str(time.time_ns() // 1_000_000 + 1000)
    result = cli(
        "archive", "--before", before, "--to", str(archive), "--key", str(key_file), "--url", url
    )
    assert result.exit_code == 0, result.output
    assert f"archived 2 run(s), 4 event(s) to {archive}" in result.stdout
    assert archive.exists() and not Path(f"{archive}.partial").exists()
    for command in ("show", "events"):
        gone = cli(command, done[0], "--url", url)
        assert gone.exit_code == 2, gone.output
        assert "run-archived" in gone.stderr and done[0] in gone.stderr
    assert cli("show", active, "--url", url).exit_code == 0
    verified = cli("verify", "--url", url)
    assert verified.exit_code == 0, verified.output
    assert "4 leaf(s) of archived runs match the stored tree" in verified.stdout
    note = tmp_path / "head.txt"
    header = json.loads(archive.read_text(encoding="utf-8").splitlines()[0])
    note.write_text(header["checkpoint"], encoding="utf-8")
    offline = cli("verify", "--archive", str(archive), "--checkpoint", str(note), "--vkey", vkey)
    assert offline.exit_code == 0, offline.output
    # the same file again: nothing left to do, nothing else archived
    again = cli(
        "archive", "--before", before, "--to", str(archive), "--key", str(key_file), "--url", url
    )
    assert again.exit_code == 0, again.output
    assert "finished the archive 0 run(s)" in again.stdout
    assert "2 run(s) of the file were archived before" in again.stdout


def test_archive_refuses_a_time_it_cannot_read_and_a_missing_key(
    cli: Any, finished_url: tuple[str, list[str], str], tmp_path: Path
) -> None:
    url, _, _ = finished_url
    key_file = tmp_path / "runs.key"
    cli("keygen", "example.com/runs", "--out", str(key_file))
    bad = cli(
        "archive",
        "--before",
        "yesterday",
        "--to",
        str(tmp_path / "a"),
        "--key",
        str(key_file),
        "--url",
        url,
    )
    assert bad.exit_code == 2 and "invalid-archive-request" in bad.stderr
    missing = cli("archive", "--before", "1", "--to", str(tmp_path / "a"), "--url", url)
    assert missing.exit_code == 2
    assert not (tmp_path / "a").exists()


def test_times_are_iso_8601_or_milliseconds() -> None:
    assert parse_time("1735689600000") == 1_735_689_600_000
    assert parse_time("2025-01-01") == 1_735_689_600_000
    assert parse_time("2025-01-01T00:00:00Z") == 1_735_689_600_000
    assert parse_time("2025-01-01T01:00:00+01:00") == 1_735_689_600_000
