"""Operation leases: grant, renew, check, finish and expire (cadence 1.x's rules, with
fences). A lease is a row of `operations` (kind "lease"), locked before it is judged."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from ..errors import (
    InvalidInputError,
    JournalIntegrityError,
    LeaseFencedError,
    OperationConflictError,
    RunArchivedError,
)
from ..journal import OperationLease, OperationStatus, js_stringify
from ..journal.canonical import JsonValueError, has_lossy_number
from ..journal.documents import stored_outcome
from ..journal.validation import (
    coerce_lease,
    require_bool,
    require_operation_id,
    require_run_id,
    require_ttl,
)
from ..journal.views import lease_standing
from ..journal.vocabulary import COMMITTED, INTERRUPTED, RUNNING, LeaseStanding
from ..storage.failures import READ, database_errors
from ..storage.rows import OperationRow
from ..storage.run_statements import (
    EXPIRE_LEASE,
    EXPIRE_LEASES,
    EXPIRE_LEASES_TIMED,
    FINISH_LEASE,
    HEAD_FOR_UPDATE_TIMED,
    INSERT_LEASE,
    RENEW_LEASE,
    RESTART_LEASE,
)
from ..storage.statements import Statements
from .archived import missing_run
from .core import LEASE, ExpiryNeeded, JournalAccess, expiry

logger = logging.getLogger(__name__)


def fenced(lease: OperationLease, reason: str) -> LeaseFencedError:
    """`lease-fenced`, logged with the lease's run and operation (never its token)."""
    logger.info(
        "cadence-store: lease of run %s operation %s (fence %d) is fenced: %s",
        lease.run_id,
        lease.operation_id,
        lease.fence,
        reason,
    )
    return LeaseFencedError("lease-fenced")


def _fence_reason(row: OperationRow | None, lease: OperationLease, now: int | None) -> str:
    if row is None or now is None:
        return "no such lease"
    if row.state != RUNNING:
        return f"the operation is {row.state}"
    if row.lease_token != lease.token or lease.fence not in (0, row.lease_fence or 0):
        return f"a later grant holds it (fence {row.lease_fence})"
    return f"it expired at {row.lease_expires_at} ms (now {now} ms)"


def standing(row: OperationRow, now: int) -> LeaseStanding:
    """The lease standing of an operation row at lease time `now` (`lease_standing`, the
    one rule every lease call and the read side judge by)."""
    return lease_standing(row.state, bool(row.lease_token), row.lease_expires_at, now)


def new_lease_token() -> str:
    """A fresh lease token (the stores pick one per call, so that a re-run finds it)."""
    return str(uuid.uuid4())


LeaseInput = OperationLease | Mapping[str, Any]


class Leases:
    """The lease calls of `RunRepository`, in `access`'s transaction."""

    __slots__ = ("_access",)

    def __init__(self, access: JournalAccess) -> None:
        self._access = access

    def assert_live(self, sql: Statements, lease: OperationLease) -> tuple[OperationRow, int]:
        """The locked row of `lease`'s operation and the lease time it was judged at, or
        `lease-fenced`. The token decides which grant is live (no clock involved); the
        lease time decides only whether that grant has expired."""
        row, now = self._access.timed_operation(sql, lease.run_id, lease.operation_id, lock=True)
        if row is None:
            missing = missing_run(sql, lease.run_id)
            if isinstance(missing, RunArchivedError):  # not a grant gone: the whole run
                raise missing
        if (
            row is None
            or now is None
            or standing(row, now) is not LeaseStanding.LIVE
            or row.lease_token != lease.token
            or lease.fence not in (0, row.lease_fence or 0)  # 0: cadence 1.x shape
        ):
            raise fenced(lease, _fence_reason(row, lease, now))
        return row, now

    def acquire_lease(
        self,
        run_id: str,
        operation_id: str,
        ttl_ms: int,
        preempt: bool,
        exclusive: bool,
        lease_token: str | None,
    ) -> OperationLease:
        """A grant after the run's row and the operation's row are locked (on the
        server's clock, lease time is read after both locks)."""
        require_operation_id(operation_id)
        ttl = require_ttl(ttl_ms)
        require_bool(preempt, "invalid-lease-option")
        require_bool(exclusive, "invalid-lease-option")
        require_run_id(run_id)
        sql = self._access.write_statements()
        if self._access.server_clock():
            locked = sql.one(HEAD_FOR_UPDATE_TIMED, run_id=run_id)
            if locked is None:
                raise missing_run(sql, run_id)
            existing, existing_now = self._access.timed_operation(
                sql, run_id, operation_id, lock=True
            )
            # the later reading, after the operation row's lock too, when there is a row
            now = int(locked.now) if existing_now is None else existing_now
        else:
            self._access.require_head(sql, run_id, lock=True)
            now = self._access.now()
            existing = self._access.operation(sql, run_id, operation_id, lock=True)
        if existing is not None and existing.kind != LEASE:
            # a journal receipt is never turned into a lease (cadence 1.x overwrote it)
            raise OperationConflictError("operation-id-conflict")
        if existing is not None and standing(existing, now) is LeaseStanding.LIVE:
            assert existing.lease_token is not None and existing.lease_expires_at is not None
            # the grant an earlier attempt of this call took, or a live lease kept
            same_grant = lease_token is not None and existing.lease_token == lease_token
            if same_grant or not preempt:
                if exclusive and not same_grant:
                    raise OperationConflictError("operation-already-running")
                return OperationLease(
                    run_id=run_id,
                    operation_id=operation_id,
                    token=existing.lease_token,
                    expires_at=existing.lease_expires_at,
                    fence=existing.lease_fence or 0,
                )
        # A new grant: the next fence of this operation (the row keeps the last one through
        # commit, interrupt and expiry, and export/import/copy carry it).
        fence = 1 if existing is None else (existing.lease_fence or 0) + 1
        token = new_lease_token() if lease_token is None else lease_token
        lease = OperationLease(
            run_id=run_id,
            operation_id=operation_id,
            token=token,
            expires_at=expiry(now, ttl),
            fence=fence,
        )
        sql.write(
            INSERT_LEASE if existing is None else RESTART_LEASE,
            run_id=run_id,
            operation_id=operation_id,
            lease_token=lease.token,
            lease_expires_at=lease.expires_at,
            lease_fence=fence,
        )
        return lease

    def renew_lease(self, lease: LeaseInput, ttl_ms: int) -> OperationLease:
        """The live grant's expiry moved, judged under the operation row's lock."""
        ttl = require_ttl(ttl_ms)
        checked = coerce_lease(lease)
        sql = self._access.write_statements()
        row, now = self.assert_live(sql, checked)
        expires_at = expiry(now, ttl)
        sql.write(
            RENEW_LEASE,
            run_id=checked.run_id,
            operation_id=checked.operation_id,
            token=checked.token,
            lease_expires_at=expires_at,
        )
        return checked.model_copy(update={"expires_at": expires_at, "fence": row.lease_fence or 0})

    def assert_lease(self, lease: LeaseInput) -> None:
        """`assert_live` on this transaction's write statements (the row stays locked)."""
        self.assert_live(self._access.write_statements(), coerce_lease(lease))

    def _finish_lease(self, lease: OperationLease, state: str, outcome_json: str | None) -> None:
        sql = self._access.write_statements()
        self.assert_live(sql, lease)
        changed = sql.write(
            FINISH_LEASE,
            run_id=lease.run_id,
            operation_id=lease.operation_id,
            token=lease.token,
            new_state=state,
            outcome_json=outcome_json,
        )
        if changed != 1:
            raise fenced(lease, "its row changed meanwhile")

    def commit_lease(self, lease: LeaseInput, outcome: Mapping[str, Any]) -> dict[str, Any]:
        """`outcome` stored as JSON.stringify writes it (a lossy number refused), and
        read back as stored."""
        checked = coerce_lease(lease)
        if not isinstance(outcome, Mapping):
            raise InvalidInputError("operation-outcome-invalid")
        try:
            serialized = js_stringify(outcome)
        except (JsonValueError, RecursionError):
            raise InvalidInputError("operation-outcome-invalid") from None
        if has_lossy_number(outcome):
            # JSON.stringify would write it as null: refused rather than lost
            raise InvalidInputError("operation-outcome-invalid", "a number JSON cannot carry")
        self._finish_lease(checked, COMMITTED, serialized)
        result: dict[str, Any] = json.loads(serialized)
        return result

    def interrupt_lease(self, lease: LeaseInput) -> None:
        """The live grant finished without an outcome."""
        self._finish_lease(coerce_lease(lease), INTERRUPTED, None)

    def finished_lease(
        self, lease: LeaseInput, state: str, outcome: Mapping[str, Any] | None
    ) -> bool:
        """The operation's row compared with `state` and `outcome` (as JSON text)."""
        checked = coerce_lease(lease)
        row = self._access.operation(
            self._access.write_statements(), checked.run_id, checked.operation_id
        )
        if row is None or row.kind != LEASE or row.state != state:
            return False
        if outcome is None:
            return row.outcome_json is None
        try:
            return row.outcome_json == js_stringify(outcome)
        except (JsonValueError, RecursionError, TypeError):
            return False

    def inspect_operation(
        self, run_id: str, operation_id: str, expire: bool
    ) -> OperationStatus | None:
        """A read (coded as one) unless it finds an expired lease to mark interrupted."""
        require_operation_id(operation_id)
        require_run_id(run_id)
        sql = self._access.write_statements()
        with database_errors(READ):  # a read, unless it finds an expired lease to mark
            self._access.require_head(sql, run_id, lock=False)
            row, now = self._access.timed_operation(sql, run_id, operation_id, lock=False)
        if row is None or now is None:
            return None
        if standing(row, now) is LeaseStanding.EXPIRED:
            if not expire:
                raise ExpiryNeeded()
            sql.write(EXPIRE_LEASE, run_id=run_id, operation_id=operation_id, now=now)
            row = self._access.operation(sql, run_id, operation_id)
            if row is None:
                raise JournalIntegrityError("operation-recovery-invalid")
        if row.state not in (RUNNING, COMMITTED, INTERRUPTED):
            raise JournalIntegrityError("operation-state-invalid")
        return OperationStatus(
            state=row.state,
            outcome=stored_outcome(row.outcome_json),
            expires_at=row.lease_expires_at,
            fence=row.lease_fence if row.kind == LEASE else None,
        )

    def recover_expired_leases(self) -> int:
        """One UPDATE of every expired running lease, by the lease clock."""
        sql = self._access.write_statements()
        if self._access.server_clock():
            return sql.write(EXPIRE_LEASES_TIMED)
        return sql.write(EXPIRE_LEASES, now=self._access.now())
