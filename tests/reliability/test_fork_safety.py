"""Issue 26: a store made before ``fork()`` (gunicorn ``--preload``, multiprocessing).

The parent makes one `RunStore`, uses it (so it holds a kept connection and a pool), then
forks 4 children; the children and the parent all keep writing through that same store
object for a while (`RunStore.transition`, every third call in a unit of work), each to
its own run, with unique operation ids. Every attempt is logged (ack with the run id the
store returned, or the failure's code, or a raw exception). Afterwards, from the database:

- 0 lost: every acknowledged transition has its receipt and event in the requested run;
- 0 doubled: each run has as many transition events as transition receipts;
- 0 written to another run: no worker's operation id is stored under another worker's
  run, and every returned projection names the run that was asked for;
- 0 raw exceptions, no child crashed or hung;
- a call that failed with a verdict (any code but ``run-store-unavailable``, whose outcome
  is unknown) committed nothing.

The default suite runs a few seconds; the issue's 60 s campaign runs with ``--slow``.
"""

from __future__ import annotations

import json
import multiprocessing
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, select
from support import ROOT_HASH

import cadence_store
from cadence_store import CadenceStoreError, RunStore
from cadence_store.storage.models import events, operations

CHILDREN = 4
DURATIONS = [
    pytest.param(3.0, id="3s"),
    pytest.param(60.0, id="60s", marks=pytest.mark.slow),
]
OUTCOME_UNKNOWN = "run-store-unavailable"  # may or may not have committed


@pytest.fixture
def fork_url(database_url: str) -> str:
    cadence_store.upgrade(database_url)
    return database_url


def write_for(store: RunStore, run_id: str, name: str, seconds: float, log_path: Path) -> None:
    """Transitions to `run_id` until `seconds` pass, each attempt a flushed JSON line."""
    deadline = time.monotonic() + seconds
    number = 0
    with open(log_path, "a", encoding="utf-8") as log:
        while time.monotonic() < deadline:
            operation_id = f"{name}-{number}"
            number += 1
            entry: dict[str, object] = {"op": operation_id}
            try:
                if number % 3 == 0:  # a unit of work on the inherited store, too
                    with store.unit_of_work() as uow:
                        moved = uow.runs.transition(
                            run_id, "paused", operation_id=operation_id, code="tick"
                        )
                else:
                    moved = store.transition(
                        run_id, "paused", operation_id=operation_id, code="tick"
                    )
            except CadenceStoreError as error:
                entry.update(outcome="fail", code=error.code)
            except Exception as error:
                entry.update(outcome="raw", error=repr(error), trace=traceback.format_exc())
            else:
                entry.update(outcome="ack", run=moved.run_id, sequence=moved.sequence)
            log.write(json.dumps(entry) + "\n")
            log.flush()
            if number % 5 == 0:  # reads go through the inherited store too
                try:
                    store.status(run_id)
                except CadenceStoreError as error:
                    log.write(json.dumps({"op": None, "outcome": "read-fail", "code": error.code}))
                    log.write("\n")
                except Exception as error:
                    log.write(json.dumps({"op": None, "outcome": "raw", "error": repr(error)}))
                    log.write("\n")
                log.flush()


def _child(store: RunStore, run_id: str, name: str, seconds: float, log_path: str) -> None:
    write_for(store, run_id, name, seconds, Path(log_path))


@dataclass
class Worker:
    name: str
    run_id: str
    log: Path
    entries: list[dict[str, object]] = field(default_factory=list)

    def read(self) -> None:
        if self.log.exists():
            lines = self.log.read_text(encoding="utf-8").splitlines()
            self.entries = [json.loads(line) for line in lines if line.strip()]


def stored_operations(db: Engine) -> set[tuple[str, str]]:
    with db.connect() as connection:
        rows = connection.execute(select(operations.c.run_id, operations.c.operation_id))
        return {(run_id, operation_id) for run_id, operation_id in rows}


def transition_events(db: Engine) -> Counter[str]:
    """Transition events per run (an event carries no operation id: receipts do)."""
    counted: Counter[str] = Counter()
    with db.connect() as connection:
        for (run_id,) in connection.execute(
            select(events.c.run_id).where(events.c.type == "state-transitioned")
        ):
            counted[run_id] += 1
    return counted


@pytest.mark.parametrize("seconds", DURATIONS)
def test_a_store_made_before_fork_loses_doubles_and_misdirects_nothing(
    fork_url: str, tmp_path: Path, seconds: float
) -> None:
    store = RunStore(fork_url, root_hash=ROOT_HASH)
    workers: list[Worker] = []
    for number in range(CHILDREN + 1):
        name = "parent" if number == CHILDREN else f"child{number}"
        run = store.start_run("abel-implement", change=f"fork-{name}", operation_id=f"s-{name}")
        workers.append(Worker(name, run.run_id, tmp_path / f"{name}.jsonl"))
    store.status(workers[0].run_id)  # the store holds connections now, as a preloaded app's

    context = multiprocessing.get_context("fork")
    processes = [
        context.Process(
            target=_child, args=(store, worker.run_id, worker.name, seconds, str(worker.log))
        )
        for worker in workers[:CHILDREN]
    ]
    for process in processes:
        process.start()
    parent = workers[CHILDREN]
    try:
        write_for(store, parent.run_id, parent.name, seconds, parent.log)
    finally:
        hung: list[str] = []
        for process, worker in zip(processes, workers, strict=False):
            process.join(timeout=seconds + 60)
            if process.is_alive():
                hung.append(worker.name)
                process.kill()
                process.join()
        store.close()
    assert not hung, f"children never finished: {hung}"
    crashed = {w.name: p.exitcode for p, w in zip(processes, workers, strict=False) if p.exitcode}
    assert not crashed, f"children crashed: {crashed}"

    for worker in workers:
        worker.read()
    problems = _campaign_problems(fork_url, workers)
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])


def _campaign_problems(url: str, workers: list[Worker]) -> list[str]:
    db = create_engine(url)
    try:
        receipts = stored_operations(db)
        appended = transition_events(db)
        with RunStore(db, root_hash=ROOT_HASH) as checker:
            for worker in workers:
                checker.verify_integrity(worker.run_id)
    finally:
        db.dispose()
    run_of = {worker.name: worker.run_id for worker in workers}
    problems: list[str] = []
    acknowledged = 0
    for worker in workers:
        for entry in worker.entries:
            operation_id = entry["op"]
            outcome = entry["outcome"]
            if outcome == "raw":
                problems.append(f"{worker.name}: raw exception {entry['error']}")
                continue
            if operation_id is None:
                continue
            assert isinstance(operation_id, str)
            in_own_run = (worker.run_id, operation_id) in receipts
            if outcome == "ack":
                acknowledged += 1
                if entry["run"] != worker.run_id:
                    problems.append(f"{operation_id}: acknowledged for run {entry['run']}")
                if not in_own_run:
                    problems.append(f"{operation_id}: acknowledged but lost")
            elif outcome == "fail" and entry["code"] != OUTCOME_UNKNOWN and in_own_run:
                problems.append(f"{operation_id}: failed with {entry['code']} but committed")
    transition_receipts: Counter[str] = Counter()
    for run_id, operation_id in receipts:
        if operation_id.startswith("s-"):
            continue  # the run's start
        transition_receipts[run_id] += 1
        owner = operation_id.rsplit("-", 1)[0]
        if run_of.get(owner) != run_id:
            problems.append(f"{operation_id}: written to the run of another worker ({run_id})")
    for run_id in set(appended) | set(transition_receipts):
        if appended[run_id] != transition_receipts[run_id]:
            problems.append(
                f"run {run_id}: {appended[run_id]} transitions appended for "
                f"{transition_receipts[run_id]} receipts (doubled or lost events)"
            )
    if acknowledged == 0:
        problems.append("no worker got a single write acknowledged")
    return problems
