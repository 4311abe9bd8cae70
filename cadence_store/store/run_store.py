"""`RunStore`: the facade. One method call is one unit of work (one transaction).

Mirrors every method of cadence 1.x's `RunStore`. It never runs DDL: a database that is
not at the head revision is refused with `SchemaOutOfDateError`, which names the upgrade
command (`RunStore.open`, the embedded owner-private store, upgrades its own file as
cadence 1.x did). Each call is described once in `calls.py` and run by `runner.py`: on
PostgreSQL a serialization failure or deadlock re-runs the whole transaction (bounded,
with jitter) before it surfaces as `run-store-busy`, and a call whose connection was lost
(a failover) is re-run as a whole with the same operation id until a primary answers or
`failover_timeout_s` passes (`failover.py`). Reads go to `read_bind` (a standby) when one
is given; writes and units of work to the primary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Self

from sqlalchemy import Engine, inspect
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session

from ..errors import (
    InvalidInputError,
    SchemaOutOfDateError,
    StoreFormatError,
)
from ..journal import OperationLease, OperationStatus, RunEvent, RunProjection
from ..journal.validation import require_clock, require_root_hash
from ..journal.values import ApprovalProof, BindDelivery
from ..journal.views import RunDetail, StoreCounts
from ..repository.run_repository import Clock, ExpiryNeeded, RunRepository
from ..storage.engine import (
    create_store_engine,
    enable_wal,
    is_sqlite,
    missing_sqlite_file,
)
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
from ..telemetry import instrument
from . import calls
from .direct_write import lends_freely
from .failover import DEFAULT_FAILOVER_TIMEOUT_S, require_failover_timeout
from .runner import Runner
from .state_root import (
    StateRoot,
    create_database_file,
    prepare_state_root,
    secure_database_files,
)
from .unit_of_work import UnitOfWork

Write = Callable[[Session], object]


@instrument
class RunStore:
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
        self._runner: Runner | None = None
        try:
            if self.schema is not None and is_sqlite(self.engine):
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
                if self._owns_engine and is_sqlite(connection):
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
        self._runner = Runner(
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
    def dialect_name(self) -> str:
        """The engine's name (`sqlite`, `postgresql`)."""
        return str(self.engine.dialect.name)

    @property
    def runner(self) -> Runner:
        """How this store's calls become transactions (`runner.py`)."""
        assert self._runner is not None  # set at the end of __init__
        return self._runner

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
                tables = set(inspect(connection).get_table_names())
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
        if self._runner is not None:
            self._runner.close()
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
            self.runner.checkpoint()
        self._dispose()
        if self.state_root is not None:
            secure_database_files(self.state_root.database_path)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- transactions ----------------------------------------------------------------------

    def unit_of_work(self) -> UnitOfWork:
        """One write transaction on the primary: `with store.unit_of_work() as uow: ...`.

        It is the caller's: a lost connection is not re-run (the block may have effects
        outside the database); re-run the whole block with the same operation ids."""
        return self.runner.unit_of_work()

    def snapshot(self) -> AbstractContextManager[RunRepository]:
        """Several reads in one snapshot: `with store.snapshot() as runs: ...` (on
        `read_bind` when given; `runs` must not write)."""
        return self.runner.reading()

    # -- runs and their journal ------------------------------------------------------------

    def start_run(
        self,
        stage: str,
        *,
        operation_id: str,
        change: str | None = None,
        provisional_key: str | None = None,
        provisional_aliases: Iterable[str] | None = None,
    ) -> RunProjection:
        """Start a run of `stage` (or return the run its keys already name)."""
        call = calls.start_run(stage, operation_id, change, provisional_key, provisional_aliases)
        return self.runner.write(call.work, call.rerun)

    def bind_change(self, run_id: str, change: str, *, operation_id: str) -> RunProjection:
        """Bind a change name to a run started without one."""
        return self.runner.write(
            lambda runs: runs.bind_change(run_id, change, operation_id=operation_id)
        )

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
        """Record the gate receipt a run was admitted under."""
        call = calls.bind_delivery(
            run_id, gate, revision, receipt_hash, operation_id, approval_proof, lease
        )
        return self.runner.write(call.work, call.rerun)

    def bind_delivery_atomically(
        self,
        run_id: str,
        gate: str,
        revision: int,
        receipt_hash: str,
        *,
        operation_id: str,
        write: Write,
        approval_proof: ApprovalProof | Mapping[str, Any] | None = None,
        lease: OperationLease | Mapping[str, Any] | None = None,
    ) -> RunProjection:
        """`bind_delivery`, and `write(session)` in the same transaction.

        `write` runs only when the call appends the event: a replayed operation id, or a
        binding already stored with this receipt, returns the projection without it.
        """
        host = calls.bind_delivery_atomically(
            run_id, gate, revision, receipt_hash, operation_id, approval_proof, lease, write
        )
        call = host.with_write(write)
        return self.runner.write(call.work, call.rerun, host_code=True)

    def bind_deliveries_atomically(
        self, inputs: Iterable[BindDelivery | Mapping[str, Any]], *, write: Write
    ) -> RunProjection:
        """Several bindings of one run (one lease), and `write(session)`, in one transaction.

        `write` runs once when at least one input appends an event, not at all when every
        input replays.
        """
        call = calls.bind_deliveries_atomically(inputs, write).with_write(write)
        return self.runner.write(call.work, call.rerun, host_code=True)

    def transition(
        self,
        run_id: str,
        to: str,
        *,
        operation_id: str,
        code: str | None = None,
        lease: OperationLease | Mapping[str, Any] | None = None,
    ) -> RunProjection:
        """Move a run to state `to` (one event); `code`: the pause code of a pause."""
        call = calls.transition(run_id, to, operation_id, code, lease)
        return self.runner.write(call.work, call.rerun)

    def transition_atomically(
        self,
        run_id: str,
        to: str,
        *,
        operation_id: str,
        write: Write,
        code: str | None = None,
        lease: OperationLease | Mapping[str, Any] | None = None,
    ) -> RunProjection:
        """`transition`, and `write(session)` in the same transaction.

        A replayed operation id returns its recorded projection without calling `write`
        (as cadence 1.x did).
        """
        host = calls.transition_atomically(run_id, to, operation_id, code, lease, write)
        call = host.with_write(write)
        return self.runner.write(call.work, call.rerun, host_code=True)

    # -- leases ------------------------------------------------------------------------------

    def acquire_lease(
        self,
        run_id: str,
        operation_id: str,
        ttl_ms: int,
        *,
        preempt: bool = False,
        exclusive: bool = False,
    ) -> OperationLease:
        """Grant a lease on `operation_id` for `ttl_ms` milliseconds (with a new fence)."""
        call = calls.acquire_lease(run_id, operation_id, ttl_ms, preempt, exclusive)
        return self.runner.write(call.work, call.rerun)

    def renew_lease(self, lease: OperationLease | Mapping[str, Any], ttl_ms: int) -> OperationLease:
        """Extend a live lease to `ttl_ms` from now (same token and fence)."""
        return self.runner.write(lambda runs: runs.renew_lease(lease, ttl_ms))

    def assert_lease(self, lease: OperationLease | Mapping[str, Any]) -> None:
        """Raise `lease-fenced` unless `lease` is the live lease of its operation."""
        self.runner.write(lambda runs: runs.assert_lease(lease))

    def commit_lease(
        self, lease: OperationLease | Mapping[str, Any], outcome: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Finish a live lease with its recorded `outcome` (returned as stored)."""
        call = calls.commit_lease(lease, outcome)
        return self.runner.write(call.work, call.rerun)

    def interrupt_lease(self, lease: OperationLease | Mapping[str, Any]) -> None:
        """Give a live lease up; the operation may be acquired again."""
        call = calls.interrupt_lease(lease)
        self.runner.write(call.work, call.rerun)

    def inspect_operation(self, run_id: str, operation_id: str) -> OperationStatus | None:
        """The state of an operation (None if unknown); an expired lease is marked
        interrupted first (on the primary)."""
        if self._read_engine is not None:
            try:
                return self.runner.read(
                    lambda runs: runs.inspect_operation(run_id, operation_id, expire=False)
                )
            except ExpiryNeeded:
                pass  # an expired lease is marked interrupted: that is a write
        return self.runner.write(lambda runs: runs.inspect_operation(run_id, operation_id))

    def recover_expired_leases(self) -> int:
        """Mark every expired lease interrupted; returns how many."""
        return self.runner.write(lambda runs: runs.recover_expired_leases())

    # -- reading (one snapshot each) ---------------------------------------------------------

    def status(self, run_id: str) -> RunProjection:
        """The run's stored projection."""
        return self.runner.read(lambda runs: runs.status(run_id))

    def list_events(self, run_id: str) -> list[RunEvent]:
        """The run's events in sequence order."""
        return self.runner.read(lambda runs: runs.list_events(run_id))

    def iter_events(self, run_id: str) -> Iterator[RunEvent]:
        """The run's events, streamed in batches from one snapshot."""
        with self.runner.reading() as runs:
            yield from runs.iter_events(run_id)

    def rebuild_projection(self, run_id: str) -> RunProjection:
        """The run's projection replayed from its events (the stored one is not used)."""
        return self.runner.read(lambda runs: runs.rebuild_projection(run_id))

    def verify_integrity(self, run_id: str) -> RunProjection:
        """Check the run's whole chain, receipts and projection; raises on damage."""
        return self.runner.read(lambda runs: runs.verify_integrity(run_id))

    def run_ids(self) -> list[str]:
        """Every run id, in order."""
        return self.runner.read(lambda runs: runs.run_ids())

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
        """Stored projections of the matching runs in run id order (see
        `RunRepository.list_runs`); page with `limit` and `after=page[-1].run_id`;
        `updated_after` / `updated_before`: last appended to after / before (ms)."""
        return self.runner.read(
            lambda runs: runs.list_runs(
                stage=stage,
                state=state,
                change=change,
                limit=limit,
                after=after,
                root_hash=root_hash,
                updated_after=updated_after,
                updated_before=updated_before,
            )
        )

    def run_detail(self, run_id: str) -> RunDetail:
        """Projection, delivery binding rows, operations and state timeline of one run."""
        return self.runner.read(lambda runs: runs.run_detail(run_id))

    def counts(self) -> StoreCounts:
        """Rows of runs, events, operations and bindings, and runs per state."""
        return self.runner.read(lambda runs: runs.counts())
