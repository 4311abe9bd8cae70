"""JavaScript-compatible JSON encoders, byte-compatible with cadence 1.x.

Finding: PyPI `rfc8785` rejects 3 of the 41 golden events (ints >= 2**53, lone surrogates) plus
NaN/Infinity (JS: null) and Mappings that are not dicts, and is ~4x slower (12 vs 3 us/event), so
we keep our own: a cheap pre-scan proves the stdlib C encoder's output equals JSON.stringify (no
surrogates, |int| <= 2**53, floats repr'd as JS would, keys below U+D800 so code-point order is
UTF-16 order); anything else takes an exact pure-Python path (Number::toString, ES2019 strings).
"""

from __future__ import annotations

import json
import json.encoder
import math
import re
from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any, Final

import orjson

__all__ = [
    "JsonValueError",
    "canonical_and_stringified",
    "canonical_json",
    "compare_canonical_strings",
    "has_lossy_number",
    "is_nested_too_deep",
    "json_text_may_nest_too_deep",
    "js_stringify",
    "js_stringify_likely",
    "stdlib_sorted_json",
]


class JsonValueError(ValueError):
    """The value cannot be written as JSON the way cadence 1.x did (unsupported type,
    non-string object key, or nesting deeper than the limit)."""


_MAX_DEPTH: Final = 512
_MAX_SAFE: Final = 2**53
_MAX_ARRAY_INDEX: Final = 2**32 - 2

# The C string encoder (not the ASCII one): escapes `"`, `\`, \b \f \n \r \t and other
# U+0000..U+001F as lowercase \u00xx and leaves everything else raw, like JSON.stringify,
# except that it would also leave surrogate code points raw.
_encode_basestring: Final[Callable[[str], str]] = json.encoder.encode_basestring

_SURROGATE: Final = re.compile(r"[\ud800-\udfff]")
_SURROGATE_PAIR: Final = re.compile(r"[\ud800-\udbff][\udc00-\udfff]")
_SURROGATE_SPLIT: Final = re.compile(r"([\ud800-\udfff])")
# Code points whose UTF-16 order can differ from their code-point order.
_UTF16_REORDERED: Final = re.compile(r"[\ud800-\U0010ffff]")


def _reject(value: object) -> object:
    raise JsonValueError(f"unsupported JSON value of type {type(value).__name__}")


def _make_fast_encoder(sort_keys: bool) -> Callable[[object], str]:
    """The stdlib C encoder, built once (``json.dumps`` would rebuild it on every call)."""
    c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
    if c_make_encoder is not None:
        try:
            encoder = c_make_encoder(
                None, _reject, _encode_basestring, None, ":", ",", sort_keys, False, False
            )
            probe = {"b": [1, 2.5, None, True, "\u00e9\n"], "a": {}}
            expected = json.dumps(
                probe, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys
            )
            if "".join(encoder(probe, 0)) == expected:

                def fast(value: object) -> str:
                    return "".join(encoder(value, 0))

                return fast
        except Exception:  # a changed private signature: fall back to the public API
            pass
    public = json.JSONEncoder(
        ensure_ascii=False,
        check_circular=False,
        allow_nan=False,
        sort_keys=sort_keys,
        separators=(",", ":"),
        default=_reject,
    )
    return public.encode


# the stdlib encoder's JSON text, keys sorted, compact, non-ASCII kept (also used where
# orjson is not installed: `stored_json`)
stdlib_sorted_json: Final = _make_fast_encoder(True)
_fast_unsorted: Final = _make_fast_encoder(False)


# orjson writes the values `_is_plain` passed (for such values its output is the C
# encoder's, tested for every code point and for floats in the range `_is_plain` lets
# through, at a tenth of its cost); it refuses what nests deeper than it goes
# (`TypeError`), and the C encoder writes those.
_SORTED: Final = orjson.OPT_SORT_KEYS


def _is_plain(
    value: list[Any] | tuple[Any, ...] | dict[Any, Any], canonical: bool, depth: int
) -> bool:
    """True when the C encoder's output for ``value`` is exactly the JavaScript output.

    That needs only exact dicts/lists/tuples, str keys (for canonical output: no code point at
    or above U+D800, so code-point order is UTF-16 order; for JSON.stringify: no array-index
    keys, which JavaScript moves to the front), strings without surrogates, ints within
    +/-2**53, floats that are not integral and lie in [1e-4, 1e16) (there Python's repr and
    Number::toString agree digit for digit), bools and None.
    """
    if depth >= _MAX_DEPTH:
        return False
    items: Any = value
    if type(value) is dict:
        for key in value:
            if type(key) is not str:
                return False
            if canonical:
                if not key.isascii() and _UTF16_REORDERED.search(key) is not None:
                    return False
            elif key.isdecimal() or (not key.isascii() and _SURROGATE.search(key) is not None):
                return False
        items = value.values()
    for item in items:
        kind = type(item)
        if kind is str:
            if not item.isascii() and _SURROGATE.search(item) is not None:
                return False
        elif kind is int:
            if not -_MAX_SAFE <= item <= _MAX_SAFE:
                return False
        elif kind is dict or kind is list or kind is tuple:
            if not _is_plain(item, canonical, depth + 1):
                return False
        elif kind is float:
            if not 1e-4 <= abs(item) < 1e16 or item.is_integer():
                return False
        elif item is not None and kind is not bool:
            return False
    return True


def _format_float(number: float) -> str:
    """ECMAScript Number::toString(number) as used by JSON.stringify (NaN/Infinity -> null)."""
    if not math.isfinite(number):
        return "null"
    if number == 0:
        return "0"  # also -0
    text = float.__repr__(number)  # shortest round-trip digits, like Number::toString
    magnitude = abs(number)
    if magnitude < 1e16 and magnitude >= 1e-4:
        return text[:-2] if number.is_integer() else text  # "12.0" -> "12"
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    significant = digits.lstrip("0")
    # number == 0.<digits> * 10**point
    point = len(whole) + (int(exponent) if exponent else 0) - (len(digits) - len(significant))
    digits = significant.rstrip("0")
    count = len(digits)
    if count <= point <= 21:
        return sign + digits + "0" * (point - count)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * -point + digits
    power = point - 1
    suffix = f"e+{power}" if power >= 0 else f"e-{-power}"
    if count == 1:
        return sign + digits + suffix
    return sign + digits[0] + "." + digits[1:] + suffix


def _format_int(number: int) -> str:
    if -_MAX_SAFE <= number <= _MAX_SAFE:
        return int.__repr__(number)
    try:
        as_double = float(number)  # the double JavaScript would hold (round half to even)
    except OverflowError:
        return "null"  # Number(...) is +/-Infinity, which JSON.stringify writes as null
    return _format_float(as_double)


def _combine_pair(match: re.Match[str]) -> str:
    pair = match.group()
    high, low = pair[0], pair[1]
    return chr(0x10000 + ((ord(high) - 0xD800) << 10) + (ord(low) - 0xDC00))


def _encode_string(text: str) -> str:
    """JSON.stringify of a string (ES2019 well-formed: lone surrogates become \\udxxx)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return _encode_basestring(text)
    # Surrogate code points: a valid high+low pair is one character in JavaScript.
    pieces = _SURROGATE_SPLIT.split(_SURROGATE_PAIR.sub(_combine_pair, text))
    out = ['"']
    for index, piece in enumerate(pieces):
        if index % 2:
            out.append(f"\\u{ord(piece):04x}")
        elif piece:
            out.append(_encode_basestring(piece)[1:-1])
    out.append('"')
    return "".join(out)


def _utf16_key(item: tuple[str, object]) -> bytes:
    return item[0].encode("utf-16-be", "surrogatepass")


def _array_index(key: str) -> int | None:
    """The integer value of a JavaScript array-index property key ("0".."4294967294")."""
    if key == "0":
        return 0
    if key.isascii() and key.isdigit() and key[0] != "0":
        number = int(key)
        if number <= _MAX_ARRAY_INDEX:
            return number
    return None


def _js_property_order(items: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """OrdinaryOwnPropertyKeys: array-index keys ascending, then the rest in insertion order."""
    indexed: list[tuple[int, tuple[str, object]]] = []
    rest: list[tuple[str, object]] = []
    for item in items:
        index = _array_index(item[0])
        if index is None:
            rest.append(item)
        else:
            indexed.append((index, item))
    if not indexed:
        return items
    indexed.sort(key=itemgetter(0))
    return [item for _, item in indexed] + rest


def _encode(value: object, canonical: bool, depth: int) -> str:
    if isinstance(value, str):
        return _encode_string(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return _format_int(value)
    if isinstance(value, float):
        return _format_float(value)
    if isinstance(value, (list, tuple, Mapping)) and depth >= _MAX_DEPTH:
        raise JsonValueError(f"JSON value nested too deep (more than {_MAX_DEPTH} levels)")
    # Plain loops rather than comprehensions: one interpreter frame per nesting level on 3.11.
    parts: list[str] = []
    if isinstance(value, (list, tuple)):
        for item in value:
            parts.append(_encode(item, canonical, depth + 1))
        return "[" + ",".join(parts) + "]"
    if isinstance(value, Mapping):
        items: list[tuple[str, object]] = []
        reordered = False
        for key, item in value.items():
            if not isinstance(key, str):
                raise JsonValueError(f"JSON object key must be a str, not {type(key).__name__}")
            if not key.isascii() and _UTF16_REORDERED.search(key) is not None:
                reordered = True
            items.append((key, item))
        if not canonical:
            items = _js_property_order(items)
        elif reordered:
            items.sort(key=_utf16_key)
        else:
            items.sort(key=itemgetter(0))
        for key, item in items:
            parts.append(_encode_string(key) + ":" + _encode(item, canonical, depth + 1))
        return "{" + ",".join(parts) + "}"
    raise JsonValueError(f"unsupported JSON value of type {type(value).__name__}")


def _dispatch(value: object, canonical: bool) -> str:
    try:
        kind = type(value)
        if (kind is dict or kind is list or kind is tuple) and _is_plain(
            value,  # type: ignore[arg-type]
            canonical,
            0,
        ):
            try:
                return orjson.dumps(value, option=_SORTED if canonical else 0).decode()
            except TypeError:  # orjson.JSONEncodeError: nested deeper than orjson's limit
                return stdlib_sorted_json(value) if canonical else _fast_unsorted(value)
        return _encode(value, canonical, 0)
    except RecursionError:
        raise JsonValueError("JSON value nested too deep for the interpreter stack") from None


def canonical_and_stringified(value: dict[str, Any]) -> tuple[bytes, str]:
    """`canonical_json(value)` as UTF-8 and `js_stringify(value)`, with one proof for
    both where `value` is plain (an event's payload is hashed in one and stored in the
    other on every append)."""
    if type(value) is dict and _is_plain(value, True, 0) and _is_plain(value, False, 0):
        try:
            return orjson.dumps(value, option=_SORTED), orjson.dumps(value).decode()
        except TypeError:  # nested deeper than orjson's limit
            pass
    return canonical_json(value).encode("utf-8"), js_stringify(value)


def canonical_json(value: object) -> str:
    """cadence 1.x ``canonicalJson``: JSON with object keys sorted by UTF-16 code units.

    dict/Mapping -> object, list/tuple -> array, str, int, float, bool, None -> null.
    Raises JsonValueError for other types, non-str keys, or nesting deeper than 512.
    """
    return _dispatch(value, True)


def js_stringify(value: object) -> str:
    """Exactly JavaScript ``JSON.stringify(value)`` (no sorting: dict order is kept, except
    that array-index keys such as "0" or "42" come first in ascending order, as in any
    JavaScript object). Raises JsonValueError like :func:`canonical_json`."""
    return _dispatch(value, False)


def compare_canonical_strings(left: str, right: str) -> int:
    """-1, 0 or 1 comparing by UTF-16 code units (JavaScript's ``<`` on strings)."""
    if not (left.isascii() and right.isascii()) and (
        _UTF16_REORDERED.search(left) is not None or _UTF16_REORDERED.search(right) is not None
    ):
        left_units = left.encode("utf-16-be", "surrogatepass")
        right_units = right.encode("utf-16-be", "surrogatepass")
        return (left_units > right_units) - (left_units < right_units)
    return (left > right) - (left < right)


def has_lossy_number(value: object) -> bool:
    """Whether `value` holds a number that JSON.stringify writes as `null` (NaN, an
    infinity, or an integer beyond the largest double), which a reader cannot get back.

    Walks with an explicit stack: the value may be nested deeper than the interpreter's.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, int) and not isinstance(item, bool):
            if not -_MAX_SAFE <= item <= _MAX_SAFE:
                try:
                    float(item)
                except OverflowError:
                    return True
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def js_stringify_likely(value: object) -> str:
    """The C encoder's output without `js_stringify`'s checks: equal to it for the plain
    values the journal builds, but not always (lone surrogates, array-index keys, unsafe
    numbers). Only for a quick comparison whose miss is confirmed with `js_stringify`."""
    return _fast_unsorted(value)


def json_text_may_nest_too_deep(text: str, limit: int = _MAX_DEPTH) -> bool:
    """False when the JSON `text` cannot decode to a value `is_nested_too_deep` refuses:
    a value nests no deeper than its text has `[` and `{` (brackets inside strings only
    raise the bound), and counting them costs less than walking the decoded value."""
    return text.count("[") + text.count("{") > limit


def is_nested_too_deep(value: object, limit: int = _MAX_DEPTH) -> bool:
    """Whether `value` nests arrays / objects deeper than `js_stringify` writes (a stored
    value the library never wrote). Walks with an explicit stack."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
