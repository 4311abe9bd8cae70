"""The pure journal: canonical JSON, event hashing, the state machine, projections.

Nothing here does I/O or imports SQLAlchemy; it is tested without a database.
"""

from . import values
from .canonical import canonical_json, compare_canonical_strings, js_stringify
from .events import EVENT_TYPES, ZERO_EVENT_HASH, create_event, hash_event
from .projection import ChainVerifier, apply_event, reduce_documents, reduce_events
from .states import (
    LEGAL_TRANSITIONS,
    RUN_STAGES,
    RUN_STATES,
    TERMINAL_STATES,
    assert_transition,
    can_transition,
    legal_control_commands,
)
from .values import *  # noqa: F403 - the public value types (values.__all__)

__all__ = [
    "EVENT_TYPES",
    "LEGAL_TRANSITIONS",
    "RUN_STAGES",
    "RUN_STATES",
    "TERMINAL_STATES",
    "ZERO_EVENT_HASH",
    "ChainVerifier",
    "apply_event",
    "assert_transition",
    "can_transition",
    "canonical_json",
    "compare_canonical_strings",
    "create_event",
    "hash_event",
    "js_stringify",
    "legal_control_commands",
    "reduce_documents",
    "reduce_events",
]
__all__ += values.__all__
