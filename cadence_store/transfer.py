"""Moving whole runs between databases: JSONL export / import, offline checks, copy.

An export is JSON Lines, one object per run::

    {"run": {...every `runs` column...},
     "events": [{...every `events` column...}, ...],          # sequence order
     "operations": [{...every `operations` column...}, ...],  # operation_id order
     "deliveryBindings": [{...every `delivery_bindings` column...}, ...]}

Column names are the tables' own (snake_case, as cadence 1.x named them) and stored TEXT
(`payload_json`, `projection_json`, `outcome_json`) is copied verbatim, so a run moved
through an export (or `copy_store`) keeps its bytes: same hashes, same projection JSON.

Every run is checked offline before anything is written (`check_record`: the chain
reduces, and the stored projection equals `js_stringify` of the rebuilt one — the rule of
`RunRepository.verify_integrity`), then written atomically and verified again at the
destination. A run id that is already present with identical content is skipped, so
re-running an import or a copy changes nothing; one present with different content is
refused (`OperationConflictError`, code `run-id-conflict`) before anything is written.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any, Final, TextIO

from sqlalchemy import Connection, Engine, Integer, Table, func, select, tuple_
from sqlalchemy.engine import URL

from .engine import create_store_engine, is_postgresql, is_sqlite
from .errors import (
    CadenceStoreError,
    InvalidInputError,
    InvalidTransitionError,
    JournalIntegrityError,
    OperationConflictError,
)
from .failures import READ, WRITE, database_errors
from .journal import ChainVerifier, hash_event
from .journal.canonical import JsonValueError
from .journal.events import hash_canonical_event
from .journal.receipts import OPERATION_COLUMNS as OPERATION_CHECK_COLUMNS
from .journal.receipts import ReceiptVerifier
from .journal.stored_json import decode_payload
from .journal.validation import is_storable
from .journal.verification import BINDING_COLUMNS as VERIFIED_BINDING_COLUMNS
from .journal.verification import stored_difference
from .models import delivery_bindings, events, operations, runs
from .schema import assert_at_head, schema_options, store_schema
from .unit_of_work import UnitOfWork

Bind = str | URL | Engine
Record = dict[str, Any]
Row = dict[str, Any]

DEFAULT_BATCH_SIZE: Final = 200
RECORD_KEYS: Final = ("run", "events", "operations", "deliveryBindings")
INVALID_RECORD: Final = "export-record-invalid"
RUN_ID_CONFLICT: Final = "run-id-conflict"
RUN_LOOKUP_CONFLICT: Final = "run-lookup-conflict"
# A hostile file (not a damaged store): the whole command is refused (exit 2) instead of
# reporting the record as broken.
TOO_DEEP: Final = "export-record-too-deep"
OUT_OF_RANGE: Final = "export-record-out-of-range"
NOT_UTF8: Final = "export-file-not-utf8"
HOSTILE_CODES: Final = frozenset({TOO_DEEP, OUT_OF_RANGE, NOT_UTF8})
INT64: Final = range(-(2**63), 2**63)
# stored JSON texts inside a record, checked for nesting before anything decodes them
_JSON_TEXTS: Final = {
    "run": "projection_json",
    "events": "payload_json",
    "operations": "outcome_json",
}
_DEEP_HINT: Final = 256  # fewer brackets than this cannot nest too deep
_SPOOL_BYTES: Final = 8 * 1024 * 1024

_TABLES: Final[dict[str, Table]] = {
    "run": runs,
    "events": events,
    "operations": operations,
    "deliveryBindings": delivery_bindings,
}
_ORDER: Final[dict[str, tuple[str, ...]]] = {
    "events": ("sequence",),
    "operations": ("operation_id",),
    "deliveryBindings": ("gate", "revision"),
}


def _sort_key(key: str) -> Callable[[Row], tuple[Any, ...]]:
    names = _ORDER[key]

    def sort_key(row: Row) -> tuple[Any, ...]:
        return tuple(row[name] for name in names)

    return sort_key


def _columns(table: Table) -> tuple[str, ...]:
    return tuple(column.name for column in table.c)


RUN_COLUMNS: Final = _columns(runs)
EVENT_COLUMNS: Final = _columns(events)
OPERATION_COLUMNS: Final = _columns(operations)
BINDING_COLUMNS: Final = _columns(delivery_bindings)


# -- results ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunCheck:
    """The verdict on one run: ok, or the first bad sequence and what differs."""

    run_id: str | None
    ok: bool
    line: int | None = None
    code: str | None = None
    sequence: int | None = None
    field: str | None = None
    expected: Any = None
    stored: Any = None
    message: str | None = None
    operation_id: str | None = None  # the operations row that does not verify

    @property
    def description(self) -> str:
        """What is wrong, in one line ('' for a run that verifies)."""
        if self.ok:
            return ""
        parts = []
        if self.sequence is not None:
            parts.append(f"sequence {self.sequence}")
        if self.field is not None:
            parts.append(
                f"{self.field}: expected {_show(self.expected)}, stored {_show(self.stored)}"
            )
        if self.message:
            parts.append(self.message)
        return ": ".join(parts) or "does not verify"

    @property
    def detail(self) -> str:
        """`description` followed by the error code."""
        return f"{self.description} ({self.code})" if not self.ok else ""

    def error(self) -> JournalIntegrityError:
        return JournalIntegrityError(
            self.code or "event-integrity-hash-chain",
            f"run {self.run_id}: {self.description}",
            run_id=self.run_id,
            sequence=self.sequence,
            expected=self.expected,
            actual=self.stored,
            operation_id=self.operation_id,
        )


def _show(value: Any) -> str:
    if value is None:
        return "(absent)"
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:197] + "..."
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


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
class Progress:
    """A progress report: `phase` is "check" (reading and comparing), "copy", "import"
    or "export"."""

    phase: str
    done: int
    total: int
    run_id: str | None = None


ProgressCallback = Callable[[Progress], None]


# -- reading records ----------------------------------------------------------------------


def _row(mapping: Any, columns: Sequence[str]) -> Row:
    return {name: mapping[name] for name in columns}


def _children(connection: Connection, table: Table, run_id: str, key: str) -> list[Row]:
    columns = _columns(table)
    order = [table.c[name] for name in _ORDER[key]]
    result = connection.execute(select(table).where(table.c.run_id == run_id).order_by(*order))
    return [_row(row._mapping, columns) for row in result]


def _record_for(connection: Connection, run_row: Row) -> Record:
    run_id = run_row["run_id"]
    return {
        "run": run_row,
        "events": _children(connection, events, run_id, "events"),
        "operations": _children(connection, operations, run_id, "operations"),
        "deliveryBindings": _children(connection, delivery_bindings, run_id, "deliveryBindings"),
    }


def read_record(connection: Connection, run_id: str) -> Record | None:
    """One run and its rows as an export record (None when the run is absent)."""
    row = connection.execute(select(runs).where(runs.c.run_id == run_id)).first()
    if row is None:
        return None
    return _record_for(connection, _row(row._mapping, RUN_COLUMNS))


def _run_rows(connection: Connection, batch_size: int) -> Iterator[list[Row]]:
    """Every run row in run id order, a batch at a time (keyset pagination)."""
    last: str | None = None
    while True:
        statement = select(runs).order_by(runs.c.run_id).limit(batch_size)
        if last is not None:
            statement = statement.where(runs.c.run_id > last)
        batch = [_row(row._mapping, RUN_COLUMNS) for row in connection.execute(statement)]
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


def dump_record(record: Record) -> str:
    """One export line (without the newline): compact, ASCII-only JSON."""
    return json.dumps(record, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


# -- engines and snapshots ----------------------------------------------------------------


@contextmanager
def _engine(bind: Bind, schema: str | None = None) -> Iterator[Engine]:
    """`bind` as an engine whose connections find the cadence tables in `schema`."""
    options = schema_options(schema)
    if isinstance(bind, Engine):
        yield bind.execution_options(**options) if options else bind
        return
    engine = create_store_engine(bind)
    try:
        yield engine.execution_options(**options) if options else engine
    finally:
        engine.dispose()


@contextmanager
def _snapshot(engine: Engine) -> Iterator[Connection]:
    """A read-only connection on one consistent snapshot of the database."""
    with engine.connect() as connection:
        try:
            if is_postgresql(connection):
                connection.execution_options(isolation_level="REPEATABLE READ")
                connection.begin()
            elif is_sqlite(connection):
                raw: Any = connection.connection.dbapi_connection
                if raw is not None and not getattr(raw, "in_transaction", True):
                    # pysqlite begins nothing for a SELECT: a deferred BEGIN makes every
                    # read below see one snapshot.
                    connection.exec_driver_sql("BEGIN")
            assert_at_head(connection, store_schema(connection))
            yield connection
        finally:
            connection.rollback()


# -- parsing and offline checks -----------------------------------------------------------


def _invalid(line: int | None, message: str) -> InvalidInputError:
    where = f"line {line}: " if line is not None else ""
    return InvalidInputError(INVALID_RECORD, where + message)


def _hostile(code: str, line: int | None, message: str) -> InvalidInputError:
    where = f"line {line}: " if line is not None else ""
    return InvalidInputError(code, where + message)


def _check_nesting(text: object, line: int | None, where: str) -> None:
    """Refuse a JSON text nested too deep to decode (the decoder would overflow the stack)."""
    if not isinstance(text, str) or text.count("[") + text.count("{") < _DEEP_HINT:
        return
    try:
        json.loads(text)
    except RecursionError:
        raise _hostile(TOO_DEEP, line, f"{where} is JSON nested too deep") from None
    except ValueError:
        pass  # not JSON at all: check_record reports it as a broken record


def _check_row(value: object, table: Table, where: str, line: int | None) -> Row:
    if not isinstance(value, dict):
        raise _invalid(line, f"{where} is not an object")
    columns = _columns(table)
    if set(value) != set(columns):
        missing = sorted(set(columns) - set(value))
        extra = sorted(set(value) - set(columns))
        raise _invalid(line, f"{where} columns differ (missing {missing}, unexpected {extra})")
    for column in table.c:
        item = value[column.name]
        if item is None:
            if column.nullable and not column.primary_key:
                continue
            raise _invalid(line, f"{where}.{column.name} is null")
        if isinstance(column.type, Integer):
            if isinstance(item, bool) or not isinstance(item, int):
                raise _invalid(line, f"{where}.{column.name} is not an integer")
            if item not in INT64:
                raise _hostile(OUT_OF_RANGE, line, f"{where}.{column.name} is not a 64-bit integer")
        elif not isinstance(item, str):
            raise _invalid(line, f"{where}.{column.name} is not a string")
        elif not is_storable(item):
            raise _invalid(line, f"{where}.{column.name} holds a NUL or a lone surrogate")
    return {name: value[name] for name in columns}


def _with_fence(row: object) -> object:
    """An operation row of an export made before fences (revision cs0002) gets the fence
    that revision gives existing rows: 1 for a lease, none for a receipt."""
    if not isinstance(row, dict) or "lease_fence" in row:
        return row
    return {**row, "lease_fence": 1 if row.get("kind") == "lease" else None}


def parse_record(text: str, line: int | None = None) -> Record:
    """Parse and shape-check one export line (`InvalidInputError` export-record-invalid)."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise _invalid(line, f"not JSON ({error})") from None
    except RecursionError:
        raise _hostile(TOO_DEEP, line, "JSON nested too deep") from None
    if not isinstance(value, dict) or set(value) != set(RECORD_KEYS):
        raise _invalid(line, f"expected an object with keys {list(RECORD_KEYS)}")
    run = _check_row(value["run"], runs, "run", line)
    run_id = run["run_id"]
    record: Record = {"run": run}
    for key in RECORD_KEYS[1:]:
        items = value[key]
        if not isinstance(items, list):
            raise _invalid(line, f"{key} is not a list")
        if key == "operations":
            items = [_with_fence(item) for item in items]
        rows = [_check_row(item, _TABLES[key], f"{key}[{i}]", line) for i, item in enumerate(items)]
        for row in rows:
            if row["run_id"] != run_id:
                raise _invalid(line, f"{key} row of run {row['run_id']} inside run {run_id}")
        keys = [tuple(row[name] for name in _ORDER[key]) for row in rows]
        if len(set(keys)) != len(keys):
            raise _invalid(line, f"{key} holds duplicate keys {_ORDER[key]}")
        record[key] = sorted(rows, key=_sort_key(key))
    bound_ops = [row["operation_id"] for row in record["deliveryBindings"]]
    if len(set(bound_ops)) != len(bound_ops):
        raise _invalid(line, "deliveryBindings reuse an operation_id")
    hashes = [row["event_hash"] for row in record["events"]]
    if len(set(hashes)) != len(hashes):
        raise _invalid(line, "events repeat an event_hash")
    _check_nesting(run["projection_json"], line, "run.projection_json")
    for key in ("events", "operations"):
        for row in record[key]:
            _check_nesting(row[_JSON_TEXTS[key]], line, f"{key}.{_JSON_TEXTS[key]}")
    return record


def _failure(record: Record, line: int | None, code: str, **fields: Any) -> RunCheck:
    return RunCheck(run_id=record["run"]["run_id"], ok=False, line=line, code=code, **fields)


def check_record(record: Record, line: int | None = None) -> RunCheck:
    """Verify one run offline: the chain links and hashes, its reduction, the projection.

    The same rule as `RunRepository.verify_integrity` (`journal.verification`,
    `journal.receipts`): the events reduce, the stored projection, run columns and binding
    rows mirror the replay, and every operations row is a receipt the chain produced or a
    consistent lease row. Returns the first thing that differs.
    """
    run = record["run"]
    verifier = ChainVerifier()
    receipts = ReceiptVerifier(run["run_id"])
    operation_rows = [[row[c] for c in OPERATION_CHECK_COLUMNS] for row in record["operations"]]
    for operation in operation_rows:
        receipts.add(operation)
    chain = "event-integrity-hash-chain"
    for row in sorted(record["events"], key=lambda row: row["sequence"]):
        sequence = verifier.count + 1
        if row["sequence"] != sequence:
            return _failure(
                record,
                line,
                chain,
                sequence=sequence,
                field="sequence",
                expected=sequence,
                stored=row["sequence"],
                message="event missing or out of order",
            )
        try:
            payload, canonical = decode_payload(row["payload_json"])
        except (ValueError, RecursionError):
            return _failure(record, line, chain, sequence=sequence, message="payload is not JSON")
        if row["prior_hash"] != verifier.prior_hash:
            return _failure(
                record,
                line,
                chain,
                sequence=sequence,
                field="priorHash",
                expected=verifier.prior_hash,
                stored=row["prior_hash"],
            )
        try:
            computed = (
                None
                if canonical is None
                else hash_canonical_event(sequence, row["type"], canonical, row["prior_hash"])
            ) or hash_event(sequence, row["type"], payload, row["prior_hash"])
        except (JsonValueError, RecursionError):
            return _failure(record, line, chain, sequence=sequence, message="payload not hashable")
        if computed != row["event_hash"]:
            return _failure(
                record,
                line,
                chain,
                sequence=sequence,
                field="hash",
                expected=computed,
                stored=row["event_hash"],
            )
        try:  # sequence, link and hash are checked above
            verifier.advance(sequence, row["type"], payload, row["event_hash"])
        except (JournalIntegrityError, InvalidTransitionError) as error:
            return _failure(
                record, line, error.code, sequence=sequence, message=f"{row['type']} event"
            )
        receipts.observe(sequence, verifier.projection)
    if verifier.projection is None:
        return _failure(record, line, "event-integrity-empty", sequence=1, message="no events")
    rebuilt = verifier.projection
    difference = stored_difference(
        rebuilt,
        run["projection_json"],
        run,
        ([binding[c] for c in VERIFIED_BINDING_COLUMNS] for binding in record["deliveryBindings"]),
    )
    if difference is not None:
        return _failure(
            record,
            line,
            "run-projection-integrity-mismatch",
            sequence=difference.sequence,
            field=difference.field,
            expected=difference.expected,
            stored=difference.actual,
        )
    problem = receipts.result(lambda: operation_rows)
    if problem is not None:
        return _failure(
            record,
            line,
            problem.code,
            sequence=problem.sequence,
            field=problem.where,
            expected=problem.expected,
            stored=problem.actual,
            message=f"operation {problem.operation_id}",
            operation_id=problem.operation_id,
        )
    return RunCheck(run_id=run["run_id"], ok=True, line=line)


def _numbered(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    iterator = iter(lines)
    number = 0
    while True:
        number += 1
        try:
            text = next(iterator)
        except StopIteration:
            return
        except UnicodeDecodeError as error:  # a file opened as UTF-8 that is not
            raise _hostile(NOT_UTF8, number, f"not UTF-8 ({error.reason})") from None
        if text.strip():
            yield number, text


def iter_verify_export(lines: Iterable[str]) -> Iterator[RunCheck]:
    """`verify_export`, one result at a time (for progress reporting)."""
    seen: set[str] = set()
    for number, text in _numbered(lines):
        try:
            record = parse_record(text, number)
        except InvalidInputError as error:
            if error.code in HOSTILE_CODES:
                raise
            yield RunCheck(
                run_id=_guess_run_id(text),
                ok=False,
                line=number,
                code=error.code,
                message=error.detail,
            )
            continue
        run_id = record["run"]["run_id"]
        if run_id in seen:
            yield _failure(record, number, INVALID_RECORD, message="run id appears twice")
            continue
        seen.add(run_id)
        yield check_record(record, number)


def verify_export(lines: Iterable[str]) -> list[RunCheck]:
    """Check an export offline (no database): one `RunCheck` per record, in file order.

    A record that does not parse is a failed check (code `export-record-invalid`).
    """
    return list(iter_verify_export(lines))


def _guess_run_id(text: str) -> str | None:
    try:
        value = json.loads(text)
        run_id = value["run"]["run_id"]
    except (ValueError, TypeError, KeyError, RecursionError):
        return None
    return run_id if isinstance(run_id, str) else None


# -- comparing with a destination ---------------------------------------------------------


def _normalised(record: Record) -> Record:
    result: Record = {"run": record["run"]}
    for key in RECORD_KEYS[1:]:
        result[key] = sorted(record[key], key=_sort_key(key))
    return result


def describe_difference(incoming: Record, existing: Record) -> str | None:
    """Where two records of one run id differ (None when identical)."""
    left, right = _normalised(incoming), _normalised(existing)
    for name in RUN_COLUMNS:
        if left["run"][name] != right["run"][name]:
            return f"runs.{name}"
    for key in RECORD_KEYS[1:]:
        table = _TABLES[key].name
        if len(left[key]) != len(right[key]):
            return f"{table}: {len(left[key])} rows here, {len(right[key])} there"
        for a, b in zip(left[key], right[key], strict=True):
            if a != b:
                where = ", ".join(f"{n}={a[n]}" for n in _ORDER[key])
                return f"{table} ({where})"
    return None


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


def _plan(
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


def _raise_conflicts(conflicts: Sequence[str]) -> None:
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


def _insert(connection: Connection, record: Record, batch_size: int) -> int:
    connection.execute(runs.insert().values(**record["run"]))
    for key in RECORD_KEYS[1:]:
        rows = record[key]
        for start in range(0, len(rows), batch_size):
            connection.execute(_TABLES[key].insert(), rows[start : start + batch_size])
    return len(record["events"])


def _write_batch(
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
                count += _insert(connection, record, batch_size)
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
        _engine(bind, schema) as engine,
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
                progress(Progress("export", len(report.written), total, record["run"]["run_id"]))
    return report


def _spool_checked(lines: Iterable[str]) -> IO[str]:
    """Parse and verify every record offline; return them spooled for the second pass."""
    spool: IO[str] = tempfile.SpooledTemporaryFile(  # noqa: SIM115 - returned to the caller
        max_size=_SPOOL_BYTES, mode="w+", encoding="utf-8", newline="\n"
    )
    try:
        seen: set[str] = set()
        keys: set[tuple[str, str, str]] = set()
        for number, text in _numbered(lines):
            record = parse_record(text, number)
            run = record["run"]
            if run["run_id"] in seen:
                raise _invalid(number, f"run {run['run_id']} appears twice")
            seen.add(run["run_id"])
            key = (run["root_hash"], run["stage"], run["lookup_key"])
            if key in keys:
                raise _invalid(number, f"lookup key {run['lookup_key']} is used by two runs")
            keys.add(key)
            check = check_record(record, number)
            if not check.ok:
                raise check.error()
            spool.write(dump_record(record))
            spool.write("\n")
        spool.seek(0)
        return spool
    except BaseException:
        spool.close()
        raise


def _batches(spool: IO[str], size: int) -> Iterator[list[Record]]:
    batch: list[Record] = []
    for text in spool:
        batch.append(json.loads(text))
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def import_store(
    bind: Bind,
    lines: Iterable[str],
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: ProgressCallback | None = None,
    schema: str | None = None,
) -> TransferReport:
    """Import an export into a database at head (`schema`: as for `export_store`).

    Every record is parsed and verified offline first, and every run id compared with the
    destination, so a bad file or a conflicting run (`run-id-conflict`) writes nothing.
    Then each run is written in its own transaction and its chain verified there (a run
    that does not verify is rolled back). Runs already present with identical content are
    skipped: importing the same file twice changes nothing.
    """
    report = TransferReport()
    with _engine(bind, schema) as engine, database_errors(WRITE):
        with engine.connect() as connection:
            assert_at_head(connection, store_schema(connection))
            connection.rollback()
        with _spool_checked(lines) as spool:
            total = 0
            with engine.connect() as connection:
                for batch in _batches(spool, batch_size):
                    _, _, conflicts = _plan(connection, batch)
                    _raise_conflicts(conflicts)
                    total += len(batch)
                connection.rollback()
            spool.seek(0)
            done = 0
            for batch in _batches(spool, batch_size):
                for record in batch:
                    _write_batch(engine, [record], report, batch_size)
                    done += 1
                    if progress is not None:
                        progress(Progress("import", done, total, record["run"]["run_id"]))
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
        _engine(source, source_schema) as source_engine,
        _engine(destination, destination_schema) as destination_engine,
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
                    to_write, identical, found = _plan(connection, records)
                    conflicts.extend(found)
                    report.skipped.extend(identical)
                    pending.extend(record["run"]["run_id"] for record in to_write)
                    checked += len(records)
                    if progress is not None:
                        progress(Progress("check", checked, total, records[-1]["run"]["run_id"]))
                connection.rollback()
            _raise_conflicts(conflicts)
            done = 0

            def copied(run_id: str) -> None:  # per run, so a batch does not sit at 0/N
                nonlocal done
                done += 1
                if progress is not None:
                    progress(Progress("copy", done, len(pending), run_id))

            if progress is not None:
                progress(Progress("copy", 0, len(pending)))
            for start in range(0, len(pending), batch_size):
                ids = pending[start : start + batch_size]
                records = []
                for run_id in ids:
                    found_record = read_record(reader, run_id)
                    if found_record is None:  # pragma: no cover - the snapshot holds it
                        raise CadenceStoreError("run-not-found", run_id)
                    records.append(found_record)
                _write_batch(destination_engine, records, report, batch_size, copied)
    return report


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "Progress",
    "ProgressCallback",
    "RunCheck",
    "TransferReport",
    "check_record",
    "copy_store",
    "describe_difference",
    "dump_record",
    "export_store",
    "import_store",
    "iter_records",
    "iter_verify_export",
    "parse_record",
    "read_record",
    "verify_export",
]
