"""benchmarks.verify: its verdicts, and that it says why when cadence 1.x cannot run.
Timing itself is never asserted; Node is never needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.verify import TARGET_RATIO, table, targets
from benchmarks.verify_cadence1x import locate


def _results(ratio: float, growth: float, speedup: float, measured: bool) -> dict[str, Any]:
    theirs: dict[str, Any] = (
        {"measured": True, "events_per_s": 100_000, "fresh_process": _fresh()}
        if measured
        else {"measured": False, "reason": "no Node"}
    )
    one = {
        "events": 50_000,
        "rounds": 5,
        "events_per_s": round(100_000 * ratio),
        "best_events_per_s": 1,
        "cpu_events_per_s": 1,
        "peak_mb": 1.5 * growth,
        "peak_mb_at_5000": 1.5,
        "peak_growth": growth,
        "fresh_process": _fresh(),
        "cadence_1x": theirs,
        "ratio_vs_cadence_1x": ratio,
    }
    jobs = {"events_per_s": 1, "cpu_s": 1, "events_per_busiest_cpu_s": 1}
    store = {"runs": 2, "events_per_run": 2, "jobs_1": jobs, "jobs_2": jobs}
    store["speedup_2_vs_1"] = speedup
    return {"engines": {"sqlite": {"one_run": one, "store": store}}}


def _fresh() -> dict[str, float]:
    return {"opened_rss_mb": 1.0, "peak_rss_mb": 2.0}


@pytest.mark.parametrize(
    ("ratio", "growth", "speedup", "verdicts"),
    [
        (TARGET_RATIO, 1.0, 1.5, ["yes", "yes", "yes"]),
        (TARGET_RATIO - 0.01, 1.6, 1.0, ["NO", "NO", "NO"]),
    ],
)
def test_each_target_gets_its_verdict(
    ratio: float, growth: float, speedup: float, verdicts: list[str]
) -> None:
    results = _results(ratio, growth, speedup, measured=True)
    assert [row["verdict"] for row in targets(results)] == verdicts
    assert "cadence 1.x verifyIntegrity, same rows" in table(results)


def test_a_run_without_cadence_1x_says_so() -> None:
    results = _results(1.0, 1.0, 1.5, measured=False)
    (first, *_) = targets(results)
    assert "published figure" in first["measure"]
    assert "cadence 1.x not measured: no Node" in table(results)


def test_locate_names_a_node_that_cannot_run_cadence_1x(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "run-store.ts").write_text("")
    monkeypatch.setenv("CADENCE_1X_SRC", str(tmp_path))
    monkeypatch.setenv("CADENCE_1X_NODE", str(tmp_path / "no-such-node"))
    reason = locate()
    assert isinstance(reason, str) and "not 24 or later" in reason
