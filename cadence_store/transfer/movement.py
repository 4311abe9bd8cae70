"""Moving whole runs between databases: JSONL export, the writing an import shares, copy.

An export is JSON Lines, one record (`transfer.record`) per run; a run moved through an
export (or `copy_store`) keeps its bytes: same hashes, same projection JSON.

Every run is checked offline before anything is written (`check_record`: the chain
reduces, and the stored projection equals `js_stringify` of the rebuilt one — the rule of
`RunRepository.verify_integrity`), then written atomically and verified again at the
destination. A run id that is already present with identical content is skipped, so
re-running an import or a copy changes nothing; one present with different content is
refused (`OperationConflictError`, code `run-id-conflict`) before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO, cast

from sqlalchemy import Connection, Engine, func, select, tuple_
from sqlalchemy.engine import URL

from ..errors import (
    InvalidInputError,
    OperationConflictError,
    RunNotFoundError,
)
from ..storage.backends import backend_for
from ..storage.engine import create_store_engine, read_snapshot
from ..storage.failures import READ, WRITE, database_errors
from ..storage.models import runs
from ..storage.run_records import read_run_record, row_of, run_record
from ..storage.schema import assert_at_head, schema_options, store_schema
from ..store.unit_of_work import UnitOfWork
from .offline import check_record
from .record import (
    CHILD_KEYS,
    DEFAULT_BATCH_SIZE,
    RUN_COLUMNS,
    RUN_ID_CONFLICT,
    RUN_LOOKUP_CONFLICT,
    TABLES,
    Record,
    Row,
    describe_difference,
    dump_record,
)

Bind = str | URL | Engine


@dataclass
class TransferReport:
    """What an export, import or copy did."""

    written: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    events_written: int = 0

    @property
    def runs_written(self) -> int:
        return len(self.written)

    @property
    def runs_skipped(self) -> int:
        return len(self.skipped)


@dataclass(frozen=True)
class TransferProgress:
    """A progress report: `phase` is "check" (reading and comparing), "copy", "import"
    or "export"."""

    phase: str
    done: int
    total: int
    run_id: str | None = None


# the former name, kept for callers (it clashed with rich's `Progress`)
Progress = TransferProgress
ProgressCallback = Callable[[TransferProgress], None]


# -- reading records ----------------------------------------------------------------------


def _record_for(connection: Connection, run_row: Row) -> Record:
    return cast(Record, run_record(connection, run_row))


def read_record(connection: Connection, run_id: str) -> Record | None:
    """One run and its rows as an export record (None when the run is absent)."""
    return cast("Record | None", read_run_record(connection, run_id))


def _run_rows(connection: Connection, batch_size: int) -> Iterator[list[Row]]:
    """Every run row in run id order, a batch at a time (keyset pagination)."""
    last: str | None = None
    while True:
        statement = select(runs).order_by(runs.c.run_id).limit(batch_size)
        if last is not None:
            statement = statement.where(runs.c.run_id > last)
        batch = [row_of(row._mapping, RUN_COLUMNS) for row in connection.execute(statement)]
        if not batch:
            return
        yield batch
        last = batch[-1]["run_id"]


def iter_records(
    connection: Connection, *, batch_size: int = DEFAULT_BATCH_SIZE
) -> Iterator[Record]:
    """Every run of a database as an export record, one run at a time."""
    for batch in _run_rows(connection, batch_size):
        for run_row in batch:
            yield _record_for(connection, run_row)


# -- engines and snapshots ----------------------------------------------------------------


@contextmanager
def transfer_engine(bind: Bind, schema: str | None = None) -> Iterator[Engine]:
    """`bind` as an engine whose connections find the cadence tables in `schema` (on
    PostgreSQL `public` when none is given: never the connection's search_path)."""
    engine = bind if isinstance(bind, Engine) else create_store_engine(bind)
    if schema is None:
        schema = store_schema(engine)  # an engine that names its schema already keeps it
    named = backend_for(engine.dialect).default_schema if schema is None else schema
    options = schema_options(named)
    try:
        yield engine.execution_options(**options) if options else engine
    finally:
        if engine is not bind:
            engine.dispose()


@contextmanager
def _snapshot(engine: Engine) -> Iterator[Connection]:
    """A read-only connection on one consistent snapshot of a database at head."""
    with engine.connect() as connection, read_snapshot(connection):
        assert_at_head(connection, store_schema(connection))
        yield connection


# -- comparing with a destination ---------------------------------------------------------


def _conflict(run_id: str, difference: str) -> OperationConflictError:
    return OperationConflictError(
        RUN_ID_CONFLICT,
        f"run {run_id} already exists at the destination with different content "
        f"({difference}); nothing was written",
    )


def _lookup_owners(connection: Connection, run_rows: Sequence[Row]) -> dict[tuple[str, ...], str]:
    """Runs at the destination that hold any of these (root_hash, stage, lookup_key)."""
    if not run_rows:
        return {}
    keys = [(r["root_hash"], r["stage"], r["lookup_key"]) for r in run_rows]
    result = connection.execute(
        select(runs.c.root_hash, runs.c.stage, runs.c.lookup_key, runs.c.run_id).where(
            tuple_(runs.c.root_hash, runs.c.stage, runs.c.lookup_key).in_(keys)
        )
    )
    return {(row[0], row[1], row[2]): row[3] for row in result}


def plan_writes(
    connection: Connection, records: Sequence[Record]
) -> tuple[list[Record], list[str], list[str]]:
    """Split records into (to write, identical ones to skip, conflict descriptions)."""
    if not records:
        return [], [], []
    ids = [record["run"]["run_id"] for record in records]
    present = set(connection.execute(select(runs.c.run_id).where(runs.c.run_id.in_(ids))).scalars())
    owners = _lookup_owners(
        connection, [r["run"] for r in records if r["run"]["run_id"] not in present]
    )
    to_write: list[Record] = []
    skipped: list[str] = []
    conflicts: list[str] = []
    for record in records:
        run = record["run"]
        run_id = run["run_id"]
        if run_id in present:
            existing = read_record(connection, run_id)
            difference = None if existing is None else describe_difference(record, existing)
            if difference is None:
                skipped.append(run_id)
            else:
                conflicts.append(f"run {run_id} ({difference})")
            continue
        owner = owners.get((run["root_hash"], run["stage"], run["lookup_key"]))
        if owner is not None and owner != run_id:
            conflicts.append(
                f"run {run_id} (lookup key {run['lookup_key']} belongs to run {owner})"
            )
            continue
        to_write.append(record)
    return to_write, skipped, conflicts


def raise_conflicts(conflicts: Sequence[str]) -> None:
    """Refuse the whole transfer when `plan_writes` found conflicts (nothing written)."""
    if not conflicts:
        return
    shown = "; ".join(conflicts[:3])
    more = f" and {len(conflicts) - 3} more" if len(conflicts) > 3 else ""
    lookup_only = all("lookup key" in c for c in conflicts)
    raise OperationConflictError(
        RUN_LOOKUP_CONFLICT if lookup_only else RUN_ID_CONFLICT,
        f"the destination already holds different content: {shown}{more}; nothing was written",
    )


# -- writing ------------------------------------------------------------------------------


def insert_record(
    connection: Connection,
    record: Record,
    batch_size: int,
    positions: Sequence[int] | None = None,
) -> int:
    """Insert a run's rows (its events at `positions`, in sequence order, else unnumbered);
    returns the number of events."""
    connection.execute(runs.insert().values(**record["run"]))
    for key in CHILD_KEYS:
        rows = record[key]
        if key == "events" and positions is not None:
            rows = [{**row, "feed_position": at} for row, at in zip(rows, positions, strict=True)]
        for start in range(0, len(rows), batch_size):
            connection.execute(TABLES[key].insert(), rows[start : start + batch_size])
    return len(record["events"])


def write_batch(
    engine: Engine,
    records: Sequence[Record],
    report: TransferReport,
    batch_size: int,
    on_run: Callable[[str], None] | None = None,
) -> list[str]:
    """Write runs in one transaction, re-verifying each chain there; returns ids written.
    `on_run` hears of each run as it is written or skipped (before the batch commits)."""
    written: list[str] = []
    count = 0
    with UnitOfWork(engine, schema=store_schema(engine)) as uow:
        connection = uow.session.connection()
        for record in records:
            run_id = record["run"]["run_id"]
            existing = read_record(connection, run_id)
            if existing is not None:
                difference = describe_difference(record, existing)
                if difference is not None:
                    raise _conflict(run_id, difference)
                report.skipped.append(run_id)
            else:
                count += insert_record(connection, record, batch_size)
                written.append(run_id)
            if on_run is not None:
                on_run(run_id)
        for run_id in written:
            uow.runs.verify_integrity(run_id)
    report.written.extend(written)
    report.events_written += count
    return written


# -- export / import ----------------------------------------------------------------------


def export_store(
    bind: Bind,
    out: TextIO,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    schema: str | None = None,
    progress: ProgressCallback | None = None,
) -> TransferReport:
    """Write every run of a database (at head) to `out` as JSON Lines, one run at a time.

    Reads one consistent snapshot; stored TEXT columns are copied verbatim. `schema`: the
    PostgreSQL schema of the cadence tables (or an engine that already translates to it).
    `progress` hears of each run written (phase "export").
    """
    report = TransferReport()
    with (
        database_errors(READ),
        transfer_engine(bind, schema) as engine,
        _snapshot(engine) as connection,
    ):
        total = 0
        if progress is not None:
            total = int(connection.execute(select(func.count()).select_from(runs)).scalar_one())
        for record in iter_records(connection, batch_size=batch_size):
            out.write(dump_record(record))
            out.write("\n")
            report.written.append(record["run"]["run_id"])
            report.events_written += len(record["events"])
            if progress is not None:
                run_id = record["run"]["run_id"]
                progress(TransferProgress("export", len(report.written), total, run_id))
    return report


# -- copy -----------------------------------------------------------------------------------


def copy_store(
    source: Bind,
    destination: Bind,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: ProgressCallback | None = None,
    source_schema: str | None = None,
    destination_schema: str | None = None,
) -> TransferReport:
    """Copy every run (events, operations, delivery bindings) from one database to another.

    `source_schema` / `destination_schema`: as `schema` of `export_store`, for each side.

    Both must be at head (`SchemaOutOfDateError` otherwise). The source is read on one
    snapshot; every source chain is verified and every run id compared with the
    destination before anything is written, so a corrupt source or a destination holding a
    different run under the same id (`run-id-conflict`) leaves the destination unchanged.
    Then runs are written `batch_size` at a time, each batch in one transaction in which
    every copied chain is verified again. Runs already present and identical are skipped:
    re-running a copy changes nothing.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError("invalid-batch-size")
    report = TransferReport()
    with (
        database_errors(WRITE),
        transfer_engine(source, source_schema) as source_engine,
        transfer_engine(destination, destination_schema) as destination_engine,
    ):
        with destination_engine.connect() as connection:
            assert_at_head(connection, store_schema(connection))
            connection.rollback()
        with _snapshot(source_engine) as reader:
            total = int(reader.execute(select(func.count()).select_from(runs)).scalar_one())
            pending: list[str] = []
            conflicts: list[str] = []
            checked = 0
            with destination_engine.connect() as connection:
                for run_rows in _run_rows(reader, batch_size):
                    records = [_record_for(reader, row) for row in run_rows]
                    for record in records:
                        check = check_record(record)
                        if not check.ok:
                            raise check.error()
                    to_write, identical, found = plan_writes(connection, records)
                    conflicts.extend(found)
                    report.skipped.extend(identical)
                    pending.extend(record["run"]["run_id"] for record in to_write)
                    checked += len(records)
                    if progress is not None:
                        progress(
                            TransferProgress("check", checked, total, records[-1]["run"]["run_id"])
                        )
                connection.rollback()
            raise_conflicts(conflicts)
            done = 0

            def copied(run_id: str) -> None:  # per run, so a batch does not sit at 0/N
                nonlocal done
                done += 1
                if progress is not None:
                    progress(TransferProgress("copy", done, len(pending), run_id))

            if progress is not None:
                progress(TransferProgress("copy", 0, len(pending)))
            for start in range(0, len(pending), batch_size):
                ids = pending[start : start + batch_size]
                records = []
                for run_id in ids:
                    found_record = read_record(reader, run_id)
                    if found_record is None:  # pragma: no cover - the snapshot holds it
                        raise RunNotFoundError("run-not-found", run_id)
                    records.append(found_record)
                write_batch(destination_engine, records, report, batch_size, copied)
    return report


__all__ = [
    "Bind",
    "Progress",
    "ProgressCallback",
    "TransferProgress",
    "TransferReport",
    "copy_store",
    "export_store",
    "insert_record",
    "iter_records",
    "plan_writes",
    "raise_conflicts",
    "read_record",
    "transfer_engine",
    "write_batch",
]
