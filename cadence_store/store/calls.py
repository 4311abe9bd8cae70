"""Each public call of the stores, written once: its work in a transaction, what a re-run
after a lost connection does (the first attempt may have committed), and when host code
runs. `RunStore` runs these descriptions; `AsyncRunStore` runs `RunStore`'s calls, and
runs the host-code ones (`*_atomically`, whose `write` may be a coroutine function) from
the same descriptions in its own unit of work.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..errors import LeaseFencedError, RunNotFoundError
from ..journal import OperationLease, RunProjection, js_stringify
from ..journal.validation import require_callable, require_operation_id
from ..journal.values import ApprovalProof, BindDelivery, Transition
from ..repository.leases import new_lease_token
from ..repository.run_repository import (
    COMMITTED,
    DELIVERY_BOUND,
    INTERRUPTED,
    TRANSITIONED,
    RunRepository,
    check_delivery,
)

T = TypeVar("T")
Work = Callable[[RunRepository], T]
# A host's code, called with the call's `Session` (`AsyncSession` in the async store, which
# awaits what it returns).
HostWrite = Callable[[Any], object]


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """A call without host code: `work` in one transaction; `rerun` instead of it on an
    attempt after a lost connection (None: `work` is safe to run again as it is)."""

    work: Work[T]
    rerun: Work[T] | None = None


@dataclass(frozen=True, slots=True)
class HostCall(Generic[T]):
    """A call that runs host code in its transaction when, and only when, it appends.

    `journal(runs)` does the journal's part and says whether it appended; `recorded(runs)`
    is what a re-run returns when an earlier attempt committed (None: it did not)."""

    journal: Work[tuple[T, bool]]
    recorded: Work[T | None]
    write: HostWrite  # the host's code (the async store awaits what it returns)

    def synchronous(self) -> Call[T]:
        """The call with its `write(session)` called synchronously."""
        write = self.write

        def work(runs: RunRepository) -> T:
            result, appended = self.journal(runs)
            if appended:
                write(runs.session)
            return result

        def rerun(runs: RunRepository) -> T:
            recorded = self.recorded(runs)
            return work(runs) if recorded is None else recorded

        return Call(work, rerun)


def _replay_first(run_id: str, operation_id: str, kind: str) -> Work[RunProjection | None]:
    """What an operation id's first attempt committed, if it did (a re-run then replays it:
    no lease check, no `write=` callback)."""
    return lambda runs: runs.recorded_outcome(run_id, operation_id, kind)


def _replayed_or_done(
    run_id: str, operation_id: str, kind: str, work: Work[RunProjection], runs: RunRepository
) -> RunProjection:
    found = runs.recorded_outcome(run_id, operation_id, kind)
    return work(runs) if found is None else found


def _materialised(values: Any) -> Any:
    """An iterable read once, as a list: every attempt of a call must see the same items."""
    if values is not None and not isinstance(values, str | bytes | Mapping):
        return list(values) if isinstance(values, Iterable) else values
    return values


# -- runs and their journal --------------------------------------------------------------
# Each description has the public call's signature and docstring: `RunStore` is made of
# them (`run_store._writes`, `_hosts`).


def start_run(
    stage: str,
    *,
    operation_id: str,
    change: str | None = None,
    provisional_key: str | None = None,
    provisional_aliases: Iterable[str] | None = None,
) -> Call[RunProjection]:
    """Start a run of `stage` (or return the run its keys already name)."""
    aliases = _materialised(provisional_aliases)
    return Call(
        lambda runs: runs.start_run(
            stage,
            operation_id=operation_id,
            change=change,
            provisional_key=provisional_key,
            provisional_aliases=aliases,
        )
    )


def bind_change(run_id: str, change: str, *, operation_id: str) -> Call[RunProjection]:
    """Bind a change name to a run started without one."""
    return Call(lambda runs: runs.bind_change(run_id, change, operation_id=operation_id))


def bind_delivery(
    run_id: str,
    gate: str,
    revision: int,
    receipt_hash: str,
    *,
    operation_id: str,
    approval_proof: ApprovalProof | Mapping[str, Any] | None = None,
    lease: OperationLease | Mapping[str, Any] | None = None,
) -> Call[RunProjection]:
    """Record the gate receipt a run was admitted under."""

    def work(runs: RunRepository) -> RunProjection:
        return runs.bind_delivery(
            run_id,
            gate,
            revision,
            receipt_hash,
            operation_id=operation_id,
            approval_proof=approval_proof,
            lease=lease,
        )

    return Call(
        work, functools.partial(_replayed_or_done, run_id, operation_id, DELIVERY_BOUND, work)
    )


def bind_delivery_atomically(
    run_id: str,
    gate: str,
    revision: int,
    receipt_hash: str,
    *,
    operation_id: str,
    write: HostWrite,
    approval_proof: ApprovalProof | Mapping[str, Any] | None = None,
    lease: OperationLease | Mapping[str, Any] | None = None,
) -> HostCall[RunProjection]:
    """`bind_delivery`, and `write(session)` in the same transaction.

    `write` runs only when the call appends the event: a replayed operation id, or a
    binding already stored with this receipt, returns the projection without it.
    """
    request = check_delivery(
        run_id, gate, revision, receipt_hash, operation_id, approval_proof, lease
    )
    require_callable(write, "delivery-binding-write-invalid")

    def journal(runs: RunRepository) -> tuple[RunProjection, bool]:
        if not request.run_id:
            # the batch call's `!runId` rule is not the single call's: cadence 1.x checks
            # the lease (another run's: fenced), then finds no run with the empty id
            if request.lease is not None:
                raise LeaseFencedError("lease-fenced")
            raise RunNotFoundError("run-not-found")
        return runs.bind_deliveries_once([request])

    return HostCall(journal, _replay_first(run_id, operation_id, DELIVERY_BOUND), write)


def bind_deliveries_atomically(
    inputs: Iterable[BindDelivery | Mapping[str, Any]], *, write: HostWrite
) -> HostCall[RunProjection]:
    """Several bindings of one run (one lease), and `write(session)`, in one transaction.

    `write` runs once when at least one input appends an event, not at all when every
    input replays.
    """
    items = _materialised(inputs)

    def journal(runs: RunRepository) -> tuple[RunProjection, bool]:
        requests = runs.check_deliveries(items)
        require_callable(write, "delivery-binding-write-invalid")
        return runs.bind_deliveries_once(requests)

    def recorded(runs: RunRepository) -> RunProjection | None:
        # the first attempt committed all of them, or none
        requests = runs.check_deliveries(items)
        require_callable(write, "delivery-binding-write-invalid")
        outcomes = [
            runs.recorded_outcome(r.run_id, r.operation_id, DELIVERY_BOUND) for r in requests
        ]
        return outcomes[-1] if None not in outcomes else None

    return HostCall(journal, recorded, write)


def transition(
    run_id: str,
    to: str,
    *,
    operation_id: str,
    code: str | None = None,
    lease: OperationLease | Mapping[str, Any] | None = None,
) -> Call[RunProjection]:
    """Move a run to state `to` (one event); `code`: the pause code of a pause."""

    def work(runs: RunRepository) -> RunProjection:
        # `transition` without its own frame: the hot path's layers are its cost
        projection, _ = runs.transition_once(
            run_id, to, operation_id=operation_id, code=code, lease=lease
        )
        return projection

    return Call(
        work, functools.partial(_replayed_or_done, run_id, operation_id, TRANSITIONED, work)
    )


def transition_many(
    requests: Iterable[Transition | Mapping[str, Any]],
) -> Call[list[RunProjection]]:
    """Several transitions, of one run or several, in one transaction; the projection
    after each, in order (`RunRepository.transition_many_once`'s rules)."""
    items = _materialised(requests)
    # a re-run replays what a first attempt committed (all of it, or nothing)
    return Call(lambda runs: runs.transition_many(items))


def transition_atomically(
    run_id: str,
    to: str,
    *,
    operation_id: str,
    write: HostWrite,
    code: str | None = None,
    lease: OperationLease | Mapping[str, Any] | None = None,
) -> HostCall[RunProjection]:
    """`transition`, and `write(session)` in the same transaction.

    A replayed operation id returns its recorded projection without calling `write`
    (as cadence 1.x did).
    """
    require_operation_id(operation_id)
    require_callable(write, "state-transition-write-invalid")
    return HostCall(
        lambda runs: runs.transition_once(
            run_id, to, operation_id=operation_id, code=code, lease=lease
        ),
        _replay_first(run_id, operation_id, TRANSITIONED),
        write,
    )


# -- leases --------------------------------------------------------------------------------


def acquire_lease(
    run_id: str,
    operation_id: str,
    ttl_ms: int,
    *,
    preempt: bool = False,
    exclusive: bool = False,
) -> Call[OperationLease]:
    """Grant a lease on `operation_id` for `ttl_ms` milliseconds (with a new fence)."""
    # The token is picked once per call: every attempt (a retry, a re-run after a lost
    # connection) asks for the same grant, so a re-run finds the lease its first took.
    token = new_lease_token()
    return Call(
        lambda runs: runs.acquire_lease(
            run_id, operation_id, ttl_ms, preempt=preempt, exclusive=exclusive, lease_token=token
        )
    )


def renew_lease(lease: OperationLease | Mapping[str, Any], ttl_ms: int) -> Call[OperationLease]:
    """Extend a live lease to `ttl_ms` from now (same token and fence)."""
    return Call(lambda runs: runs.renew_lease(lease, ttl_ms))


def assert_lease(lease: OperationLease | Mapping[str, Any]) -> Call[None]:
    """Raise `lease-fenced` unless `lease` is the live lease of its operation."""
    return Call(lambda runs: runs.assert_lease(lease))


def commit_lease(
    lease: OperationLease | Mapping[str, Any], outcome: Mapping[str, Any]
) -> Call[dict[str, Any]]:
    """Finish a live lease with its recorded `outcome` (returned as stored)."""

    def rerun(runs: RunRepository) -> dict[str, Any]:
        if runs.finished_lease(lease, COMMITTED, outcome):
            recorded: dict[str, Any] = json.loads(js_stringify(outcome))
            return recorded
        return runs.commit_lease(lease, outcome)

    return Call(lambda runs: runs.commit_lease(lease, outcome), rerun)


def interrupt_lease(lease: OperationLease | Mapping[str, Any]) -> Call[None]:
    """Give a live lease up; the operation may be acquired again."""

    def rerun(runs: RunRepository) -> None:
        if not runs.finished_lease(lease, INTERRUPTED):
            runs.interrupt_lease(lease)

    return Call(lambda runs: runs.interrupt_lease(lease), rerun)


def recover_expired_leases() -> Call[int]:
    """Mark every expired lease interrupted; returns how many."""
    return Call(lambda runs: runs.recover_expired_leases())


__all__ = [
    "Call",
    "HostCall",
    "HostWrite",
    "acquire_lease",
    "assert_lease",
    "bind_change",
    "bind_deliveries_atomically",
    "bind_delivery",
    "bind_delivery_atomically",
    "commit_lease",
    "interrupt_lease",
    "recover_expired_leases",
    "renew_lease",
    "start_run",
    "transition",
    "transition_atomically",
    "transition_many",
]
