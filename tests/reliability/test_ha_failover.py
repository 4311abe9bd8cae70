"""An automatic failover under writers: pg_auto_failover, a monitor and two nodes.

tests/pg_autofailover.py builds the formation on this machine (loopback, private ports
and sockets). Four writer processes (pooler_writer.py, default store settings but for
`failover_timeout_s`) write through the URL `pg_autoctl show uri` prints, as printed
(multi-host `postgres://h1:p1,h2:p2/db?target_session_attrs=read-write`; only the user
name is added). Mid-run the primary node crashes (its pg_autoctl and its server get
SIGKILL) and the monitor promotes the standby by itself. Then, on the new primary:

- every acknowledged write is present exactly once, every chain verifies;
- every call ended within `failover_timeout_s` + 1 s, acknowledged or coded
  `run-store-unavailable`, none `run-store-write-failed`;
- with a budget longer than the promotion, not one call failed.

The default suite tightens the monitor's health checks (promotion in a few seconds);
``--slow`` keeps pg_auto_failover's defaults and measures their promotion time (about
50 s, so `failover_timeout_s` must be longer than the default 30 s: 75 s here).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deployment import CallLog, check_journal, figures, prepare_runs, run_writers, wait_for
from pg_autofailover import Formation, auto_failover_formation, pg_autoctl_available
from pg_cluster import pg_available

import cadence_store
from cadence_store.storage.engine import parse_url

pytestmark = [pytest.mark.postgres, pytest.mark.campaign]

SLACK_S = 1.0


def _require(available: tuple[bool, str]) -> None:
    ok, reason = available
    if not ok:
        if os.environ.get("CI", "").strip().lower() in {"true", "1"}:
            pytest.fail(f"required under CI: {reason}", pytrace=False)
        pytest.skip(reason)


@pytest.fixture
def formation(request: pytest.FixtureRequest) -> Iterator[Formation]:
    _require(pg_available())
    _require(pg_autoctl_available())
    with auto_failover_formation(fast=not request.config.getoption("--slow")) as running:
        yield running


def _with_user(uri: str, user: str = "postgres") -> str:
    scheme, rest = uri.split("://", 1)
    return f"{scheme}://{user}@{rest}"


def test_writers_ride_through_an_automatic_failover(
    formation: Formation,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    slow = request.config.getoption("--slow")
    budget_s = 75.0 if slow else 30.0
    printed = formation.show_uri()
    assert printed.startswith("postgres://") and "," in printed  # the multi-host form
    url = _with_user(printed)
    assert parse_url(url).query["host"]  # accepted: h1:p1,h2:p2 became host=...&host=...
    cadence_store.upgrade(url)
    plans = prepare_runs(url, ["sync"] * 4, "ha")
    logs_path = tmp_path
    moments: dict[str, float] = {}

    def crash_the_primary() -> None:
        time.sleep(1.0)
        old = formation.primary()
        moments["crashed"] = time.time()
        formation.crash(old)
        # writers waiting for a primary: until the monitor promotes the standby
        wait_for(
            lambda: _acknowledged_after(logs_path, moments["crashed"]) >= len(plans),
            "acknowledged writes on the promoted node",
        )
        time.sleep(1.0)

    logs = run_writers(url, plans, tmp_path, failover_timeout_s=budget_s, during=crash_the_primary)
    acknowledged = sorted(at for log in logs for at, _elapsed in log.acknowledged.values())
    after = [at for at in acknowledged if at >= moments["crashed"]]
    # no write acknowledged by any writer: from the crash to the first write on the new primary
    outage_s = max(b - a for a, b in zip([moments["crashed"], *after], after, strict=False))
    counts = figures(logs) | check_journal(url, plans, logs)
    slowest = max(elapsed for log in logs for _at, elapsed in log.acknowledged.values())
    report = counts | {
        "write_outage_s": round(outage_s, 1),
        "slowest_call_s": round(slowest, 1),
        "failover_timeout_s": budget_s,
        "monitor": "defaults" if slow else "fast health checks",
    }
    with capsys.disabled():
        print("\npg_auto_failover: " + ", ".join(f"{k}={v}" for k, v in report.items()))
    assert counts["lost"] == 0 and counts["doubled"] == 0, report
    codes = {code for log in logs for *_, code in log.failed.values()}
    assert codes <= {"run-store-unavailable"}, report
    failures = {key: value for log in logs for key, value in log.failed.items()}
    assert counts["failed"] == 0, (report, failures)  # the budget outlasts the promotion
    for log in logs:
        for (kind, op), (_at, elapsed) in log.acknowledged.items():
            assert elapsed <= budget_s + SLACK_S, (kind, op, elapsed)


def _acknowledged_after(directory: Path, moment: float) -> int:
    logs = [CallLog.read(path) for path in sorted(directory.glob("writer-*.log"))]
    return sum(1 for log in logs for at, _elapsed in log.acknowledged.values() if at >= moment)
