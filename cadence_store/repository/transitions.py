"""A run's state transitions: `transition_once`, one event after the run's head.

The common case is one write: the `state-transitioned` event after the head this store's
last commit left the run at (or the head read under the row's lock), with the operation
id's receipt, landing only while the row holds that head and the id has no receipt.
Everything else (a fenced transition, a replay, a head that moved) takes the general
path: the stored head, locked, and the receipt upserted.
"""

from __future__ import annotations

from ..errors import InvalidTransitionError
from ..journal import RUN_STATES, RunProjection
from ..journal.documents import built_projection
from ..journal.validation import require_transition_input
from ..storage.statements import Statements
from .appender import EVENT_REFUSED, EventAppender
from .archived import missing_run
from .core import TRANSITIONED, JournalAccess, transition_payload
from .leases import LeaseInput, Leases, fenced
from .transaction import RunHead


class Transitions:
    """`RunRepository`'s transitions (fenced by a lease when one is given), in `access`'s
    transaction."""

    __slots__ = ("_access", "_appender", "_leases")

    def __init__(self, access: JournalAccess, appender: EventAppender, leases: Leases) -> None:
        self._access = access
        self._appender = appender
        self._leases = leases

    def transition_once(
        self, run_id: str, to: str, operation_id: str, code: str | None, lease: LeaseInput | None
    ) -> tuple[RunProjection, bool]:
        """First after the remembered head, then after the locked stored head, each in one
        write with the receipt; then a replay; then the general path (the receipt
        upserted) from the stored head read again."""
        _, _, checked_code, checked_lease = require_transition_input(
            run_id, operation_id, code, lease
        )
        access = self._access
        transaction = access.transaction
        sql = transaction.statements(write=True)
        to_a_state = isinstance(to, str) and to in RUN_STATES
        if to_a_state and checked_lease is None:
            # After the head this store's last commit left the run at, without reading
            # the row: the write names that whole head, and lands only if the row still
            # holds it and the operation id has no receipt.
            projection = self._transition_after(
                sql, transaction.known_head(run_id), to, checked_code, operation_id, known=True
            )
            if projection is not None:
                return projection, True
        head = access.head(sql, run_id, lock=True)
        if checked_lease is not None:
            if checked_lease.run_id != run_id:
                raise fenced(checked_lease, f"it is a lease of another run than {run_id}")
            self._leases.assert_live(sql, checked_lease)
        if to_a_state:
            # The common case, in one write that also checks the receipt: it writes
            # nothing when the operation id has a row already.
            projection = self._transition_after(sql, head, to, checked_code, operation_id)
            if projection is not None:
                return projection, True
        replay = access.replay(sql, run_id, operation_id, TRANSITIONED)
        if replay is not None:
            return replay, False
        if head is None:
            raise missing_run(sql, run_id)
        if not isinstance(to, str) or to not in RUN_STATES:
            raise InvalidTransitionError("event-integrity-state-mismatch")
        # No committed receipt: an uncommitted row of this operation id, or a head that
        # moved. From the stored head, with the receipt upserted (or the error raised).
        access.forget_head(run_id)
        head = access.require_head(sql, run_id, lock=True)
        payload = transition_payload(head.document(), to, checked_code)
        document, projection_json = self._appender.append(sql, head, TRANSITIONED, payload)
        access.record(
            sql, run_id, operation_id, TRANSITIONED, projection_json, document["sequence"]
        )
        return built_projection(document), True

    def _transition_after(
        self,
        sql: Statements,
        head: RunHead | None,
        to: str,
        code: str | None,
        operation_id: str,
        *,
        known: bool = False,
    ) -> RunProjection | None:
        """The transition to `to` appended after `head` with the committed receipt of
        `operation_id` (`EventAppender.append_event`; `known`: a remembered head), as the run's
        projection after it. None when there is no head, nothing was written, or the head
        does not allow the event: what follows decides (a replay first)."""
        if head is None:
            return None
        current = head.document()
        try:
            appended = self._appender.append_event(
                sql,
                head,
                current,
                TRANSITIONED,
                transition_payload(current, to, code),
                operation_id=operation_id,
                known=known,
            )
        except EVENT_REFUSED:
            return None
        if appended is None:
            return None
        document, _ = appended
        return built_projection(document)
