"""Verifying export records offline, by the rule of `RunRepository.verify_integrity`.

No database: each record's chain is replayed, its projection, run columns and binding
rows compared with the replay, and its operations rows checked as receipts or leases.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import InvalidInputError, InvalidTransitionError, JournalIntegrityError
from ..journal import ChainVerifier
from ..journal.receipts import OPERATION_COLUMNS as OPERATION_CHECK_COLUMNS
from ..journal.receipts import ReceiptVerifier
from ..journal.verification import BINDING_COLUMNS as VERIFIED_BINDING_COLUMNS
from ..journal.verification import stored_difference
from .record import (
    HOSTILE_CODES,
    INVALID_RECORD,
    NOT_UTF8,
    Record,
    RunCheck,
    hostile,
    parse_record,
)


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
    for row in sorted(record["events"], key=lambda row: row["sequence"]):
        try:
            verifier.feed_json(
                row["sequence"],
                row["type"],
                row["payload_json"],
                row["event_hash"],
                row["prior_hash"],
            )
        except (JournalIntegrityError, InvalidTransitionError) as error:
            if isinstance(error, JournalIntegrityError) and error.field is not None:
                return _failure(
                    record,
                    line,
                    error.code,
                    sequence=error.sequence,
                    field=None if error.field == "payload" else error.field,
                    expected=error.expected,
                    stored=error.actual,
                    message=error.detail,
                )
            # the event links, but does not apply
            return _failure(
                record,
                line,
                error.code,
                sequence=verifier.count + 1,
                message=f"{row['type']} event",
            )
        receipts.observe(verifier.count, verifier.projection)
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


def numbered_lines(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    iterator = iter(lines)
    number = 0
    while True:
        number += 1
        try:
            text = next(iterator)
        except StopIteration:
            return
        except UnicodeDecodeError as error:  # a file opened as UTF-8 that is not
            raise hostile(NOT_UTF8, number, f"not UTF-8 ({error.reason})") from None
        if text.strip():
            yield number, text


def iter_verify_export(lines: Iterable[str]) -> Iterator[RunCheck]:
    """`verify_export`, one result at a time (for progress reporting)."""
    seen: set[str] = set()
    for number, text in numbered_lines(lines):
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
