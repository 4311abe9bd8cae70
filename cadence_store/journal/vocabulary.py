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

# The values as plain `str`, for hot paths (a literal-speed global, not a member lookup per
# call) and SQL parameters (a driver may adapt an Enum by its name, not its value).
RUN_CREATED: Final = EventType.RUN_CREATED.value
CHANGE_BOUND: Final = EventType.CHANGE_BOUND.value
DELIVERY_BOUND: Final = EventType.DELIVERY_BOUND.value
STATE_TRANSITIONED: Final = EventType.STATE_TRANSITIONED.value
OPERATION_INTERRUPTED: Final = EventType.OPERATION_INTERRUPTED.value
KIND_START: Final = OperationKind.START.value
KIND_LEASE: Final = OperationKind.LEASE.value
RUNNING: Final = OperationState.RUNNING.value
COMMITTED: Final = OperationState.COMMITTED.value
INTERRUPTED: Final = OperationState.INTERRUPTED.value
DESIGN_STAGE: Final = Stage.DESIGN.value
# each enum's values in declaration order (cadence 1.x's order)
EVENT_TYPE_VALUES: Final = tuple(member.value for member in EventType)
OPERATION_STATE_VALUES: Final = tuple(member.value for member in OperationState)
STAGE_VALUES: Final = tuple(member.value for member in Stage)
GATE_VALUES: Final = tuple(member.value for member in Gate)
RUN_STATE_VALUES: Final = tuple(member.value for member in RunState)
JOURNAL_RECEIPT_KIND_VALUES: Final = frozenset(
    member.value for member in OperationKind if member is not OperationKind.LEASE
)

# The events that set a run's state (its timeline); the others change keys or bindings.
STATE_SETTING_EVENTS: Final[frozenset[str]] = frozenset(
    {EventType.RUN_CREATED, EventType.STATE_TRANSITIONED, EventType.OPERATION_INTERRUPTED}
)

__all__ = [
    "CHANGE_BOUND",
    "COMMITTED",
    "DELIVERY_BOUND",
    "DESIGN_STAGE",
    "EVENT_TYPE_NAMES",
    "EVENT_TYPE_VALUES",
    "GATE_VALUES",
    "INTERRUPTED",
    "JOURNAL_RECEIPT_KIND_VALUES",
    "KIND_LEASE",
    "KIND_START",
    "OPERATION_INTERRUPTED",
    "OPERATION_STATE_VALUES",
    "RUNNING",
    "RUN_CREATED",
    "RUN_STATE_VALUES",
    "STAGE_VALUES",
    "STATE_TRANSITIONED",
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
