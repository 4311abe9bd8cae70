"""The public value types: pydantic models with snake_case attributes and cadence 1.x aliases.

`model_dump(mode="json", by_alias=True, exclude_none=True)` gives the object cadence 1.x
returned. A `RunProjection` made from a stored or reduced projection also keeps that
object's exact key order (`document()` / `to_json()`), which cadence 1.x's byte-level
comparisons depend on.
"""

from __future__ import annotations

import copy
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, PrivateAttr, StrictInt, StrictStr
from pydantic.alias_generators import to_camel

from .canonical import js_stringify

ModelT = TypeVar("ModelT", bound=BaseModel)


def _construct(model: type[ModelT], values: dict[str, Any]) -> ModelT:
    """`model.model_construct(**values)` for values that name every field: the same
    instance state (`__dict__`, fields set, no extras, private defaults), without its
    generic per-field work."""
    instance = model.__new__(model)
    object.__setattr__(instance, "__dict__", values)
    object.__setattr__(instance, "__pydantic_fields_set__", set(values))
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(
        instance, "__pydantic_private__", {"_document": None} if model is RunProjection else None
    )
    return instance


class _Value(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )

    def to_dict(self) -> dict[str, Any]:
        """The cadence 1.x (camelCase) object."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ApprovalProof(_Value):
    revision: StrictInt
    contract_hash: StrictStr
    record_hash: StrictStr


class DeliveryBinding(_Value):
    gate: StrictStr
    revision: StrictInt
    receipt_hash: StrictStr
    approval_proof: ApprovalProof | None = None


class RunProjection(_Value):
    run_id: StrictStr
    root_hash: StrictStr
    stage: StrictStr
    change: StrictStr | None = None
    provisional_key: StrictStr | None = None
    state: StrictStr
    sequence: StrictInt
    event_hash: StrictStr
    delivery_revision: StrictInt | None = None
    delivery_bindings: tuple[DeliveryBinding, ...] = ()
    pause_code: StrictStr | None = None
    terminal: StrictStr | None = None

    _document: dict[str, Any] | None = PrivateAttr(default=None)

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> RunProjection:
        """Wrap a projection object (cadence 1.x key order) without losing that order."""
        projection = cls.model_validate(document)
        projection._document = document
        return projection

    @classmethod
    def from_trusted_document(cls, document: dict[str, Any]) -> RunProjection:
        """Wrap a projection this library just built (`apply_event`), without validating
        it again: the append hot path builds one per call."""
        bindings = tuple(
            _construct(
                DeliveryBinding,
                {
                    "gate": binding["gate"],
                    "revision": binding["revision"],
                    "receipt_hash": binding["receiptHash"],
                    "approval_proof": None
                    if (proof := binding.get("approvalProof")) is None
                    else _construct(
                        ApprovalProof,
                        {
                            "revision": proof["revision"],
                            "contract_hash": proof["contractHash"],
                            "record_hash": proof["recordHash"],
                        },
                    ),
                },
            )
            for binding in document["deliveryBindings"]
        )
        projection = _construct(
            cls,
            {
                "run_id": document["runId"],
                "root_hash": document["rootHash"],
                "stage": document["stage"],
                "change": document.get("change"),
                "provisional_key": document.get("provisionalKey"),
                "state": document["state"],
                "sequence": document["sequence"],
                "event_hash": document["eventHash"],
                "delivery_revision": document.get("deliveryRevision"),
                "delivery_bindings": bindings,
                "pause_code": document.get("pauseCode"),
                "terminal": document.get("terminal"),
            },
        )
        projection._document = document
        return projection

    def __eq__(self, other: object) -> bool:
        # equal field values; the key order kept for byte-level compatibility is not
        # part of a projection's identity
        if not isinstance(other, RunProjection):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash((self.run_id, self.sequence, self.event_hash))

    def document(self) -> dict[str, Any]:
        """The projection object in cadence 1.x key order (a copy)."""
        if self._document is not None:
            return copy.deepcopy(self._document)
        return self.to_dict()

    def to_json(self) -> str:
        """`JSON.stringify` of the projection, as cadence 1.x stored it."""
        return js_stringify(self._document if self._document is not None else self.to_dict())


class RunEvent(_Value):
    sequence: StrictInt
    type: StrictStr
    payload: dict[str, Any]
    prior_hash: StrictStr
    hash: StrictStr
    # cadence-store's addition, not in the hash: when the event was appended (ms by the
    # store's clock); None for events cadence 1.x wrote
    recorded_at: StrictInt | None = None

    def to_dict(self) -> dict[str, Any]:
        """The cadence 1.x (camelCase) object, without cadence-store's additions."""
        return self.model_dump(
            mode="json", by_alias=True, exclude_none=True, exclude={"recorded_at"}
        )


class OperationLease(_Value):
    """A grant of an operation's lease. `token` fences stale holders inside the database;
    `fence` (cadence-store's addition) grows with each grant of the operation, for
    resources outside it. A lease given in cadence 1.x's shape (no `fence`) has fence 0:
    its token alone identifies the grant."""

    run_id: StrictStr
    operation_id: StrictStr
    token: StrictStr
    expires_at: StrictInt
    fence: StrictInt = 0


class OperationStatus(_Value):
    state: Literal["running", "committed", "interrupted"]
    outcome: dict[str, Any] | None = None
    expires_at: StrictInt | None = None
    fence: StrictInt | None = None  # the current or last grant's (None for receipts)


class BindDelivery(_Value):
    """One input of `bind_deliveries_atomically` (the fields of `bind_delivery`)."""

    run_id: StrictStr
    gate: StrictStr
    revision: StrictInt
    receipt_hash: StrictStr
    operation_id: StrictStr
    approval_proof: ApprovalProof | None = None
    lease: OperationLease | None = None
