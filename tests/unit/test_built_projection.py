"""A projection the append builds (`built_projection`, from `apply_event`'s document) is
the model pydantic validates from that document, its key order kept; a document that is
not a projection is refused with the journal's code, never built unchecked."""

from __future__ import annotations

from typing import Any

import pytest

from cadence_store.errors import JournalIntegrityError
from cadence_store.journal import RunProjection
from cadence_store.journal.documents import built_projection

HASH = "ab" * 32
BINDING = {"gate": "design", "revision": 2, "receiptHash": "cd" * 32}
PROVED = {
    "gate": "delivery",
    "revision": 3,
    "receiptHash": "ef" * 32,
    "approvalProof": {"revision": 3, "contractHash": "01" * 32, "recordHash": "23" * 32},
}


def _document(**extra: Any) -> dict[str, Any]:
    return {
        "runId": "run-1",
        "rootHash": HASH,
        "stage": "abel-design",
        "state": "paused",
        "sequence": 7,
        "eventHash": "9f" * 32,
        "deliveryBindings": [],
        **extra,
    }


@pytest.mark.parametrize(
    "document",
    [
        _document(),
        _document(provisionalKey=HASH, pauseCode="bench"),
        _document(deliveryBindings=[BINDING, PROVED], deliveryRevision=3, change="c-1"),
        _document(state="completed", terminal="completed"),
    ],
    ids=["plain", "paused", "bound-later", "terminal"],
)
def test_a_built_projection_is_the_validated_one(document: dict[str, Any]) -> None:
    built = built_projection(document)
    assert built == RunProjection.from_document(document)
    assert built.to_dict() == document
    # cadence 1.x's key order (a change bound after the start comes last)
    assert list(built.document()) == list(document)
    assert built.to_json() == RunProjection.from_document(document).to_json()
    assert built.model_fields_set == RunProjection.from_document(document).model_fields_set
    with pytest.raises(Exception, match="frozen"):
        built.state = "running"  # type: ignore[misc]


@pytest.mark.parametrize(
    "document",
    [
        {key: value for key, value in _document().items() if key != "eventHash"},
        _document(sequence="7"),
        _document(deliveryBindings=[{**BINDING, "revision": True}]),
    ],
    ids=["missing-field", "string-sequence", "boolean-revision"],
)
def test_a_document_that_is_not_a_projection_is_refused(document: dict[str, Any]) -> None:
    with pytest.raises(JournalIntegrityError) as refused:
        built_projection(document)
    assert refused.value.code == "run-projection-invalid"


def test_a_key_no_field_names_is_carried_in_the_document() -> None:
    """A stored row may carry keys the model does not name: the append builds on the row
    as stored, so they stay in the document it writes (not refused, not dropped)."""
    document = _document(changeName="renamed-behind")
    built = built_projection(document)
    assert built == built_projection(_document())
    assert built.to_dict() == document
    assert '"changeName":"renamed-behind"' in built.to_json()
