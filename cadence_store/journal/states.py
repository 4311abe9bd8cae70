"""The run state machine of cadence 1.x: 18 states, legal transitions, terminal states."""

from __future__ import annotations

from typing import Final

from ..errors import InvalidTransitionError
from .vocabulary import RUN_STATE_VALUES, STAGE_VALUES

RUN_STAGES: Final = STAGE_VALUES
RUN_STATES: Final = RUN_STATE_VALUES

TERMINAL_STATES: Final = frozenset({"completed", "discarded", "rejected"})

LEGAL_TRANSITIONS: Final[dict[str, tuple[str, ...]]] = {
    "created": ("validating-delivery", "paused", "discarded", "rejected"),
    "validating-delivery": ("ready", "paused", "approval-needed", "discarded", "rejected"),
    "ready": ("queued", "running", "paused", "discarded", "rejected"),
    "queued": ("connecting", "running", "paused", "discarded"),
    "connecting": ("running", "retryable", "paused", "discarded"),
    "running": (
        "validating",
        "verifying",
        "queued",
        "retryable",
        "paused",
        "approval-needed",
        "change-verifying",
        "discarded",
    ),
    "validating": ("running", "verifying", "retryable", "paused", "approval-needed", "discarded"),
    "verifying": (
        "running",
        "retryable",
        "paused",
        "approval-needed",
        "change-verifying",
        "discarded",
    ),
    "retryable": ("queued", "connecting", "running", "paused", "discarded"),
    "paused": (
        "paused",
        "validating-delivery",
        "ready",
        "queued",
        "connecting",
        "running",
        "approval-needed",
        "recovering",
        "completed",
        "discarded",
        "rejected",
    ),
    "approval-needed": ("validating-delivery", "paused", "discarded", "rejected"),
    "change-verifying": (
        "running",
        "retryable",
        "paused",
        "approval-needed",
        "ready-to-apply",
        "discarded",
    ),
    "ready-to-apply": ("applying", "paused", "discarded"),
    "applying": ("recovering", "completed"),
    "recovering": ("applying", "paused", "completed", "discarded", "rejected"),
    "completed": (),
    "discarded": (),
    "rejected": (),
}


def can_transition(from_: str, to: str) -> bool:
    return to in LEGAL_TRANSITIONS.get(from_, ())


def assert_transition(from_: str, to: str) -> None:
    if to not in LEGAL_TRANSITIONS.get(from_, ()):  # `can_transition`, on every append
        raise InvalidTransitionError(f"invalid-run-transition:{from_}:{to}")


def legal_control_commands(state: str) -> list[str]:
    """The operator commands cadence 1.x offered for a run in `state`."""
    if state in TERMINAL_STATES:
        return ["status"]
    if state in ("paused", "retryable", "approval-needed"):
        return ["status", "resume", "rebind", "discard"]
    if state == "recovering":
        return ["status", "resume", "discard"]
    return ["status", "cancel", "discard"]
