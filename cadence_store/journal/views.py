"""The read side's values and rules: listing filters, run details, counts, the timeline.

`RunStore.list_runs` / `run_detail` / `counts` (and the same methods of `RunRepository`)
return these. Like the other values they are pydantic models with snake_case attributes
and camelCase aliases (`to_dict()`). Pure: no I/O, no SQLAlchemy; `cadence_store.repository.queries`
reads the rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import StrictInt, StrictStr

from ..errors import CadenceStoreError, InvalidInputError
from .documents import stored_outcome, stored_projection
from .projection import apply_event_in_place
from .validation import is_safe_integer, is_storable, require_change, require_root_hash
from .values import ApprovalProof, CadenceValue, RunEvent, RunProjection
from .vocabulary import (
    RUN_STATE_NAMES,
    STAGE_NAMES,
    STATE_SETTING_EVENTS,
    LeaseStanding,
    OperationState,
)


class BindingRecord(CadenceValue):
    """A row of `delivery_bindings`: a binding and the operation id that recorded it."""

    gate: StrictStr
    revision: StrictInt
    receipt_hash: StrictStr
    operation_id: StrictStr
    approval_proof: ApprovalProof | None = None


class OperationRecord(CadenceValue):
    """A row of `operations`: an idempotency receipt or a lease, as it stands when read.

    The lease token is not part of it: whoever holds a token can write with it.
    """

    operation_id: StrictStr
    kind: StrictStr
    state: OperationState
    lease: LeaseStanding
    expires_at: StrictInt | None = None
    fence: StrictInt | None = None  # a lease's current or last grant; None for receipts
    outcome: dict[str, Any] | None = None


class TimelineEntry(CadenceValue):
    """One step of a run's state path: an event that set its state (`state`, and the
    pause code it recorded), or the event where the chain stopped applying (`error`)."""

    sequence: StrictInt
    event: StrictStr
    state: StrictStr | None = None
    code: StrictStr | None = None
    error: StrictStr | None = None
    recorded_at: StrictInt | None = None  # the event's; None for events cadence 1.x wrote


class RunDetail(CadenceValue):
    """One run: its stored projection, binding rows, operations and state timeline."""

    projection: RunProjection
    delivery_bindings: tuple[BindingRecord, ...] = ()
    operations: tuple[OperationRecord, ...] = ()
    timeline: tuple[TimelineEntry, ...] = ()
    # ms by the store's clock: the first event's and the last event's time (None for runs
    # cadence 1.x wrote, until cadence-store appends to them)
    created_at: StrictInt | None = None
    updated_at: StrictInt | None = None


class StoreCounts(CadenceValue):
    """Rows in the four tables, runs per state (states in sorted order), and the runs an
    archive deleted (`archived`: counted in none of the others)."""

    runs: StrictInt
    events: StrictInt
    operations: StrictInt
    bindings: StrictInt
    by_state: dict[str, int]
    archived: StrictInt = 0


@dataclass(frozen=True, slots=True)
class RunListing:
    """A checked `list_runs` request. Empty `stages` / `states`: any."""

    stages: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    change: str | None = None
    root_hash: str | None = None
    limit: int | None = None
    after: str | None = None
    updated_after: int | None = None  # runs whose updated_at is later than this (ms)
    updated_before: int | None = None  # ... earlier than this


def _time_filter(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not is_safe_integer(value):
        raise InvalidInputError("invalid-time-filter", f"{name} is integer milliseconds")
    return value


def _names(value: object, allowed: frozenset[str], code: str) -> tuple[str, ...]:
    """One name or a collection of names, each in `allowed`; sorted, without repeats."""
    if value is None:
        return ()
    if isinstance(value, str):
        items: list[object] = [value]
    elif isinstance(value, Iterable) and not isinstance(value, bytes | Mapping):
        items = list(value)
    else:
        raise InvalidInputError(code)
    if not items or not all(isinstance(item, str) and item in allowed for item in items):
        raise InvalidInputError(code)
    return tuple(sorted({str(item) for item in items}))


def check_run_page(*, limit: object = None, after: object = None) -> tuple[int | None, str | None]:
    """A keyset page of runs (`list_runs`, `run_ids`): `limit` a positive integer,
    `after` the run id the last page ended at; each may be None."""
    if limit is not None and (
        not is_safe_integer(limit) or not isinstance(limit, int) or limit < 1
    ):
        raise InvalidInputError("invalid-limit", "limit is a positive integer")
    if after is not None and (not isinstance(after, str) or not is_storable(after)):
        raise InvalidInputError("invalid-run-cursor", "after is the run id the last page ended at")
    return limit, after


def check_run_listing(
    *,
    stage: object = None,
    state: object = None,
    change: object = None,
    root_hash: object = None,
    limit: object = None,
    after: object = None,
    updated_after: object = None,
    updated_before: object = None,
) -> RunListing:
    """Validate `list_runs` arguments; an unknown stage or state is an error, not an
    empty page (a typo should not look like "no runs")."""
    limit, after = check_run_page(limit=limit, after=after)
    return RunListing(
        stages=_names(stage, STAGE_NAMES, "invalid-run-stage"),
        states=_names(state, RUN_STATE_NAMES, "invalid-run-state"),
        change=None if change is None else require_change(change),
        root_hash=None if root_hash is None else require_root_hash(root_hash),
        limit=limit,
        after=after,
        updated_after=_time_filter(updated_after, "updated_after"),
        updated_before=_time_filter(updated_before, "updated_before"),
    )


def lease_standing(state: str, has_token: bool, expires_at: int | None, now: int) -> LeaseStanding:
    """A lease is live while `expires_at >= now` (as `assert_lease` decides)."""
    if state != OperationState.RUNNING:
        return LeaseStanding.NONE
    if not has_token or expires_at is None:
        return LeaseStanding.MISSING
    return LeaseStanding.LIVE if expires_at >= now else LeaseStanding.EXPIRED


def state_timeline(events: Iterable[RunEvent]) -> tuple[TimelineEntry, ...]:
    """The run's state path: one entry per event that set its state, in order.

    Events are applied without checking hashes (`verify_integrity` does that), so the
    path of a run whose hashes were damaged still shows; an event that cannot be applied
    ends the path with an entry naming its error code.
    """
    return state_path(
        (event.sequence, event.type, event.payload, event.hash, event.recorded_at)
        for event in events
    )


# (sequence, type, payload, hash, recorded_at) of an event, its payload already parsed
EventFields = tuple[int, str, Any, str, "int | None"]


def state_path(events: Iterable[EventFields], since: int = 0) -> tuple[TimelineEntry, ...]:
    """`state_timeline` of events given as plain fields (no model per event: a long
    chain is folded whole to show a page of it); entries of events up to `since` are
    folded but left out."""
    entries: list[TimelineEntry] = []
    projection: dict[str, Any] | None = None
    for sequence, type_, payload, hash_, recorded_at in events:
        fields = payload if isinstance(payload, Mapping) else {}
        try:
            # the fold's projection is its own: only its state and code leave it
            projection = apply_event_in_place(projection, sequence, type_, fields, hash_)
        except CadenceStoreError as error:
            entries.append(
                TimelineEntry(
                    sequence=sequence, event=type_, error=error.code, recorded_at=recorded_at
                )
            )
            break
        if projection is not None and type_ in STATE_SETTING_EVENTS and sequence > since:
            entries.append(
                TimelineEntry(
                    sequence=sequence,
                    event=type_,
                    state=projection["state"],
                    code=projection.get("pauseCode"),
                    recorded_at=recorded_at,
                )
            )
    return tuple(entries)


__all__ = [
    "BindingRecord",
    "OperationRecord",
    "RunDetail",
    "RunListing",
    "StoreCounts",
    "TimelineEntry",
    "check_run_listing",
    "check_run_page",
    "lease_standing",
    "state_path",
    "state_timeline",
    "stored_outcome",
    "stored_projection",
]
