"""The public value types: pydantic models with snake_case attributes and cadence 1.x aliases.

`to_dict()` gives exactly the object cadence 1.x returned: cadence-store's additions to it
(`fence`) are attributes, shown by `model_dump()`, never by `to_dict()`. Strings stay as
stored, lone surrogates included (valid in JavaScript, so in cadence 1.x's outcomes and
payloads): `to_dict()`, `model_dump(mode="json")` and `model_dump_json()` never re-encode
them. A `RunProjection` made from a stored or reduced projection also keeps that
object's exact key order (`document()` / `to_json()`), which cadence 1.x's byte-level
comparisons depend on.
"""

from __future__ import annotations

import copy
import json
import math
from enum import Enum
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, StrictInt, StrictStr, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticSerializationError

from .canonical import js_stringify


def _json_ready(value: Any) -> Any:
    """A python-mode dump as JSON mode has it (lists, enum values, non-finite floats as
    null), with every string kept as it is: pydantic's JSON mode passes strings through
    UTF-8, which turns a lone surrogate into U+FFFD or raises."""
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(item) for item in value]
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class CadenceValue(BaseModel):
    """The base of the public value types: a frozen pydantic model, snake_case attributes
    with cadence 1.x's camelCase names as aliases, `to_dict()` the cadence 1.x object."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )

    # cadence-store's additions to the cadence 1.x object: attributes, left out of to_dict()
    cadence_additions: ClassVar[frozenset[str]] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        """Exactly the cadence 1.x (camelCase) object: fields that are None left out, and
        cadence-store's additions (`cadence_additions`) too, at every level."""
        cadence_object: dict[str, Any] = _json_ready(self._cadence_object())
        return cadence_object

    def _cadence_object(self) -> dict[str, Any]:
        fields = type(self).model_fields
        return {
            field.alias or name: item._cadence_object()
            if isinstance(item, CadenceValue)
            else tuple(
                part._cadence_object() if isinstance(part, CadenceValue) else part for part in item
            )
            if isinstance(item, tuple)
            else item
            for name, field in fields.items()
            if name not in self.cadence_additions and (item := getattr(self, name)) is not None
        }

    def model_dump(self, *, mode: str = "python", **options: Any) -> dict[str, Any]:
        if mode == "json":
            dumped: dict[str, Any] = _json_ready(super().model_dump(mode="python", **options))
            return dumped
        return super().model_dump(mode=mode, **options)

    def model_dump_json(
        self, *, indent: int | None = None, ensure_ascii: bool = False, **options: Any
    ) -> str:
        if not ensure_ascii:  # pydantic's own (its older releases take no ensure_ascii)
            try:
                return super().model_dump_json(indent=indent, **options)
            except PydanticSerializationError:
                pass  # a lone surrogate, which UTF-8 cannot carry
        # written as JSON.stringify writes a lone surrogate (a \udxxx escape), every
        # other non-ASCII character escaped too
        return json.dumps(
            self.model_dump(mode="json", **options),
            indent=indent,
            separators=(",", ":") if indent is None else None,
        )


class ApprovalProof(CadenceValue):
    """What approved a delivery: its revision, contract hash and record hash."""

    revision: StrictInt
    contract_hash: StrictStr
    record_hash: StrictStr


class DeliveryBinding(CadenceValue):
    """A delivery gate's receipt a run was admitted under (gate, revision, receipt hash)."""

    gate: StrictStr
    revision: StrictInt
    receipt_hash: StrictStr
    approval_proof: ApprovalProof | None = None


class RunProjection(CadenceValue):
    """A run's current state as its events replay to it (`to_dict()`: cadence 1.x's object)."""

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
    def from_document(
        cls, document: dict[str, Any], *, ignoring_other_keys: bool = False
    ) -> RunProjection:
        """Wrap a projection object (cadence 1.x key order) without losing that order;
        `ignoring_other_keys`: keys no field is named by are kept in the document only,
        not refused."""
        fields = document
        if ignoring_other_keys:
            fields = {key: value for key, value in document.items() if key in _PROJECTION_KEYS}
        projection = cls.model_validate(fields)
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
        return super().to_dict()

    def to_dict(self) -> dict[str, Any]:
        """The cadence 1.x object, in its key order when the projection was stored or
        built by this library (`document()`)."""
        return self.document()

    def to_json(self) -> str:
        """`JSON.stringify` of the projection, as cadence 1.x stored it."""
        return js_stringify(self._document if self._document is not None else self.to_dict())


class RunEvent(CadenceValue):
    """One event of a run's hash chain: sequence, type, payload, prior hash and hash."""

    sequence: StrictInt
    type: StrictStr
    payload: dict[str, Any]
    prior_hash: StrictStr
    hash: StrictStr
    # cadence-store's addition, not in the hash: when the event was appended (ms by the
    # store's clock); None for events cadence 1.x wrote
    recorded_at: StrictInt | None = None

    cadence_additions: ClassVar[frozenset[str]] = frozenset({"recorded_at"})


def event_fields(
    sequence: int,
    type: str,
    payload: Any,
    prior_hash: str,
    event_hash: str,
    recorded_at: int | None,
) -> dict[str, Any]:
    """A stored event's columns (its payload decoded) under `RunEvent`'s field names."""
    return {
        "sequence": sequence,
        "type": type,
        "payload": payload,
        "prior_hash": prior_hash,
        "hash": event_hash,
        "recorded_at": recorded_at,
    }


def stored_event(fields: dict[str, Any]) -> RunEvent:
    """A stored event (`event_fields`) as a `RunEvent`.

    Validated: pydantic's compiled validation is also the quickest way to build one. A
    row that is not what the type says (a store edited by hand: a payload that is no
    object) comes back as it is stored, for verification to report, not to fail a read."""
    try:
        return RunEvent.model_validate(fields)
    except ValidationError:
        return RunEvent.model_construct(**fields)


class OperationLease(CadenceValue):
    """A grant of an operation's lease. `token` fences stale holders inside the database;
    `fence` (cadence-store's addition) grows with each grant of the operation, for
    resources outside it. A lease given in cadence 1.x's shape (no `fence`) has fence 0:
    its token alone identifies the grant."""

    cadence_additions: ClassVar[frozenset[str]] = frozenset({"fence"})

    run_id: StrictStr
    operation_id: StrictStr
    token: StrictStr
    expires_at: StrictInt
    fence: StrictInt = 0


class OperationStatus(CadenceValue):
    """How an operation stands: running, committed or interrupted, with outcome and fence."""

    cadence_additions: ClassVar[frozenset[str]] = frozenset({"fence"})

    state: Literal["running", "committed", "interrupted"]
    outcome: dict[str, Any] | None = None
    expires_at: StrictInt | None = None
    fence: StrictInt | None = None  # the current or last grant's (None for receipts)


class Transition(CadenceValue):
    """One input of `transition_many`: the fields of `transition`, without a lease (a
    fenced transition is a call of its own)."""

    run_id: StrictStr
    to: StrictStr
    operation_id: StrictStr
    code: StrictStr | None = None


class BindDelivery(CadenceValue):
    """One input of `bind_deliveries_atomically` (the fields of `bind_delivery`)."""

    run_id: StrictStr
    gate: StrictStr
    revision: StrictInt
    receipt_hash: StrictStr
    operation_id: StrictStr
    approval_proof: ApprovalProof | None = None
    lease: OperationLease | None = None


# a projection document's keys that name a field (cadence 1.x's camelCase names)
_PROJECTION_KEYS: frozenset[str] = frozenset(
    field.alias or name for name, field in RunProjection.model_fields.items()
)

# the public value types, which `cadence_store.journal` and `cadence_store` re-export
__all__ = [
    "ApprovalProof",
    "BindDelivery",
    "DeliveryBinding",
    "OperationLease",
    "OperationStatus",
    "RunEvent",
    "RunProjection",
    "Transition",
]
