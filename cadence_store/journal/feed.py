"""The journal feed's values and input rules: a `FeedItem`, follower names, positions.

Pure: no database. A position is an event's place in the feed (1, 2, 3, ... with gaps
allowed); a follower is a host's name for one consumer of the feed, under which it
records the position it has applied (`record_position`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import StrictInt, StrictStr, ValidationError

from ..errors import InvalidInputError
from .validation import is_identifier, is_safe_integer
from .values import CadenceValue, RunEvent, stored_event

INVALID_FOLLOWER = "invalid-follower"
INVALID_FEED_POSITION = "invalid-feed-position"
FEED_POSITION_BACKWARDS = "feed-position-backwards"


class FeedItem(CadenceValue):
    """One committed event in feed order: its position, its run, the event itself."""

    # no cadence 1.x counterpart: to_dict() is the whole object, camelCase
    cadence_additions: ClassVar[frozenset[str]] = frozenset()

    position: StrictInt
    run_id: StrictStr
    event: RunEvent


def stored_feed_item(position: int, run_id: str, event: dict[str, Any]) -> FeedItem:
    """A feed row as a `FeedItem`, `event` its event's `event_fields`: validated, or as it
    is stored where the row is not what the types say, as `stored_event` does."""
    try:
        return FeedItem.model_validate({"position": position, "run_id": run_id, "event": event})
    except ValidationError:
        return FeedItem.model_construct(position=position, run_id=run_id, event=stored_event(event))


def require_follower(value: object) -> str:
    """A follower's name: the rule of operation ids (1-128 characters: letters, digits,
    `.`, `_`, `:`, `-`, starting and ending with a letter or digit)."""
    if not isinstance(value, str) or not is_identifier(value):
        raise InvalidInputError(INVALID_FOLLOWER, "a follower is named like an operation id")
    return value


def require_feed_position(value: object) -> int:
    """A feed position: an int from 0 (before the first event) to 2**53 - 1."""
    if isinstance(value, bool) or not isinstance(value, int) or not is_safe_integer(value):
        raise InvalidInputError(INVALID_FEED_POSITION, "a position is an int >= 0")
    if value < 0:
        raise InvalidInputError(INVALID_FEED_POSITION, "a position is an int >= 0")
    return value


def require_feed_limit(value: object) -> int | None:
    """None (every item) or a positive int (`list_runs`'s rule and code)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not is_safe_integer(value):
        raise InvalidInputError("invalid-limit", "limit is a positive integer")
    if value < 1:
        raise InvalidInputError("invalid-limit", "limit is a positive integer")
    return value
