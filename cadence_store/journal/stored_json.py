"""Decoding stored event payloads and re-encoding them canonically, on a C fast path.

Verification decodes every stored payload (`JSON.stringify` text) and hashes its canonical
JSON, so this is the hottest code of `verify_integrity`. A C library (orjson when installed,
else the stdlib's C decoder and encoder) does both when the *text* proves that its output
equals cadence 1.x's byte for byte:

- every code point is below U+D800, so code-point (and UTF-8 byte) key order is UTF-16
  order, as `canonical_json` sorts;
- no ``\\u`` escape, so no surrogate and no control character reaches an encoder (the
  short escapes ``\\n \\t \\" \\\\`` are written alike by all of them);
- no ``NaN``/``Infinity`` (the stdlib decoder would accept them; JSON.stringify writes null);
- no digit followed by ``.``, ``e`` or ``E`` and no run of 16 digits, so every number is
  an integer below 10**15 (< 2**53), which every encoder writes in plain digits.

The checks may refuse texts that would have been fine (a key like "v1.2"); those, and any
text a C library refuses (too deep, not JSON), take the exact path: the stdlib decoder and
`canonical_json`, as before. Equality is tested on the golden events and the Node vectors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from .canonical import canonical_json, stdlib_sorted_json

__all__ = ["canonical_payload", "decode_payload", "fast_library"]

# Numbers that are not small integers: a fraction or exponent follows a digit, or 16 digits.
_NOT_SMALL_INT: Final = re.compile(r"[0-9](?:[.eE]|[0-9]{15})")
# Code points whose UTF-16 order can differ from code-point order (and surrogates).
_HIGH_CODE_POINT: Final = re.compile(r"[^\x00-\ud7ff]")

_exact_decode: Final[Callable[[str], Any]] = json.JSONDecoder().decode


def _stdlib_canonical(value: Any) -> bytes:
    return stdlib_sorted_json(value).encode("utf-8")


def _load_fast_library() -> tuple[str, Callable[[str], Any], Callable[[Any], bytes]]:
    try:
        import orjson
    except ImportError:  # optional speed-up: the stdlib's C encoder is the same bytes
        return "json", _exact_decode, _stdlib_canonical
    return "orjson", orjson.loads, partial(orjson.dumps, option=orjson.OPT_SORT_KEYS)


fast_library, _fast_decode, _fast_canonical = _load_fast_library()


def provably_plain(text: str) -> bool:
    """True when a C encoder's canonical output for this JSON text is cadence 1.x's."""
    if not text.isascii() and _HIGH_CODE_POINT.search(text) is not None:
        return False
    return (
        "\\u" not in text
        and "NaN" not in text
        and "Infinity" not in text
        and _NOT_SMALL_INT.search(text) is None
    )


def decode_payload(text: Any) -> tuple[Any, bytes | None]:
    """The stored JSON text's value, and its canonical JSON (UTF-8) when the fast path
    proved it; None means: compute it with `canonical_json`.

    Raises ValueError or TypeError when the text is not JSON (as `json.loads` would).
    """
    # provably_plain, inline: this runs once per event of every verified chain
    if (
        type(text) is str
        and (text.isascii() or _HIGH_CODE_POINT.search(text) is None)
        and "\\u" not in text
        and "NaN" not in text
        and "Infinity" not in text
        and _NOT_SMALL_INT.search(text) is None
    ):
        try:
            value = _fast_decode(text)
            return value, _fast_canonical(value)
        except (ValueError, TypeError, RecursionError):
            pass  # refused by the C library (too deep, not JSON): the exact path decides
    return _exact_decode(text), None


def canonical_payload(text: str) -> bytes:
    """canonical_json(json.loads(text)) as UTF-8, on the fast path where proven.

    Raises ValueError when the text is not JSON, JsonValueError when it cannot be written.
    """
    value, canonical = decode_payload(text)
    if canonical is None:
        canonical = canonical_json(value).encode("utf-8")
    return canonical
