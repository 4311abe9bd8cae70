"""`RunStore`'s lease calls: each one transaction on the primary, safe to re-run.

A re-run after a lost connection (`failover.py`) must not grant twice or report a done
commit as fenced: `acquire_lease` picks its token once per call, so a re-run finds the
lease its first attempt took; commit and interrupt count as done when their first attempt
finished the lease (`RunRepository.finished_lease`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .journal import OperationLease, OperationStatus, js_stringify
from .repository import COMMITTED, INTERRUPTED, ExpiryNeeded, RunRepository
from .repository_leases import new_lease_token

T = TypeVar("T")


def lease_grant(
    run_id: str, operation_id: str, ttl_ms: int, preempt: bool, exclusive: bool
) -> Callable[[RunRepository], OperationLease]:
    """The work of one `acquire_lease` call, with its token picked once: every attempt of
    the call (a retry, a re-run after a lost connection) asks for the same grant, so a
    re-run finds the lease its first attempt took."""
    token = new_lease_token()
    return lambda runs: runs.acquire_lease(
        run_id, operation_id, ttl_ms, preempt=preempt, exclusive=exclusive, lease_token=token
    )


class StoreLeases:
    """The lease methods of `RunStore` (which provides `_write`, `_read` and the engines)."""

    _read_engine: Any

    def _write(
        self,
        work: Callable[[RunRepository], T],
        rerun: Callable[[RunRepository], T] | None = None,
        *,
        host_code: bool = False,
    ) -> T:
        raise NotImplementedError

    def _read(self, work: Callable[[RunRepository], T]) -> T:
        raise NotImplementedError

    def acquire_lease(
        self,
        run_id: str,
        operation_id: str,
        ttl_ms: int,
        *,
        preempt: bool = False,
        exclusive: bool = False,
    ) -> OperationLease:
        """Grant the operation (`run_id`, `operation_id`) to the caller for `ttl_ms`
        milliseconds; returns the lease (token, expiry, fence).

        A live lease of another holder is returned as it is (`exclusive=True`: refused with
        `operation-already-running`), or replaced by a new grant with a higher fence
        (`preempt=True`). An expired, committed or interrupted operation gets a new grant."""
        return self._write(lease_grant(run_id, operation_id, ttl_ms, preempt, exclusive))

    def renew_lease(self, lease: OperationLease | Mapping[str, Any], ttl_ms: int) -> OperationLease:
        """Extend a live lease to `ttl_ms` from now (same token and fence); `lease-fenced` if
        it is no longer the live grant."""
        return self._write(lambda runs: runs.renew_lease(lease, ttl_ms))

    def assert_lease(self, lease: OperationLease | Mapping[str, Any]) -> None:
        """Raise `LeaseFencedError` (`lease-fenced`) unless `lease` is the live grant of its
        operation; writes nothing."""
        self._write(lambda runs: runs.assert_lease(lease))

    def commit_lease(
        self, lease: OperationLease | Mapping[str, Any], outcome: Mapping[str, Any]
    ) -> dict[str, Any]:
        """End a live lease with `outcome` (a JSON object), marking the operation committed;
        returns the stored outcome. A second commit of the same lease is `lease-fenced` (the
        outcome stays; `inspect_operation` shows it)."""

        def rerun(runs: RunRepository) -> dict[str, Any]:
            if runs.finished_lease(lease, COMMITTED, outcome):
                recorded: dict[str, Any] = json.loads(js_stringify(outcome))
                return recorded
            return runs.commit_lease(lease, outcome)

        return self._write(lambda runs: runs.commit_lease(lease, outcome), rerun)

    def interrupt_lease(self, lease: OperationLease | Mapping[str, Any]) -> None:
        """End a live lease without an outcome, marking the operation interrupted (another
        holder may then acquire it)."""

        def rerun(runs: RunRepository) -> None:
            if not runs.finished_lease(lease, INTERRUPTED):
                runs.interrupt_lease(lease)

        self._write(lambda runs: runs.interrupt_lease(lease), rerun)

    def inspect_operation(self, run_id: str, operation_id: str) -> OperationStatus | None:
        """The operation's state, outcome, expiry and fence, or None if it has no row. An
        expired running lease is marked interrupted first (a write)."""
        if self._read_engine is not None:
            try:
                return self._read(
                    lambda runs: runs.inspect_operation(run_id, operation_id, expire=False)
                )
            except ExpiryNeeded:
                pass  # an expired lease is marked interrupted: that is a write
        return self._write(lambda runs: runs.inspect_operation(run_id, operation_id))

    def recover_expired_leases(self) -> int:
        """Mark every expired running lease interrupted; returns how many were."""
        return self._write(lambda runs: runs.recover_expired_leases())


__all__ = ["StoreLeases", "lease_grant"]
