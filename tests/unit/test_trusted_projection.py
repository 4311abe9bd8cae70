"""A projection the append builds without validating (`RunProjection.from_trusted_document`,
set past pydantic's `__setattr__` through its slots' own setters) is in every part of its
state the model pydantic validates from the same document."""

from __future__ import annotations

from typing import Any

import pytest

from cadence_store.journal import RunProjection

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


def _state(model: Any) -> tuple[Any, ...]:
    """All of a model's state but its fields set (validation names only those given)."""
    return (type(model), model.__dict__, model.__pydantic_extra__, model.__pydantic_private__)


@pytest.mark.parametrize(
    "document",
    [
        _document(),
        _document(provisionalKey=HASH, pauseCode="bench"),
        _document(change="c-1", deliveryRevision=3, deliveryBindings=[BINDING, PROVED]),
        _document(state="completed", terminal="completed"),
    ],
    ids=["plain", "paused", "bound", "terminal"],
)
def test_a_trusted_projection_is_the_validated_one(document: dict[str, Any]) -> None:
    trusted = RunProjection.from_trusted_document(document)
    validated = RunProjection.from_document(document)
    assert trusted == validated
    assert trusted.to_dict() == validated.to_dict() == document
    assert trusted.document() == document
    assert _state(trusted) == _state(validated)
    for mine, theirs in zip(trusted.delivery_bindings, validated.delivery_bindings, strict=True):
        assert _state(mine) == _state(theirs)
        if mine.approval_proof is not None:
            assert _state(mine.approval_proof) == _state(theirs.approval_proof)
    # every field named, as `model_construct` names them; no extras; the document kept
    assert trusted.__pydantic_fields_set__ == set(RunProjection.model_fields)
    assert trusted.__pydantic_extra__ is None
    with pytest.raises(Exception, match="frozen"):
        trusted.state = "running"  # type: ignore[misc]
