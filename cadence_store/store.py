"""`RunStore`: the facade. One method call is one unit of work (one transaction).

Mirrors every method of cadence 1.x's `RunStore`. It never runs DDL: a database that is
not at the head revision is refused with `SchemaOutOfDateError`, which names the upgrade
command (`RunStore.open`, the embedded owner-private store, upgrades its own file as
cadence 1.x did). On PostgreSQL a serialization failure or deadlock re-runs the whole
transaction (bounded, with jitter) before it surfaces as `run-store-busy`, and a call
whose connection was lost (a failover) is re-run as a whole with the same operation id
until a primary answers or `failover_timeout_s` passes (`failover.py`). Reads go to
`read_bind` (a standby) when one is given; writes and units of work to the primary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

from sqlalchemy import Engine, inspect
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session

from .direct_write import DirectWrites, fits_direct_writes
from .engine import (
    create_store_engine,
    enable_wal,
    is_sqlite,
    masked_url,
    missing_sqlite_file,
)
from .errors import (
    InvalidInputError,
    SchemaOutOfDateError,
    StoreFormatError,
)
from .failover import DEFAULT_FAILOVER_TIMEOUT_S, Failover, require_failover_timeout
from .failures import READ, database_errors, is_database_error
from .journal import OperationLease, RunProjection
from .journal.validation import (
    require_callable,
    require_clock,
    require_operation_id,
    require_root_hash,
)
from .journal.values import ApprovalProof, BindDelivery
from .legacy import CADENCE_TABLE_NAMES
from .repository import (
    DELIVERY_BOUND,
    TRANSITIONED,
    Clock,
    RunRepository,
    check_delivery,
)
from .schema import (
    VERSION_TABLE,
    require_schema_name,
    schema_options,
    upgrade,
    upgrade_command,
)
from .shape import assert_store_ready
from .state_root import (
    StateRoot,
    create_database_file,
    prepare_state_root,
    secure_database_files,
)
from .store_leases import StoreLeases
from .store_reads import StoreReads
from .store_transactions import StoreTransactions
from .telemetry import instrument

T = TypeVar("T")
Write = Callable[[Session], object]


@instrument
class RunStore(StoreTransactions, StoreLeases, StoreReads):
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
        self._owns_read_engine = False
        self._read_engine: Engine | None = None
        self._owns_engine = not isinstance(bind, Engine)
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
        self._closed = False
        self.state_root: StateRoot | None = None
        # calls that run no host code skip the Connection/Session wrapping (direct_write)
        self._direct = (
            DirectWrites(
                self._base_engine,
                root_hash=self.root_hash,
                clock=self._clock,
                schema=self.schema,
                keep_one=self._owns_engine,  # a host's pool lends all its connections
            )
            if fits_direct_writes(self._base_engine)
            else None
        )
        if self.schema is not None and is_sqlite(self.engine):
            self._dispose()
            raise InvalidInputError("invalid-schema-name", "a schema name needs PostgreSQL")
        self._failover = Failover(
            failover_timeout_s,
            database=masked_url(self.engine.url),
            forget_connections=self._forget_connections,
        )
        missing = missing_sqlite_file(self.engine)
        if missing is not None:
            self._dispose()
            # connecting would create an empty file; there is no store to use here
            raise SchemaOutOfDateError(
                f"{missing} does not exist; run: {upgrade_command(self.engine.url)}",
                command=upgrade_command(self.engine.url),
            )
        try:
            with database_errors(READ), self.engine.connect() as connection:
                assert_store_ready(connection, self.schema)
                connection.rollback()
                if self._owns_engine and is_sqlite(connection):
                    enable_wal(connection)
        except BaseException:
            self._dispose()
            raise
        if read_bind is not None:
            self._owns_read_engine = not isinstance(read_bind, Engine)
            try:
                base = (
                    read_bind
                    if isinstance(read_bind, Engine)
                    else create_store_engine(read_bind, **engine_options)
                )
            except BaseException:
                self._dispose()
                raise
            self._read_engine = base.execution_options(**options) if options else base

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
        self._lend_kept_connection()
        if self._owns_engine:
            self._base_engine.dispose()
        if self._owns_read_engine and self._read_engine is not None:
            self._read_engine.dispose()

    def _forget_connections(self) -> None:
        """Drop idle pooled connections: they may point at a primary that is gone."""
        if self._direct is not None:
            self._direct.release(discard=True)
        self._base_engine.pool.dispose()
        if self._read_engine is not None:
            self._read_engine.pool.dispose()

    def close(self) -> None:
        """Release the store's connections (a host's engine is left to the host)."""
        if self._closed:
            return
        self._closed = True
        if self._owns_engine and is_sqlite(self.engine):
            try:
                with self.engine.connect() as connection:
                    connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            except Exception as error:
                if not is_database_error(error):
                    raise
                # checkpointing is housekeeping; the data is already durable
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
        aliases = None if provisional_aliases is None else provisional_aliases
        if aliases is not None and not isinstance(aliases, str | bytes | Mapping):
            aliases = list(aliases) if isinstance(aliases, Iterable) else aliases
        return self._write(
            lambda runs: runs.start_run(
                stage,
                operation_id=operation_id,
                change=change,
                provisional_key=provisional_key,
                provisional_aliases=aliases,
            )
        )

    def bind_change(self, run_id: str, change: str, *, operation_id: str) -> RunProjection:
        return self._write(lambda runs: runs.bind_change(run_id, change, operation_id=operation_id))

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
        def work(runs: RunRepository) -> RunProjection:
            return runs.bind_delivery(
                run_id,
                gate,
                revision,
                receipt_hash,
                operation_id=operation_id,
                approval_proof=approval_proof,
                lease=lease,
            )

        return self._write(work, _replay_first(run_id, operation_id, DELIVERY_BOUND, work))

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
        request = check_delivery(
            run_id, gate, revision, receipt_hash, operation_id, approval_proof, lease
        )
        require_callable(write, "delivery-binding-write-invalid")

        def work(runs: RunRepository) -> RunProjection:
            projection, appended = runs.bind_deliveries_once([request])
            if appended:
                write(runs.session)
            return projection

        return self._write(
            work, _replay_first(run_id, operation_id, DELIVERY_BOUND, work), host_code=True
        )

    def bind_deliveries_atomically(
        self, inputs: Iterable[BindDelivery | Mapping[str, Any]], *, write: Write
    ) -> RunProjection:
        """Several bindings of one run (one lease), and `write(session)`, in one transaction.

        `write` runs once when at least one input appends an event, not at all when every
        input replays.
        """
        items = (
            list(inputs)
            if isinstance(inputs, Iterable) and not isinstance(inputs, str | bytes | Mapping)
            else inputs
        )

        def work(runs: RunRepository) -> RunProjection:
            requests = runs.check_deliveries(items)
            require_callable(write, "delivery-binding-write-invalid")
            projection, appended = runs.bind_deliveries_once(requests)
            if appended:
                write(runs.session)
            return projection

        def rerun(runs: RunRepository) -> RunProjection:
            # the first attempt committed all of them, or none
            requests = runs.check_deliveries(items)
            require_callable(write, "delivery-binding-write-invalid")
            recorded = [
                runs.recorded_outcome(r.run_id, r.operation_id, DELIVERY_BOUND) for r in requests
            ]
            last = recorded[-1]
            if last is not None and None not in recorded:
                return last
            return work(runs)

        return self._write(work, rerun, host_code=True)

    def transition(
        self,
        run_id: str,
        to: str,
        *,
        operation_id: str,
        code: str | None = None,
        lease: OperationLease | Mapping[str, Any] | None = None,
    ) -> RunProjection:
        def work(runs: RunRepository) -> RunProjection:
            return runs.transition(run_id, to, operation_id=operation_id, code=code, lease=lease)

        return self._write(work, _replay_first(run_id, operation_id, TRANSITIONED, work))

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
        require_operation_id(operation_id)
        require_callable(write, "state-transition-write-invalid")

        def work(runs: RunRepository) -> RunProjection:
            projection, appended = runs.transition_once(
                run_id, to, operation_id=operation_id, code=code, lease=lease
            )
            if appended:
                write(runs.session)
            return projection

        return self._write(
            work, _replay_first(run_id, operation_id, TRANSITIONED, work), host_code=True
        )


def _replay_first(
    run_id: str, operation_id: str, kind: str, work: Callable[[RunRepository], RunProjection]
) -> Callable[[RunRepository], RunProjection]:
    """The re-run of a journal call after a lost connection: an operation id its first
    attempt committed is replayed (no lease check, no `write=` callback), else `work`."""

    def rerun(runs: RunRepository) -> RunProjection:
        recorded = runs.recorded_outcome(run_id, operation_id, kind)
        return work(runs) if recorded is None else recorded

    return rerun
