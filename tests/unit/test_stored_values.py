"""A stored row becomes a `RunEvent` / `FeedItem` by pydantic's validation (the quick
path), which must build exactly what `model_construct` builds from the same columns
(the general path, which takes a row as it is); a row that is not what the types say
still comes back as stored, never as a validation error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadence_store.journal import RunEvent
from cadence_store.journal.feed import FeedItem, stored_feed_item
from cadence_store.journal.values import event_fields, stored_event

GOLDEN = Path(__file__).parents[1] / "fixtures" / "cadence-1x" / "golden-events.jsonl"
A = "a" * 64

# strings as stored: any code point, lone surrogates included
texts = st.text(st.characters(codec=None, categories=None), max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
payloads = st.dictionaries(texts, json_values, max_size=6)
columns = st.tuples(
    st.integers(1, 2**53 - 1), texts, payloads, texts, texts, st.none() | st.integers(0, 2**53)
)


def constructed_event(row: tuple[Any, ...]) -> RunEvent:
    sequence, type_, payload, prior_hash, event_hash, recorded_at = row
    return RunEvent.model_construct(
        sequence=sequence,
        type=type_,
        payload=payload,
        prior_hash=prior_hash,
        hash=event_hash,
        recorded_at=recorded_at,
    )


def fields_of(value: Any) -> dict[str, Any]:
    """Each field's value as it is held (no serializer: an ill-typed row would warn)."""
    return {name: getattr(value, name) for name in type(value).model_fields}


def same_value(built: Any, expected: Any) -> None:
    assert type(built) is type(expected)
    assert built == expected
    assert built.model_dump() == expected.model_dump()
    assert built.model_fields_set == expected.model_fields_set
    for name in type(expected).model_fields:
        assert type(getattr(built, name)) is type(getattr(expected, name)), name


@settings(max_examples=400, deadline=None)
@given(columns)
def test_a_well_typed_event_is_what_model_construct_builds(row: tuple[Any, ...]) -> None:
    event = stored_event(event_fields(*row))
    same_value(event, constructed_event(row))
    assert event.to_dict() == constructed_event(row).to_dict()


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 2**53 - 1), texts, columns)
def test_a_well_typed_feed_item_is_what_model_construct_builds(
    position: int, run_id: str, row: tuple[Any, ...]
) -> None:
    item = stored_feed_item(position, run_id, event_fields(*row))
    expected = FeedItem.model_construct(
        position=position, run_id=run_id, event=constructed_event(row)
    )
    same_value(item, expected)
    same_value(item.event, expected.event)


def test_the_golden_cadence_1x_events_are_built_alike() -> None:
    lines = GOLDEN.read_text().splitlines()
    assert len(lines) > 10
    for position, line in enumerate(lines, start=1):
        golden = json.loads(line)
        row = (
            golden["sequence"],
            golden["type"],
            golden["payload"],
            golden["priorHash"],
            golden["hash"],
            None,
        )
        same_value(stored_event(event_fields(*row)), constructed_event(row))
        item = stored_feed_item(position, "run-1", event_fields(*row))
        assert item.event == constructed_event(row)


ILL_TYPED = [
    pytest.param((1, "run-created", ["not", "an", "object"], A, A, None), id="list-payload"),
    pytest.param((1, "run-created", "text", A, A, None), id="text-payload"),
    pytest.param(("1", "run-created", {}, A, A, None), id="text-sequence"),
    pytest.param((1.0, "run-created", {}, A, A, None), id="real-sequence"),
    pytest.param((True, "run-created", {}, A, A, None), id="bool-sequence"),
    pytest.param((1, "run-created", {}, None, A, None), id="null-prior-hash"),
    pytest.param((1, "run-created", {}, A, A, "soon"), id="text-recorded-at"),
]


@pytest.mark.parametrize("row", ILL_TYPED)
def test_an_ill_typed_row_comes_back_as_stored(row: tuple[Any, ...]) -> None:
    event = stored_event(event_fields(*row))
    expected = constructed_event(row)
    assert fields_of(event) == fields_of(expected)
    for name in RunEvent.model_fields:
        assert type(getattr(event, name)) is type(getattr(expected, name)), name
    item = stored_feed_item(7, "run-1", event_fields(*row))
    assert (item.position, item.run_id) == (7, "run-1")
    assert fields_of(item.event) == fields_of(expected)


def test_an_ill_typed_position_or_run_id_comes_back_as_stored() -> None:
    row = (1, "run-created", {}, A, A, None)
    item = stored_feed_item("7", None, event_fields(*row))  # type: ignore[arg-type]
    assert (item.position, item.run_id) == ("7", None)
    same_value(item.event, constructed_event(row))
