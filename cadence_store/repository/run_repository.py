"""`RunRepository`: the journal rules, inside a caller's SQLAlchemy `Session`.

It never commits: whoever owns the session (a `UnitOfWork`, `RunStore`, or a host
application) commits or rolls back the journal rows together with its own. Hash-chain
append and lease fencing are enforced inside the transaction, after the rows they depend
on are locked, in one lock order (`core.py`). It states each call (signature, error
boundary, contract) and hands it to the part that does the work, one part a module
(annotated in the class), on `core` (`JournalAccess`: transaction, clock, locks, heads,
receipts) and `appender` (`EventAppender`: the append).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from sqlalchemy.orm import Session

from ..journal import OperationLease, OperationStatus, RunEvent, RunProjection
from ..journal.feed import FeedItem
from ..journal.validation import check_deliveries, check_delivery, require_clock, require_root_hash
from ..journal.values import ApprovalProof, BindDelivery, Transition
from ..journal.views import RunDetail, StoreCounts
from ..storage.failures import READ, coded
from ..storage.rows import FeedRow, UnnumberedRow
from ..storage.schema import require_schema_name
from ..telemetry import traced
from .appender import EventAppender
from .batches import TransitionBatches
from .bindings import DeliveryBindings
from .core import EVENT_BATCH, Clock, JournalAccess, journal_write, system_clock
from .feed import RunFeed
from .leases import Leases
from .reading import RunReads
from .starts import RunStarts
from .transaction import JournalTransaction
from .transitions import Transitions


class RunRepository:
    """The journal's rules on a caller's session; one method call reads and writes rows,
    it never commits."""

    # its parts, one a job (annotated here so that a reader, or a tool, finds each)
    _starts: RunStarts
    _transitions: Transitions
    _batches: TransitionBatches
    _bindings: DeliveryBindings
    _leases: Leases
    _reads: RunReads
    _feed: RunFeed

    def __init__(
        self,
        session: Session | JournalTransaction,
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
        schema: str | None = None,
    ) -> None:
        """`session`: a host's `Session`, which the host commits (a `UnitOfWork` and
        `RunStore` pass the `JournalTransaction` they own, with the values they checked).
        `root_hash`: of the runs `start_run` starts; `clock`: milliseconds (default: the
        system's, on PostgreSQL the server's); `schema`: the PostgreSQL schema of
        cadence-store's tables (the session's other statements are left as they are)."""
        if isinstance(session, JournalTransaction):
            transaction = session
            schema = transaction.schema
        else:
            root_hash = None if root_hash is None else require_root_hash(root_hash)
            require_clock(clock)
            schema = require_schema_name(schema)
            transaction = JournalTransaction.on_session(session, schema)
        self.transaction = transaction
        self.schema = schema
        access = JournalAccess(transaction, clock)
        appender = EventAppender(access)
        self._leases = leases = Leases(access)
        self._starts = RunStarts(access, appender, root_hash)
        self._transitions = Transitions(access, appender, leases)
        self._batches = TransitionBatches(access)
        self._bindings = DeliveryBindings(access, appender, leases)
        self._reads = RunReads(access)
        self._feed = RunFeed(access)

    @property
    def root_hash(self) -> str | None:
        """The root hash of the runs this repository starts (None: it starts none)."""
        return self._starts.root_hash

    @property
    def session(self) -> Session:
        """The session of this repository's transaction (for host rows)."""
        return self.transaction.session

    @property
    def dialect_name(self) -> str | None:
        """The engine's name (`sqlite`, `postgresql`), None while not known yet."""
        return self.transaction.dialect_name

    @traced
    @journal_write
    def start_run(
        self,
        stage: str,
        *,
        operation_id: str,
        change: str | None = None,
        provisional_key: str | None = None,
        provisional_aliases: Iterable[str] | None = None,
    ) -> RunProjection:
        """Start a run of `stage` (`abel-design` or `abel-implement`) and return its projection.

        The run is found again by its `change`, or by its `provisional_key` (and
        `provisional_aliases`) for a design run without a change yet: a second start with
        the same key returns that run. The same `operation_id` replays the recorded run.
        Needs a root hash (`invalid-root-hash` otherwise)."""
        return self._starts.start_run(
            stage, operation_id, change, provisional_key, provisional_aliases
        )

    @traced
    @journal_write
    def bind_change(self, run_id: str, change: str, *, operation_id: str) -> RunProjection:
        """Give the design run `run_id` its `change` (a `change-bound` event); returns the
        projection. A run that cannot take a change (an implement run, or one that has a
        change) is refused with `change-binding-not-allowed`."""
        return self._starts.bind_change(run_id, change, operation_id=operation_id)

    @traced
    def transition(
        self,
        run_id: str,
        to: str,
        *,
        operation_id: str,
        code: str | None = None,
        lease: OperationLease | Mapping[str, Any] | None = None,
    ) -> RunProjection:
        """Move the run to state `to` (a `state-transitioned` event); returns the projection.

        `code` is the pause code recorded with `paused`. An illegal move raises
        `invalid-run-transition:FROM:TO`, an unknown state `event-integrity-state-mismatch`
        (see the transition table). The same `operation_id` replays the recorded outcome.
        `lease`: refused with `lease-fenced` unless it is the operation's live lease."""
        projection, _ = self.transition_once(
            run_id, to, operation_id=operation_id, code=code, lease=lease
        )
        return projection

    @traced
    @journal_write
    def transition_once(
        self,
        run_id: str,
        to: str,
        *,
        operation_id: str,
        code: str | None = None,
        lease: OperationLease | Mapping[str, Any] | None = None,
    ) -> tuple[RunProjection, bool]:
        """`transition`, and whether it appended a new event: `(projection, appended)`.

        `appended` is False when the operation id was already recorded (a retried
        request): the recorded projection comes back and nothing is written. This is how
        a host `Session` (or `AsyncRunRepository` in an `AsyncSession`) knows whether to
        add its own rows, exactly once per event::

            run, appended = runs.transition_once(run_id, "paused", operation_id=request_id)
            if appended:
                session.add(AuditRow(run_id=run_id, request_id=request_id))
        """
        return self._transitions.transition_once(run_id, to, operation_id, code, lease)

    @traced
    def transition_many(
        self, requests: Iterable[Transition | Mapping[str, Any]]
    ) -> list[RunProjection]:
        """Several transitions in one go (`transition_many_once`'s rules): the projection
        after each request, in order."""
        return [projection for projection, _ in self.transition_many_once(requests)]

    @traced
    @journal_write
    def transition_many_once(
        self, requests: Iterable[Transition | Mapping[str, Any]]
    ) -> list[tuple[RunProjection, bool]]:
        """Each request (`Transition`, or a mapping of its fields) as `transition_once`
        would answer it, called in order in this transaction: `(projection, appended)`.

        The requests may name several runs, and an operation id twice (the second
        replays the first). Their statements are sent together: on PostgreSQL four round
        trips for the whole batch, where calls of `transition` take one each. A request
        that would fail (an illegal move, an unknown run, an operation id of another
        kind, bad input) raises its error, and nothing of the batch is written."""
        return self._batches.transition_many_once(requests)

    @traced
    @journal_write
    def bind_delivery(
        self,
        run_id: str,
        gate: str,
        revision: int,
        receipt_hash: str,
        *,
        operation_id: str,
        approval_proof: ApprovalProof | Mapping[str, Any] | None = None,
        lease: OperationLease | Mapping[str, Any] | None = None,
    ) -> RunProjection:
        """Record the receipt of delivery gate `gate` (`gate-a`, `gate-b`) at `revision`
        (`delivery-bound` event and a `delivery_bindings` row), with an optional
        `approval_proof`; returns the projection. The same gate and revision with the same
        `receipt_hash` writes nothing more; another receipt is `delivery-revision-conflict`.
        `lease`: the write is fenced by that lease."""
        request = check_delivery(
            run_id, gate, revision, receipt_hash, operation_id, approval_proof, lease
        )
        return self._bindings.bind_delivery(request)

    @traced
    def check_deliveries(self, inputs: object) -> list[BindDelivery]:
        """Validate the inputs of `bind_deliveries_atomically` (cadence 1.x rules)."""
        return check_deliveries(inputs)

    @traced
    def bind_deliveries(
        self, requests: Iterable[BindDelivery | Mapping[str, Any]]
    ) -> RunProjection:
        """Bind several deliveries of one run (`bind_deliveries_once`'s rules)."""
        projection, _ = self.bind_deliveries_once(requests)
        return projection

    @traced
    @journal_write
    def bind_deliveries_once(
        self, requests: Iterable[BindDelivery | Mapping[str, Any]]
    ) -> tuple[RunProjection, bool]:
        """Bind deliveries of one run (one lease), and say whether any of them appended
        an event: `(projection, appended)`.

        `appended` is False when every request replayed its operation id or found its
        binding already stored with the same receipt: a host `Session` adds its own rows
        (an audit row, an outbox message) only when it is True, so a retried request adds
        them once. The inputs follow `bind_deliveries_atomically`'s rules."""
        return self._bindings.bind_deliveries_once(requests)

    @traced
    @journal_write
    def acquire_lease(
        self,
        run_id: str,
        operation_id: str,
        ttl_ms: int,
        *,
        preempt: bool = False,
        exclusive: bool = False,
        lease_token: str | None = None,
    ) -> OperationLease:
        """Grant a lease of `operation_id` on the run for `ttl_ms`, with the operation's
        next fence. A live lease of the operation is returned as it is unless `preempt`
        (`exclusive`: refused with `operation-already-running` instead). `lease_token`:
        the token to grant (default: a fresh one); a live lease already granted under it
        is returned as it is, whatever `preempt` and `exclusive` say: `RunStore` passes
        the same token to every attempt of one call, so a re-run after a lost connection
        finds the lease its first attempt took."""
        return self._leases.acquire_lease(
            run_id, operation_id, ttl_ms, preempt, exclusive, lease_token
        )

    @traced
    @journal_write
    def renew_lease(self, lease: OperationLease | Mapping[str, Any], ttl_ms: int) -> OperationLease:
        """Extend a live lease to `ttl_ms` from now (same token and fence); `lease-fenced` if
        it is no longer the live grant."""
        return self._leases.renew_lease(lease, ttl_ms)

    @traced
    @journal_write
    def assert_lease(self, lease: OperationLease | Mapping[str, Any]) -> None:
        """Raise `LeaseFencedError` (`lease-fenced`) unless `lease` is the live grant of its
        operation; writes nothing."""
        self._leases.assert_lease(lease)

    @traced
    @journal_write
    def commit_lease(
        self, lease: OperationLease | Mapping[str, Any], outcome: Mapping[str, Any]
    ) -> dict[str, Any]:
        """End a live lease with `outcome` (a JSON object), marking the operation committed;
        returns the stored outcome. A second commit of the same lease is `lease-fenced` (the
        outcome stays; `inspect_operation` shows it)."""
        return self._leases.commit_lease(lease, outcome)

    @traced
    @journal_write
    def interrupt_lease(self, lease: OperationLease | Mapping[str, Any]) -> None:
        """End a live lease without an outcome, marking the operation interrupted (another
        holder may then acquire it)."""
        self._leases.interrupt_lease(lease)

    @traced
    @journal_write
    def finished_lease(
        self,
        lease: OperationLease | Mapping[str, Any],
        state: str,
        outcome: Mapping[str, Any] | None = None,
    ) -> bool:
        """Whether `lease`'s operation is already finished as `state` (COMMITTED with
        exactly `outcome`, or INTERRUPTED): `RunStore` re-runs a commit or an interrupt
        whose acknowledgement was lost, and one already done counts as done. Finishing
        clears the token (as cadence 1.x did), so this cannot tell the caller's own
        finish from an identical one; the recorded result is the same either way."""
        return self._leases.finished_lease(lease, state, outcome)

    @traced
    @journal_write
    def inspect_operation(
        self, run_id: str, operation_id: str, *, expire: bool = True
    ) -> OperationStatus | None:
        """The state, outcome and lease of `operation_id` on the run (None: no such
        operation); an expired lease found here is marked interrupted first, unless
        `expire=False` (a read on a standby), which raises `ExpiryNeeded` instead."""
        return self._leases.inspect_operation(run_id, operation_id, expire)

    @traced
    @journal_write
    def recover_expired_leases(self) -> int:
        """Mark every expired running lease interrupted; returns how many were."""
        return self._leases.recover_expired_leases()

    @traced
    @coded(READ)
    def recorded_outcome(self, run_id: str, operation_id: str, kind: str) -> RunProjection | None:
        """The projection a journal operation id (`kind`: its event type) recorded when it
        committed, or None. `RunStore` looks here first when it re-runs a call whose
        connection was lost: a first attempt that committed is replayed before any lease
        check (its lease was live when it committed; it may have expired since)."""
        return self._reads.recorded_outcome(run_id, operation_id, kind)

    @traced
    @coded(READ)
    def status(self, run_id: str) -> RunProjection:
        """The run's stored projection (no replay); `run-not-found` if there is none."""
        return self._reads.status(run_id)

    @traced
    @coded(READ)
    def iter_event_rows(self, run_id: str) -> Iterator[tuple[Any, ...]]:
        """(sequence, type, payload_json, prior_hash, event_hash, recorded_at) in order,
        fetched in pages of EVENT_BATCH (a chain is never loaded whole). Plain tuples:
        an `EventRow` per row would cost verification time."""
        yield from self._reads.iter_event_rows(run_id)

    @traced
    @coded(READ)
    def iter_events(self, run_id: str) -> Iterator[RunEvent]:
        """The run's events in sequence order, read in batches."""
        yield from self._reads.iter_events(run_id)

    @traced
    @coded(READ)
    def list_events(self, run_id: str) -> list[RunEvent]:
        """The run's events in sequence order (`iter_events` streams them instead)."""
        return list(self._reads.iter_events(run_id))

    @traced
    @coded(READ)
    def rebuild_projection(self, run_id: str) -> RunProjection:
        """Replay the run's events and return the projection they produce (without comparing
        it with the stored one: that is `verify_integrity`)."""
        return self._reads.rebuild_projection(run_id)

    @traced
    @coded(READ)
    def verify_integrity(self, run_id: str) -> RunProjection:
        """Replay the chain and compare it with everything stored about the run: the
        projection (key order included), the run row's columns, the binding rows and the
        operations rows (each journal receipt must be a projection the chain produced)."""
        return self._reads.verify_integrity(run_id)

    @traced
    @coded(READ)
    def run_ids(self, *, after: str | None = None, limit: int | None = None) -> list[str]:
        """Run ids in the engine's sorted order: after `after` (a keyset page: the last id
        of the previous one), at most `limit`, all by default; checked as `list_runs`'."""
        return self._reads.run_ids(after, limit)

    @traced
    @coded(READ)
    def list_runs(
        self,
        *,
        stage: str | Iterable[str] | None = None,
        state: str | Iterable[str] | None = None,
        change: str | None = None,
        limit: int | None = None,
        after: str | None = None,
        root_hash: str | None = None,
        updated_after: int | None = None,
        updated_before: int | None = None,
    ) -> list[RunProjection]:
        """Stored projections of the runs that match every filter given, in run id order.

        `stage` / `state`: one name or several; `limit`: at most that many; `after`: the
        last run id of the previous page (keyset pagination). Runs of every root hash
        unless `root_hash` is given. `updated_after` / `updated_before`: runs last appended
        to strictly after / before that time (ms; runs without times never match)."""
        return self._reads.list_runs(
            stage, state, change, limit, after, root_hash, updated_after, updated_before
        )

    @traced
    @coded(READ)
    def run_detail(self, run_id: str) -> RunDetail:
        """The run's projection, binding rows, operations (leases judged by the clock)
        and state timeline."""
        return self._reads.run_detail(run_id)

    @traced
    @coded(READ)
    def counts(self) -> StoreCounts:
        """Rows of runs, events, operations and bindings, and runs per state."""
        return self._reads.counts()

    @traced
    @coded(READ)
    def read_feed(
        self, *, after: int = 0, limit: int | None = None, run_id: str | None = None
    ) -> list[FeedItem]:
        """Committed events with a position above `after`, in feed order (`limit` of them
        at most; `run_id`: that run's only).

        Positions are given after commit (PostgreSQL: by the appending process's feed
        notifier, `storage.feed_notifier`; SQLite: by the append itself), so a reader
        needs no write. Events still without one (an import, a writer that died between
        its commit and its numbering) are numbered first (`number_feed`) when this
        transaction can (read-write, READ COMMITTED, a role that may update the events):
        the feed's numbering lock is then held until it ends, so such a transaction
        should end soon. Otherwise they come later, after what is returned, once
        numbered: a read-only role, a standby, a REPEATABLE READ transaction read what
        is numbered."""
        return self._feed.read_feed(after, limit, run_id)

    @traced
    @coded(READ)
    def read_feed_rows(
        self, *, after: int = 0, limit: int | None = None, run_id: str | None = None
    ) -> list[FeedRow]:
        """`read_feed`'s rows, not yet `FeedItem`s (`feed.feed_item` makes each): a follower
        converts each as it yields it, so the collector never finds a page's items alive."""
        return self._feed.read_feed_rows(after, limit, run_id)

    @traced
    @coded(READ)
    def feed_unnumbered(self) -> UnnumberedRow | None:
        """None when every event has a feed position; else who may number them."""
        return self._feed.feed_unnumbered()

    @traced
    @journal_write
    def number_feed(self) -> int:
        """Give the events committed without a position theirs (PostgreSQL; on SQLite an
        append numbers its event itself, and only an import leaves some to number):
        the count numbered. The numbering lock is held until this transaction commits,
        so commit it soon (see `storage.feed_statements`)."""
        return self._feed.number_feed()

    @traced
    @coded(READ)
    def newest_feed(self, limit: int) -> list[FeedItem]:
        """The `limit` newest numbered feed items, newest first. It numbers nothing, so it
        writes nothing (a read snapshot, a standby): items still waiting for their
        position are not among them yet."""
        return self._feed.newest_feed(limit)

    @traced
    @coded(READ)
    def follower_position(self, follower: str) -> int:
        """The position `follower` recorded last (`record_position`), 0 if none."""
        return self._feed.follower_position(follower)

    @traced
    @journal_write
    def record_position(self, follower: str, position: int, *, rewind: bool = False) -> None:
        """Record that `follower` has applied every item up to `position`, in this
        transaction (with the host's rows: both commit, or neither).

        A position below the one recorded is refused (`feed-position-backwards`, nothing
        written): the follower would apply those items again. `rewind=True` moves it back
        on purpose (a read model rebuilt from an earlier point)."""
        self._feed.record_position(follower, position, rewind)


__all__ = ["EVENT_BATCH", "Clock", "RunRepository", "check_delivery", "system_clock"]
