"""Event hashing: sha256 of the canonical JSON of {sequence, type, payload, priorHash}."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any, Final

from ..errors import JournalIntegrityError
from .canonical import canonical_json
from .validation import SHA256, is_safe_integer
from .values import RunEvent

ZERO_EVENT_HASH: Final = "0" * 64

EVENT_TYPES: Final = (
    "run-created",
    "change-bound",
    "delivery-bound",
    "state-transitioned",
    "operation-interrupted",
)


def hash_event(sequence: int, type_: str, payload: Mapping[str, Any], prior_hash: str) -> str:
    unsigned = {"sequence": sequence, "type": type_, "payload": payload, "priorHash": prior_hash}
    return hashlib.sha256(canonical_json(unsigned).encode("utf-8")).hexdigest()


def create_event(sequence: int, type: str, payload: Mapping[str, Any], prior_hash: str) -> RunEvent:
    """A new signed event (cadence 1.x `createRunEvent`)."""
    if (
        not is_safe_integer(sequence)
        or sequence < 1
        or not isinstance(prior_hash, str)
        or SHA256.fullmatch(prior_hash) is None
    ):
        raise JournalIntegrityError("event-integrity-invalid-header")
    body = copy.deepcopy(dict(payload))
    return RunEvent(
        sequence=sequence,
        type=type,
        payload=body,
        prior_hash=prior_hash,
        hash=hash_event(sequence, type, body, prior_hash),
    )
