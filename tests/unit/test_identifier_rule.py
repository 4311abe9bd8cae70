"""cadence 1.x's identifier rule, code point by code point.

tests/fixtures/identifier-code-points.json is what the real JavaScript regex
(`/^[a-z0-9](?:[a-z0-9._:-]{0,126}[a-z0-9])?$/iu`, run by Node) accepts at the ends of an
identifier and inside it; tests/fixtures/make_identifier_code_points.mjs generates it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadence_store import InvalidInputError
from cadence_store.journal.validation import IDENTIFIER, is_identifier, require_operation_id

VECTORS = json.loads(
    (Path(__file__).parent.parent / "fixtures" / "identifier-code-points.json").read_text()
)
EVERY_CODE_POINT = range(0x110000)  # lone surrogates included


def test_the_ends_accept_exactly_what_cadence_1x_accepts() -> None:
    accepted = [cp for cp in EVERY_CODE_POINT if IDENTIFIER.fullmatch(chr(cp))]
    assert accepted == VECTORS["edge"]


def test_the_inside_accepts_exactly_what_cadence_1x_accepts() -> None:
    accepted = [cp for cp in EVERY_CODE_POINT if IDENTIFIER.fullmatch(f"a{chr(cp)}a")]
    assert accepted == VECTORS["inner"]


def test_the_two_case_folds_outside_ascii() -> None:
    # JavaScript's /iu folds U+212A (Kelvin sign) to k and U+017F (long s) to s
    outside_ascii = sorted({cp for cp in VECTORS["edge"] + VECTORS["inner"] if cp > 0x7F})
    assert outside_ascii == [0x017F, 0x212A]
    assert require_operation_id("op-\u212a") == "op-\u212a"
    assert require_operation_id("\u017f") == "\u017f"


def test_lengths_count_code_points() -> None:
    assert VECTORS["lengths"] == {"accepted": True, "refused": False}
    assert require_operation_id("\u212a" * 128)
    with pytest.raises(InvalidInputError):
        require_operation_id("\u212a" * 129)


def test_the_string_method_check_is_the_rule() -> None:
    """`is_identifier` (string methods for ASCII) answers as the expression does: every
    code point at an end, inside, and alone; every ASCII pair and triple around the
    edges; lengths 1, 128, 129; the empty string."""
    for cp in EVERY_CODE_POINT:
        for text in (chr(cp), f"a{chr(cp)}a", f"{chr(cp)}a", f"a{chr(cp)}"):
            assert is_identifier(text) == (IDENTIFIER.fullmatch(text) is not None), repr(text)
    ascii_sample = [chr(cp) for cp in range(0x80)]
    for first in ascii_sample:
        for last in ascii_sample:
            for text in (first + last, f"{first}-{last}", f"{first}.x:{last}"):
                assert is_identifier(text) == (IDENTIFIER.fullmatch(text) is not None)
    for text in ("", "a" * 128, "a" * 129, "a" + "-" * 126 + "b", "a" + "-" * 127 + "b"):
        assert is_identifier(text) == (IDENTIFIER.fullmatch(text) is not None), len(text)
