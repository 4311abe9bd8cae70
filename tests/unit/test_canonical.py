"""cadence_store.journal.canonical: byte-compatibility with cadence 1.x / JavaScript JSON."""

from __future__ import annotations

import collections
import enum
import hashlib
import json
import math
import struct
import sys
import types
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadence_store.errors import JournalIntegrityError
from cadence_store.journal import canonical
from cadence_store.journal.canonical import (
    JsonValueError,
    canonical_json,
    compare_canonical_strings,
    js_stringify,
)
from cadence_store.journal.documents import event_payload

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = FIXTURES / "cadence-1x" / "golden-events.jsonl"
VECTORS = FIXTURES / "js-json-vectors.json"
MAX_SAFE = 2**53


# ---------------------------------------------------------------------------------------------
# 1. cadence 1.x golden events
# ---------------------------------------------------------------------------------------------


def _golden_lines() -> list[str]:
    return GOLDEN.read_text(encoding="utf-8").splitlines()


def test_golden_file_is_present() -> None:
    assert len(_golden_lines()) == 41


@pytest.mark.parametrize(
    "line", _golden_lines(), ids=lambda line: str(json.loads(line)["sequence"])
)
def test_golden_event_canonical_and_hash(line: str) -> None:
    event = json.loads(line)
    hashed = {key: event[key] for key in ("sequence", "type", "payload", "priorHash")}
    text = canonical_json(hashed)
    assert text == event["canonical"]
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == event["hash"]
    # Insertion order of the hashed object must not matter.
    assert canonical_json(dict(reversed(list(hashed.items())))) == event["canonical"]


@pytest.mark.parametrize(
    "line", _golden_lines(), ids=lambda line: str(json.loads(line)["sequence"])
)
def test_golden_line_is_js_stringify_output(line: str) -> None:
    # Each line was written by JSON.stringify; the README says U+0085/U+2028/U+2029 were
    # then escaped so every event stays on one physical line.
    expected = line.replace("\\u0085", "\u0085").replace("\\u2028", "\u2028")
    expected = expected.replace("\\u2029", "\u2029")
    assert js_stringify(json.loads(line)) == expected


def test_golden_chain_links() -> None:
    prior = "0" * 64
    for line in _golden_lines():
        event = json.loads(line)
        assert event["priorHash"] == prior
        prior = event["hash"]


# ---------------------------------------------------------------------------------------------
# 2. vectors produced by Node (tests/fixtures/make_js_json_vectors.mjs)
# ---------------------------------------------------------------------------------------------


def untag(value: Any) -> Any:
    """Decode the tagged inputs of js-json-vectors.json (see the generator's header)."""
    if isinstance(value, list):
        return [untag(item) for item in value]
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
                return {key: untag(item) for key, item in body}
        return {key: untag(item) for key, item in value.items()}
    return value


def _vectors() -> list[dict[str, Any]]:
    document = json.loads(VECTORS.read_text(encoding="utf-8"))
    vectors: list[dict[str, Any]] = document["vectors"]
    return vectors


def test_vector_file_covers_the_edge_cases() -> None:
    names = {vector["name"] for vector in _vectors()}
    assert len(names) == len(_vectors()) > 1000
    for name in (
        "float -0",
        "float 1e21",
        "float 1e-7",
        "float 5e-324",
        "float NaN",
        "int 9007199254740993",
        "int 18446744073709551616",
        "computed 0.1+0.2",
        "computed 1/3",
        "float 123e-20",
        "string loneHigh",
        "string loneLow",
        "string astral",
        "string lineSep",
        "string nel",
        "control U+001f",
        "utf16 key order",
        "array-index keys",
    ):
        assert name in names


@pytest.mark.parametrize("vector", _vectors(), ids=lambda vector: vector["name"])
def test_js_vector(vector: dict[str, Any]) -> None:
    value = untag(vector["input"])
    assert canonical_json(value) == vector["canonical"]
    assert js_stringify(value) == vector["stringify"]
    # The exact pure-Python path must agree with whatever path the public functions took.
    assert canonical._encode(value, True, 0) == vector["canonical"]
    assert canonical._encode(value, False, 0) == vector["stringify"]


# ---------------------------------------------------------------------------------------------
# Hand-written examples (documentation of the rules)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1e21, "1e+21"),
        (1e-7, "1e-7"),
        (0.000001, "0.000001"),
        (1e16, "10000000000000000"),
        (1.5e-7, "1.5e-7"),
        (1.2345678901234568e20, "123456789012345680000"),
        (5e-324, "5e-324"),
        (-0.0, "0"),
        (1.0, "1"),
        (-12.0, "-12"),
        (2**53, "9007199254740992"),
        (2**53 + 1, "9007199254740992"),
        (2**64, "18446744073709552000"),
        (10**21, "1e+21"),
        (10**400, "null"),
        (math.nan, "null"),
        (math.inf, "null"),
        (-math.inf, "null"),
        (True, "true"),
        (False, "false"),
        (None, "null"),
        ((1, (2.5, "x")), '[1,[2.5,"x"]]'),
        ("\u2028\u2029\u007f\u0085\u00e9", '"\u2028\u2029\u007f\u0085\u00e9"'),
        ('\x00\x1f\b\f\n\r\t"\\/', '"\\u0000\\u001f\\b\\f\\n\\r\\t\\"\\\\/"'),
        ("\ud800", '"\\ud800"'),
        ("a\udc00b", '"a\\udc00b"'),
        ("\ud83d\ude00", '"\U0001f600"'),  # a paired surrogate pair is one character
        ("\ude00\ud83d", '"\\ude00\\ud83d"'),
        ({"b": [{}], "a": ()}, '{"a":[],"b":[{}]}'),
    ],
)
def test_examples(value: object, expected: str) -> None:
    assert canonical_json(value) == expected
    if not isinstance(value, dict):
        assert js_stringify(value) == expected
    expected.encode("utf-8")  # never a lone surrogate in the output


def test_utf16_key_order() -> None:
    value = {"\ue000": 1, "\U0001f600": 2, "\ud83d\ude01": 3, "\udc00": 4, "\uffff": 5}
    assert (
        canonical_json(value) == '{"\U0001f600":2,"\U0001f601":3,"\\udc00":4,"\ue000":1,"\uffff":5}'
    )
    assert (
        js_stringify(value) == '{"\ue000":1,"\U0001f600":2,"\U0001f601":3,"\\udc00":4,"\uffff":5}'
    )


def test_js_stringify_keeps_insertion_order_but_moves_array_index_keys_first() -> None:
    value = {"z": 1, "b": {"y": 1, "x": 2}, "2": 0, "10": 0, "01": 0, "-1": 0, "a": None}
    assert js_stringify(value) == '{"2":0,"10":0,"z":1,"b":{"y":1,"x":2},"01":0,"-1":0,"a":null}'
    assert canonical_json(value) == '{"-1":0,"01":0,"10":0,"2":0,"a":null,"b":{"x":2,"y":1},"z":1}'


def test_mappings_and_subclasses() -> None:
    class Color(enum.IntEnum):
        RED = 3

    class Name(enum.StrEnum):
        ADA = "ada"

    value = {
        "proxy": types.MappingProxyType({"b": 1, "a": 2}),
        "ordered": collections.OrderedDict([("d", 1), ("c", 2)]),
        "enum": Color.RED,
        "name": Name.ADA,
        "sub": type("F", (float,), {})(1.5),
    }
    assert canonical_json(value) == (
        '{"enum":3,"name":"ada","ordered":{"c":2,"d":1},"proxy":{"a":2,"b":1},"sub":1.5}'
    )
    assert js_stringify(value) == (
        '{"proxy":{"b":1,"a":2},"ordered":{"d":1,"c":2},"enum":3,"name":"ada","sub":1.5}'
    )


def test_compare_canonical_strings() -> None:
    assert compare_canonical_strings("a", "b") == -1
    assert compare_canonical_strings("b", "a") == 1
    assert compare_canonical_strings("a", "a") == 0
    assert compare_canonical_strings("", "a") == -1
    assert compare_canonical_strings("a", "aa") == -1
    # UTF-16 code units: an astral character (D83D DE00) sorts before U+E000..U+FFFF.
    assert compare_canonical_strings("\U0001f600", "\ue000") == -1
    assert compare_canonical_strings("\uffff", "\U00010000") == 1
    assert compare_canonical_strings("\ud7ff", "\U00010000") == -1
    assert compare_canonical_strings("\udc00", "\U0010ffff") == 1
    assert compare_canonical_strings("\ud83d\ude00", "\U0001f600") == 0
    assert compare_canonical_strings("\u00e9", "e\u0301") == 1


# ---------------------------------------------------------------------------------------------
# 3. properties
# ---------------------------------------------------------------------------------------------

_INTERESTING = (
    '\x00\x1f"\\/\x7f\x85\u2028\u2029\ud7ff\ud800\udbff\udc00\udfff\ue000\uffff'
    "\U0001f600\U0010ffffaAz09\u00e9"
)
_chars = st.one_of(st.characters(exclude_categories=()), st.sampled_from(_INTERESTING))
_text = st.text(_chars, max_size=8)
_keys = st.one_of(_text, st.sampled_from(["0", "1", "2", "10", "01", "-1", "4294967294", "a", "b"]))
_numbers = st.one_of(
    st.integers(min_value=-MAX_SAFE, max_value=MAX_SAFE),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e21, 1e-7, 1e-6, 1e16, 5e-324, 0.1 + 0.2, 1 / 3, 2.0**53 + 2]),
)
_scalars = st.one_of(st.none(), st.booleans(), _numbers, _text)
_json_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(_keys, children, max_size=5),
    ),
    max_leaves=30,
)
_settings = settings(max_examples=200, derandomize=True, deadline=None)


def _combine_pairs(text: str) -> str:
    """A str as JavaScript sees it: a high+low surrogate pair is one character."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _js_number(number: float) -> Any:
    """The JavaScript number for ``number``: a safe integer as int, else a double (or null)."""
    if isinstance(number, int) and -MAX_SAFE <= number <= MAX_SAFE:
        return number
    try:
        double = float(number)
    except OverflowError:
        return None
    if math.isnan(double) or math.isinf(double):
        return None
    if double.is_integer() and abs(double) <= MAX_SAFE:
        return int(double)  # printed without a point or exponent, so it parses as an int
    return double


def _parsed(value: Any) -> Any:
    """json.loads output with integers beyond 2**53 read as the double JavaScript holds."""
    if isinstance(value, list):
        return [_parsed(item) for item in value]
    if isinstance(value, dict):
        return {key: _parsed(item) for key, item in value.items()}
    if type(value) is int and not -MAX_SAFE <= value <= MAX_SAFE:
        return float(value)
    return value


def _expected(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return _js_number(value)
    if isinstance(value, str):
        return _combine_pairs(value)
    if isinstance(value, (list, tuple)):
        return [_expected(item) for item in value]
    return {_combine_pairs(key): _expected(item) for key, item in value.items()}


def _same(left: Any, right: Any) -> bool:
    """Equality that also requires identical types (so 1 vs 1.0 and 0 vs False differ)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, list):
        return len(left) == len(right) and all(map(_same, left, right))
    if isinstance(left, dict):
        return list(left) == list(right) and all(_same(left[k], right[k]) for k in left)
    return bool(left == right)


def _keys_unique_as_js(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(map(_keys_unique_as_js, value))
    if isinstance(value, dict):
        combined = {_combine_pairs(key) for key in value}
        return len(combined) == len(value) and all(map(_keys_unique_as_js, value.values()))
    return True


def _js_order(keys: list[str]) -> list[str]:
    def index(key: str) -> int | None:
        if key == "0" or (key.isascii() and key.isdigit() and key[0] != "0"):
            number = int(key)
            return number if number <= 2**32 - 2 else None
        return None

    indexed = sorted((index(key), key) for key in keys if index(key) is not None)
    return [key for _, key in indexed] + [key for key in keys if index(key) is None]


def _check_key_order(text: str, canonical_order: bool) -> None:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        if canonical_order:
            assert all(
                compare_canonical_strings(a, b) < 0 for a, b in zip(keys, keys[1:], strict=False)
            )
        return dict(pairs)

    json.loads(text, object_pairs_hook=hook)


def _shuffled(value: Any, draw: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_shuffled(item, draw) for item in value]
    if isinstance(value, dict):
        keys = draw(st.permutations(list(value)))
        return {key: _shuffled(value[key], draw) for key in keys}
    return value


@_settings
@given(_json_values)
def test_outputs_parse_back_to_the_js_value(value: Any) -> None:
    if not _keys_unique_as_js(value):
        return  # e.g. both "\ud83d\ude00" and "\U0001f600" as keys: one key in JavaScript
    expected = _expected(value)
    for encode in (canonical_json, js_stringify):
        text = encode(value)
        text.encode("utf-8")  # never a lone surrogate in the output
        parsed = _parsed(json.loads(text))
        assert _same(_sort_all(parsed), _sort_all(expected))
    _check_key_order(canonical_json(value), canonical_order=True)


def _sort_all(value: Any) -> Any:
    if isinstance(value, list):
        return [_sort_all(item) for item in value]
    if isinstance(value, dict):
        return {key: _sort_all(value[key]) for key in sorted(value)}
    return value


@_settings
@given(_json_values)
def test_js_stringify_key_order_is_javascript_property_order(value: Any) -> None:
    def walk(original: Any, parsed: Any) -> None:
        if isinstance(original, (list, tuple)):
            for left, right in zip(original, parsed, strict=True):
                walk(left, right)
        elif isinstance(original, dict):
            expected = _js_order([_combine_pairs(key) for key in original])
            assert [key for key, _ in parsed] == expected
            by_key = dict(parsed)
            for key, item in original.items():
                walk(item, by_key[_combine_pairs(key)])

    if _keys_unique_as_js(value):
        walk(value, json.loads(js_stringify(value), object_pairs_hook=list))


@_settings
@given(st.data())
def test_canonical_json_ignores_key_insertion_order(data: st.DataObject) -> None:
    value = data.draw(_json_values)
    assert canonical_json(_shuffled(value, data.draw)) == canonical_json(value)


@_settings
@given(_json_values)
def test_fast_and_exact_paths_agree(value: Any) -> None:
    assert canonical._encode(value, True, 0) == canonical_json(value)
    assert canonical._encode(value, False, 0) == js_stringify(value)


def test_the_plain_encoder_writes_what_the_c_encoder_writes() -> None:
    """The writes' encoder of values `_is_plain` passes (orjson) against the stdlib C
    encoder the proof is about: every code point but lone surrogates (which `_is_plain`
    sends to the exact path), and floats in the range it lets through."""
    points = [*range(0xD800), *range(0xE000, 0x110000, 7), 0x10FFFF]
    texts = ["a" + chr(point) + "b" for point in points]
    assert [orjson.dumps(t).decode() for t in texts] == [canonical._fast_unsorted(t) for t in texts]
    keyed = {t: index for index, t in enumerate(reversed(texts))}
    assert orjson.dumps(keyed, option=canonical._SORTED).decode() == canonical.stdlib_sorted_json(
        keyed
    )
    floats = [1e-4, 0.00010000000000000002, 0.1, 0.5, 2.5, 123.456, 1e15 + 0.5]
    floats += [9999999999999998.0, 1234567890123456.8, 1 / 3, 2 / 3 * 1e12]
    floats += [10 ** (exponent / 97) * sign for exponent in range(-388, 1552) for sign in (1, -1)]
    plain = [f for f in floats if canonical._is_plain([f], True, 0)]
    assert len(plain) > 3_000
    assert orjson.dumps(plain).decode() == canonical._fast_unsorted(plain)


@_settings
@given(_json_values)
def test_one_proof_for_both_texts_of_a_payload(value: Any) -> None:
    """`canonical_and_stringified` (an append's payload: hashed and stored) answers what
    the two encoders answer one by one, plain or not."""
    document = {"payload": value, "\u00e9": [value], "0": value}
    for each in (document, {"from": "running", "to": "paused", "code": value}):
        assert canonical.canonical_and_stringified(each) == (
            canonical_json(each).encode("utf-8"),
            js_stringify(each),
        )


@_settings
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_floats_round_trip(number: float) -> None:
    assert float(canonical_json(number)) == number
    assert canonical_json(number) == canonical_json([number])[1:-1]


@_settings
@given(_text, _text)
def test_compare_canonical_strings_is_utf16_order(left: str, right: str) -> None:
    left_units = left.encode("utf-16-be", "surrogatepass")
    right_units = right.encode("utf-16-be", "surrogatepass")
    expected = (left_units > right_units) - (left_units < right_units)
    assert compare_canonical_strings(left, right) == expected
    assert compare_canonical_strings(right, left) == -expected


# ---------------------------------------------------------------------------------------------
# 4. rejected values and depth
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        {1, 2},
        frozenset(),
        b"bytes",
        bytearray(b"x"),
        object(),
        Decimal("1.5"),
        1j,
        {1: "int key"},
        {None: 1},
        {("a",): 1},
        {"a": {"b": [1, {2.5: "float key"}]}},
        [1, 2, {3}],
        {"nested": {"bytes": b""}},
        range(3),
        iter([1]),
    ],
    ids=lambda value: type(value).__name__,
)
def test_unsupported_values_raise(value: object) -> None:
    with pytest.raises(JsonValueError):
        canonical_json(value)
    with pytest.raises(JsonValueError):
        js_stringify(value)


def test_json_value_error_is_a_value_error() -> None:
    assert issubclass(JsonValueError, ValueError)


def _nested(depth: int, make_dict: bool = False) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"k": value} if make_dict else [value]
    return value


def test_nesting_up_to_512_levels_is_fine() -> None:
    assert canonical_json(_nested(512)) == "[" * 512 + '"x"' + "]" * 512
    assert js_stringify(_nested(512, make_dict=True)).count("{") == 512
    # The same depth through the exact (non-C) path: a float forces it.
    slow: Any = [1.0]
    for _ in range(511):
        slow = {"k": slow}
    assert canonical_json(slow) == '{"k":' * 511 + "[1]" + "}" * 511
    assert js_stringify(slow) == canonical_json(slow)


@pytest.mark.parametrize("depth", [513, 1_000, 100_000])
@pytest.mark.parametrize("make_dict", [False, True])
def test_too_deep_values_raise(depth: int, make_dict: bool) -> None:
    value = _nested(depth, make_dict)
    with pytest.raises(JsonValueError, match="more than 512 levels"):
        canonical_json(value)
    with pytest.raises(JsonValueError, match="more than 512 levels"):
        js_stringify(value)


@pytest.mark.parametrize("depth", [0, 1, 511, 512, 513, 514])
@pytest.mark.parametrize("shape", ["list", "dict", "mixed", "brackets in strings"])
def test_counting_brackets_never_passes_a_payload_the_walk_refuses(depth: int, shape: str) -> None:
    """`json_text_may_nest_too_deep` is the fast path of `event_payload`: where it answers
    False, the walk over the decoded value must answer False too."""
    value: Any = "[{" * 300 if shape == "brackets in strings" else "x"
    for level in range(depth):
        as_dict = shape == "dict" or (shape == "mixed" and level % 2 == 1)
        value = {"k": value} if as_dict else [value]
    text = json.dumps(value)
    too_deep = canonical.is_nested_too_deep(json.loads(text))
    assert too_deep == (depth > 512)
    if not canonical.json_text_may_nest_too_deep(text):
        assert not too_deep
    if too_deep:
        assert canonical.json_text_may_nest_too_deep(text)


def test_a_stored_payload_nested_too_deep_is_still_refused() -> None:
    text = "[" * 513 + "1" + "]" * 513
    with pytest.raises(JournalIntegrityError, match="nested too deep"):
        event_payload(text, "run-1", 1)
    assert event_payload("[" * 512 + "1" + "]" * 512, "run-1", 1) is not None


def test_cycles_raise() -> None:
    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    mapping: dict[str, Any] = {}
    mapping["self"] = mapping
    for value in (cyclic, mapping):
        with pytest.raises(JsonValueError):
            canonical_json(value)
        with pytest.raises(JsonValueError):
            js_stringify(value)


def test_low_stack_raises_json_value_error_not_recursion_error() -> None:
    limit = sys.getrecursionlimit()
    here = len(__import__("inspect").stack(0))
    sys.setrecursionlimit(here + 150)
    try:
        for value in (_nested(400), _nested(400, make_dict=True), [_nested(400, make_dict=True)]):
            try:
                canonical_json(value)
            except JsonValueError:
                pass
    finally:
        sys.setrecursionlimit(limit)
