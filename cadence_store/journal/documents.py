"""Stored JSON read back: run projections, operation outcomes and event payloads.

One decoding of each, for the repository and the read side alike. A row that does not
decode, or decodes to the wrong shape, is a `JournalIntegrityError`: the store was
written by something other than this library. Pure: no I/O, no SQLAlchemy.
"""

from __future__ import annotations

import json
from typing import Any, Final

from ..errors import JournalIntegrityError
from .canonical import is_nested_too_deep, json_text_may_nest_too_deep
from .values import RunProjection

Document = dict[str, Any]

_decode_json: Final = json.JSONDecoder().decode


def parse_document(
    text: object, code: str = "run-projection-invalid", *, run_id: str | None = None
) -> Document:
    """A stored projection document: a JSON object with a string `runId`."""
    try:
        value = json.loads(text)  # type: ignore[arg-type]  # anything else: TypeError
    except (TypeError, ValueError, RecursionError):  # RecursionError: nested too deep
        raise JournalIntegrityError(code, run_id=run_id) from None
    if not isinstance(value, dict) or not isinstance(value.get("runId"), str):
        raise JournalIntegrityError(code, run_id=run_id)
    return value


def projection_of(document: Document, *, run_id: str | None = None) -> RunProjection:
    """A projection read from the database: validated."""
    try:
        return RunProjection.from_document(document)
    except ValueError:
        raise JournalIntegrityError("run-projection-invalid", run_id=run_id) from None


def stored_projection(text: object, run_id: str | None = None) -> RunProjection:
    """A run row's `projection_json`, validated (cadence 1.x key order kept)."""
    return projection_of(parse_document(text, run_id=run_id), run_id=run_id)


def built_projection(document: Document) -> RunProjection:
    """A projection `apply_event` just built from a verified head, its fields validated
    (pydantic's validation costs less than building the model by hand in Python). Keys
    the model does not name, which a stored row may carry, are kept in the document
    (`to_dict()`, `to_json()`), as the append carries them on."""
    try:
        return RunProjection.from_document(document, ignoring_other_keys=True)
    except ValueError:
        raise JournalIntegrityError("run-projection-invalid") from None


def stored_outcome(text: object, run_id: str | None = None) -> dict[str, Any] | None:
    """An operation row's `outcome_json`: an object, or None when nothing was recorded.
    Refused when nested too deep to be written out again."""
    if text is None:
        return None
    try:
        outcome = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        outcome = None
    if not isinstance(outcome, dict) or is_nested_too_deep(outcome):
        raise JournalIntegrityError("operation-outcome-invalid", run_id=run_id)
    return outcome


def event_payload(payload_json: Any, run_id: str, sequence: Any) -> Any:
    """An event row's payload, refused when it is not JSON or is nested too deep."""
    try:
        payload = _decode_json(payload_json)
    except (TypeError, ValueError, RecursionError):
        raise JournalIntegrityError(
            "event-integrity-hash-chain", "payload is not JSON", run_id=run_id, sequence=sequence
        ) from None
    # it could not be written out again (a text it decoded from is a str)
    if json_text_may_nest_too_deep(payload_json) and is_nested_too_deep(payload):
        raise JournalIntegrityError(
            "event-integrity-hash-chain",
            "payload nested too deep",
            run_id=run_id,
            sequence=sequence,
        )
    return payload


__all__ = [
    "Document",
    "built_projection",
    "event_payload",
    "parse_document",
    "projection_of",
    "stored_outcome",
    "stored_projection",
]
