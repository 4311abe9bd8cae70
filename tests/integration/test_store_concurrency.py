"""Several processes writing one store at once (SQLite file and PostgreSQL).

Each child is a fresh interpreter ("spawn"), opens its own RunStore and waits at a
barrier so that the writers really overlap. Bounded: 2 processes x 25 calls.
"""

from __future__ import annotations

import multiprocessing
import queue
import traceback

import pytest

# RunStore-only: the concurrent writers are child processes using RunStore (its retries
# are what is under test); `store` only sets up and reads back.
pytestmark = pytest.mark.run_store_only

ROOT_HASH = "ab" * 32
PROCESSES = 2
CALLS = 25
TIMEOUT_S = 120


def _key(worker: int, n: int) -> str:
    return f"{worker:032x}{n:032x}"


def _child(task, url, worker, barrier, results) -> None:
    try:
        from cadence_store import RunStore

        with RunStore(url, root_hash=ROOT_HASH) as store:
            barrier.wait(timeout=60)
            out = []
            for n in range(CALLS):
                if task == "distinct":
                    run = store.start_run(
                        "abel-design",
                        provisional_key=_key(worker, n),
                        operation_id=f"w{worker}-{n}",
                    )
                    out.append(run.run_id)
                elif task == "same-keys":
                    run = store.start_run(
                        "abel-design", provisional_key=_key(99, n), operation_id=f"w{worker}-{n}"
                    )
                    out.append(run.run_id)
                else:  # "transitions" on one run, given as task payload
                    run_id = task[1]
                    projection = store.transition(
                        run_id, "paused", operation_id=f"w{worker}-{n}", code=f"w{worker}-{n}"
                    )
                    out.append(projection.sequence)
        results.put((worker, "ok", out))
    except BaseException:
        results.put((worker, "error", traceback.format_exc()))


def _run_children(url, task):
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES)
    results = context.Queue()
    children = [
        context.Process(target=_child, args=(task, url, worker, barrier, results))
        for worker in range(PROCESSES)
    ]
    for child in children:
        child.start()
    outcomes = {}
    try:
        for _ in children:
            worker, status, value = results.get(timeout=TIMEOUT_S)
            assert status == "ok", value
            outcomes[worker] = value
    except queue.Empty:
        raise AssertionError("a writer process did not finish in time") from None
    finally:
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
                child.join()
    assert all(child.exitcode == 0 for child in children)
    return outcomes


def test_processes_start_distinct_design_runs_at_once(store, store_url, table_rows):
    outcomes = _run_children(store_url, "distinct")
    run_ids = [run_id for worker in range(PROCESSES) for run_id in outcomes[worker]]
    assert len(run_ids) == PROCESSES * CALLS
    assert len(set(run_ids)) == PROCESSES * CALLS
    rows = table_rows("runs")
    assert sorted(r["run_id"] for r in rows) == sorted(run_ids)
    assert {r["lookup_key"] for r in rows} == {
        f"provisional:{_key(w, n)}" for w in range(PROCESSES) for n in range(CALLS)
    }
    assert len(table_rows("events")) == PROCESSES * CALLS
    assert len(table_rows("operations")) == PROCESSES * CALLS
    for run_id in run_ids[:: CALLS // 5]:
        assert store.verify_integrity(run_id).sequence == 1


def test_processes_starting_the_same_keys_share_one_run_per_key(store, store_url, table_rows):
    outcomes = _run_children(store_url, "same-keys")
    # both writers got the same run for each key: creation is serialised per key
    assert outcomes[0] == outcomes[1]
    assert len(set(outcomes[0])) == CALLS
    assert len(table_rows("runs")) == CALLS
    assert len(table_rows("events")) == CALLS
    assert len(table_rows("operations")) == PROCESSES * CALLS


def test_processes_appending_to_one_run_never_fork_the_chain(store, store_url, table_rows):
    run = store.start_run("abel-implement", change="contended", operation_id="s1")
    store.transition(run.run_id, "paused", operation_id="t0")
    outcomes = _run_children(store_url, ("transitions", run.run_id))
    sequences = sorted(s for worker in range(PROCESSES) for s in outcomes[worker])
    assert sequences == list(range(3, 3 + PROCESSES * CALLS))
    final = store.verify_integrity(run.run_id)
    assert final.sequence == 2 + PROCESSES * CALLS
    assert len(store.list_events(run.run_id)) == final.sequence
    assert len(table_rows("operations")) == 2 + PROCESSES * CALLS
