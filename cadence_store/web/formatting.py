"""How stored values are written on a page: times, shortened hashes, JSON text.

Stored strings can be anything a writer sent (lone surrogates included): every function
here returns text for Jinja2 to escape, never markup.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import orjson

from ..errors import InvalidInputError

HASH_SHOWN = 12  # characters of a hash shown; the full value is in the title


def format_time(milliseconds: int | None) -> str:
    """UTC time of a store timestamp (ms), `-` for none (events cadence 1.x wrote)."""
    if milliseconds is None:
        return "-"
    moment = datetime.fromtimestamp(milliseconds / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def short_hash(value: str | None) -> str:
    """The first characters of a hash (the page puts the whole one in a title)."""
    if not value:
        return "-"
    return value if len(value) <= HASH_SHOWN else value[:HASH_SHOWN] + "…"


def json_text(value: Any) -> str:
    """Indented JSON for reading. orjson writes it (a page shows hundreds of payloads
    and outcomes: the stdlib indents in pure Python); what orjson refuses (a lone
    surrogate, an integer beyond 64 bits, over 255 levels) the stdlib writes, compact
    when indenting nests too deep for its pure Python encoder (stored JSON nests up to
    512 levels, which the C encoder writes)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode("utf-8")
    except (TypeError, orjson.JSONEncodeError):
        pass
    try:
        return json.dumps(value, indent=2, ensure_ascii=False)
    except RecursionError:
        return json.dumps(value, ensure_ascii=False)


def parse_time_filter(value: str | None, name: str) -> int | None:
    """A time filter from a query string: ms since the epoch, or an ISO date / date and
    time (`datetime-local` inputs send `2026-12-06T19:30`), UTC unless it says otherwise."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInputError(
            "invalid-time-filter", f"{name} is a date, a date and time, or milliseconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def time_input_value(milliseconds: int | None) -> str:
    """A time filter as a `datetime-local` input shows it (UTC), empty for none."""
    if milliseconds is None:
        return ""
    return datetime.fromtimestamp(milliseconds / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M")
