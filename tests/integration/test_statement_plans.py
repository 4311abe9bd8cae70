"""Every statement the store issues finds its rows of `events`, `runs` and `operations` by
an index, on both engines.

A store of a few thousand runs and events (with bindings, leases, a checkpoint) is built
and analysed; then a workload makes every public call of `RunStore` (starts, transitions,
leases, bindings, reads, `list_runs` with each filter and a keyset page, `run_ids` and
its pages, counts, `inspect_operation`, `read_feed`, verification, checkpoints and
proofs) with a `before_cursor_execute` listener recording each statement with its
parameters. Each is explained (`EXPLAIN QUERY PLAN` on SQLite, `EXPLAIN (FORMAT JSON)` on
PostgreSQL, with the recorded parameters) and fails the test when it reads one of those
tables whole: SQLite's `SCAN <table>` without an index, PostgreSQL's `Seq Scan`, or an
index walked end to end with a filter and no index condition. What reads the whole store
by its nature (`EXPECTED_SCANS`, by a fragment of the statement, with the reason) may
scan. The plans are printed (`-s`, or on failure).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, event, text
from support import ROOT_HASH

import cadence_store
from cadence_store import RunStore, generate_signer_key
from cadence_store.storage.engine import create_store_engine

RUNS = 3_000
BATCH = 250
RARE = 40  # one run in RARE is a design run, one in RARE validates its delivery
RARE_ROOT_RUNS = 30
OTHER_ROOT = "d" * 64
TABLES = ("events", "runs", "operations")
RECEIPT = "c" * 64
KEY = generate_signer_key("plans.example/runs")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# statements that may walk a table (or an index) whole with a filter: a fragment of the
# statement's text (compared with its whitespace runs as single spaces), and why
EXPECTED_SCANS: dict[str, str] = {
    "runs.updated_at > ": (
        "list_runs(updated_after=, updated_before=) walks the runs in run id order: an "
        "index on updated_at would be rewritten by every append (each transition moves "
        "it; on PostgreSQL every run-row update would stop being a HOT update)"
    ),
    "runs.state IN (": (
        "list_runs with several states: each state's runs come from ix_runs_state_run_id, "
        "but in run id order only within one state; the planner may walk run ids instead"
    ),
    "lease_expires_at < CAST(floor(EXTRACT(epoch FROM clock_timestamp())": (
        "recover_expired_leases on PostgreSQL judges each lease at the server's clock as "
        "it reaches it (volatile: no index condition); it walks "
        "ix_operations_lease_expires_at, which holds the live leases only"
    ),
}


@dataclass
class Recorded:
    statement: str
    parameters: Any
    calls: set[str]


class Recorder:
    """The statements an engine runs, each with the first parameters it ran with, and the
    calls that ran it."""

    def __init__(self) -> None:
        self.statements: dict[str, Recorded] = {}
        self.call = "(build)"
        self._lock = threading.Lock()

    def __call__(
        self,
        _connection: Connection,
        _cursor: Any,
        statement: str,
        parameters: Any,
        _context: Any,
        executemany: bool,
    ) -> None:
        if executemany and parameters:
            parameters = parameters[0]
        with self._lock:
            found = self.statements.get(statement)
            if found is None:
                self.statements[statement] = Recorded(statement, parameters, {self.call})
            else:
                found.calls.add(self.call)


def _build(store: RunStore, other_root: RunStore) -> list[str]:
    """RUNS runs in the proportions a filter is asked about: one in RARE a design run (the
    rest implement runs with a change), one in RARE validating its delivery (the rest
    paused), RARE_ROOT_RUNS under another root hash; some bindings and leases. The run
    ids (of the main root)."""
    run_ids: list[str] = []
    for first in range(0, RUNS, BATCH):
        with store.unit_of_work() as uow:
            for number in range(first, first + BATCH):
                if number % RARE == 0:
                    run = uow.runs.start_run(
                        "abel-design",
                        provisional_key=_sha(f"key-{number}"),
                        operation_id=f"s{number}",
                    )
                else:
                    run = uow.runs.start_run(
                        "abel-implement", change=f"change-{number}", operation_id=f"s{number}"
                    )
                state = "validating-delivery" if number % RARE == 1 else "paused"
                uow.runs.transition(run.run_id, state, operation_id=f"t{number}")
                run_ids.append(run.run_id)
    for number in range(RARE_ROOT_RUNS):
        other_root.start_run("abel-implement", change=f"other-{number}", operation_id=f"o{number}")
    for number in range(0, RUNS, 50):
        if number % RARE:
            store.bind_delivery(run_ids[number], "gate-a", 1, RECEIPT, operation_id=f"b{number}")
        lease = store.acquire_lease(run_ids[number], f"l{number}", 60_000)
        store.commit_lease(lease, {"n": number})
    return run_ids


def _analyse(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.execute(text("ANALYZE"))
        connection.commit()


def _workload(store: RunStore, recorder: Recorder, run_ids: list[str]) -> None:
    """Every public call of the store, once or twice (the recorder names each)."""

    def call(name: str, function: Any, *args: Any, **kwargs: Any) -> Any:
        recorder.call = name
        return function(*args, **kwargs)

    implement = run_ids[2]
    design = run_ids[RARE]
    middle = run_ids[len(run_ids) // 2 + 2]
    new = call("start_run", store.start_run, "abel-implement", change="new", operation_id="ws")
    call("start_run (replay)", store.start_run, "abel-implement", change="new", operation_id="ws")
    call(
        "start_run (design)",
        store.start_run,
        "abel-design",
        provisional_key=_sha("new-key"),
        provisional_aliases=[_sha("alias")],
        operation_id="wsd",
    )
    call("transition", store.transition, new.run_id, "paused", operation_id="wt1")
    call("transition (replay)", store.transition, new.run_id, "paused", operation_id="wt1")
    call("transition (another run)", store.transition, middle, "paused", operation_id="wt2")
    call(
        "transition_many",
        store.transition_many,
        [{"run_id": implement, "to": "paused", "operation_id": "wtm"}],
    )
    call("bind_change", store.bind_change, design, "bound-change", operation_id="wbc")
    call("bind_delivery", store.bind_delivery, implement, "gate-b", 1, RECEIPT, operation_id="wb")
    lease = call("acquire_lease", store.acquire_lease, middle, "wl", 60_000)
    lease = call("renew_lease", store.renew_lease, lease, 60_000)
    call("assert_lease", store.assert_lease, lease)
    call("commit_lease", store.commit_lease, lease, {"ok": True})
    lease = call("acquire_lease (2)", store.acquire_lease, middle, "wl2", 60_000)
    call("interrupt_lease", store.interrupt_lease, lease)
    call("recover_expired_leases", store.recover_expired_leases)
    call("status", store.status, middle)
    call("list_events", store.list_events, middle)
    call("iter_events", lambda: list(store.iter_events(middle)))
    call("run_detail", store.run_detail, middle)
    call("rebuild_projection", store.rebuild_projection, middle)
    call("verify_integrity (run)", store.verify_integrity, middle)
    call("inspect_operation", store.inspect_operation, middle, "wl")
    call("inspect_operation (missing)", store.inspect_operation, middle, "nothing")
    call("counts", store.counts)
    call("list_runs", store.list_runs, limit=50)
    call("list_runs (keyset page)", store.list_runs, limit=50, after=middle)
    call("list_runs (state)", store.list_runs, state="validating-delivery", limit=50)
    call(
        "list_runs (states)",
        store.list_runs,
        state=["validating-delivery", "approval-needed"],
        limit=50,
    )
    call("list_runs (stage)", store.list_runs, stage="abel-design", limit=50)
    call("list_runs (change)", store.list_runs, change="change-7")
    call("list_runs (root hash)", store.list_runs, root_hash=OTHER_ROOT, limit=50)
    call("list_runs (updated range)", store.list_runs, updated_after=0, updated_before=1, limit=5)
    call("run_ids", lambda: list(store.run_ids()))
    call("run_ids (keyset page)", store.run_ids, after=middle, limit=50)
    call("run_ids (first page)", store.run_ids, limit=50)
    call("run_ids (after)", store.run_ids, after=run_ids[-3])
    call("read_feed (latest)", store.read_feed, after=RUNS * 3 - 1_000, limit=1_000)
    call("read_feed (from 0)", store.read_feed, after=0, limit=500)
    call("read_feed (run)", store.read_feed, after=0, run_id=middle)
    stop = threading.Event()
    follower = store.follow(follower="plans", stop=stop, poll_s=0.01)
    recorder.call = "follow"
    next(follower)
    stop.set()
    follower.close()
    call("follower_position", store.follower_position, "plans")
    signed = call("checkpoint", store.checkpoint, KEY, origin="plans.example/runs")
    call("verify_checkpoint", store.verify_checkpoint, signed.note, KEY.verifier())
    call("inclusion_proof", store.inclusion_proof, middle)
    call("consistency_proof", store.consistency_proof, 10, signed.size)


_SQLITE_SCAN = re.compile(rf"^SCAN ({'|'.join(TABLES)})\b")
_FILTERED = re.compile(r"\bWHERE\b", re.IGNORECASE)


def _sqlite_plan(connection: Connection, recorded: Recorded) -> tuple[list[str], list[str]]:
    """The plan's lines, and its walks of a whole table (or of a whole index of it) in a
    statement that filters: SQLite's SCAN (a SEARCH is by a key)."""
    rows = connection.exec_driver_sql(
        f"EXPLAIN QUERY PLAN {recorded.statement}", recorded.parameters or ()
    ).all()
    plan = [str(row[3]) for row in rows]
    if not _FILTERED.search(recorded.statement):
        return plan, []  # a listing in key order, or a count: it reads what it returns
    return plan, [line for line in plan if _SQLITE_SCAN.match(line)]


def _pg_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _pg_nodes(child)


def _pg_plan(connection: Connection, recorded: Recorded) -> tuple[list[str], list[str]]:
    found = connection.exec_driver_sql(
        f"EXPLAIN (FORMAT JSON) {recorded.statement}", recorded.parameters or None
    ).scalar_one()
    document = found if isinstance(found, list) else json.loads(found)
    plan: list[str] = []
    scans: list[str] = []
    for node in _pg_nodes(document[0]["Plan"]):
        relation = node.get("Relation Name")
        kind = node["Node Type"]
        line = " ".join(
            part
            for part in (
                kind,
                f"on {relation}" if relation else "",
                f"using {node['Index Name']}" if "Index Name" in node else "",
                f"cond {node['Index Cond']}" if "Index Cond" in node else "",
                f"filter {node['Filter']}" if "Filter" in node else "",
            )
            if part
        )
        plan.append(line)
        # a table read whole, or an index walked end to end, to filter its rows (a Seq
        # Scan with no filter reads what it returns: a count, a listing, a join's side)
        whole = "Filter" in node and (
            kind == "Seq Scan"
            or (kind in ("Index Scan", "Index Only Scan") and "Index Cond" not in node)
        )
        if relation in TABLES and whole:
            scans.append(line)
    return plan, scans


def _explained(statement: str) -> bool:
    return statement.lstrip().split(None, 1)[0].upper() in {
        "SELECT",
        "WITH",
        "INSERT",
        "UPDATE",
        "DELETE",
    }


def _expected(statement: str) -> str | None:
    flat = " ".join(statement.split())
    return next((why for fragment, why in EXPECTED_SCANS.items() if fragment in flat), None)


@pytest.fixture
def planned_store(database_url: str) -> Iterator[tuple[RunStore, Recorder, list[str]]]:
    """The store on an engine with the recorder listening from the start (a store made on
    an engine with cursor listeners runs every call through them)."""
    cadence_store.upgrade(database_url)
    engine = create_store_engine(database_url)
    recorder = Recorder()
    event.listen(engine, "before_cursor_execute", recorder)
    try:
        with (
            RunStore(engine, root_hash=ROOT_HASH) as store,
            RunStore(engine, root_hash=OTHER_ROOT) as other_root,
        ):
            run_ids = _build(store, other_root)
            store.checkpoint(KEY, origin="plans.example/runs")
            _analyse(engine)
            recorder.statements.clear()
            yield store, recorder, run_ids
    finally:
        engine.dispose()


def test_every_statement_reads_by_an_index(
    planned_store: tuple[RunStore, Recorder, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    store, recorder, run_ids = planned_store
    _workload(store, recorder, run_ids)
    event.remove(store.engine, "before_cursor_execute", recorder)
    explain = _sqlite_plan if store.dialect_name == "sqlite" else _pg_plan
    report: list[str] = []
    failures: list[str] = []
    with store.engine.connect() as connection:
        for recorded in recorder.statements.values():
            if not _explained(recorded.statement):
                continue
            plan, scans = explain(connection, recorded)
            expected = _expected(recorded.statement)
            verdict = "ok" if not scans else f"expected: {expected}" if expected else "FULL SCAN"
            report.append(
                f"--- {verdict} [{', '.join(sorted(recorded.calls))}]\n"
                f"{' '.join(recorded.statement.split())[:600]}\n  " + "\n  ".join(plan)
            )
            if scans and expected is None:
                failures.append(f"{sorted(recorded.calls)}: {scans}")
            connection.rollback()
    with capsys.disabled():
        print(f"\n{store.dialect_name}: {len(report)} statements explained")
        print("\n".join(report))
    assert not failures, "\n".join(failures)
