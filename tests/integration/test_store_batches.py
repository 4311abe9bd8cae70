"""`transition_many`: a batch of transitions answers what calls of `transition` answer.

Each request is decided as `transition_once` would decide it, in order, in one
transaction: a replayed operation id (committed before, or earlier in the batch) answers
its recorded projection and writes nothing; a fresh one appends. A request that would
fail fails the whole batch, which then writes nothing. Every test that takes ``store``
runs through each entry point (RunStore, a unit of work, a host session's
RunRepository, AsyncRunStore) on both engines.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session
from support import OWNED, ROOT_HASH

from cadence_store import (
    AsyncRunRepository,
    AsyncRunStore,
    InvalidInputError,
    InvalidTransitionError,
    OperationConflictError,
    RunNotFoundError,
    RunProjection,
    RunRepository,
    RunStore,
    Transition,
)
from cadence_store.async_store import async_database_url

UNKNOWN_RUN = "01a23d4b-0000-7000-8000-000000000000"


def _started(store: Any, label: str) -> str:
    run = store.start_run("abel-implement", change=label, operation_id=f"start-{label}")
    return str(run.run_id)


def _shape(projection: RunProjection) -> tuple[Any, ...]:
    """What a projection says, apart from its run's identity and hashes."""
    return (
        projection.state,
        projection.sequence,
        projection.pause_code,
        projection.terminal,
        projection.delivery_revision,
    )


def _moves(first: str, second: str) -> list[dict[str, Any]]:
    """Requests over two runs: a pause with a code, a replay of a request earlier in the
    batch, a replay of a call committed before it, and moves of both runs interleaved."""
    return [
        {"run_id": first, "to": "validating-delivery", "operation_id": "m1"},
        {"run_id": second, "to": "paused", "operation_id": "m2", "code": "hold"},
        {"runId": first, "to": "paused", "operationId": "m3", "code": "wait"},
        {"run_id": first, "to": "validating-delivery", "operation_id": "m1"},  # replays m1
        {"run_id": second, "to": "paused", "operation_id": "before"},  # committed before
        {"run_id": first, "to": "validating-delivery", "operation_id": "m4"},
        {"run_id": second, "to": "ready", "operation_id": "m5"},
    ]


def _events(store: Any, run_id: str) -> list[tuple[Any, ...]]:
    """The run's events after its start (whose payload names the run)."""
    return [(e.sequence, e.type, e.payload) for e in store.list_events(run_id)[1:]]


def _receipts(table_rows: Any, run_id: str) -> list[tuple[Any, ...]]:
    return sorted(
        (r["operation_id"], r["kind"], r["state"], r["sequence"], r["lease_token"])
        for r in table_rows("operations")
        if r["run_id"] == run_id
    )


def test_a_batch_answers_what_calls_of_transition_answer(store, table_rows):
    batch_runs = [_started(store, "batch-a"), _started(store, "batch-b")]
    call_runs = [_started(store, "calls-a"), _started(store, "calls-b")]
    for run_id in (batch_runs[1], call_runs[1]):
        store.transition(run_id, "paused", operation_id="before", code="early")

    batched = store.transition_many(_moves(*batch_runs))
    called = [
        store.transition(
            move.get("run_id", move.get("runId")),
            move["to"],
            operation_id=move.get("operation_id", move.get("operationId")),
            code=move.get("code"),
        )
        for move in _moves(*call_runs)
    ]

    assert [_shape(p) for p in batched] == [_shape(p) for p in called]
    assert [p.run_id for p in batched] == [batch_runs[i] for i in (0, 1, 0, 0, 1, 0, 1)]
    assert batched[3] == batched[0]  # the replay answers the projection it recorded
    for ours, theirs in zip(batch_runs, call_runs, strict=True):
        assert _events(store, ours) == _events(store, theirs)
        assert _receipts(table_rows, ours) == [
            (operation_id.replace("start-calls", "start-batch"), *rest)
            for operation_id, *rest in _receipts(table_rows, theirs)
        ]
        assert store.verify_integrity(ours) == store.status(ours)
        [run_row] = [r for r in table_rows("runs") if r["run_id"] == ours]
        assert run_row["projection_json"] == store.status(ours).to_json()


TRICKY_CODE = 'é✓ "quoted" back\\slash\nline \ud800 lone \U0001f600'


def test_a_batch_stores_the_texts_calls_store(store, table_rows):
    """Payloads, projections and receipts are stored as calls store them, byte for byte,
    for a code of quotes, backslashes, a newline, non-ASCII and a lone surrogate (which
    the batch's JSON row sets carry on PostgreSQL)."""
    ours, theirs = _started(store, "text-batch"), _started(store, "text-calls")
    request = {"run_id": ours, "to": "paused", "operation_id": "p", "code": TRICKY_CODE}
    store.transition_many([request])
    store.transition(theirs, "paused", operation_id="p", code=TRICKY_CODE)

    def texts(run_id: str, label: str) -> tuple[str, ...]:
        [run] = [r for r in table_rows("runs") if r["run_id"] == run_id]
        [event] = [r for r in table_rows("events") if (r["run_id"], r["sequence"]) == (run_id, 2)]
        [receipt] = [
            r for r in table_rows("operations") if (r["run_id"], r["operation_id"]) == (run_id, "p")
        ]
        # a run's own identity apart: its id, change and head's hash
        own = ((run_id, "RUN"), (label, "LABEL"), (run["event_hash"], "HASH"))
        named = [run["projection_json"], receipt["outcome_json"]]
        for value, stand_in in own:
            named = [text.replace(value, stand_in) for text in named]
        return (event["payload_json"], *named)

    assert texts(ours, "text-batch") == texts(theirs, "text-calls")
    assert store.status(ours).pause_code == TRICKY_CODE == store.status(theirs).pause_code
    assert store.verify_integrity(ours) == store.status(ours)


def test_a_repeated_batch_replays_it_and_writes_nothing(store, snapshot):
    runs = [_started(store, "again-a"), _started(store, "again-b")]
    store.transition(runs[1], "paused", operation_id="before")
    first = store.transition_many(_moves(*runs))
    before = snapshot()

    again = store.transition_many(_moves(*runs))

    assert again == first
    assert snapshot() == before


def test_models_and_mappings_are_the_same_request(store):
    run_id = _started(store, "models")
    [by_model] = store.transition_many(
        [Transition(run_id=run_id, to="paused", operation_id="p1", code="c")]
    )
    [by_mapping] = store.transition_many(
        [{"runId": run_id, "to": "paused", "operationId": "p1", "code": "c"}]
    )
    assert by_model == by_mapping and by_model.pause_code == "c"


def test_an_empty_batch_is_nothing(store, snapshot):
    _started(store, "empty")
    before = snapshot()
    assert store.transition_many([]) == []
    assert snapshot() == before


FAILURES = {
    "illegal-move": (
        InvalidTransitionError,
        "invalid-run-transition:validating-delivery:completed",
        lambda run_id: {"run_id": run_id, "to": "completed", "operation_id": "f"},
    ),
    "unknown-state": (
        InvalidTransitionError,
        "event-integrity-state-mismatch",
        lambda run_id: {"run_id": run_id, "to": "sideways", "operation_id": "f"},
    ),
    "state-not-text": (
        InvalidTransitionError,
        "event-integrity-state-mismatch",
        lambda run_id: {"run_id": run_id, "to": 7, "operation_id": "f"},
    ),
    "unknown-run": (
        RunNotFoundError,
        "run-not-found",
        lambda run_id: {"run_id": UNKNOWN_RUN, "to": "paused", "operation_id": "f"},
    ),
    "operation-of-another-kind": (
        OperationConflictError,
        "operation-id-conflict",
        lambda run_id: {"run_id": run_id, "to": "paused", "operation_id": "start-fails"},
    ),
    "bad-operation-id": (
        InvalidInputError,
        "invalid-operation-id",
        lambda run_id: {"run_id": run_id, "to": "paused", "operation_id": "no spaces"},
    ),
    "code-not-text": (
        InvalidInputError,
        "invalid-transition-code",
        lambda run_id: {"run_id": run_id, "to": "paused", "operation_id": "f", "code": 1},
    ),
    "run-id-not-text": (
        InvalidInputError,
        "invalid-run-id",
        lambda run_id: {"run_id": None, "to": "paused", "operation_id": "f"},
    ),
    "a-lease": (
        InvalidInputError,
        "invalid-transition-request",
        lambda run_id: {"run_id": run_id, "to": "paused", "operation_id": "f", "lease": {}},
    ),
    "not-a-request": (InvalidInputError, "invalid-transition-request", lambda run_id: run_id),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_request_that_would_fail_fails_the_batch_and_writes_nothing(store, rejected, failure):
    """The failing request comes last, after requests that would append: none of them
    is written."""
    error, code, request = FAILURES[failure]
    run_id = _started(store, "fails")
    fine = [
        {"run_id": run_id, "to": "validating-delivery", "operation_id": "ok-1"},
        {"run_id": run_id, "to": "paused", "operation_id": "ok-2"},
        {"run_id": run_id, "to": "validating-delivery", "operation_id": "ok-3"},
    ]
    with rejected(error, code):
        store.transition_many([*fine, request(run_id)])
    # the same requests without the failing one append
    assert [p.sequence for p in store.transition_many(fine)] == [2, 3, 4]


@pytest.mark.parametrize("requests", ["text", {"run_id": "r"}, 5, None], ids=repr)
def test_requests_that_are_not_a_list_are_refused(store, rejected, requests):
    _started(store, "not-a-list")
    with rejected(InvalidInputError, "transition-batch-invalid"):
        store.transition_many(requests)


def test_a_leased_operation_id_conflicts_in_a_batch_as_in_a_call(store, rejected):
    run_id = _started(store, "leased")
    store.acquire_lease(run_id, "leased-op", 60_000)
    request = {"run_id": run_id, "to": "paused", "operation_id": "leased-op"}
    with rejected(OperationConflictError, "operation-id-conflict"):
        store.transition(run_id, "paused", operation_id="leased-op")
    with rejected(OperationConflictError, "operation-id-conflict"):
        store.transition_many([request])


def test_an_unfinished_receipt_is_overwritten_as_a_call_overwrites_it(store, db, table_rows):
    """A transition's receipt row that is not committed (as an older writer may leave
    one): the request appends from the stored head and commits the receipt over it."""
    runs = {how: _started(store, f"unfinished-{how}") for how in ("batch", "call")}
    with db.begin() as connection:
        for run_id in runs.values():
            connection.execute(
                OWNED["operations"]
                .insert()
                .values(
                    run_id=run_id,
                    operation_id="half",
                    kind="state-transitioned",
                    state="running",
                    outcome_json=None,
                )
            )
    [batched] = store.transition_many(
        [{"run_id": runs["batch"], "to": "paused", "operation_id": "half"}]
    )
    called = store.transition(runs["call"], "paused", operation_id="half")
    assert _shape(batched) == _shape(called) == ("paused", 2, None, None, None)
    receipts = {
        how: [r for r in _receipts(table_rows, run_id) if r[0] == "half"]
        for how, run_id in runs.items()
    }
    assert (
        receipts["batch"]
        == receipts["call"]
        == [("half", "state-transitioned", "committed", 2, None)]
    )
    assert store.verify_integrity(runs["batch"]) == batched


def test_a_batch_stamps_its_events_with_one_time(store, clock):
    run_id = _started(store, "stamped")
    clock.advance(1_000)
    store.transition_many(
        [
            {"run_id": run_id, "to": s, "operation_id": f"s{n}"}
            for n, s in enumerate(["validating-delivery", "paused", "validating-delivery"])
        ]
    )
    events = store.list_events(run_id)
    assert [e.recorded_at for e in events[1:]] == [clock.now] * 3
    assert store.run_detail(run_id).updated_at == clock.now


# -- inside a unit of work and a host session ---------------------------------------------


def test_a_batch_in_a_unit_of_work_goes_on_from_its_earlier_calls(run_store: RunStore):
    run_id = _started(run_store, "uow")
    with run_store.unit_of_work() as uow:
        uow.runs.transition(run_id, "validating-delivery", operation_id="u1")
        answers = uow.runs.transition_many_once(
            [
                {"run_id": run_id, "to": "paused", "operation_id": "u2"},
                {"run_id": run_id, "to": "validating-delivery", "operation_id": "u1"},
                {"run_id": run_id, "to": "validating-delivery", "operation_id": "u3"},
            ]
        )
        assert [(p.sequence, appended) for p, appended in answers] == [
            (3, True),
            (2, False),
            (4, True),
        ]
        after = uow.runs.transition(run_id, "paused", operation_id="u4")
    assert after.sequence == 5 and run_store.verify_integrity(run_id) == after


def test_a_unit_of_work_that_fails_keeps_nothing_of_its_batch(run_store: RunStore):
    run_id = _started(run_store, "rolled-back")
    with pytest.raises(RuntimeError), run_store.unit_of_work() as uow:
        uow.runs.transition_many([{"run_id": run_id, "to": "paused", "operation_id": "r1"}])
        raise RuntimeError("the block fails after its batch")
    assert run_store.status(run_id).sequence == 1
    [moved] = run_store.transition_many([{"run_id": run_id, "to": "paused", "operation_id": "r1"}])
    assert moved.sequence == 2


def test_a_unit_of_work_goes_on_after_a_refused_batch(run_store: RunStore):
    """A refused batch wrote nothing, so the unit of work may catch its error and commit
    what else it did."""
    run_id = _started(run_store, "goes-on")
    with run_store.unit_of_work() as uow:
        uow.runs.transition(run_id, "paused", operation_id="g1")
        with pytest.raises(InvalidTransitionError):
            uow.runs.transition_many(
                [
                    {"run_id": run_id, "to": "validating-delivery", "operation_id": "g2"},
                    {"run_id": run_id, "to": "completed", "operation_id": "g3"},
                ]
            )
        uow.runs.transition(run_id, "validating-delivery", operation_id="g4")
    assert [e.sequence for e in run_store.list_events(run_id)] == [1, 2, 3]
    assert run_store.verify_integrity(run_id).sequence == 3


def test_a_host_session_adds_its_rows_once_per_appended_request(
    run_store: RunStore, store_url: str
):
    """`transition_many_once` says which requests appended: a host adds its own rows for
    those only, so a retried batch adds none."""
    run_id = _started(run_store, "host")
    engine = create_engine(store_url)
    audited: list[str] = []
    requests = [
        {"run_id": run_id, "to": "paused", "operation_id": "h1"},
        {"run_id": run_id, "to": "validating-delivery", "operation_id": "h2"},
    ]
    try:
        for _attempt in range(2):
            with Session(engine) as session, session.begin():
                runs = RunRepository(session, root_hash=ROOT_HASH)
                for request, (_, appended) in zip(
                    requests, runs.transition_many_once(requests), strict=True
                ):
                    if appended:
                        audited.append(request["operation_id"])
    finally:
        engine.dispose()
    assert audited == ["h1", "h2"]
    assert run_store.status(run_id).sequence == 3


def test_an_async_unit_of_work_and_session_batch_as_the_sync_ones(store_url: str):
    """`AsyncRunRepository.transition_many_once` in an `AsyncUnitOfWork` and in a host's
    `AsyncSession` answers what the sync repository answers."""
    async_url = async_database_url(store_url).render_as_string(hide_password=False)

    async def batches() -> tuple[list[Any], list[Any]]:
        store = AsyncRunStore(async_url, root_hash=ROOT_HASH)
        try:
            run = await store.start_run("abel-implement", change="async", operation_id="s")
            requests = [
                {"run_id": run.run_id, "to": "paused", "operation_id": "a1"},
                {"run_id": run.run_id, "to": "validating-delivery", "operation_id": "a2"},
            ]
            async with store.unit_of_work() as uow:
                in_uow = await uow.runs.transition_many_once(requests)
            engine = create_async_engine(async_url)
            try:
                async with AsyncSession(engine) as session, session.begin():
                    runs = AsyncRunRepository(session, root_hash=ROOT_HASH)
                    in_session = await runs.transition_many_once([*requests[1:], requests[0]])
            finally:
                await engine.dispose()
            return in_uow, in_session
        finally:
            await store.aclose()

    in_uow, in_session = asyncio.run(batches())
    assert [(p.sequence, appended) for p, appended in in_uow] == [(2, True), (3, True)]
    # the same requests again, in the other order: each replays its recorded projection
    assert in_session == [(in_uow[1][0], False), (in_uow[0][0], False)]


# -- concurrency ---------------------------------------------------------------------------


def test_concurrent_batches_over_the_same_runs_fork_nothing(store_url: str):
    """Two stores batch the same two runs at once, naming them in opposite orders: the
    runs are locked in one order (no deadlock), and every request appends once."""
    with RunStore(store_url, root_hash=ROOT_HASH) as setup:
        runs = [_started(setup, "race-a"), _started(setup, "race-b")]
    failures: list[BaseException] = []

    def batches(label: str, order: list[str]) -> None:
        try:
            with RunStore(store_url, root_hash=ROOT_HASH) as mine:
                for n in range(15):
                    mine.transition_many(
                        [
                            {"run_id": run_id, "to": "paused", "operation_id": f"{label}-{n}-{i}"}
                            for i, run_id in enumerate(order * 2)
                        ]
                    )
        except BaseException as error:  # reported below
            failures.append(error)

    threads = [
        threading.Thread(target=batches, args=("x", runs)),
        threading.Thread(target=batches, args=("y", runs[::-1])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    with RunStore(store_url, root_hash=ROOT_HASH) as check:
        for run_id in runs:
            # 2 threads x 15 batches x 2 requests a run, after the start
            assert check.verify_integrity(run_id).sequence == 1 + 60


# -- round trips ---------------------------------------------------------------------------


def _client_syncs(trace: Path) -> int:
    """Sync messages the client sent, each the end of a round trip (libpq trace lines:
    `<time> TAB F TAB <length> TAB Sync`)."""
    return sum(
        1
        for line in trace.read_text().splitlines()
        if line.split("\t")[1:2] == ["F"] and line.split("\t")[3:4] == ["Sync"]
    )


@pytest.mark.parametrize("size", [1, 100])
def test_a_batch_costs_the_same_round_trips_whatever_its_size_on_postgresql(
    pg_database_url: str, size: int
):
    """The locks and receipts in one pipeline, then the head's UPDATE, the events and
    the receipts: four round trips for one request or a hundred."""
    from cadence_store import upgrade

    upgrade(pg_database_url)
    with RunStore(pg_database_url, root_hash=ROOT_HASH) as setup:
        run_id = _started(setup, "trips")
    engine = create_engine(pg_database_url)
    try:
        with Session(engine) as session, tempfile.TemporaryDirectory() as directory:
            runs = RunRepository(session)
            runs.status(run_id)  # the transaction has begun: only the batch is traced
            raw = session.connection().connection.dbapi_connection
            trace = Path(directory) / "trace"
            with trace.open("w") as out:
                raw.pgconn.trace(out.fileno())
                try:
                    answers = runs.transition_many(
                        [
                            {"run_id": run_id, "to": "paused", "operation_id": f"t{n}"}
                            for n in range(size)
                        ]
                    )
                finally:
                    raw.pgconn.untrace()
            syncs = _client_syncs(trace)
            session.commit()
    finally:
        engine.dispose()
    assert [p.sequence for p in answers] == list(range(2, size + 2))
    assert syncs == 4
