"""`RunStore`: the facade. One method call is one unit of work (one transaction).

Mirrors every method of cadence 1.x's `RunStore`. It never runs DDL: a database that is
not at the head revision is refused with `SchemaOutOfDateError`, which names the upgrade
command (`RunStore.open`, the embedded owner-private store, upgrades its own file as
cadence 1.x did). Every call runs through `transactions.py` and its one retry loop
(`retries.py`): on PostgreSQL a serialization failure or deadlock re-runs the whole
transaction (bounded, with jitter) before it surfaces as `run-store-busy`, and a call
whose connection was lost (a failover) is re-run as a whole with the same operation id
until a primary answers or `failover_timeout_s` passes (`failover.py`). Reads go to
`read_bind` (a standby) when one is given; writes and units of work to the primary.

The methods whose signature is another's (the repository's reads and plain writes, the
feed's, the host-code calls of `host_calls.py`) are generated from it, as source, in
`run_store_calls.py` (`tools/generate_methods.py`, checked in CI).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from os import PathLike
from typing import Any, Self

from sqlalchemy import Engine
from sqlalchemy import inspect as inspect_database
from sqlalchemy.engine import URL

from ..errors import (
    InvalidInputError,
    SchemaOutOfDateError,
    StoreFormatError,
)
from ..journal import OperationLease, OperationStatus, RunEvent, RunProjection, js_stringify
from ..journal.archives import ArchiveProgressCallback, ArchiveReport
from ..journal.note_keys import SignerKey, VerifierKey
from ..journal.tree_views import (
    CheckpointReport,
    ConsistencyProof,
    InclusionProof,
    SignedCheckpoint,
)
from ..journal.validation import require_clock, require_root_hash
from ..journal.values import Transition
from ..journal.vocabulary import COMMITTED, INTERRUPTED
from ..repository.core import TRANSITIONED, ExpiryNeeded
from ..repository.leases import new_lease_token
from ..repository.run_repository import Clock, RunRepository
from ..storage.backends import backend_for
from ..storage.engine import create_store_engine, enable_wal, missing_sqlite_file
from ..storage.failures import READ, database_errors
from ..storage.legacy import CADENCE_TABLE_NAMES
from ..storage.schema import (
    VERSION_TABLE,
    require_schema_name,
    schema_options,
    upgrade,
    upgrade_command,
)
from ..storage.shape import assert_store_ready
from ..telemetry import traced
from . import checkpoints, retention
from .direct_write import lends_freely
from .failover import DEFAULT_FAILOVER_TIMEOUT_S, require_failover_timeout
from .host_calls import materialised
from .retention import DEFAULT_ARCHIVE_BATCH
from .retries import replaying
from .run_store_calls import RunStoreCalls
from .state_root import (
    StateRoot,
    create_database_file,
    prepare_state_root,
    secure_database_files,
)
from .transactions import Transactions
from .unit_of_work import UnitOfWork


class RunStore(RunStoreCalls):
    """The run journal on one database (a URL, or a host's `Engine`)."""

    def __init__(
        self,
        bind: str | URL | Engine,
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
        schema: str | None = None,
        failover_timeout_s: float = DEFAULT_FAILOVER_TIMEOUT_S,
        read_bind: str | URL | Engine | None = None,
        **engine_options: Any,
    ) -> None:
        """`bind`: a URL or a host `Engine` (never altered); `schema`: the PostgreSQL
        schema holding the cadence tables; `engine_options` go to `create_engine`
        (pool size and the like) when cadence-store creates the engine.

        `failover_timeout_s`: how long a call whose connection was lost is re-run (same
        operation id, backoff) before `StoreUnavailableError`; 0 turns re-running off.
        `read_bind`: a URL or `Engine` of a standby serving the reads (they may lag)."""
        self.root_hash = None if root_hash is None else require_root_hash(root_hash)
        self._clock = require_clock(clock)
        # checked before any engine exists: a bad value leaves nothing to dispose
        require_failover_timeout(failover_timeout_s)
        self.schema = require_schema_name(schema)
        self._closed = False
        self.state_root: StateRoot | None = None
        self._owns_engine = not isinstance(bind, Engine)
        self._owns_read_engine = read_bind is not None and not isinstance(read_bind, Engine)
        self._base_engine = (
            bind if isinstance(bind, Engine) else create_store_engine(bind, **engine_options)
        )
        options = schema_options(self.schema)
        # For connections that touch only cadence-store's tables (reads, transfer): an
        # option engine shares the pool, and the host's own engine is left as it was. Units
        # of work run on the plain engine, so a host's rows in them stay where they belong.
        self.engine: Engine = (
            self._base_engine.execution_options(**options) if options else self._base_engine
        )
        self._read_engine: Engine | None = None
        self._transactions: Transactions | None = None
        try:
            if self.schema is not None and not backend_for(self.engine).named_schemas:
                raise InvalidInputError("invalid-schema-name", "a schema name needs PostgreSQL")
            missing = missing_sqlite_file(self.engine)
            if missing is not None:
                # connecting would create an empty file; there is no store to use here
                command = upgrade_command(self.engine.url)
                raise SchemaOutOfDateError(
                    f"{missing} does not exist; run: {command}", command=command
                )
            with database_errors(READ), self.engine.connect() as connection:
                assert_store_ready(connection, self.schema)
                connection.rollback()
                if self._owns_engine:
                    enable_wal(connection)
            if read_bind is not None:
                base = (
                    read_bind
                    if isinstance(read_bind, Engine)
                    else create_store_engine(read_bind, **engine_options)
                )
                self._read_engine = base.execution_options(**options) if options else base
        except BaseException:
            self._dispose()
            raise
        self._transactions = Transactions(
            self._base_engine,
            self.engine,
            root_hash=self.root_hash,
            clock=self._clock,
            schema=self.schema,
            failover_timeout_s=failover_timeout_s,
            read_engine=self._read_engine,
            # a host's pool lends all its connections; ours may keep one between calls
            keep_connection=self._owns_engine
            and lends_freely(self._base_engine.pool, engine_options),
        )

    @property
    def clock(self) -> Clock | None:
        """The clock given to the store (None: the system's), which judges lease time."""
        clock: Clock | None = self._clock
        return clock

    @property
    def dialect_name(self) -> str:
        """The engine's name (`sqlite`, `postgresql`)."""
        return backend_for(self.engine).name

    @property
    def transactions(self) -> Transactions:
        """How this store's calls become transactions (`transactions.py`)."""
        assert self._transactions is not None  # set at the end of __init__
        return self._transactions

    @classmethod
    def open(cls, root: StateRoot, *, clock: Clock | None = None) -> RunStore:
        """The owner-private embedded store of a state root, as cadence 1.x opened it.

        Creates the root's directories (0700) and database file (0600), upgrades that
        file (adopting a cadence 1.x store), refuses a private store holding tables it
        does not recognise, keeps `-wal`/`-shm` 0600, and recovers expired leases.
        """
        prepared = prepare_state_root(root)
        create_database_file(prepared.database_path)
        secure_database_files(prepared.database_path)
        engine = create_store_engine(prepared.database_url)
        try:
            with engine.connect() as connection:
                tables = set(inspect_database(connection).get_table_names())
                connection.rollback()
            # A private file is the store's alone: tables that are neither cadence 1.x's
            # nor ours mean it is something else (cadence 1.x refused it too).
            if tables and not tables & (CADENCE_TABLE_NAMES | {VERSION_TABLE}):
                raise StoreFormatError(
                    prepared.database_path, f"unrecognised tables: {sorted(tables)}"
                )
            upgrade(engine)
        except StoreFormatError as error:
            engine.dispose()
            # the owner-private store is cadence's alone: backing it up and resetting it
            # is the recovery, as cadence 1.x advised
            error.database_path = prepared.database_path
            error.clashing_tables = ()
            raise
        except BaseException:
            engine.dispose()
            raise
        engine.dispose()
        store = cls(prepared.database_url, root_hash=prepared.consumer_root_hash, clock=clock)
        store.state_root = prepared
        try:
            secure_database_files(prepared.database_path)
            store.recover_expired_leases()
            secure_database_files(prepared.database_path)
        except BaseException:
            store.close()
            raise
        return store

    # -- lifecycle -------------------------------------------------------------------------

    def _dispose(self) -> None:
        if self._transactions is not None:
            self._transactions.close()
        if self._owns_engine:
            self._base_engine.dispose()
        if self._owns_read_engine and self._read_engine is not None:
            self._read_engine.dispose()

    def close(self) -> None:
        """Release the store's connections (a host's engine is left to the host)."""
        if self._closed:
            return
        self._closed = True
        if self._owns_engine:
            self.transactions.checkpoint()
        self._dispose()
        if self.state_root is not None:
            secure_database_files(self.state_root.database_path)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc_info: object) -> None:
        self.close()

    # -- transactions ----------------------------------------------------------------------

    def unit_of_work(self) -> UnitOfWork:
        """One write transaction on the primary: `with store.unit_of_work() as uow: ...`.

        It is the caller's: a lost connection is not re-run (the block may have effects
        outside the database); re-run the whole block with the same operation ids."""
        return self.transactions.unit_of_work()

    def snapshot(self) -> AbstractContextManager[RunRepository]:
        """Several reads in one snapshot: `with store.snapshot() as runs: ...` (on
        `read_bind` when given; `runs` must not write)."""
        return self.transactions.reading()

    # -- runs and their journal -----------------------------------------------------------

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
        """Move a run to state `to` (one `state-transitioned` event) and return its
        projection; `code`: the pause code of a pause. The same `operation_id` replays the
        recorded outcome; `lease`: refused with `lease-fenced` unless it is the
        operation's live lease.

        Its attempts, each a write that lands only on the head it names, until one lands:

        1. in the call's transaction (`RunRepository.transition_once`): after the head
           this store's last commit left the run at, without reading the row
           (`_transition_after` on the remembered head; no lease given); then after the
           stored head, read under its lock (`_transition_after` again); then, with no
           receipt of `operation_id` committed, its replay, or the event from the stored
           head with the receipt upserted (or the refusal raised);
        2. that transaction again, whole, while it loses a race (PostgreSQL);
        3. after a lost connection, the call again, replaying first what the lost try may
           have committed (`retries.call_with_retries`).
        """

        def work(runs: RunRepository) -> RunProjection:
            projection, _ = runs.transition_once(
                run_id, to, operation_id=operation_id, code=code, lease=lease
            )
            return projection

        return self.transactions.write(work, replaying(TRANSITIONED, run_id, operation_id, work))

    @traced
    def transition_many(
        self, requests: Iterable[Transition | Mapping[str, Any]]
    ) -> list[RunProjection]:
        """Several transitions, of one run or several, in one transaction; the projection
        after each, in order (`RunRepository.transition_many_once`'s rules)."""
        items = materialised(requests)
        # a re-run replays what a first attempt committed (all of it, or nothing)
        return self.transactions.write(lambda runs: runs.transition_many(items))

    # -- leases ------------------------------------------------------------------------------

    @traced
    def acquire_lease(
        self,
        run_id: str,
        operation_id: str,
        ttl_ms: int,
        *,
        preempt: bool = False,
        exclusive: bool = False,
    ) -> OperationLease:
        """Grant a lease on `operation_id` for `ttl_ms` milliseconds (with a new fence):
        see `RunRepository.acquire_lease`."""
        # The token is picked once per call: every attempt (a retry, a re-run after a lost
        # connection) asks for the same grant, so a re-run finds the lease its first took.
        token = new_lease_token()
        return self.transactions.write(
            lambda runs: runs.acquire_lease(
                run_id,
                operation_id,
                ttl_ms,
                preempt=preempt,
                exclusive=exclusive,
                lease_token=token,
            )
        )

    @traced
    def commit_lease(
        self, lease: OperationLease | Mapping[str, Any], outcome: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Finish a live lease with its recorded `outcome` (returned as stored)."""

        def rerun(runs: RunRepository) -> dict[str, Any]:
            if runs.finished_lease(lease, COMMITTED, outcome):
                recorded: dict[str, Any] = json.loads(js_stringify(outcome))
                return recorded
            return runs.commit_lease(lease, outcome)

        return self.transactions.write(lambda runs: runs.commit_lease(lease, outcome), rerun)

    @traced
    def interrupt_lease(self, lease: OperationLease | Mapping[str, Any]) -> None:
        """Give a live lease up; the operation may be acquired again."""

        def rerun(runs: RunRepository) -> None:
            if not runs.finished_lease(lease, INTERRUPTED):
                runs.interrupt_lease(lease)

        return self.transactions.write(lambda runs: runs.interrupt_lease(lease), rerun)

    @traced
    def inspect_operation(self, run_id: str, operation_id: str) -> OperationStatus | None:
        """The state of an operation (None if unknown); an expired lease is marked
        interrupted first (on the primary)."""
        if self._read_engine is not None:
            try:
                return self.transactions.read(
                    lambda runs: runs.inspect_operation(run_id, operation_id, expire=False)
                )
            except ExpiryNeeded:
                pass  # an expired lease is marked interrupted: that is a write
        return self.transactions.write(lambda runs: runs.inspect_operation(run_id, operation_id))

    # -- the transparency tree ------------------------------------------------------------

    @traced
    def checkpoint(self, key: SignerKey | str, *, origin: str | None = None) -> SignedCheckpoint:
        """Sign the journal feed's tree head and record it: number the feed, extend the
        stored tree by the events since the last checkpoint (only those are hashed), sign
        a C2SP checkpoint with `key` (a `SignerKey` or its text) under `origin` (default:
        the key's name) and record the note. Refused, with nothing recorded, when the
        store no longer holds the last head it signed (`checkpoint-rollback`,
        `checkpoint-mismatch`): it never signs two inconsistent views."""
        return checkpoints.checkpoint(self.transactions, self._clock, key, origin)

    @traced
    def verify_checkpoint(self, note: str | bytes, vkey: VerifierKey | str) -> CheckpointReport:
        """Check a signed checkpoint against this store: its signature by `vkey` (a
        `VerifierKey` or its text), that the first `size` leaves, recomputed from the
        events, have its root (and that the stored tree holds the events' leaves), and
        every run's chain. `CheckpointError` (`checkpoint-signature-invalid`,
        `checkpoint-rollback`, `checkpoint-mismatch` with the first event that departs)
        or the chain's own integrity error when not."""
        return checkpoints.verify(self.transactions, note, vkey)

    @traced
    def inclusion_proof(
        self, run_id: str, sequence: int | None = None, *, size: int | None = None
    ) -> InclusionProof:
        """The proof that event `sequence` of `run_id` (default: its newest) is in the
        tree of the checkpoint recorded at `size` (default: the newest recorded).
        `run-not-found`, `checkpoint-not-found` (no checkpoint of that size),
        `leaf-not-in-tree` (no such event, or not in that tree)."""
        return checkpoints.inclusion_proof(self.transactions, run_id, sequence, size)

    @traced
    def consistency_proof(self, old_size: int, new_size: int) -> ConsistencyProof:
        """The proof that the tree of `new_size` leaves extends that of `old_size` (both
        at most the newest recorded checkpoint's size, else `invalid-tree-size`)."""
        return checkpoints.consistency_proof(self.transactions, old_size, new_size)

    # -- retention ----------------------------------------------------------------------

    @traced
    def archive(
        self,
        *,
        finished_before_ms: int,
        to: str | PathLike[str],
        key: SignerKey | str,
        batch: int = DEFAULT_ARCHIVE_BATCH,
        progress: ArchiveProgressCallback | None = None,
    ) -> ArchiveReport:
        """Archive the finished runs (`completed`, `discarded`, `rejected`) whose last event
        was recorded before `finished_before_ms` (its `recorded_at`; for an event cadence
        1.x wrote, whose `recorded_at` is NULL, the run row's `updated_at`; a run with
        neither is never archived): sign a checkpoint with `key` (a `SignerKey` or its
        text), write each run (its export record and its leaves' inclusion proofs against
        that checkpoint) to the archive file `to`, made durable (fsync, rename, fsync of
        the directory), and only then delete them in transactions of at most `batch`
        runs (each also ending after about 50 ms of deleting, so that no writer waits
        long for its locks), each run whole in one, its leaves kept in the tree and its
        ids answering `run-archived`. A run that changed after the file was written is left whole.

        When `to` exists (an archive interrupted after its file was durable), the file
        is verified (`archive-invalid` when it does not; `checkpoint-signature-invalid`
        when another key signed it) and its runs still in the store are deleted;
        nothing else is archived. `progress` hears of each run written
        (phase "archive") and each transaction (phase "delete")."""
        return retention.archive(
            self.transactions,
            self._clock,
            finished_before_ms=finished_before_ms,
            to=to,
            key=key,
            batch=batch,
            progress=progress,
        )

    # -- reading ----------------------------------------------------------------------------

    def iter_events(self, run_id: str) -> Iterator[RunEvent]:
        """The run's events, streamed in batches from one snapshot."""
        with self.transactions.reading() as runs:
            yield from runs.iter_events(run_id)
