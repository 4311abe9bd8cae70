"""Delivery bindings: a gate's receipt at a revision, recorded once per run.

A binding is a `delivery-bound` event and a `delivery_bindings` row, written together;
the same gate and revision with the same receipt writes nothing more (and says so, for a
host that adds its own rows only when something was appended).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InvalidInputError, OperationConflictError
from ..journal import RunProjection
from ..journal.documents import Document, built_projection, stored_projection
from ..journal.validation import check_deliveries, require_findable_run
from ..journal.values import BindDelivery
from ..journal.vocabulary import DELIVERY_BOUND
from ..storage.rows import BindingReceiptRow
from ..storage.run_statements import BINDING, INSERT_BINDING
from ..storage.statements import Statements
from .appender import EventAppender
from .archived import missing_run
from .core import JournalAccess
from .leases import Leases, fenced


class DeliveryBindings:
    """`RunRepository`'s delivery bindings (fenced by a lease when one is given), in
    `access`'s transaction."""

    __slots__ = ("_access", "_appender", "_leases")

    def __init__(self, access: JournalAccess, appender: EventAppender, leases: Leases) -> None:
        self._access = access
        self._appender = appender
        self._leases = leases

    def _bind_checked(self, sql: Statements, request: BindDelivery) -> tuple[RunProjection, bool]:
        """Bind one checked request; the flag says whether an event was appended (False:
        a replayed operation id, or a binding already stored with this very receipt)."""
        require_findable_run(request.run_id, request.lease)
        head = self._access.head(sql, request.run_id, lock=True)
        if request.lease is not None:
            if request.lease.run_id != request.run_id:
                raise fenced(request.lease, f"it is a lease of another run than {request.run_id}")
            self._leases.assert_live(sql, request.lease)
        replay = self._access.replay(sql, request.run_id, request.operation_id, DELIVERY_BOUND)
        if replay is not None:
            return replay, False
        proof = request.approval_proof
        existing = sql.one(
            BINDING,
            run_id=request.run_id,
            gate=request.gate,
            revision=request.revision,
        )
        if head is None:
            raise missing_run(sql, request.run_id)
        wanted = BindingReceiptRow(
            receipt_hash=request.receipt_hash,
            approval_revision=proof.revision if proof else None,
            contract_hash=proof.contract_hash if proof else None,
            record_hash=proof.record_hash if proof else None,
        )
        if existing is not None:
            if existing != wanted:
                raise OperationConflictError("delivery-revision-conflict")
            self._access.record(
                sql,
                request.run_id,
                request.operation_id,
                DELIVERY_BOUND,
                head.projection_json,
                head.sequence,
            )
            return stored_projection(head.projection_json), False
        sql.write(
            INSERT_BINDING,
            run_id=request.run_id,
            gate=request.gate,
            revision=request.revision,
            receipt_hash=wanted.receipt_hash,
            approval_revision=wanted.approval_revision,
            contract_hash=wanted.contract_hash,
            record_hash=wanted.record_hash,
            operation_id=request.operation_id,
        )
        payload: Document = {
            "gate": request.gate,
            "revision": request.revision,
            "receiptHash": request.receipt_hash,
        }
        if proof is not None:
            payload["approvalProof"] = {
                "revision": proof.revision,
                "contractHash": proof.contract_hash,
                "recordHash": proof.record_hash,
            }
        document, projection_json = self._appender.append(sql, head, DELIVERY_BOUND, payload)
        self._access.record(
            sql,
            request.run_id,
            request.operation_id,
            DELIVERY_BOUND,
            projection_json,
            document["sequence"],
        )
        return built_projection(document), True

    def bind_delivery(self, request: BindDelivery) -> RunProjection:
        """One checked request (`check_delivery`) bound on the write statements."""
        projection, _ = self._bind_checked(self._access.write_statements(), request)
        return projection

    def bind_deliveries_once(
        self, requests: Iterable[BindDelivery | Mapping[str, Any]]
    ) -> tuple[RunProjection, bool]:
        """Each checked request bound in order on the same write statements; the
        projection after the last, and whether any appended."""
        checked = check_deliveries(requests)
        sql = self._access.write_statements()
        projection: RunProjection | None = None
        appended = False
        for request in checked:
            projection, appended_one = self._bind_checked(sql, request)
            appended = appended or appended_one
        if projection is None:
            raise InvalidInputError("delivery-binding-empty")
        return projection, appended
