"""`EventAppender`: one event appended to a run's chain, in one guarded write.

The event is computed from the run's head (`journal.projection.event_after`: the stored
projection is the base, O(1) in the chain's length), and written with the run row's move
to the head after it, by compare-and-set on the head it was computed from: a head that
moved meanwhile writes nothing, so the chain never forks.
"""

from __future__ import annotations

from typing import Final

from ..errors import InvalidTransitionError, JournalIntegrityError
from ..journal.documents import Document
from ..journal.projection import event_after
from ..storage.append_statements import (
    ADVANCE_KNOWN,
    ADVANCE_RUN,
    ADVANCE_UNRECORDED,
    APPEND_RECORDED,
    APPEND_RECORDED_KNOWN,
    INSERT_EVENT,
    INSERT_RECEIPT,
)
from ..storage.statements import Statements
from .core import JournalAccess, append_values
from .transaction import RunHead

# what an event's computation raises when the head does not allow it (`append_event`)
EVENT_REFUSED: Final = (InvalidTransitionError, JournalIntegrityError)
# what an append writes once its guarded head UPDATE wrote the run's row
_EVENT: Final = (INSERT_EVENT,)
_EVENT_AND_RECEIPT: Final = (INSERT_EVENT, INSERT_RECEIPT)


class EventAppender:
    """Appends events to runs' chains in `access`'s transaction."""

    __slots__ = ("_access",)

    def __init__(self, access: JournalAccess) -> None:
        self._access = access

    def append(
        self, sql: Statements, head: RunHead, type_: str, payload: Document
    ) -> tuple[Document, str]:
        """Append one event to a locked run (its receipt is the caller's to record):
        the run's projection after it, and its JSON."""
        appended = self.append_event(sql, head, head.document(), type_, payload)
        if appended is None:
            # the run row is not the head the event was computed from: writing the event
            # would fork the chain
            raise JournalIntegrityError(
                "run-projection-integrity-mismatch", run_id=head.run_id, sequence=head.sequence
            )
        return appended

    def append_event(
        self,
        sql: Statements,
        head: RunHead,
        current: Document,
        type_: str,
        payload: Document,
        *,
        operation_id: str | None = None,
        known: bool = False,
    ) -> tuple[Document, str] | None:
        """Append the event of `type_` with `payload` after a run's `head` (`current`: its
        parsed projection) and move the run's row to the head after it, in one write that
        lands only while the row still holds `head`: all of it when `known` (a head
        remembered from an earlier commit, not read under this transaction's lock). With
        `operation_id`, that write also records the id's committed receipt (kind: the
        event's type), and lands only while the id has no row.

        Returns the run's projection after the event and its JSON; None when nothing was
        written (the head moved, or the operation id has a row). Raises, writing nothing,
        when `current` is not `head`'s or the event is not allowed after it (one of
        `EVENT_REFUSED`, before anything else is asked)."""
        sequence = head.sequence + 1
        payload_json, event_hash, document, projection_json = event_after(
            current, head.run_id, sequence, type_, payload, head.event_hash
        )
        params = append_values(head, type_, payload_json, event_hash, document, projection_json)
        profile = sql.profile
        access = self._access
        params["now"] = access.append_now(profile)
        if operation_id is None:
            written = sql.write_guarded(ADVANCE_RUN, _EVENT, params)
        else:
            params["operation_id"] = operation_id
            params["kind"] = type_
            params["outcome_json"] = projection_json
            if known:
                params["prior_projection_json"] = head.projection_json
            if profile.one_statement_append:
                found = sql.one_from(APPEND_RECORDED_KNOWN if known else APPEND_RECORDED, params)
                written = found is not None and found.advanced == 1
            else:
                advance = ADVANCE_KNOWN if known else ADVANCE_UNRECORDED
                written = sql.write_guarded(advance, _EVENT_AND_RECEIPT, params)
        if not written:
            return None
        after = RunHead(
            head.run_id, head.root_hash, head.stage, projection_json, sequence, event_hash, document
        )
        access.transaction.keep_head(after, appended=profile)
        return document, projection_json
