"""Delivery bindings: a gate's receipt at a revision, recorded once per run.

A binding is a `delivery-bound` event and a `delivery_bindings` row, written together;
the same gate and revision with the same receipt writes nothing more (and says so, for a
host that adds its own rows only when something was appended).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InvalidInputError, OperationConflictError, RunNotFoundError
from ..journal import OperationLease, RunProjection
from ..journal.documents import Document, built_projection, stored_projection
from ..journal.validation import check_deliveries, check_delivery, require_findable_run
from ..journal.values import ApprovalProof, BindDelivery
from ..journal.vocabulary import DELIVERY_BOUND
from ..storage.rows import BindingReceiptRow
from ..storage.run_statements import BINDING, INSERT_BINDING
from ..storage.statements import Statements
from .core import RepositoryCore, journal_write
from .leases import LeaseRules, fenced


class DeliveryBindings(LeaseRules, RepositoryCore):
    """`RunRepository`'s delivery bindings (fenced by a lease when one is given)."""

    def _bind_checked(self, sql: Statements, request: BindDelivery) -> tuple[RunProjection, bool]:
        """Bind one checked request; the flag says whether an event was appended (False:
        a replayed operation id, or a binding already stored with this very receipt)."""
        require_findable_run(request.run_id, request.lease)
        head = self._head(sql, request.run_id, lock=True)
        if request.lease is not None:
            if request.lease.run_id != request.run_id:
                raise fenced(request.lease, f"it is a lease of another run than {request.run_id}")
            self._assert_live(sql, request.lease)
        replay = self._replay(sql, request.run_id, request.operation_id, DELIVERY_BOUND)
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
            raise RunNotFoundError("run-not-found")
        wanted = BindingReceiptRow(
            receipt_hash=request.receipt_hash,
            approval_revision=proof.revision if proof else None,
            contract_hash=proof.contract_hash if proof else None,
            record_hash=proof.record_hash if proof else None,
        )
        if existing is not None:
            if existing != wanted:
                raise OperationConflictError("delivery-revision-conflict")
            self._record(
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
        document, projection_json = self._append(sql, head, DELIVERY_BOUND, payload)
        self._record(
            sql,
            request.run_id,
            request.operation_id,
            DELIVERY_BOUND,
            projection_json,
            document["sequence"],
        )
        return built_projection(document), True

    @journal_write
    def bind_delivery(
        self,
        run_id: str,
        gate: str,
        revision: int,
        receipt_hash: str,
        *,
        operation_id: str,
        approval_proof: ApprovalProof | Mapping[str, Any] | None = None,
        lease: OperationLease | Mapping[str, Any] | None = None,
    ) -> RunProjection:
        """Record the receipt of delivery gate `gate` (`gate-a`, `gate-b`) at `revision`
        (`delivery-bound` event and a `delivery_bindings` row), with an optional
        `approval_proof`; returns the projection. The same gate and revision with the same
        `receipt_hash` writes nothing more; another receipt is `delivery-revision-conflict`.
        `lease`: the write is fenced by that lease."""
        request = check_delivery(
            run_id, gate, revision, receipt_hash, operation_id, approval_proof, lease
        )
        projection, _ = self._bind_checked(self._write_statements(), request)
        return projection

    def check_deliveries(self, inputs: object) -> list[BindDelivery]:
        """Validate the inputs of `bind_deliveries_atomically` (cadence 1.x rules)."""
        return check_deliveries(inputs)

    def bind_deliveries(
        self, requests: Iterable[BindDelivery | Mapping[str, Any]]
    ) -> RunProjection:
        """Bind several deliveries of one run (`bind_deliveries_once`'s rules)."""
        projection, _ = self.bind_deliveries_once(requests)
        return projection

    @journal_write
    def bind_deliveries_once(
        self, requests: Iterable[BindDelivery | Mapping[str, Any]]
    ) -> tuple[RunProjection, bool]:
        """Bind deliveries of one run (one lease), and say whether any of them appended
        an event: `(projection, appended)`.

        `appended` is False when every request replayed its operation id or found its
        binding already stored with the same receipt: a host `Session` adds its own rows
        (an audit row, an outbox message) only when it is True, so a retried request adds
        them once. The inputs follow `bind_deliveries_atomically`'s rules."""
        checked = check_deliveries(requests)
        sql = self._write_statements()
        projection: RunProjection | None = None
        appended = False
        for request in checked:
            projection, appended_one = self._bind_checked(sql, request)
            appended = appended or appended_one
        if projection is None:
            raise InvalidInputError("delivery-binding-empty")
        return projection, appended
