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

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from sqlalchemy import Engine
from sqlalchemy import inspect as inspect_database
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session

from ..errors import (
    InvalidInputError,
    SchemaOutOfDateError,
    StoreFormatError,
)
from ..journal import OperationStatus, RunEvent
from ..journal.validation import require_clock, require_root_hash
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
from .following import follow, read_feed
from .forwarding import as_method
from .runner import Runner
from .state_root import (
    StateRoot,
    create_database_file,
    prepare_state_root,
    secure_database_files,
)
from .unit_of_work import UnitOfWork

Write = Callable[[Session], object]


P = ParamSpec("P")
R = TypeVar("R")


def _writes(describe: Callable[P, calls.Call[R]]) -> Callable[Concatenate[RunStore, P], R]:
    """A write of the store: the description's work on the primary, with its re-run."""

    def call(self: RunStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        described = describe(*args, **kwargs)
        runner = self._runner  # not the property: a frame less on every write
        assert runner is not None  # set at the end of __init__
        return runner.write(described.work, described.rerun)

    as_method(call, describe, "RunStore")
    return call


def _hosts(describe: Callable[P, calls.HostCall[R]]) -> Callable[Concatenate[RunStore, P], R]:
    """A write that runs host code: the description with its `write` called in the call's
    transaction (retried and re-run as a whole)."""

    def call(self: RunStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        described = describe(*args, **kwargs).synchronous()
        return self.runner.write(described.work, described.rerun, host_code=True)

    as_method(call, describe, "RunStore")
    return call


def _on_runner(
    function: Callable[Concatenate[Runner, P], R],
) -> Callable[Concatenate[RunStore, P], R]:
    """A store call written over the store's runner (the feed's, `following.py`)."""

    def call(self: RunStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return function(self.runner, *args, **kwargs)

    as_method(call, function, "RunStore", replacing_first=True)
    return call


def _reads(
    method: Callable[Concatenate[RunRepository, P], R],
) -> Callable[Concatenate[RunStore, P], R]:
    """A read of the store: the repository's method in one snapshot."""

    def call(self: RunStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.runner.read(lambda runs: method(runs, *args, **kwargs))

    as_method(call, method, "RunStore")
    return call


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

    def __exit__(self, *_exc_info: object) -> None:
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

    # -- runs and their journal: each call made of its description (`calls.py`) ----------

    start_run = _writes(calls.start_run)
    bind_change = _writes(calls.bind_change)
    bind_delivery = _writes(calls.bind_delivery)
    bind_delivery_atomically = _hosts(calls.bind_delivery_atomically)
    bind_deliveries_atomically = _hosts(calls.bind_deliveries_atomically)
    transition = _writes(calls.transition)
    transition_atomically = _hosts(calls.transition_atomically)
    transition_many = _writes(calls.transition_many)

    # -- leases ------------------------------------------------------------------------------

    acquire_lease = _writes(calls.acquire_lease)
    renew_lease = _writes(calls.renew_lease)
    assert_lease = _writes(calls.assert_lease)
    commit_lease = _writes(calls.commit_lease)
    interrupt_lease = _writes(calls.interrupt_lease)
    recover_expired_leases = _writes(calls.recover_expired_leases)

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

    # -- reading: the repository's reads, each in one snapshot (on `read_bind` if given) ----

    status = _reads(RunRepository.status)
    list_events = _reads(RunRepository.list_events)
    rebuild_projection = _reads(RunRepository.rebuild_projection)
    verify_integrity = _reads(RunRepository.verify_integrity)
    run_ids = _reads(RunRepository.run_ids)
    list_runs = _reads(RunRepository.list_runs)
    run_detail = _reads(RunRepository.run_detail)
    counts = _reads(RunRepository.counts)

    def iter_events(self, run_id: str) -> Iterator[RunEvent]:
        """The run's events, streamed in batches from one snapshot."""
        with self.runner.reading() as runs:
            yield from runs.iter_events(run_id)

    # -- the journal feed (README "Following the journal", `following.py`) -----------------

    follower_position = _reads(RunRepository.follower_position)

    read_feed = _on_runner(read_feed)
    follow = _on_runner(follow)
