"""`cadence-store follow`: the feed's events as they commit; Ctrl-C ends it with status 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cadence_store import RunStore, upgrade

ROOT_HASH = "ab" * 32
TIMEOUT_S = 60
# the child imports this checkout's cadence_store (the test runs in an empty directory)
CHILD_ENV = {
    **os.environ,
    "PYTHONUNBUFFERED": "1",
    "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
}


def _store(database_url: str) -> tuple[RunStore, str]:
    upgrade(database_url)
    store = RunStore(database_url, root_hash=ROOT_HASH)
    run = store.start_run("abel-design", provisional_key="a" * 64, operation_id="start")
    return store, run.run_id


def _read_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, process.stderr.read() if process.stderr else "no output"
    return line


def test_follow_prints_each_commit_and_ctrl_c_ends_it_quietly(database_url: str) -> None:
    store, run_id = _store(database_url)
    process = subprocess.Popen(
        [sys.executable, "-m", "cadence_store", "follow", "--url", database_url, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=CHILD_ENV,
    )
    try:
        first = json.loads(_read_line(process))
        assert (first["runId"], first["event"]["sequence"]) == (run_id, 1)
        assert first["event"]["type"] == "run-created" and first["position"] >= 1
        store.transition(run_id, "paused", operation_id="pause")  # while it follows
        second = json.loads(_read_line(process))
        assert (second["event"]["sequence"], second["position"] > first["position"]) == (2, True)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
        store.close()
    assert process.returncode == 0, err
    assert out == "" and "Traceback" not in err and "Aborted" not in err


def test_follow_after_and_run_choose_what_is_printed(database_url: str, cli) -> None:
    store, run_id = _store(database_url)
    other = store.start_run("abel-design", provisional_key="b" * 64, operation_id="other")
    store.transition(run_id, "paused", operation_id="pause")
    store.close()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cadence_store",
            "follow",
            "--url",
            database_url,
            "--run",
            run_id,
            "--after",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=CHILD_ENV,
    )
    try:
        position, shown_run, sequence, type_ = _read_line(process).rstrip("\n").split("\t")
        assert (shown_run, sequence, type_) == (run_id, "2", "state-transitioned")
        assert other.run_id != shown_run and int(position) > 1
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0


@pytest.mark.parametrize("after", ["-1", "x"])
def test_follow_refuses_a_bad_after(cli, after: str, tmp_path: Path) -> None:
    result = cli("follow", "--url", f"sqlite:///{tmp_path}/s.sqlite3", "--after", after)
    assert result.exit_code == 2
