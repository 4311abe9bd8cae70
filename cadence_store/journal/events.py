"""Event hashing: sha256 of the canonical JSON of {sequence, type, payload, priorHash}."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final

from ..errors import JournalIntegrityError
from .canonical import canonical_json
from .validation import SHA256, is_safe_integer
from .values import RunEvent
from .vocabulary import EVENT_TYPE_VALUES

ZERO_EVENT_HASH: Final = "0" * 64

EVENT_TYPES: Final = EVENT_TYPE_VALUES


# Strings JSON.stringify writes as they are, between quotes (printable ASCII, no `"` or `\`).
_VERBATIM: Final = re.compile(r"[ !#-\[\]-~]*")
_MAX_SAFE: Final = 2**53
MAX_SAFE: Final = _MAX_SAFE


def _json_string(value: str) -> str:
    # ASCII letters and digits (a hash's hex) are verbatim without asking the pattern
    if (value.isascii() and value.isalnum()) or _VERBATIM.fullmatch(value):
        return f'"{value}"'
    return canonical_json(value)


# the event types as JSON strings (the hashed text; as bytes, `EVENT_TYPE_JSON`)
_TYPE_JSON: Final = {name: f'"{name}"' for name in EVENT_TYPE_VALUES}


def hash_event(sequence: int, type_: str, payload: Mapping[str, Any], prior_hash: str) -> str:
    """sha256 hex of canonical_json({sequence, type, payload, priorHash})."""
    if (
        type(sequence) is int
        and -_MAX_SAFE <= sequence <= _MAX_SAFE
        and type(type_) is str
        and type(prior_hash) is str
    ):
        # the four keys in canonical (UTF-16) order, without building the outer object:
        # every event of every chain is hashed this way, on appends and on verification
        text = (
            f'{{"payload":{canonical_json(payload)},"priorHash":{_json_string(prior_hash)},'
            f'"sequence":{sequence},"type":{_TYPE_JSON.get(type_) or _json_string(type_)}}}'
        )
    else:
        unsigned = {
            "sequence": sequence,
            "type": type_,
            "payload": payload,
            "priorHash": prior_hash,
        }
        text = canonical_json(unsigned)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# the event types as JSON strings, for headers written directly
EVENT_TYPE_JSON: Final = {name: text.encode("ascii") for name, text in _TYPE_JSON.items()}


def hash_canonical_event(
    sequence: int, type_: str, canonical_payload: bytes, prior_hash: str
) -> str | None:
    """`hash_event` of a payload whose canonical JSON (UTF-8) is already known, or None
    when the header needs the general path (`hash_event`)."""
    if not (
        type(sequence) is int
        and -_MAX_SAFE <= sequence <= _MAX_SAFE
        and type(type_) is str
        and type(prior_hash) is str
    ):
        return None
    type_json = EVENT_TYPE_JSON.get(type_)
    if type_json is None:
        type_json = _json_string(type_).encode("utf-8")
    # a hex hash (every prior hash of an intact chain) is written verbatim
    if prior_hash.isascii() and prior_hash.isalnum():
        prior_json = b'"%b"' % prior_hash.encode("ascii")
    else:
        prior_json = _json_string(prior_hash).encode("utf-8")
    return hashlib.sha256(
        b'{"payload":%b,"priorHash":%b,"sequence":%d,"type":%b}'
        % (canonical_payload, prior_json, sequence, type_json)
    ).hexdigest()


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
