"""How the pages write stored values: `json_text` writes what the stdlib's indented JSON
would, by orjson where it can and by the stdlib where orjson refuses the value."""

from __future__ import annotations

import json
from typing import Any

import pytest
from web_support import deep_json

from cadence_store.web.formatting import json_text


@pytest.mark.parametrize(
    "value",
    [
        {"state": "paused", "sequence": 7, "ok": True, "none": None, "list": [1, {"a": []}]},
        {"text": 'é \u2028 \U0001f600 "quoted" \\ <script>', "empty": {}, "float": 1.5},
        {"lone": "lone \udc80 surrogate"},  # orjson refuses it: the stdlib writes it
        {"big": 2**70, "negative": -(2**63) - 1},  # beyond 64 bits: the stdlib
        deep_json(300),  # deeper than orjson writes: the stdlib, indented
    ],
)
def test_json_text_is_the_stdlib_s_indented_json(value: Any) -> None:
    assert json_text(value) == json.dumps(value, indent=2, ensure_ascii=False)


def test_json_text_of_a_value_nested_deeper_than_orjson_writes() -> None:
    value = deep_json(600)  # beyond orjson's 255 levels and the 512 a store keeps
    assert json.loads(json_text(value)) == value
