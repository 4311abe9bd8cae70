"""Importing a file into a database at head: an export (one record per line), or an
archive file (`restore`: its runs back where the store archived them)."""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO, Final

from ..storage.failures import WRITE, database_errors
from ..storage.schema import assert_at_head, store_schema
from .movement import (
    Bind,
    ProgressCallback,
    TransferProgress,
    TransferReport,
    plan_writes,
    raise_conflicts,
    transfer_engine,
    write_batch,
)
from .offline import check_record, numbered_lines
from .record import (
    DEFAULT_BATCH_SIZE,
    NOT_UTF8,
    Record,
    dump_record,
    hostile,
    invalid_record,
    parse_record,
)
from .restore import (
    ArchivedRecord,
    check_kept_leaves,
    checked_archive_runs,
    is_archive,
    restore_run,
)

_SPOOL_BYTES: Final = 8 * 1024 * 1024
# a run to write, and (from an archive) each event's position in the store that archived it
Spooled = tuple[Record, tuple[int, ...] | None]


def _export_runs(lines: Iterable[str]) -> Iterator[tuple[int, Record, tuple[int, ...] | None]]:
    seen: set[str] = set()
    for number, text in numbered_lines(lines):
        record = parse_record(text, number)
        run_id = record["run"]["run_id"]
        if run_id in seen:
            raise invalid_record(number, f"run {run_id} appears twice")
        seen.add(run_id)
        yield number, record, None


def _archive_runs(lines: Iterable[str]) -> Iterator[tuple[int, Record, tuple[int, ...] | None]]:
    for number, item in checked_archive_runs(lines):
        yield number, item.record, item.positions


def _spool_checked(runs: Iterable[tuple[int, Record, tuple[int, ...] | None]]) -> IO[str]:
    """Verify every run offline; return them spooled for the second pass."""
    spool: IO[str] = tempfile.SpooledTemporaryFile(  # noqa: SIM115 - returned to the caller
        max_size=_SPOOL_BYTES, mode="w+", encoding="utf-8", newline="\n"
    )
    try:
        keys: set[tuple[str, str, str]] = set()
        for number, record, positions in runs:
            run = record["run"]
            key = (run["root_hash"], run["stage"], run["lookup_key"])
            if key in keys:
                raise invalid_record(number, f"lookup key {run['lookup_key']} is used by two runs")
            keys.add(key)
            check = check_record(record, number)
            if not check.ok:
                raise check.error()
            spool.write(f"[{dump_record(record)},{json.dumps(positions)}]\n")
        spool.seek(0)
        return spool
    except BaseException:
        spool.close()
        raise


def _batches(spool: IO[str], size: int) -> Iterator[list[Spooled]]:
    batch: list[Spooled] = []
    for text in spool:
        record, positions = json.loads(text)
        batch.append((record, None if positions is None else tuple(positions)))
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _peek(lines: Iterable[str]) -> tuple[str | None, Iterable[str]]:
    """The first line, and the lines with it still at their head."""
    iterator = iter(lines)
    try:
        first = next(iterator, None)
    except UnicodeDecodeError as error:  # a file opened as UTF-8 that is not
        raise hostile(NOT_UTF8, 1, f"not UTF-8 ({error.reason})") from None
    return first, iterator if first is None else itertools.chain([first], iterator)


def import_store(
    bind: Bind,
    lines: Iterable[str],
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: ProgressCallback | None = None,
    schema: str | None = None,
) -> TransferReport:
    """Import an export, or an archive file, into a database at head (`schema`: as for
    `export_store`).

    Every record is parsed and verified offline first, and every run id compared with the
    destination, so a bad file or a conflicting run (`run-id-conflict`) writes nothing.
    Then each run is written in its own transaction and its chain verified there (a run
    that does not verify is rolled back). Runs already present with identical content are
    skipped: importing the same file twice changes nothing.

    An archive's runs are restored (`transfer.restore`): each leaf's proof must lead to
    the root of the archive's checkpoint, and in the store that archived the run its
    leaves must be the ones the store kept (`checkpoint-mismatch` otherwise); the events
    go back to their positions and the run is no longer archived. A truncated or altered
    archive is `archive-invalid`.
    """
    report = TransferReport()
    first, lines = _peek(lines)
    archive = first is not None and is_archive(first)
    with transfer_engine(bind, schema) as engine, database_errors(WRITE):
        with engine.connect() as connection:
            assert_at_head(connection, store_schema(connection))
            connection.rollback()
        runs = _archive_runs(lines) if archive else _export_runs(lines)
        with _spool_checked(runs) as spool:
            total = 0
            with engine.connect() as connection:
                for batch in _batches(spool, batch_size):
                    _, _, conflicts = plan_writes(connection, [record for record, _ in batch])
                    raise_conflicts(conflicts)
                    restored = [ArchivedRecord(r, p) for r, p in batch if p is not None]
                    check_kept_leaves(connection, restored)
                    total += len(batch)
                connection.rollback()
            spool.seek(0)
            done = 0
            for batch in _batches(spool, batch_size):
                for record, positions in batch:
                    if positions is None:
                        write_batch(engine, [record], report, batch_size)
                    else:
                        restore_run(engine, ArchivedRecord(record, positions), report, batch_size)
                    done += 1
                    if progress is not None:
                        progress(TransferProgress("import", done, total, record["run"]["run_id"]))
    return report


__all__ = ["import_store"]
