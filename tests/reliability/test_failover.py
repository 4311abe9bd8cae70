"""A real PostgreSQL failover loses no acknowledged write and applies none twice.

A primary and a synchronous standby (tests/pg_replication.py) on this machine's
binaries. Four writer processes (tests/reliability/failover_writer.py) append
transitions with unique operation ids through a multi-host URL
(``target_session_attrs=read-write``); they never retry by themselves. Mid-run the
primary's postmaster gets SIGKILL and the standby is promoted. Then, on the new primary:

- every acknowledged operation is in the journal, exactly once;
- no operation id has two events (every transition event has its own receipt);
- every chain verifies;
- at least 95 % of attempts were acknowledged.

The figures (acknowledged, lost, doubled, fraction, failover gap = kill to the first
acknowledgement after the promotion was requested) are printed. Short by default (a
couple of seconds of writing each side of the failover); ``--slow`` writes for longer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pg_cluster import pg_available
from pg_replication import ReplicatedPair, replicated_pair
from sqlalchemy import create_engine, text
from support import ROOT_HASH

import cadence_store
from cadence_store import RunStore

pytestmark = [pytest.mark.postgres, pytest.mark.campaign]

WRITERS = 4
WRITER = Path(__file__).resolve().parent / "failover_writer.py"
MIN_ACKNOWLEDGED = 0.95
WAIT_S = 120  # for anything that should take seconds; a hang fails instead of blocking CI
PROMOTE_AFTER_S = 0.2  # a failover manager notices the dead primary, then promotes


@dataclass
class Phase:
    before_kill_s: float
    after_promotion_s: float


SHORT = Phase(before_kill_s=1.5, after_promotion_s=1.5)
LONG = Phase(before_kill_s=15.0, after_promotion_s=30.0)


@dataclass
class WriterLog:
    attempts: list[str] = field(default_factory=list)
    acknowledged: dict[str, float] = field(default_factory=dict)  # op -> unix time
    failed: dict[str, str] = field(default_factory=dict)  # op -> code

    @classmethod
    def read(cls, path: Path) -> WriterLog:
        log = cls()
        if not path.exists():
            return log  # the writer has not started yet
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) < 3:
                continue  # a line cut short by the writer's end
            if parts[0] == "attempt":
                log.attempts.append(parts[1])
            elif parts[0] == "ack":
                log.acknowledged[parts[1]] = float(parts[2])
            elif parts[0] == "fail" and len(parts) == 4:
                log.failed[parts[1]] = parts[3]
        return log


@pytest.fixture
def pair() -> Iterator[ReplicatedPair]:
    ok, reason = pg_available()
    if not ok:
        if os.environ.get("CI", "").strip().lower() in {"true", "1"}:
            pytest.fail(f"PostgreSQL is required under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    with replicated_pair() as running:
        yield running


def _wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _writers_acknowledged_after(logs: list[Path], moment: float) -> int:
    """How many writers have had a write acknowledged at or after `moment` (each writer
    counted once: a fast writer's acks must not stand in for a writer still opening its
    store, which a kill of the primary would then fail)."""
    return sum(
        any(at >= moment for at in WriterLog.read(path).acknowledged.values()) for path in logs
    )


def run_failover(pair: ReplicatedPair, tmp_path: Path, phase: Phase) -> dict[str, float]:
    cadence_store.upgrade(pair.primary.url())
    url = pair.multi_host_url()
    with RunStore(url, root_hash=ROOT_HASH, read_bind=pair.standby.url()) as store:
        run_ids = []
        for number in range(WRITERS):
            run = store.start_run(
                "abel-implement", change=f"failover-{number}", operation_id=f"start-{number}"
            )
            store.transition(run.run_id, "paused", operation_id=f"pause-{number}")
            run_ids.append(run.run_id)
        # reads come from the standby, which may lag: wait until it has the runs
        _wait_for(
            lambda: all(_standby_sequence(store, run_id) == 2 for run_id in run_ids),
            "the standby to replay the new runs",
        )

    stop = tmp_path / "stop"
    logs = [tmp_path / f"writer-{number}.log" for number in range(WRITERS)]
    writers = [
        subprocess.Popen(
            [sys.executable, str(WRITER), url, run_id, f"w{number}", str(log), str(stop)],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / f"writer-{number}.err", "w"),  # noqa: SIM115
        )
        for number, (run_id, log) in enumerate(zip(run_ids, logs, strict=True))
    ]
    try:
        _wait_for(lambda: _writers_acknowledged_after(logs, 0) == WRITERS, "the writers to start")
        time.sleep(phase.before_kill_s)
        killed_at = time.time()
        pair.kill_primary()
        time.sleep(PROMOTE_AFTER_S)
        promoted_at = time.time()
        pair.promote()
        promote_s = time.time() - promoted_at
        _wait_for(
            lambda: _writers_acknowledged_after(logs, promoted_at) == WRITERS,
            "acknowledged writes on the new primary",
        )
        time.sleep(phase.after_promotion_s)
    finally:
        stop.touch()
        for writer in writers:
            try:
                writer.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                writer.kill()
                writer.wait()
    reruns = 0
    for number, writer in enumerate(writers):
        errors = (tmp_path / f"writer-{number}.err").read_text()
        assert writer.returncode == 0, errors
        assert "Traceback" not in errors, errors
        # the store's WARNING lines (Python's last-resort handler writes them to stderr)
        reruns += errors.count("re-running the call")
    assert reruns > 0  # the writers did live through the failover
    return _check_journal(pair, run_ids, logs, killed_at, promoted_at) | {
        "promote_s": promote_s,
        "reruns": reruns,
    }


def _standby_sequence(store: RunStore, run_id: str) -> int | None:
    try:
        return store.status(run_id).sequence
    except cadence_store.RunNotFoundError:
        return None


def _check_journal(
    pair: ReplicatedPair,
    run_ids: list[str],
    logs: list[Path],
    killed_at: float,
    promoted_at: float,
) -> dict[str, float]:
    writer_logs = [WriterLog.read(path) for path in logs]
    engine = create_engine(pair.standby.url())  # the new primary
    try:
        with engine.connect() as connection:
            receipts = {
                (run_id, operation_id): sequence
                for run_id, operation_id, sequence in connection.execute(
                    text(
                        "SELECT run_id, operation_id, "
                        "CAST(CAST(outcome_json AS json) ->> 'sequence' AS integer) "
                        "FROM operations WHERE kind = 'state-transitioned' "
                        "AND state = 'committed'"
                    )
                )
            }
            transition_events = {
                (run_id, sequence)
                for run_id, sequence in connection.execute(
                    text("SELECT run_id, sequence FROM events WHERE type = 'state-transitioned'")
                )
            }
    finally:
        engine.dispose()

    lost = doubled = 0
    for run_id, log in zip(run_ids, writer_logs, strict=True):
        for operation_id in log.acknowledged:
            if (run_id, operation_id) not in receipts:
                lost += 1
    # every transition event belongs to exactly one operation id, and vice versa
    sequences = [(run_id, sequence) for (run_id, _), sequence in receipts.items()]
    doubled = len(sequences) - len(set(sequences)) + len(transition_events - set(sequences))
    assert set(sequences) <= transition_events

    with RunStore(pair.standby.url(), root_hash=ROOT_HASH) as store:
        for run_id in run_ids:
            store.verify_integrity(run_id)

    attempts = sum(len(log.attempts) for log in writer_logs)
    acknowledged = sum(len(log.acknowledged) for log in writer_logs)
    after = [at for log in writer_logs for at in log.acknowledged.values() if at >= promoted_at]
    figures = {
        "attempts": attempts,
        "acknowledged": acknowledged,
        "lost": lost,
        "doubled": doubled,
        "fraction": acknowledged / attempts,
        "gap_s": min(after) - killed_at,
        "failed": sum(len(log.failed) for log in writer_logs),
    }
    assert lost == 0, figures
    assert doubled == 0, figures
    assert figures["fraction"] >= MIN_ACKNOWLEDGED, figures
    return figures


def _report(capsys: pytest.CaptureFixture[str], name: str, figures: dict[str, float]) -> None:
    with capsys.disabled():
        print(
            f"\n{name}: {figures['acknowledged']:.0f} of {figures['attempts']:.0f} attempts "
            f"acknowledged ({figures['fraction']:.2%}), lost {figures['lost']:.0f}, "
            f"doubled {figures['doubled']:.0f}, failed {figures['failed']:.0f}, "
            f"{figures['reruns']:.0f} re-runs logged, "
            f"failover gap {figures['gap_s']:.2f} s (promotion {figures['promote_s']:.2f} s)"
        )


def test_a_failover_loses_no_acknowledged_write_and_applies_none_twice(
    pair: ReplicatedPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _report(capsys, "failover", run_failover(pair, tmp_path, SHORT))


@pytest.mark.slow
def test_a_longer_failover_run(
    pair: ReplicatedPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _report(capsys, "failover (long)", run_failover(pair, tmp_path, LONG))
