"""Input rules of cadence 1.x, with its error codes. Pure: no I/O, no SQLAlchemy."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

from pydantic import ValidationError

from ..errors import InvalidInputError, LeaseFencedError, RunNotFoundError
from .states import RUN_STAGES
from .values import ApprovalProof, BindDelivery, OperationLease, Transition
from .vocabulary import DESIGN_STAGE, GATE_VALUES

CHANGE_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,126}[a-z0-9])?")
# cadence 1.x: /^[a-z0-9](?:[a-z0-9._:-]{0,126}[a-z0-9])?$/iu. JavaScript's /iu folds
# exactly two code points outside ASCII into [a-z]: U+017F (long s) and U+212A (Kelvin sign).
# Spelled out, because Python's re.IGNORECASE folds others too (U+0130, U+0131).
# tests/fixtures/identifier-code-points.json holds what the real regex accepts.
_IDENTIFIER_EDGE = "a-zA-Z0-9\u017f\u212a"
IDENTIFIER = re.compile(
    f"[{_IDENTIFIER_EDGE}](?:[{_IDENTIFIER_EDGE}._:-]{{0,126}}[{_IDENTIFIER_EDGE}])?"
)
# IDENTIFIER's ASCII characters: inside, and at the ends (`is_identifier`)
_IDENTIFIER_ASCII: Final = string.ascii_letters + string.digits + "._:-"
SHA256 = re.compile(r"[a-f0-9]{64}")
SURROGATE = re.compile(r"[\ud800-\udfff]")
DELIVERY_GATES = GATE_VALUES
MAX_SAFE_INTEGER = 2**53 - 1
MAX_PROVISIONAL_ALIASES = 4


def is_sha256(value: object) -> bool:
    return isinstance(value, str) and SHA256.fullmatch(value) is not None


def is_safe_integer(value: object) -> bool:
    """JavaScript's Number.isSafeInteger; booleans are not numbers."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    if isinstance(value, float):
        return value.is_integer() and abs(value) <= MAX_SAFE_INTEGER
    return False


def is_identifier(value: str) -> bool:
    """`IDENTIFIER.fullmatch(value)`, an ASCII value judged by string methods (every
    journal call checks an operation id; the regular expression's engine was the dearer
    part of that check)."""
    if value.isascii():
        return (
            0 < len(value) <= 128
            and value[0].isalnum()
            and value[-1].isalnum()
            and not value.strip(_IDENTIFIER_ASCII)  # nothing left: every character allowed
        )
    return IDENTIFIER.fullmatch(value) is not None


def require_operation_id(value: object) -> str:
    if not isinstance(value, str) or not is_identifier(value):
        raise InvalidInputError("invalid-operation-id")
    return value


def require_change(value: object) -> str:
    if not isinstance(value, str) or CHANGE_NAME.fullmatch(value) is None:
        raise InvalidInputError("invalid-change")
    return value


def is_storable(value: str) -> bool:
    """Whether a database can hold `value` as text (no NUL, no lone surrogate)."""
    return "\x00" not in value and (value.isascii() or SURROGATE.search(value) is None)


def require_run_id(value: object) -> str:
    # Any string may name a run (lookups answer run-not-found); other types are misuse.
    if not isinstance(value, str):
        raise InvalidInputError("invalid-run-id")
    if not is_storable(value):
        raise RunNotFoundError("run-not-found")  # no run can have this id
    return value


def require_run_id_text(value: object) -> str:
    """A run id whose lookup comes later (cadence 1.x checks a lease before the run)."""
    if not isinstance(value, str):
        raise InvalidInputError("invalid-run-id")
    return value


def require_findable_run(run_id: str, lease: OperationLease | None) -> None:
    """A run id no database can hold names no run: a lease presented with it is another
    run's (`lease-fenced`, cadence 1.x's first check), else `run-not-found`."""
    if not is_storable(run_id):
        if lease is not None:
            raise LeaseFencedError("lease-fenced")
        raise RunNotFoundError("run-not-found")


def require_transition_input(
    run_id: object, operation_id: object, code: object, lease: object
) -> tuple[str, str, str | None, OperationLease | None]:
    """A transition's checked run id, operation id, code and lease: the common input
    (ASCII ids, no lease) in this one call, anything else by each rule in cadence 1.x's
    order (operation id, run id, code, lease, a run id no database can hold), which says
    what is wrong."""
    if (
        lease is None
        and type(operation_id) is str
        and is_identifier(operation_id)
        and type(run_id) is str
        and run_id.isascii()
        and "\x00" not in run_id  # `is_storable` of an ASCII text
        and (code is None or type(code) is str)
    ):
        return run_id, operation_id, code or None, None
    checked_operation_id = require_operation_id(operation_id)
    checked_run_id = require_run_id_text(run_id)
    checked_code = require_transition_code(code)
    checked_lease = coerce_optional_lease(lease)
    require_findable_run(checked_run_id, checked_lease)
    return checked_run_id, checked_operation_id, checked_code, checked_lease


def require_clock(value: object) -> Any:
    if value is not None and not callable(value):
        raise InvalidInputError("invalid-clock", "clock must be a callable returning milliseconds")
    return value


def require_root_hash(value: object) -> str:
    if not is_sha256(value):
        raise InvalidInputError("invalid-root-hash")
    assert isinstance(value, str)
    return value


def require_stage(value: object) -> str:
    if value not in RUN_STAGES:
        raise InvalidInputError("invalid-run-stage")
    assert isinstance(value, str)
    return value


def as_safe_integer(value: object) -> int | None:
    """The value as an int when it is a JavaScript safe integer, else None."""
    if is_safe_integer(value):
        assert isinstance(value, int | float)
        return int(value)
    return None


def require_ttl(value: object) -> int:
    ttl = as_safe_integer(value)
    if ttl is None or ttl < 1:
        raise InvalidInputError("invalid-lease-ttl")
    return ttl


def lookup_keys(
    stage: str,
    change: object,
    provisional_key: object,
    provisional_aliases: object,
) -> list[str]:
    """The run lookup keys of a start request, first one primary (cadence 1.x `lookupKeys`)."""
    has_change = change is not None
    has_provisional = provisional_key is not None
    if has_change == has_provisional:
        raise InvalidInputError("invalid-run-lookup-key")
    if has_change:
        if provisional_aliases is not None:
            raise InvalidInputError("invalid-run-lookup-key")
        return [f"change:{require_change(change)}"]
    if not is_sha256(provisional_key):
        raise InvalidInputError("invalid-provisional-key")
    aliases: list[str] = []
    if provisional_aliases is not None and (
        isinstance(provisional_aliases, str | bytes | Mapping)
        or not isinstance(provisional_aliases, Iterable)
        or len(aliases := list(provisional_aliases)) > MAX_PROVISIONAL_ALIASES
        or not all(is_sha256(alias) for alias in aliases)
    ):
        raise InvalidInputError("invalid-provisional-key")
    if stage != DESIGN_STAGE:
        raise InvalidInputError("provisional-run-requires-design")
    unique = dict.fromkeys([str(provisional_key), *aliases])
    return [f"provisional:{key}" for key in unique]


def _integral_numbers(value: Mapping[Any, Any], names: frozenset[str]) -> dict[Any, Any]:
    """A copy of the mapping with its integral floats under `names` as ints: cadence 1.x's
    numbers are JavaScript's, where 3.0 is 3 (one rule with `as_safe_integer`)."""
    fields = dict(value)
    for name in names & fields.keys():
        number = fields[name]
        if isinstance(number, float) and (integral := as_safe_integer(number)) is not None:
            fields[name] = integral
    return fields


_PROOF_NUMBERS: Final = frozenset({"revision"})
_LEASE_NUMBERS: Final = frozenset({"expires_at", "expiresAt", "fence"})


def coerce_approval_proof(value: object) -> ApprovalProof | None:
    if value is None or isinstance(value, ApprovalProof):
        proof = value
    elif isinstance(value, Mapping):
        try:
            proof = ApprovalProof.model_validate(_integral_numbers(value, _PROOF_NUMBERS))
        except ValidationError:
            raise InvalidInputError("invalid-delivery-binding") from None
    else:
        raise InvalidInputError("invalid-delivery-binding")
    if proof is not None and (
        not is_safe_integer(proof.revision)
        or proof.revision < 1
        or not is_sha256(proof.contract_hash)
        or not is_sha256(proof.record_hash)
    ):
        raise InvalidInputError("invalid-delivery-binding")
    return proof


def coerce_lease(value: object) -> OperationLease:
    lease: OperationLease | None = None
    if isinstance(value, OperationLease):
        lease = value
    elif isinstance(value, Mapping):
        try:
            lease = OperationLease.model_validate(_integral_numbers(value, _LEASE_NUMBERS))
        except ValidationError:
            pass
    if lease is None:
        raise InvalidInputError("invalid-lease")
    if not all(is_storable(text) for text in (lease.run_id, lease.operation_id, lease.token)):
        raise LeaseFencedError("lease-fenced")  # never the live lease of any operation
    return lease


def coerce_optional_lease(value: object) -> OperationLease | None:
    return None if value is None else coerce_lease(value)


def require_delivery(gate: object, revision: object, receipt_hash: object) -> tuple[str, int, str]:
    number = as_safe_integer(revision)
    if gate not in DELIVERY_GATES or number is None or number < 1 or not is_sha256(receipt_hash):
        raise InvalidInputError("invalid-delivery-binding")
    assert isinstance(gate, str) and isinstance(receipt_hash, str)
    return gate, number, receipt_hash


def require_transition_code(code: object) -> str | None:
    if code is None:
        return None
    if not isinstance(code, str):
        raise InvalidInputError("invalid-transition-code")
    return code or None


def require_callable(value: object, code: str) -> Any:
    if not callable(value):
        raise InvalidInputError(code)
    return value


def require_bool(value: object, code: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(code)
    return value


def check_delivery(
    run_id: object,
    gate: object,
    revision: object,
    receipt_hash: object,
    operation_id: object,
    approval_proof: object,
    lease: object,
) -> BindDelivery:
    """Validate one delivery binding request, in cadence 1.x's order of checks."""
    checked_operation = require_operation_id(operation_id)
    gate_, revision_, receipt_ = require_delivery(gate, revision, receipt_hash)
    proof = coerce_approval_proof(approval_proof)
    checked_lease = coerce_optional_lease(lease)
    return BindDelivery.model_construct(
        run_id=require_run_id_text(run_id),
        gate=gate_,
        revision=revision_,
        receipt_hash=receipt_,
        operation_id=checked_operation,
        approval_proof=proof,
        lease=checked_lease,
    )


# the keys one request of `check_deliveries` may have (snake_case or camelCase)
DELIVERY_FIELDS: Final = frozenset(
    {
        "run_id",
        "runId",
        "gate",
        "revision",
        "receipt_hash",
        "receiptHash",
        "operation_id",
        "operationId",
        "approval_proof",
        "approvalProof",
        "lease",
    }
)


def check_deliveries(inputs: object) -> list[BindDelivery]:
    """Validate the inputs of `bind_deliveries_atomically` (cadence 1.x rules): one run,
    one lease token, at least one request."""
    if isinstance(inputs, str | bytes | Mapping) or not isinstance(inputs, Iterable):
        raise InvalidInputError("delivery-binding-write-invalid")
    requests = []
    for item in inputs:
        if isinstance(item, BindDelivery):
            fields: Mapping[str, Any] = dict(item)
        elif isinstance(item, Mapping):
            fields = item
        else:
            raise InvalidInputError("invalid-delivery-binding")
        if set(fields) - DELIVERY_FIELDS:
            raise InvalidInputError("invalid-delivery-binding")
        requests.append(
            check_delivery(
                fields.get("run_id", fields.get("runId")),
                fields.get("gate"),
                fields.get("revision"),
                fields.get("receipt_hash", fields.get("receiptHash")),
                fields.get("operation_id", fields.get("operationId")),
                fields.get("approval_proof", fields.get("approvalProof")),
                fields.get("lease"),
            )
        )
    if not requests:
        raise InvalidInputError("delivery-binding-empty")
    first = requests[0]
    token = first.lease.token if first.lease else None
    if not first.run_id or any(
        r.run_id != first.run_id or (r.lease.token if r.lease else None) != token for r in requests
    ):
        raise InvalidInputError("delivery-binding-write-invalid")
    return requests


# the keys one request of `check_transitions` may have (snake_case or camelCase)
TRANSITION_FIELDS: Final = frozenset(
    {"run_id", "runId", "to", "operation_id", "operationId", "code"}
)


class CheckedTransition(NamedTuple):
    """One request of `transition_many`, its input checked (`to` is judged with the run:
    after the receipt, as `transition` judges it; a `to` that is no text is "")."""

    run_id: str
    to: str
    operation_id: str
    code: str | None


def check_transitions(inputs: object) -> list[CheckedTransition]:
    """Validate the inputs of `transition_many` (`Transition`s or mappings of their
    fields), each with `transition`'s input rules and codes."""
    if isinstance(inputs, str | bytes | Mapping) or not isinstance(inputs, Iterable):
        raise InvalidInputError("transition-batch-invalid")
    requests = []
    for item in inputs:
        run_id: object
        to: object
        operation_id: object
        code: object
        if isinstance(item, Transition):
            run_id, to, operation_id, code = item.run_id, item.to, item.operation_id, item.code
        elif isinstance(item, Mapping):
            if not item.keys() <= TRANSITION_FIELDS:
                # a lease among them: a fenced transition is `transition(..., lease=...)`
                raise InvalidInputError("invalid-transition-request")
            run_id = item.get("run_id", item.get("runId"))
            to = item.get("to")
            operation_id = item.get("operation_id", item.get("operationId"))
            code = item.get("code")
        else:
            raise InvalidInputError("invalid-transition-request")
        checked_run, checked_operation, checked_code, _ = require_transition_input(
            run_id, operation_id, code, None
        )
        requests.append(
            CheckedTransition(
                checked_run, to if isinstance(to, str) else "", checked_operation, checked_code
            )
        )
    return requests
