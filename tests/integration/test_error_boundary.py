"""Issue 10: one error boundary, walked method by method.

Every public method of `RunStore`, of `uow.runs` in `store.unit_of_work()`, of
`UnitOfWork`, of `RunRepository` in a host `Session` and of the transfer API is called
against a store that was opened (so its shape check passed) and then damaged behind its
back: all owned tables dropped, `events` dropped, or a column of `runs` renamed. Each call
must fail with a coded `CadenceStoreError` (or, where the damage is not in its way,
succeed), never with a raw driver error, and no read may report `run-store-write-failed`.

The methods are found by introspection: a new public method without an entry in `CALLS`
(or in `NOT_CALLED`, with the reason) fails `test_every_public_method_has_a_call`, so a
leak like the old `RunRepository.iter_events` (a raw `sqlite3.OperationalError` in a host
session) cannot come back unnoticed.
"""

from __future__ import annotations

import functools
import inspect
import io
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session
from support import OWNED, ROOT_HASH, FakeClock

import cadence_store
from cadence_store import (
    BindDelivery,
    CadenceStoreError,
    OperationLease,
    RunRepository,
    RunStore,
    Transition,
    UnitOfWork,
    generate_signer_key,
)
from cadence_store.journal.notes import Checkpoint, sign_checkpoint

A = "a" * 64
B = "b" * 64
CODE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*(:[a-z0-9-]+)*$")
WRITE_FAILED = "run-store-write-failed"


@dataclass
class Target:
    """What the calls need: a run and a lease made before the damage, an export line."""

    run_id: str
    lease: OperationLease
    export_line: str
    url: str


def _bind(t: Target, operation_id: str = "walk-bind") -> dict[str, Any]:
    return {
        "run_id": t.run_id,
        "gate": "gate-a",
        "revision": 1,
        "receipt_hash": A,
        "operation_id": operation_id,
    }


def _no_write(session: Session) -> None:
    pass


Call = Callable[[Target], tuple[tuple[Any, ...], dict[str, Any]]]
WALK_KEY = generate_signer_key("walk.example")
# a signed checkpoint of one leaf: its signature verifies, so its check reads the store
WALK_NOTE = sign_checkpoint(Checkpoint("walk.example", 1, bytes(32)), WALK_KEY)


# Arguments of every public method, by name (the same name on every entry point).
def _stopped_after_one_look() -> Callable[[], bool]:
    """A `follow(stop=)` that lets the follower read once, then ends it."""
    looks = iter((False,))
    return lambda: next(looks, True)


CALLS: dict[str, Call] = {
    "start_run": lambda t: (("abel-design",), {"operation_id": "walk-start", "provisional_key": B}),
    "bind_change": lambda t: ((t.run_id, "walk-change"), {"operation_id": "walk-change"}),
    "bind_delivery": lambda t: ((), _bind(t)),
    "bind_delivery_atomically": lambda t: ((), {**_bind(t), "write": _no_write}),
    "bind_deliveries_atomically": lambda t: (([_bind(t)],), {"write": _no_write}),
    "bind_deliveries": lambda t: (([BindDelivery(**_bind(t))],), {}),
    "bind_deliveries_once": lambda t: (([BindDelivery(**_bind(t))],), {}),
    "check_deliveries": lambda t: (([_bind(t)],), {}),
    "transition": lambda t: ((t.run_id, "paused"), {"operation_id": "walk-t", "code": "c"}),
    "transition_once": lambda t: ((t.run_id, "paused"), {"operation_id": "walk-t", "code": "c"}),
    "transition_many": lambda t: (
        ([{"run_id": t.run_id, "to": "paused", "operation_id": "walk-t"}],),
        {},
    ),
    "transition_many_once": lambda t: (
        ([Transition(run_id=t.run_id, to="paused", operation_id="walk-t", code="c")],),
        {},
    ),
    "transition_atomically": lambda t: (
        (t.run_id, "paused"),
        {"operation_id": "walk-t", "code": "c", "write": _no_write},
    ),
    "acquire_lease": lambda t: ((t.run_id, "walk-lease", 60_000), {}),
    "renew_lease": lambda t: ((t.lease, 60_000), {}),
    "assert_lease": lambda t: ((t.lease,), {}),
    "commit_lease": lambda t: ((t.lease, {"ok": True}), {}),
    "interrupt_lease": lambda t: ((t.lease,), {}),
    "inspect_operation": lambda t: ((t.run_id, "lease-1"), {}),
    "finished_lease": lambda t: ((t.lease, "committed", {"ok": True}), {}),
    "recorded_outcome": lambda t: ((t.run_id, "walk-t", "state-transitioned"), {}),
    "recover_expired_leases": lambda t: ((), {}),
    "status": lambda t: ((t.run_id,), {}),
    "list_events": lambda t: ((t.run_id,), {}),
    "iter_events": lambda t: ((t.run_id,), {}),
    "iter_event_rows": lambda t: ((t.run_id,), {}),
    "rebuild_projection": lambda t: ((t.run_id,), {}),
    "verify_integrity": lambda t: ((t.run_id,), {}),
    "run_ids": lambda t: ((), {}),
    # the read side of the second round (issue branches add these methods)
    "list_runs": lambda t: ((), {}),
    "run_detail": lambda t: ((t.run_id,), {}),
    "counts": lambda t: ((), {}),
    # the journal feed (third round)
    "read_feed": lambda t: ((), {}),
    "read_feed_rows": lambda t: ((), {}),
    "follow": lambda t: ((), {"stop": _stopped_after_one_look()}),
    "follower_position": lambda t: (("walker",), {}),
    "record_position": lambda t: (("walker", 1), {}),
    "feed_unnumbered": lambda t: ((), {}),
    "number_feed": lambda t: ((), {}),
    "newest_feed": lambda t: ((10,), {}),
    # the transparency tree (fourth round)
    "checkpoint": lambda t: ((WALK_KEY,), {}),
    "verify_checkpoint": lambda t: ((WALK_NOTE, WALK_KEY.verifier()), {}),
    "inclusion_proof": lambda t: ((t.run_id,), {}),
    "consistency_proof": lambda t: ((0, 0), {}),
    # retention (a fresh file each time: an existing one would be resumed)
    "archive": lambda t: (
        (),
        {
            "finished_before_ms": 0,
            "to": Path(tempfile.mkdtemp()) / "walk.archive",
            "key": WALK_KEY,
        },
    ),
    "close": lambda t: ((), {}),
}

# Reads: whatever fails in them is never a write failure.
READS = frozenset(
    {
        "status",
        "list_events",
        "iter_events",
        "iter_event_rows",
        "rebuild_projection",
        "verify_integrity",
        "inspect_operation",  # a read, unless it marks an expired lease interrupted
        "run_ids",
        "recorded_outcome",
        "list_runs",
        "run_detail",
        "counts",
        "follower_position",
        "feed_unnumbered",
        "newest_feed",
        "verify_checkpoint",
        "inclusion_proof",
        "consistency_proof",
        "export_store",
        "verify_export",
    }
)

# Public names deliberately not called here, and why.
NOT_CALLED = {
    RunStore: {
        "open": "a classmethod on a state root's own file; it upgrades and checks it anew",
        "unit_of_work": "walked as its own entry point (uow.runs and UnitOfWork)",
        "snapshot": "the read transaction every read call runs in; walked through them",
    },
    RunRepository: {},
    UnitOfWork: {},
}

DAMAGES = {
    "owned-tables-dropped": [
        "DROP TABLE archived_operations",
        "DROP TABLE archived_runs",
        "DROP TABLE kept_leaves",
        "DROP TABLE checkpoints",
        "DROP TABLE tree_tiles",
        "DROP TABLE follower_positions",
        "DROP TABLE delivery_bindings",
        "DROP TABLE operations",
        "DROP TABLE events",
        "DROP TABLE runs",
    ],
    "events-dropped": ["DROP TABLE events"],
    "runs-column-renamed": ["ALTER TABLE runs RENAME COLUMN projection_json TO projection_old"],
}


def public_methods(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls, callable) if not name.startswith("_")}


@pytest.mark.parametrize("cls", [RunStore, RunRepository, UnitOfWork], ids=lambda c: c.__name__)
def test_every_public_method_has_a_call(cls: type) -> None:
    missing = public_methods(cls) - set(CALLS) - set(NOT_CALLED[cls])
    assert not missing, f"add {sorted(missing)} to CALLS (or NOT_CALLED, with the reason)"
    assert public_methods(cls) >= set(NOT_CALLED[cls]), "NOT_CALLED names a method that is gone"


TRANSFER = frozenset({"export_store", "import_store", "copy_store", "verify_export"})


def test_the_transfer_api_is_all_walked() -> None:
    exported = {
        name
        for name in cadence_store.__all__
        if name.endswith(("_store", "_export")) and name != "upgrade"
    }
    assert exported == TRANSFER


# -- the walk ---------------------------------------------------------------------------------


def _consume(result: Any) -> Any:
    """Iterators are consumed: the rows they stream must fail coded too."""
    if inspect.isgenerator(result) or isinstance(result, Iterator):
        return list(result)
    return result


def _check(name: str, call: Callable[[], Any], must_fail: bool) -> str | None:
    """Run one call; return its error code (None: it succeeded)."""
    try:
        call()
    except CadenceStoreError as error:
        assert isinstance(error.code, str) and CODE.match(error.code), (name, error.code)
        if name in READS:
            assert error.code != WRITE_FAILED, f"{name} is a read but reported {error.code}"
        return error.code
    except Exception as error:  # the point: nothing else may escape
        pytest.fail(f"{name} leaked {type(error).__module__}.{type(error).__name__}: {error}")
    assert not must_fail, f"{name} succeeded on a store without its tables"
    return None


@pytest.fixture(params=list(DAMAGES), ids=list(DAMAGES))
def damaged(
    request: pytest.FixtureRequest, database_url: str
) -> Iterator[tuple[str, Target, RunStore, Engine, FakeClock]]:
    """A store opened (shape check passed), then damaged; and a host engine used before."""
    cadence_store.upgrade(database_url)
    clock = FakeClock()
    store = RunStore(database_url, root_hash=ROOT_HASH, clock=clock)
    host = create_engine(database_url)
    try:
        run = store.start_run("abel-implement", change="walk", operation_id="s1")
        lease = store.acquire_lease(run.run_id, "lease-1", 60_000)
        out = io.StringIO()
        cadence_store.export_store(database_url, out)
        with Session(host) as session, session.begin():
            # the host engine passed its shape check before the damage, as a live app's has
            RunRepository(session, root_hash=ROOT_HASH, clock=clock).status(run.run_id)
        with create_engine(database_url).begin() as connection:
            for statement in DAMAGES[request.param]:
                connection.execute(text(statement))
        connection.engine.dispose()
        target = Target(run.run_id, lease, out.getvalue().splitlines()[0], database_url)
        yield request.param, target, store, host, clock
    finally:
        store.close()
        host.dispose()


Invoke = Callable[[str, tuple[Any, ...], dict[str, Any]], Any]


def _walk(damage: str, target: Target, names: set[str], invoke: Invoke) -> dict[str, str | None]:
    codes = {}
    for name in sorted(names):
        args, kwargs = CALLS[name](target)
        must_fail = damage == "owned-tables-dropped" and name not in NO_DATABASE
        codes[name] = _check(name, functools.partial(invoke, name, args, kwargs), must_fail)
    return codes


# Methods that never touch the database (validation only) or only tidy up.
NO_DATABASE = frozenset({"check_deliveries", "close", "verify_export"})


def _methods(cls: type) -> set[str]:
    return public_methods(cls) - set(NOT_CALLED[cls])


def test_run_store(damaged: tuple[str, Target, RunStore, Engine, FakeClock]) -> None:
    damage, target, store, _, _ = damaged
    names = _methods(RunStore) - {"close"}
    codes = _walk(damage, target, names, lambda n, a, k: _consume(getattr(store, n)(*a, **k)))
    assert codes.keys() == names
    _check("close", store.close, must_fail=False)


def test_uow_runs(damaged: tuple[str, Target, RunStore, Engine, FakeClock]) -> None:
    damage, target, store, _, _ = damaged

    def invoke(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with store.unit_of_work() as uow:
            return _consume(getattr(uow.runs, name)(*args, **kwargs))

    _walk(damage, target, _methods(RunRepository), invoke)


def test_repository_in_a_host_session(
    damaged: tuple[str, Target, RunStore, Engine, FakeClock],
) -> None:
    damage, target, _, host, clock = damaged

    def invoke(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with Session(host) as session, session.begin():
            repository = RunRepository(session, root_hash=ROOT_HASH, clock=clock, schema=None)
            return _consume(getattr(repository, name)(*args, **kwargs))

    _walk(damage, target, _methods(RunRepository), invoke)


def test_unit_of_work(damaged: tuple[str, Target, RunStore, Engine, FakeClock]) -> None:
    damage, target, store, host, clock = damaged
    assert not _methods(UnitOfWork), "walk UnitOfWork's new public methods here"

    def enter_and_leave(engine: Engine) -> None:
        with UnitOfWork(engine, root_hash=ROOT_HASH, clock=clock) as uow:
            uow.session.execute(text("SELECT 1"))

    # on an engine whose shape check passed before the damage: nothing to refuse
    _check("UnitOfWork (checked engine)", lambda: enter_and_leave(host), must_fail=False)
    # on a fresh engine the check at entry refuses the damaged store
    fresh = create_engine(target.url)
    try:
        code = _check("UnitOfWork (fresh engine)", lambda: enter_and_leave(fresh), must_fail=True)
        assert code == "run-store-reset-required"
    finally:
        fresh.dispose()
    # a statement failing on a damaged table inside the block is coded too
    with (
        pytest.raises(CadenceStoreError) as info,
        UnitOfWork(host, root_hash=ROOT_HASH, clock=clock) as uow,
    ):
        uow.session.execute(text("SELECT projection_json, run_id FROM runs, events"))
    assert CODE.match(info.value.code)


def test_transfer_api(damaged: tuple[str, Target, RunStore, Engine, FakeClock]) -> None:
    damage, target, _, _, _ = damaged
    url, line = target.url, target.export_line
    calls: dict[str, Callable[[], Any]] = {
        "export_store": lambda: cadence_store.export_store(url, io.StringIO()),
        "import_store": lambda: cadence_store.import_store(url, [line]),
        "copy_store": lambda: cadence_store.copy_store(url, url),
        "verify_export": lambda: cadence_store.verify_export([line]),
    }
    assert calls.keys() == TRANSFER
    for name, call in calls.items():
        _check(name, call, must_fail=damage == "owned-tables-dropped" and name not in NO_DATABASE)


def test_the_owned_tables_are_the_ones_damaged() -> None:
    assert set(OWNED) == set(cadence_store.OWNED_TABLES)
