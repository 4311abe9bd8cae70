"""The export record: one run and its rows as one JSON line, parsed and checked offline.

A record is::

    {"run": {...every `runs` column...},
     "events": [{...every `events` column...}, ...],          # sequence order
     "operations": [{...every `operations` column...}, ...],  # operation_id order
     "deliveryBindings": [{...every `delivery_bindings` column...}, ...]}

Column names are the tables' own (snake_case, as cadence 1.x named them) and stored TEXT
(`payload_json`, `projection_json`, `outcome_json`) is kept verbatim.

`parse_record` shape-checks a line, `dump_record` writes one (`offline` verifies them).
Nothing here touches a database (the tables are read for their columns only).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, TypedDict

from sqlalchemy import Integer, Table

from ..errors import InvalidInputError, JournalIntegrityError
from ..journal.receipts import JOURNAL_RECEIPT_KINDS, claimed_sequence
from ..journal.validation import is_storable
from ..journal.vocabulary import KIND_LEASE
from ..storage.models import delivery_bindings, events, operations, runs
from ..storage.run_records import CHILD_ORDER, RUN_COLUMNS, Row, column_names

ChildKey = Literal["events", "operations", "deliveryBindings"]


class Record(TypedDict):
    """One run of an export: its `runs` row and its child rows, column names as keys."""

    run: Row
    events: list[Row]
    operations: list[Row]
    deliveryBindings: list[Row]  # the export format's key


DEFAULT_BATCH_SIZE: Final = 200
RECORD_KEYS: Final = ("run", "events", "operations", "deliveryBindings")
CHILD_KEYS: Final[tuple[ChildKey, ...]] = ("events", "operations", "deliveryBindings")
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
# deeper than Python's default recursion limit lets any decoder go: refused unread
_MAX_DEPTH: Final = 1000
_JSON_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_A_BRACKET: Final = re.compile(r"[^\[\]{}]")

TABLES: Final[dict[str, Table]] = {
    "run": runs,
    "events": events,
    "operations": operations,
    "deliveryBindings": delivery_bindings,
}


def row_order(key: str) -> Callable[[Row], tuple[Any, ...]]:
    names = CHILD_ORDER[key]

    def sort_key(row: Row) -> tuple[Any, ...]:
        return tuple(row[name] for name in names)

    return sort_key


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


def dump_record(record: Record) -> str:
    """One export line (without the newline): compact, ASCII-only JSON."""
    return json.dumps(record, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


# -- parsing and offline checks -----------------------------------------------------------


def invalid_record(line: int | None, message: str) -> InvalidInputError:
    where = f"line {line}: " if line is not None else ""
    return InvalidInputError(INVALID_RECORD, where + message)


def hostile(code: str, line: int | None, message: str) -> InvalidInputError:
    where = f"line {line}: " if line is not None else ""
    return InvalidInputError(code, where + message)


def _nesting_depth(text: str) -> int:
    """How deep `text`'s arrays and objects nest, counted without decoding it (a decoder
    recursing that deep runs the garbage collector's finalizers at the stack's limit)."""
    brackets = _NOT_A_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(itertools.accumulate(1 if c in "[{" else -1 for c in brackets), default=0)


def _check_nesting(text: object, line: int | None, where: str) -> None:
    """Refuse a JSON text nested too deep to decode (the decoder would overflow the stack)."""
    if not isinstance(text, str) or text.count("[") + text.count("{") < _DEEP_HINT:
        return
    if _nesting_depth(text) > _MAX_DEPTH:
        raise hostile(TOO_DEEP, line, f"{where} is JSON nested too deep")
    try:
        json.loads(text)
    except RecursionError:
        raise hostile(TOO_DEEP, line, f"{where} is JSON nested too deep") from None
    except ValueError:
        pass  # not JSON at all: check_record reports it as a broken record


def _check_row(value: object, table: Table, where: str, line: int | None) -> Row:
    if not isinstance(value, dict):
        raise invalid_record(line, f"{where} is not an object")
    columns = column_names(table)
    if set(value) != set(columns):
        missing = sorted(set(columns) - set(value))
        extra = sorted(set(value) - set(columns))
        raise invalid_record(
            line, f"{where} columns differ (missing {missing}, unexpected {extra})"
        )
    for column in (table.c[name] for name in columns):
        item = value[column.name]
        if item is None:
            if column.nullable and not column.primary_key:
                continue
            raise invalid_record(line, f"{where}.{column.name} is null")
        if isinstance(column.type, Integer):
            if isinstance(item, bool) or not isinstance(item, int):
                raise invalid_record(line, f"{where}.{column.name} is not an integer")
            if item not in INT64:
                raise hostile(OUT_OF_RANGE, line, f"{where}.{column.name} is not a 64-bit integer")
        elif not isinstance(item, str):
            raise invalid_record(line, f"{where}.{column.name} is not a string")
        elif not is_storable(item):
            raise invalid_record(line, f"{where}.{column.name} holds a NUL or a lone surrogate")
    return {name: value[name] for name in columns}


def _with_fence(row: object) -> object:
    """An operation row of an export made before fences (revision cs0002) gets the fence
    that revision gives existing rows: 1 for a lease, none for a receipt."""
    if not isinstance(row, dict) or "lease_fence" in row:
        return row
    return {**row, "lease_fence": 1 if row.get("kind") == KIND_LEASE else None}


# columns added by revision cs0003: an export made before it has none (unknown times)
_TIMES: Final[dict[str, tuple[str, ...]]] = {
    "run": ("created_at", "updated_at"),
    "events": ("recorded_at",),
}


def _with_sequence(row: object) -> object:
    """An operation row of an export made before receipt sequences (revision cs0005) gets
    the sequence that revision gives existing rows: the one a journal receipt's text
    names, none for a lease."""
    if not isinstance(row, dict) or "sequence" in row:
        return row
    receipt = row.get("kind") in JOURNAL_RECEIPT_KINDS
    return {**row, "sequence": claimed_sequence(row.get("outcome_json")) if receipt else None}


def _with_times(row: object, key: str) -> object:
    """A row of an export made before timestamps (revision cs0003) gets NULL times, as
    that revision gives the rows it finds."""
    names = _TIMES[key]
    if not isinstance(row, dict) or all(name in row for name in names):
        return row
    return {**row, **{name: row.get(name) for name in names}}


def decode_line(text: str, line: int | None = None) -> Any:
    """One line's JSON value: `export-record-too-deep` (refused unread) when nested too
    deep to decode, `export-record-invalid` when not JSON."""
    if text.count("[") + text.count("{") >= _DEEP_HINT and _nesting_depth(text) > _MAX_DEPTH:
        raise hostile(TOO_DEEP, line, "JSON nested too deep")
    try:
        return json.loads(text)
    except ValueError as error:
        raise invalid_record(line, f"not JSON ({error})") from None
    except RecursionError:
        raise hostile(TOO_DEEP, line, "JSON nested too deep") from None


def parse_record(text: str, line: int | None = None) -> Record:
    """Parse and shape-check one export line (`InvalidInputError` export-record-invalid)."""
    return record_of(decode_line(text, line), line)


def record_of(value: object, line: int | None = None) -> Record:
    """Shape-check one decoded export record (`InvalidInputError` export-record-invalid)."""
    if not isinstance(value, dict) or set(value) != set(RECORD_KEYS):
        raise invalid_record(line, f"expected an object with keys {list(RECORD_KEYS)}")
    run = _check_row(_with_times(value["run"], "run"), runs, "run", line)
    run_id = run["run_id"]
    children: dict[ChildKey, list[Row]] = {}
    for key in CHILD_KEYS:
        items = value[key]
        if not isinstance(items, list):
            raise invalid_record(line, f"{key} is not a list")
        if key == "operations":
            items = [_with_sequence(_with_fence(item)) for item in items]
        elif key == "events":
            items = [_with_times(item, key) for item in items]
        rows = [_check_row(item, TABLES[key], f"{key}[{i}]", line) for i, item in enumerate(items)]
        for row in rows:
            if row["run_id"] != run_id:
                raise invalid_record(line, f"{key} row of run {row['run_id']} inside run {run_id}")
        keys = [tuple(row[name] for name in CHILD_ORDER[key]) for row in rows]
        if len(set(keys)) != len(keys):
            raise invalid_record(line, f"{key} holds duplicate keys {CHILD_ORDER[key]}")
        children[key] = sorted(rows, key=row_order(key))
    record = Record(
        run=run,
        events=children["events"],
        operations=children["operations"],
        deliveryBindings=children["deliveryBindings"],
    )
    bound_ops = [row["operation_id"] for row in record["deliveryBindings"]]
    if len(set(bound_ops)) != len(bound_ops):
        raise invalid_record(line, "deliveryBindings reuse an operation_id")
    hashes = [row["event_hash"] for row in record["events"]]
    if len(set(hashes)) != len(hashes):
        raise invalid_record(line, "events repeat an event_hash")
    _check_nesting(run["projection_json"], line, "run.projection_json")
    for key in ("events", "operations"):
        for row in record[key]:
            _check_nesting(row[_JSON_TEXTS[key]], line, f"{key}.{_JSON_TEXTS[key]}")
    return record


def _normalised(record: Record) -> Record:
    return Record(
        run=record["run"],
        events=sorted(record["events"], key=row_order("events")),
        operations=sorted(record["operations"], key=row_order("operations")),
        deliveryBindings=sorted(record["deliveryBindings"], key=row_order("deliveryBindings")),
    )


def describe_difference(incoming: Record, existing: Record) -> str | None:
    """Where two records of one run id differ (None when identical)."""
    left, right = _normalised(incoming), _normalised(existing)
    for name in RUN_COLUMNS:
        if left["run"][name] != right["run"][name]:
            return f"runs.{name}"
    for key in CHILD_KEYS:
        table = TABLES[key].name
        if len(left[key]) != len(right[key]):
            return f"{table}: {len(left[key])} rows here, {len(right[key])} there"
        for a, b in zip(left[key], right[key], strict=True):
            if a != b:
                where = ", ".join(f"{n}={a[n]}" for n in CHILD_ORDER[key])
                return f"{table} ({where})"
    return None


__all__ = [
    "CHILD_KEYS",
    "DEFAULT_BATCH_SIZE",
    "HOSTILE_CODES",
    "INVALID_RECORD",
    "RECORD_KEYS",
    "RUN_COLUMNS",
    "ChildKey",
    "Record",
    "Row",
    "RunCheck",
    "decode_line",
    "describe_difference",
    "dump_record",
    "parse_record",
    "record_of",
]
