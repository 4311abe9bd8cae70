"""`RunStore`: the facade. One method call is one unit of work (one transaction).

Mirrors every method of cadence 1.x's `RunStore`. It never runs DDL: a database that is
not at the head revision is refused with `SchemaOutOfDateError`, which names the upgrade
command (`RunStore.open`, the embedded owner-private store, upgrades its own file as
cadence 1.x did). On PostgreSQL a serialization failure or deadlock re-runs the whole
transaction (bounded, with jitter) before it surfaces as `run-store-busy`.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Final, Self, TypeVar

from sqlalchemy import Engine, inspect
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from .engine import create_store_engine, enable_wal, is_sqlite, read_snapshot
from .errors import (
    SchemaOutOfDateError,
    StoreBusyError,
    StoreFormatError,
    StoreUnavailableError,
)
from .failures import is_database_error, is_retryable, translate_database_error
from .journal import OperationLease, OperationStatus, RunEvent, RunProjection
from .journal.validation import (
    require_callable,
    require_clock,
    require_operation_id,
    require_root_hash,
)
from .journal.values import ApprovalProof, BindDelivery
from .legacy import CADENCE_TABLE_NAMES
from .repository import Clock, RunRepository, check_delivery
from .schema import (
    VERSION_TABLE,
    assert_at_head,
    schema_options,
    upgrade,
    upgrade_command,
)
from .state_root import (
    StateRoot,
    create_database_file,
    prepare_state_root,
    secure_database_files,
)
from .unit_of_work import UnitOfWork

T = TypeVar("T")
MAX_ATTEMPTS: Final = 8
Write = Callable[[Session], object]


def _missing_sqlite_file(engine: Engine) -> str | None:
    database = engine.url.database
    if not is_sqlite(engine) or database in (None, "", ":memory:") or database.startswith("file:"):
        return None
    return None if os.path.exists(database) else database


class RunStore:
    """The run journal on one database (a URL, or a host's `Engine`)."""

    def __init__(
        self,
        bind: str | URL | Engine,
        *,
        root_hash: str | None = None,
        clock: Clock | None = None,
        schema: str | None = None,
        **engine_options: Any,
    ) -> None:
        """`bind`: a URL or a host `Engine` (never altered); `schema`: the PostgreSQL
        schema holding the cadence tables; `engine_options` go to `create_engine`
        (pool size and the like) when cadence-store creates the engine."""
        self.root_hash = None if root_hash is None else require_root_hash(root_hash)
        self._clock = require_clock(clock)
        self._owns_engine = not isinstance(bind, Engine)
        self._base_engine = (
            bind if isinstance(bind, Engine) else create_store_engine(bind, **engine_options)
        )
        options = schema_options(schema)
        # an option engine shares the pool; the host's own engine is left as it was
        self.engine: Engine = (
            self._base_engine.execution_options(**options) if options else self._base_engine
        )
        self._closed = False
        self.state_root: StateRoot | None = None
        missing = _missing_sqlite_file(self.engine)
        if missing is not None:
            self._dispose()
            # connecting would create an empty file; there is no store to use here
            raise SchemaOutOfDateError(
                f"{missing} does not exist; run: {upgrade_command(self.engine.url)}",
                command=upgrade_command(self.engine.url),
            )
        try:
            with self.engine.connect() as connection:
                assert_at_head(connection)
                connection.rollback()
                if self._owns_engine and is_sqlite(connection):
                    enable_wal(connection)
        except DBAPIError as error:
            self._dispose()
            raise translate_database_error(error) from error
        except BaseException:
            self._dispose()
            raise

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
            error.database_path = prepared.database_path
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
        if self._owns_engine:
            self._base_engine.dispose()

    def close(self) -> None:
        """Release the store's connections (a host's engine is left to the host)."""
        if self._closed:
            return
        self._closed = True
        if self._owns_engine and is_sqlite(self.engine):
            try:
                with self.engine.connect() as connection:
                    connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            except DBAPIError:
                pass  # checkpointing is housekeeping; the data is already durable
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

    def _assert_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError("run-store-closed")

    # -- transactions ------------------------------------------------------------------------

    def unit_of_work(self) -> UnitOfWork:
        """One write transaction: `with store.unit_of_work() as uow: uow.runs....`."""
        self._assert_open()
        return UnitOfWork(self.engine, root_hash=self.root_hash, clock=self._clock)

    def _write(self, work: Callable[[RunRepository], T]) -> T:
        """Run `work` in its own unit of work, retrying whole transactions that lost a race."""
        self._assert_open()
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                with self.unit_of_work() as uow:
                    return work(uow.runs)
            except StoreBusyError as error:
                cause = error.__cause__
                if attempt == MAX_ATTEMPTS or not is_retryable(cause or error):
                    raise
                time.sleep(random.uniform(0, 0.002 * 2**attempt))
        raise AssertionError("unreachable")

    @contextmanager
    def _reading(self) -> Iterator[RunRepository]:
        self._assert_open()
        try:
            with self.engine.connect() as connection, read_snapshot(connection):
                yield RunRepository.on_connection(
                    connection,
                    lambda: Session(bind=connection),
                    root_hash=self.root_hash,
                    clock=self._clock,
                )
        except Exception as error:
            if is_database_error(error, self.engine.dialect.loaded_dbapi):
                raise translate_database_error(error) from error
            raise

    def _read(self, work: Callable[[RunRepository], T]) -> T:
        with self._reading() as repository:
            return work(repository)

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
        return self._write(
            lambda runs: runs.bind_delivery(
                run_id,
                gate,
                revision,
                receipt_hash,
                operation_id=operation_id,
                approval_proof=approval_proof,
                lease=lease,
            )
        )

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

        return self._write(work)

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

        return self._write(work)

    def transition(
        self,
        run_id: str,
        to: str,
        *,
        operation_id: str,
        code: str | None = None,
        lease: OperationLease | Mapping[str, Any] | None = None,
    ) -> RunProjection:
        return self._write(
            lambda runs: runs.transition(
                run_id, to, operation_id=operation_id, code=code, lease=lease
            )
        )

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

        return self._write(work)

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
        return self._write(
            lambda runs: runs.acquire_lease(
                run_id, operation_id, ttl_ms, preempt=preempt, exclusive=exclusive
            )
        )

    def renew_lease(self, lease: OperationLease | Mapping[str, Any], ttl_ms: int) -> OperationLease:
        return self._write(lambda runs: runs.renew_lease(lease, ttl_ms))

    def assert_lease(self, lease: OperationLease | Mapping[str, Any]) -> None:
        self._write(lambda runs: runs.assert_lease(lease))

    def commit_lease(
        self, lease: OperationLease | Mapping[str, Any], outcome: Mapping[str, Any]
    ) -> dict[str, Any]:
        return self._write(lambda runs: runs.commit_lease(lease, outcome))

    def interrupt_lease(self, lease: OperationLease | Mapping[str, Any]) -> None:
        self._write(lambda runs: runs.interrupt_lease(lease))

    def inspect_operation(self, run_id: str, operation_id: str) -> OperationStatus | None:
        return self._write(lambda runs: runs.inspect_operation(run_id, operation_id))

    def recover_expired_leases(self) -> int:
        return self._write(lambda runs: runs.recover_expired_leases())

    # -- reading -----------------------------------------------------------------------------

    def status(self, run_id: str) -> RunProjection:
        return self._read(lambda runs: runs.status(run_id))

    def list_events(self, run_id: str) -> list[RunEvent]:
        return self._read(lambda runs: runs.list_events(run_id))

    def iter_events(self, run_id: str) -> Iterator[RunEvent]:
        """The run's events, streamed in batches."""
        with self._reading() as runs:
            yield from runs.iter_events(run_id)

    def rebuild_projection(self, run_id: str) -> RunProjection:
        return self._read(lambda runs: runs.rebuild_projection(run_id))

    def verify_integrity(self, run_id: str) -> RunProjection:
        return self._read(lambda runs: runs.verify_integrity(run_id))

    def run_ids(self) -> list[str]:
        return self._read(lambda runs: runs.run_ids())
