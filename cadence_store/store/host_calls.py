"""The store calls that run host code (`*_atomically`), each written once: its journal
work, what a re-run after a lost connection returns (the first attempt may have
committed), and the host's `write`, called in the same transaction when, and only when,
the call appends.

These functions are the calls' signatures and docstrings: `RunStore`'s and
`AsyncRunStore`'s `*_atomically` methods are generated from them
(`tools/generate_methods.py`), the sync store calling `write(session)`, the async one
awaiting what it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..errors import LeaseFencedError, RunNotFoundError
from ..journal import OperationLease, RunProjection
from ..journal.validation import require_callable, require_operation_id
from ..journal.values import ApprovalProof, BindDelivery
from ..journal.vocabulary import DELIVERY_BOUND
from ..repository.core import TRANSITIONED
from ..repository.run_repository import RunRepository, check_delivery

T = TypeVar("T")
Work = Callable[[RunRepository], T]
# A host's code, called with the call's `Session` (`AsyncSession` in the async store, which
# awaits what it returns).
HostWrite = Callable[[Any], object]


@dataclass(frozen=True, slots=True)
class HostCall(Generic[T]):
    """A call that runs host code in its transaction when, and only when, it appends.

    `journal(runs)` does the journal's part and says whether it appended; `recorded(runs)`
    is what a re-run returns when an earlier attempt committed (None: it did not)."""

    journal: Work[tuple[T, bool]]
    recorded: Work[T | None]
    write: HostWrite  # the host's code (the async store awaits what it returns)

    def synchronous(self) -> tuple[Work[T], Work[T]]:
        """The call's work, and its re-run, with `write(session)` called synchronously."""
        write = self.write

        def work(runs: RunRepository) -> T:
            result, appended = self.journal(runs)
            if appended:
                write(runs.session)
            return result

        def rerun(runs: RunRepository) -> T:
            recorded = self.recorded(runs)
            return work(runs) if recorded is None else recorded

        return work, rerun


def _replay_first(run_id: str, operation_id: str, kind: str) -> Work[RunProjection | None]:
    """What an operation id's first attempt committed, if it did (a re-run then replays it:
    no lease check, no `write=` callback)."""
    return lambda runs: runs.recorded_outcome(run_id, operation_id, kind)


def materialised(values: Any) -> Any:
    """An iterable read once, as a list: every attempt of a call must see the same items."""
    if values is not None and not isinstance(values, str | bytes | Mapping):
        return list(values) if isinstance(values, Iterable) else values
    return values


# -- the calls ----------------------------------------------------------------------------


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
    items = materialised(inputs)

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


__all__ = [
    "HostCall",
    "HostWrite",
    "materialised",
    "bind_deliveries_atomically",
    "bind_delivery_atomically",
    "transition_atomically",
]
