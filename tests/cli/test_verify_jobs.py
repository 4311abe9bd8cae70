"""`cadence-store verify --jobs N`, `parallel_verify.verify_runs` and
`parallel_verify.iter_verified_runs`, on both engines."""

from __future__ import annotations

import multiprocessing
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from cadence_store import InvalidInputError, RunNotFoundError, RunStore, parallel_verify, upgrade
from cadence_store.parallel_verify import iter_verified_runs, verify_runs
from cadence_store.transfer import RunCheck

ROOT_HASH = "ab" * 32
RUNS = 9


@pytest.fixture
def store_url(database_url: str) -> str:
    """A store of RUNS runs, each a few events long."""
    upgrade(database_url)
    with RunStore(database_url, root_hash=ROOT_HASH) as store:
        for index in range(RUNS):
            run = store.start_run(
                "abel-implement", change=f"change-{index}", operation_id=f"start-{index}"
            )
            for step in range(index % 3 + 1):
                store.transition(
                    run.run_id, "paused", operation_id=f"pause-{index}-{step}", code="wait"
                )
    return database_url


def _run_ids(url: str) -> list[str]:
    with RunStore(url) as store:
        return store.run_ids()


def _tamper(url: str, run_id: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "UPDATE events SET payload_json = replace(payload_json, 'wait', 'wail')"
                    " WHERE run_id = :run AND sequence = 2"
                ),
                {"run": run_id},
            )
    finally:
        engine.dispose()


def test_two_jobs_pass_a_clean_store_like_one_job(cli: Any, store_url: str) -> None:
    one = cli("verify", "--url", store_url)
    two = cli("verify", "--jobs", "2", "--url", store_url)
    assert two.exit_code == one.exit_code == 0, two.output
    assert f"{RUNS} ok, 0 broken" in two.stdout
    assert two.stdout == one.stdout


def test_two_jobs_name_the_tampered_run_and_exit_1(cli: Any, store_url: str) -> None:
    broken = _run_ids(store_url)[4]
    _tamper(store_url, broken)
    one = cli("verify", "--url", store_url)
    two = cli("verify", "-j", "2", "--url", store_url)
    assert two.exit_code == one.exit_code == 1, two.output
    lines = [line for line in two.stdout.splitlines() if line.startswith("BROKEN")]
    assert lines == [f"BROKEN run {broken}: sequence 2: " + lines[0].split(": ", 2)[2]]
    assert "hash: expected" in lines[0] and "(event-integrity-hash-chain)" in lines[0]
    assert f"{RUNS - 1} ok, 1 broken" in two.stdout
    assert two.stdout == one.stdout


def test_jobs_must_be_a_positive_integer(cli: Any, store_url: str) -> None:
    for value in ("0", "-1", "two"):
        result = cli("verify", "--jobs", value, "--url", store_url)
        assert result.exit_code == 2, result.output


def test_verify_runs_keeps_the_order_of_the_run_ids(store_url: str) -> None:
    with RunStore(store_url) as store:
        ids = list(reversed(store.run_ids()))
        _tamper(store_url, ids[1])
        seen: list[str | None] = []
        results = verify_runs(store, ids, jobs=2, on_result=lambda check: seen.append(check.run_id))
        assert [check.run_id for check in results] == ids == seen
        assert [check.ok for check in results] == [index != 1 for index in range(len(ids))]
        assert results[1].sequence == 2 and results[1].field == "hash"
        assert verify_runs(store, ids, jobs=1) == results
        assert verify_runs(store, jobs=3) == verify_runs(store)


def test_a_worker_failure_is_raised_with_its_code(store_url: str) -> None:
    with RunStore(store_url) as store:
        ids = [*store.run_ids(), "00000000-0000-4000-8000-000000000000"]
        with pytest.raises(RunNotFoundError) as raised:
            verify_runs(store, ids, jobs=2)
        assert raised.value.code == "run-not-found"
        for jobs in (0, -2, True, 1.5):
            with pytest.raises(InvalidInputError) as invalid:
                verify_runs(store, ids, jobs=jobs)  # type: ignore[arg-type]
            assert invalid.value.code == "invalid-jobs"


def test_workers_start_safely_while_the_caller_has_threads(store_url: str) -> None:
    # fork() in a process with other threads can hand a child a lock that no thread will
    # release; Python 3.12+ warns about it (DeprecationWarning). The workers must not
    # be forked from the caller, whatever threads it runs.
    release = threading.Event()
    busy = threading.Thread(target=release.wait, daemon=True)
    busy.start()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DeprecationWarning)
            with RunStore(store_url) as store:
                checks = list(verify_runs(store, jobs=2))
    finally:
        release.set()
        busy.join()
    assert [check.ok for check in checks] == [True] * RUNS
    assert [str(w.message) for w in caught if "fork" in str(w.message)] == []


def test_the_iterator_gives_verify_runs_list(store_url: str, monkeypatch: Any) -> None:
    with RunStore(store_url) as store:
        ids = store.run_ids()
        _tamper(store_url, ids[4])
        expected = verify_runs(store)
        assert [check.ok for check in expected] == [index != 4 for index in range(RUNS)]
        assert [check.run_id for check in expected] == ids
        assert list(iter_verified_runs(store)) == expected
        assert list(iter_verified_runs(store, jobs=2)) == expected
        assert list(iter_verified_runs(store, ids[3:6])) == expected[3:6]
        assert list(iter_verified_runs(store, ids[::-1], jobs=2)) == expected[::-1]
        assert list(iter_verified_runs(store, [])) == []
        for page in (1, 2, 3, RUNS, RUNS + 1):  # pages that divide the runs, and not
            monkeypatch.setattr(parallel_verify, "RUN_ID_PAGE", page)
            seen: list[RunCheck] = []
            assert verify_runs(store, on_result=seen.append) == expected == seen
            assert list(iter_verified_runs(store)) == expected


def test_the_iterator_is_lazy_page_by_page(store_url: str, monkeypatch: Any) -> None:
    monkeypatch.setattr(parallel_verify, "RUN_ID_PAGE", 2)
    with RunStore(store_url) as store:
        ids = store.run_ids()
        checks = iter_verified_runs(store)
        assert isinstance(checks, Iterator)
        _tamper(store_url, ids[0])  # nothing was read yet: the first run is seen broken
        first = next(checks)
        assert (first.run_id, first.ok) == (ids[0], False)
        # the first page (two runs) is verified; the later pages are not read yet
        _tamper(store_url, ids[5])
        rest = list(checks)
        assert [check.run_id for check in rest] == ids[1:]
        assert [check.ok for check in rest] == [index != 5 for index in range(1, RUNS)]


def test_the_iterator_checks_jobs_at_the_call(store_url: str) -> None:
    with RunStore(store_url) as store:
        for jobs in (0, -2, True, 1.5):
            with pytest.raises(InvalidInputError) as invalid:
                iter_verified_runs(store, jobs=jobs)  # type: ignore[arg-type]
            assert invalid.value.code == "invalid-jobs"


@pytest.mark.parametrize("jobs", [1, 2])
def test_leaving_the_loop_early_stops_cleanly(store_url: str, jobs: int) -> None:
    with RunStore(store_url) as store:
        ids = store.run_ids()
        checks = iter_verified_runs(store, jobs=jobs)
        taken = []
        for check in checks:
            taken.append(check)
            if len(taken) == 2:
                break
        checks.close()  # what leaving the loop does once the generator is dropped
        assert [check.run_id for check in taken] == ids[:2]
        assert list(checks) == []
        assert not [
            child for child in multiprocessing.active_children() if "cadence-verify" in child.name
        ]
        # no snapshot left open: the store writes and verifies as before
        store.transition(ids[0], "paused", operation_id="after-break", code="wait")
        assert all(check.ok for check in iter_verified_runs(store))
