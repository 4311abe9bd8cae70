"""The scale benchmark's stores (benchmarks/scale_build.py): the planned proportions hold,
the named runs are there, and a store written by the builder verifies run by run and
measures its bytes per event. Timing itself is never asserted."""

from __future__ import annotations

from pathlib import Path

from benchmarks.scale import landmarks, writes_side_by_side
from benchmarks.scale_build import LONG_CHANGE, SHORT_CHANGE, build, plans
from benchmarks.scale_report import WRITES
from benchmarks.scale_storage import sqlite_storage
from cadence_store import RunStore
from cadence_store.parallel_verify import verify_runs


def test_a_tenth_of_a_percent_of_the_runs_carry_about_forty_percent_of_the_events() -> None:
    planned = plans(10_000, 100_000)
    assert len(planned) == 10_000
    total = sum(plan.events for plan in planned)
    assert 95_000 <= total <= 105_000
    heavy = sorted((plan.events for plan in planned), reverse=True)[:10]
    assert 0.35 <= sum(heavy) / total <= 0.45
    named = {plan.change: plan.events for plan in planned if plan.change}
    assert named == {LONG_CHANGE: 5_000, SHORT_CHANGE: 50}
    assert plans(10_000, 100_000) == planned  # seeded: the same store at every build


def test_a_built_store_verifies_and_holds_its_named_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'scale.sqlite3'}"
    facts = build(url, 1_000, 10_000)
    assert facts["runs"] == 1_000
    with RunStore(url) as store:
        checks = verify_runs(store, jobs=1)
        assert len(checks) == 1_000
        assert all(check.ok for check in checks)
        (long,) = store.list_runs(change=LONG_CHANGE)
        (short,) = store.list_runs(change=SHORT_CHANGE)
        assert (long.sequence, short.sequence) == (5_000, 50)
        counts = store.counts()
        assert counts.bindings > 0 and counts.operations > counts.events
    storage = sqlite_storage(tmp_path / "scale.sqlite3", tmp_path)
    assert storage["events"] == facts["events"]
    assert "sqlite_autoindex_events_1" in storage["cadence_store"]["tables"]["events"]["indexes"]
    assert storage["cadence_1x_shaped"]["store_bytes_per_event"] > 0


def test_the_writes_alone_are_timed_on_every_size_in_one_loop(tmp_path: Path) -> None:
    stores = {}
    for size, runs in (("small", 100), ("big", 200)):
        url = f"sqlite:///{tmp_path / f'{size}.sqlite3'}"
        build(url, runs, runs * 10)
        with RunStore(url) as store:
            stores[size] = (url, landmarks(store, url, runs), store.counts().runs)
    timed = writes_side_by_side(
        {size: (url, marks) for size, (url, marks, _) in stores.items()}, lambda name: True, 5
    )
    assert set(timed) == {"small", "big"}
    for size, (url, _, runs_before) in stores.items():
        assert set(timed[size]) == set(WRITES)
        assert all(figures["samples"] == 5 for figures in timed[size].values())
        if Path("/proc/self/io").exists():
            assert all(figures["page_reads_per_call"] >= 0 for figures in timed[size].values())
        with RunStore(url) as store:
            # its replay and mover runs, then a new run for the warm-up and each round
            assert store.counts().runs == runs_before + 2 + 1 + 5
