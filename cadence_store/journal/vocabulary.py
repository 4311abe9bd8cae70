"""The journal's vocabulary, named once: event types, operation kinds and states, stages,
gates, run states.

The values are cadence 1.x's strings, stored as they are in its tables and hashed into
its events, so they never change. Each enum is a `StrEnum`: a member *is* its string
(`EventType.RUN_CREATED == "run-created"`), so it can be stored, hashed and compared
with stored text directly. Membership of an arbitrary value is checked against the
frozensets below (`value in RUN_STATE_NAMES`), not the enum class (Python 3.11 raises
on `"x" in RunState`).

Pure: this module imports nothing else of cadence-store.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class EventType(StrEnum):
    RUN_CREATED = "run-created"
    CHANGE_BOUND = "change-bound"
    DELIVERY_BOUND = "delivery-bound"
    STATE_TRANSITIONED = "state-transitioned"
    OPERATION_INTERRUPTED = "operation-interrupted"


class OperationKind(StrEnum):
    """`operations.kind`: the journal call an idempotency receipt records, or a lease."""

    START = "start"
    CHANGE_BOUND = "change-bound"
    DELIVERY_BOUND = "delivery-bound"
    STATE_TRANSITIONED = "state-transitioned"
    LEASE = "lease"


class OperationState(StrEnum):
    RUNNING = "running"
    COMMITTED = "committed"
    INTERRUPTED = "interrupted"


class LeaseStanding(StrEnum):
    """How an operation's lease stands at the moment it is read."""

    LIVE = "live"
    EXPIRED = "expired"  # past its expiry, not yet recovered as interrupted
    NONE = "none"  # the operation is not running
    MISSING = "missing"  # running without a token or expiry: a damaged row


class Stage(StrEnum):
    DESIGN = "abel-design"
    IMPLEMENT = "abel-implement"


class Gate(StrEnum):
    A = "gate-a"
    B = "gate-b"


class RunState(StrEnum):
    CREATED = "created"
    VALIDATING_DELIVERY = "validating-delivery"
    READY = "ready"
    QUEUED = "queued"
    CONNECTING = "connecting"
    RUNNING = "running"
    VALIDATING = "validating"
    VERIFYING = "verifying"
    RETRYABLE = "retryable"
    PAUSED = "paused"
    APPROVAL_NEEDED = "approval-needed"
    CHANGE_VERIFYING = "change-verifying"
    READY_TO_APPLY = "ready-to-apply"
    APPLYING = "applying"
    RECOVERING = "recovering"
    COMPLETED = "completed"
    DISCARDED = "discarded"
    REJECTED = "rejected"


EVENT_TYPE_NAMES: Final[frozenset[str]] = frozenset(EventType)
OPERATION_STATE_NAMES: Final[frozenset[str]] = frozenset(OperationState)
STAGE_NAMES: Final[frozenset[str]] = frozenset(Stage)
GATE_NAMES: Final[frozenset[str]] = frozenset(Gate)
RUN_STATE_NAMES: Final[frozenset[str]] = frozenset(RunState)
TERMINAL_RUN_STATES: Final[frozenset[str]] = frozenset(
    {RunState.COMPLETED, RunState.DISCARDED, RunState.REJECTED}
)

# The events that set a run's state (its timeline); the others change keys or bindings.
STATE_SETTING_EVENTS: Final[frozenset[str]] = frozenset(
    {EventType.RUN_CREATED, EventType.STATE_TRANSITIONED, EventType.OPERATION_INTERRUPTED}
)

__all__ = [
    "EVENT_TYPE_NAMES",
    "GATE_NAMES",
    "OPERATION_STATE_NAMES",
    "RUN_STATE_NAMES",
    "STAGE_NAMES",
    "STATE_SETTING_EVENTS",
    "TERMINAL_RUN_STATES",
    "EventType",
    "Gate",
    "LeaseStanding",
    "OperationKind",
    "OperationState",
    "RunState",
    "Stage",
]
