"""Shared parts of the deployment campaigns (test_pooler.py, test_ha_failover.py).

Writer processes (pooler_writer.py) write through a URL for a while, something happens
to the database under them (`during`), and then the journal is checked on the primary:
every acknowledged transition is there exactly once (its receipt names one event, no
event lacks a receipt), every acknowledged lease commit is committed, every chain
verifies.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import create_engine, text

from cadence_store import RunStore
from cadence_store.storage.engine import parse_url

ROOT_HASH = "ab" * 32
WRITER = Path(__file__).resolve().parent / "pooler_writer.py"
WAIT_S = 180  # for anything that should take seconds; a hang fails instead of blocking CI


@dataclass
class Plan:
    """One writer: its run, its mode (sync, async, schema:NAME)."""

    run_id: str
    mode: str = "sync"

    @property
    def schema(self) -> str | None:
        return self.mode.split(":", 1)[1] if self.mode.startswith("schema:") else None


@dataclass
class CallLog:
    calls: int = 0
    acknowledged: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    failed: dict[tuple[str, str], tuple[float, float, str]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> CallLog:
        log = cls()
        if not path.exists():
            return log
        for line in path.read_text().splitlines():
            parts = line.split()
            if parts[:1] == ["call"] and len(parts) == 4:
                log.calls += 1
            elif parts[:1] == ["ack"] and len(parts) == 5:
                log.acknowledged[(parts[1], parts[2])] = (float(parts[3]), float(parts[4]))
            elif parts[:1] == ["fail"] and len(parts) == 6:
                log.failed[(parts[1], parts[2])] = (float(parts[3]), float(parts[4]), parts[5])
        return log

    def transitions(self) -> list[str]:
        return [op for kind, op in self.acknowledged if kind == "transition"]

    def lease_commits(self) -> list[str]:
        return [op for kind, op in self.acknowledged if kind == "commit"]


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def prepare_runs(url: str, plans_by_mode: list[str], tag: str) -> list[Plan]:
    """One fresh run per writer (in its schema), started on `url` directly."""
    plans = []
    for number, mode in enumerate(plans_by_mode):
        plan = Plan("", mode)
        with RunStore(url, root_hash=ROOT_HASH, schema=plan.schema) as store:
            run = store.start_run(
                "abel-implement", change=f"{tag}-{number}", operation_id=f"{tag}-start-{number}"
            )
            store.transition(run.run_id, "paused", operation_id=f"{tag}-pause-{number}")
        plans.append(Plan(run.run_id, mode))
    return plans


def run_writers(
    url: str,
    plans: list[Plan],
    tmp_path: Path,
    *,
    failover_timeout_s: float,
    during: Callable[[], None],
) -> list[CallLog]:
    """Start the writers on `url`, call `during()` once each has written, stop them."""
    stop = tmp_path / "stop"
    stop.unlink(missing_ok=True)
    logs = [tmp_path / f"writer-{number}.log" for number in range(len(plans))]
    for log in logs:
        log.unlink(missing_ok=True)
    errors = [tmp_path / f"writer-{number}.err" for number in range(len(plans))]
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                str(WRITER),
                url,
                plan.run_id,
                f"w{number}",
                str(log),
                str(stop),
                plan.mode,
                str(failover_timeout_s),
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(error, "w"),  # noqa: SIM115
        )
        for number, (plan, log, error) in enumerate(zip(plans, logs, errors, strict=True))
    ]
    try:
        wait_for(
            lambda: all(CallLog.read(log).acknowledged for log in logs), "every writer to write"
        )
        during()
    finally:
        stop.touch()
        for writer in writers:
            try:
                writer.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                writer.kill()
                writer.wait()
    for writer, error in zip(writers, errors, strict=True):
        stderr = error.read_text()
        assert writer.returncode == 0, stderr
        assert "Traceback" not in stderr, stderr
    return [CallLog.read(log) for log in logs]


def check_journal(url: str, plans: list[Plan], logs: list[CallLog]) -> dict[str, int]:
    """Lost and doubled writes on `url` (the primary, reached directly); chains verified."""
    lost = doubled = 0
    engine = create_engine(parse_url(url))  # the multi-host forms too
    try:
        with engine.connect() as connection:
            for plan, log in zip(plans, logs, strict=True):
                schema = plan.schema or "public"
                receipts = dict(
                    connection.execute(
                        text(
                            f"SELECT operation_id, CAST(CAST(outcome_json AS json) ->> 'sequence'"
                            f" AS integer) FROM {schema}.operations WHERE run_id = :run "
                            "AND kind = 'state-transitioned' AND state = 'committed'"
                        ),
                        {"run": plan.run_id},
                    ).all()
                )
                events = set(
                    connection.execute(
                        text(
                            f"SELECT sequence FROM {schema}.events WHERE run_id = :run "
                            "AND type = 'state-transitioned'"
                        ),
                        {"run": plan.run_id},
                    ).scalars()
                )
                committed_leases = set(
                    connection.execute(
                        text(
                            f"SELECT operation_id FROM {schema}.operations WHERE run_id = :run "
                            "AND state = 'committed'"
                        ),
                        {"run": plan.run_id},
                    ).scalars()
                )
                lost += sum(1 for op in log.transitions() if op not in receipts)
                lost += sum(1 for op in log.lease_commits() if op not in committed_leases)
                sequences = list(receipts.values())
                doubled += len(sequences) - len(set(sequences))
                doubled += len(events - set(sequences))
                assert set(sequences) <= events
    finally:
        engine.dispose()
    for plan in plans:
        with RunStore(url, root_hash=ROOT_HASH, schema=plan.schema) as store:
            store.verify_integrity(plan.run_id)
    return {"lost": lost, "doubled": doubled}


def figures(logs: list[CallLog]) -> dict[str, int]:
    codes: dict[str, int] = {}
    for log in logs:
        for _at, _elapsed, code in log.failed.values():
            codes[code] = codes.get(code, 0) + 1
    return {
        "calls": sum(log.calls for log in logs),
        "acknowledged": sum(len(log.acknowledged) for log in logs),
        "failed": sum(len(log.failed) for log in logs),
        **{f"failed:{code}": count for code, count in sorted(codes.items())},
    }
