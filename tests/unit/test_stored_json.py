"""cadence_store.journal.stored_json: the C fast path of verification writes exactly what
the exact encoder writes, on the golden events, the Node vectors and generated values."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadence_store import InvalidTransitionError, JournalIntegrityError
from cadence_store.journal import (
    ChainVerifier,
    apply_event,
    canonical_json,
    js_stringify,
    stored_json,
)
from cadence_store.journal.events import hash_canonical_event, hash_event
from cadence_store.journal.stored_json import canonical_payload, decode_payload, provably_plain

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = FIXTURES / "cadence-1x" / "golden-events.jsonl"
VECTORS = FIXTURES / "js-json-vectors.json"


def _golden() -> list[dict[str, Any]]:
    return [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines()]


def _untag(value: Any) -> Any:
    """The tagged inputs of js-json-vectors.json (see test_canonical.untag)."""
    if isinstance(value, list):
        return [_untag(item) for item in value]
    if isinstance(value, dict):
        if len(value) == 1:
            ((tag, body),) = value.items()
            if tag == "$int":
                return int(body)
            if tag == "$float":
                return float(body)
            if tag == "$bits":
                return struct.unpack(">d", bytes.fromhex(body))[0]
            if tag == "$object":
                return {key: _untag(item) for key, item in body}
        return {key: _untag(item) for key, item in value.items()}
    return value


def _vectors() -> list[dict[str, Any]]:
    vectors: list[dict[str, Any]] = json.loads(VECTORS.read_text(encoding="utf-8"))["vectors"]
    return vectors


def _exact(text: str) -> bytes:
    return canonical_json(json.loads(text)).encode("utf-8")


def _same(left: Any, right: Any) -> bool:
    """Equality with identical types and key order (1 vs 1.0 and 0 vs False differ)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, list):
        return len(left) == len(right) and all(map(_same, left, right))
    if isinstance(left, dict):
        return list(left) == list(right) and all(_same(left[k], right[k]) for k in left)
    return bool(left == right) or left != left  # NaN


# -- the golden events --------------------------------------------------------------------


@pytest.mark.parametrize("event", _golden(), ids=lambda event: str(event["sequence"]))
def test_golden_event_hashes_from_its_stored_text(event: dict[str, Any]) -> None:
    stored = js_stringify(event["payload"])  # the payload_json cadence 1.x wrote
    value, fast = decode_payload(stored)
    assert _same(value, json.loads(stored))
    if fast is not None:
        assert fast == _exact(stored)
    canonical = canonical_payload(stored)
    assert canonical == canonical_json(event["payload"]).encode("utf-8")
    assert (
        hash_canonical_event(event["sequence"], event["type"], canonical, event["priorHash"])
        == event["hash"]
    )


def test_the_fast_path_takes_most_golden_events_and_refuses_the_odd_ones() -> None:
    taken = [decode_payload(js_stringify(event["payload"]))[1] is not None for event in _golden()]
    assert 10 < sum(taken) < len(taken)


def _outcome(feed: Any, events: list[dict[str, Any]]) -> Any:
    verifier = ChainVerifier()
    try:
        for event in events:
            feed(verifier, event)
        return js_stringify(verifier.result())
    except (JournalIntegrityError, InvalidTransitionError) as error:
        return (type(error), error.code, error.sequence, error.expected, error.actual)


def test_feed_json_replays_the_golden_chain_like_feed() -> None:
    events = _golden()

    def parsed(verifier: ChainVerifier, e: dict[str, Any]) -> None:
        verifier.feed(e["sequence"], e["type"], e["payload"], e["hash"], e["priorHash"])

    def stored(verifier: ChainVerifier, e: dict[str, Any]) -> None:
        text = js_stringify(e["payload"])
        verifier.feed_json(e["sequence"], e["type"], text, e["hash"], e["priorHash"])

    for length in range(1, len(events) + 1):
        assert _outcome(stored, events[:length]) == _outcome(parsed, events[:length])


# -- the Node vectors ---------------------------------------------------------------------


@pytest.mark.parametrize("vector", _vectors(), ids=lambda vector: vector["name"])
def test_js_vector_through_stored_text(vector: dict[str, Any]) -> None:
    stored = vector["stringify"]  # what JSON.stringify wrote for the input
    value, fast = decode_payload(stored)
    assert _same(value, json.loads(stored))
    if fast is not None:
        assert fast == vector["canonical"].encode("utf-8")
        # and the stdlib's C encoder (the fallback without orjson) agrees too
        assert stored_json._stdlib_canonical(value) == fast
    assert canonical_payload(stored) == _exact(stored)
    if "\\u" not in stored and not isinstance(_untag(vector["input"]), float):
        assert canonical_payload(stored) == canonical_json(_untag(vector["input"])).encode()


def test_the_fast_path_takes_plain_vectors_and_refuses_the_rest() -> None:
    taken = {v["name"] for v in _vectors() if decode_payload(v["stringify"])[1] is not None}
    assert "float 1e21" not in taken
    assert "float 0.1" not in taken
    assert "int 9007199254740993" not in taken
    assert "string loneHigh" not in taken
    assert "control U+001f" not in taken
    assert "utf16 key order" not in taken
    assert 100 < len(taken) < len(_vectors())


# -- what the text checks refuse ----------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1.5}',
        '{"a":1e3}',
        '{"a":10E3}',
        '{"a":1234567890123456}',
        '{"a":-9007199254740993}',
        '{"a":"\\ud800"}',
        '{"a":"\\u001f"}',
        '{"a":NaN}',
        '{"a":-Infinity}',
        '{"\ue000":1,"\U0001f600":2}',
        '{"a":"\U0001f600"}',
        '{"v1.2":true}',
    ],
)
def test_texts_the_fast_path_cannot_prove_take_the_exact_path(text: str) -> None:
    assert not provably_plain(text)
    value, fast = decode_payload(text)
    assert fast is None
    assert _same(value, json.loads(text))
    assert canonical_payload(text) == _exact(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"b":[1,{"d":null,"c":false}],"a":"x\\n\\t\\"\\\\/"}',
        '{"z":-123456789012345,"\u00e9":"\u2028\u2029\x7f\u0085","y":[]}',
        '{"a":1,"b":2,"a":3}',  # duplicate keys: the last value, at the first position
        '"just a string"',
        "[0,-0,true]",
        '{"a": 1 , "b" : [ ] }',
    ],
)
def test_plain_texts_take_the_fast_path_and_agree(text: str) -> None:
    assert provably_plain(text)
    value, fast = decode_payload(text)
    assert _same(value, json.loads(text))
    assert fast == _exact(text) == stored_json._stdlib_canonical(value)


@pytest.mark.parametrize("text", ["", "{", "nul", '{"a":}', "[1,]"])
def test_text_that_is_not_json_raises_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        decode_payload(text)


def test_too_deep_for_the_c_library_takes_the_exact_path() -> None:
    text = "[" * 300 + "]" * 300  # orjson writes at most 254 levels
    value, _ = decode_payload(text)
    assert canonical_payload(text) == _exact(text)
    assert _same(value, json.loads(text))


# -- generated values ---------------------------------------------------------------------

_chars = st.one_of(
    st.characters(max_codepoint=0x7F),
    st.sampled_from('\x00\x1f"\\/\x7f\x85\u00e9\u2028\u2029\ud7ff\ue000\uffff\U0001f600'),
)
_text = st.text(_chars, max_size=8)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**15), max_value=10**15),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    _text,
)
_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5), st.dictionaries(_text, children, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=500, derandomize=True, deadline=None)
@given(_values)
def test_stored_text_of_any_value_decodes_and_encodes_as_the_exact_path(value: Any) -> None:
    stored = js_stringify(value)
    decoded, fast = decode_payload(stored)
    assert _same(decoded, json.loads(stored))
    if fast is not None:
        assert fast == _exact(stored) == stored_json._stdlib_canonical(decoded)
    assert canonical_payload(stored) == _exact(stored)


def test_hash_canonical_event_is_hash_event() -> None:
    payload = {"to": "paused", "from": "running", "code": "x"}
    canonical = canonical_json(payload).encode()
    for sequence, type_, prior in [
        (1, "state-transitioned", "0" * 64),
        (7, "custom \u00e9", "ab" * 32),
        (2**53, "run-created", 'not "hex"'),
    ]:
        assert hash_canonical_event(sequence, type_, canonical, prior) == hash_event(
            sequence, type_, payload, prior
        )
    assert hash_canonical_event(True, "run-created", canonical, "0" * 64) is None
    assert hash_canonical_event(2**53 + 1, "run-created", canonical, "0" * 64) is None


# -- the in-place fold of a replay ----------------------------------------------------------


def test_apply_event_never_changes_its_input_while_the_verifier_folds_in_place() -> None:
    created = {
        "runId": "r",
        "rootHash": "ab" * 32,
        "stage": "abel-design",
        "provisionalKey": "k",
    }
    steps: list[tuple[str, dict[str, Any]]] = [
        ("run-created", created),
        ("state-transitioned", {"from": "created", "to": "paused", "code": "wait"}),
        ("change-bound", {"change": "c"}),
        ("delivery-bound", {"gate": "gate-a", "revision": 1, "receiptHash": "a" * 64}),
        ("operation-interrupted", {}),
        ("state-transitioned", {"from": "paused", "to": "discarded"}),
    ]
    verifier = ChainVerifier()
    document: dict[str, Any] | None = None
    prior = "0" * 64
    for sequence, (type_, payload) in enumerate(steps, start=1):
        digest = hash_event(sequence, type_, payload, prior)
        before = None if document is None else js_stringify(document)
        after = apply_event(document, sequence, type_, payload, digest)
        if document is not None:
            assert js_stringify(document) == before
        verifier.feed_json(sequence, type_, js_stringify(payload), digest, prior)
        assert after is not None
        assert js_stringify(verifier.result()) == js_stringify(after)
        document, prior = after, digest
