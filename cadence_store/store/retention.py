"""`RunStore.archive`: finished runs written to a durable archive file, then deleted.

The order is what makes it crash-safe (kill -9 at any point loses nothing):

1. a signed checkpoint (`checkpoints.checkpoint`): every event archived is in its tree;
2. the runs, their export records and their leaves' inclusion proofs against that
   checkpoint, read in one snapshot and written to `to + ".partial"`, flushed, fsynced,
   renamed into place, the directory fsynced: the archive is durable before anything
   is deleted;
3. the runs deleted in transactions of at most `batch` runs, each run whole in one of
   them, with its leaves and ids kept (`repository/retention.py`); a run whose head
   moved since it was written is left whole.

An archive file that exists already is one an interrupted archive made durable: a call
with it verifies it (chains, proofs, signature by `key`) and finishes step 3 for its runs
still in the store, and archives nothing else.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from ..errors import InvalidInputError
from ..journal.archive_format import ArchivedLeaf, header_line, run_line, trailer_line
from ..journal.archives import ArchiveProgress, ArchiveProgressCallback, ArchiveReport
from ..journal.note_keys import VerifierKey
from ..journal.tree_views import SignedCheckpoint
from ..journal.validation import is_safe_integer
from ..repository.core import Clock, JournalAccess, system_clock
from ..repository.retention import Deletion, RunArchives
from ..repository.run_repository import RunRepository
from ..repository.transaction import JournalTransaction
from ..storage.engine import read_snapshot
from ..storage.rows import ArchivableRunRow
from ..storage.run_records import read_run_record
from . import checkpoints
from .transactions import Transactions

DEFAULT_ARCHIVE_BATCH: Final = 1000
PARTIAL_SUFFIX: Final = ".partial"
_PAGE: Final = 1000  # runs selected per page
ARCHIVE_REQUEST_INVALID: Final = "invalid-archive-request"


@dataclass(frozen=True, slots=True)
class ArchiveRequest:
    """An archive's checked arguments."""

    finished_before_ms: int
    path: Path
    batch: int

    @classmethod
    def checked(cls, finished_before_ms: object, to: object, batch: object) -> ArchiveRequest:
        if (
            isinstance(finished_before_ms, bool)
            or not isinstance(finished_before_ms, int)
            or not is_safe_integer(finished_before_ms)
        ):
            raise InvalidInputError(ARCHIVE_REQUEST_INVALID, "finished_before_ms is int ms")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise InvalidInputError(ARCHIVE_REQUEST_INVALID, "batch is an int >= 1")
        if not isinstance(to, str | os.PathLike) or not os.fspath(to):
            raise InvalidInputError(ARCHIVE_REQUEST_INVALID, "to is a file path")
        return cls(finished_before_ms, Path(os.fspath(to)), batch)


def archive(
    transactions: Transactions,
    clock: Clock | None,
    *,
    finished_before_ms: int,
    to: str | os.PathLike[str],
    key: object,
    batch: int = DEFAULT_ARCHIVE_BATCH,
    progress: ArchiveProgressCallback | None = None,
) -> ArchiveReport:
    """See `RunStore.archive`."""
    request = ArchiveRequest.checked(finished_before_ms, to, batch)
    signer = checkpoints.signer_of(key)
    now = (system_clock if clock is None else clock)()
    if request.path.exists():
        return _resume(transactions, request, signer.verifier(), now, progress)
    signed = checkpoints.checkpoint(transactions, clock, signer, None)
    written, events_written = _write_archive(transactions, request, signed, now, progress)
    deletion = _delete(transactions, request.batch, written, now, progress)
    return ArchiveReport(
        path=str(request.path),
        checkpoint=signed,
        runs_written=len(written),
        events_written=events_written,
        runs_archived=deletion.runs,
        events_archived=deletion.events,
        already_archived=deletion.gone,
        kept=deletion.kept,
    )


# -- writing the file -----------------------------------------------------------------------


@contextmanager
def _snapshot(transactions: Transactions) -> Iterator[tuple[Connection, RunArchives]]:
    """One read snapshot on the primary (never a standby: the tree it proofs against was
    signed there): its connection (export records) and the retention reads."""
    transactions.assert_open()
    with transactions.engine.connect() as connection, read_snapshot(connection):
        transaction = JournalTransaction.on_connection(
            connection, transactions.schema, Session, host_statements=False
        )
        try:
            yield connection, RunArchives(JournalAccess(transaction, None))
        finally:
            transaction.close()


def _write_archive(
    transactions: Transactions,
    request: ArchiveRequest,
    signed: SignedCheckpoint,
    now: int,
    progress: ArchiveProgressCallback | None,
) -> tuple[list[ArchivableRunRow], int]:
    """The archive file, durable: the runs it holds (as written) and their events."""
    partial = request.path.with_name(request.path.name + PARTIAL_SUFFIX)
    written: list[ArchivableRunRow] = []
    events = 0
    with _snapshot(transactions) as (connection, archives):
        candidates = list(_archivable(archives, request.finished_before_ms))
        with partial.open("w", encoding="utf-8", newline="\n") as out:
            out.write(header_line(signed.note, signed.size, request.finished_before_ms, now))
            for head in candidates:
                line = _run_line(connection, archives, head, signed.size)
                if line is None:
                    continue  # an event of it is newer than the checkpoint: left whole
                text, count = line
                out.write(text)
                written.append(head)
                events += count
                if progress is not None:
                    progress(ArchiveProgress("archive", len(written), len(candidates), head.run_id))
            out.write(trailer_line(len(written), events))
            _durable(out)
    os.replace(partial, request.path)
    _fsync_directory(request.path.parent)
    return written, events


def _archivable(archives: RunArchives, before: int) -> Iterator[ArchivableRunRow]:
    after = ""
    while page := archives.archivable(before, after, _PAGE):
        yield from page
        after = page[-1].run_id


def _run_line(
    connection: Connection, archives: RunArchives, head: ArchivableRunRow, tree_size: int
) -> tuple[str, int] | None:
    record = read_run_record(connection, head.run_id)
    proofs = archives.leaf_proofs(head.run_id, tree_size)
    if record is None or proofs is None:
        return None
    leaves = [ArchivedLeaf(proof.sequence, proof.leaf_index, proof.hashes) for proof in proofs]
    return run_line(record, leaves), len(leaves)


def _durable(out: IO[str]) -> None:
    out.flush()
    os.fsync(out.fileno())


def _fsync_directory(directory: Path) -> None:
    """The rename made durable (a directory opened read-only; not on Windows)."""
    if not hasattr(os, "O_DIRECTORY"):  # pragma: no cover - Windows
        return
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


# -- resuming ----------------------------------------------------------------------------


def _resume(
    transactions: Transactions,
    request: ArchiveRequest,
    vkey: VerifierKey,
    now: int,
    progress: ArchiveProgressCallback | None,
) -> ArchiveReport:
    """Finish an archive whose file exists (pending the archive reader)."""
    raise InvalidInputError("archive-file-exists", f"{request.path} exists already")


def _head_of(record: Mapping[str, Any]) -> ArchivableRunRow:
    run = record["run"]
    last = record["events"][-1] if record["events"] else {}
    recorded = last.get("recorded_at")
    return ArchivableRunRow(
        str(run["run_id"]),
        int(run["sequence"]),
        str(run["event_hash"]),
        run.get("updated_at") if recorded is None else recorded,
    )


# -- deleting ------------------------------------------------------------------------------


def _delete(
    transactions: Transactions,
    batch: int,
    heads: list[ArchivableRunRow],
    now: int,
    progress: ArchiveProgressCallback | None,
) -> Deletion:
    total = Deletion()
    for start in range(0, len(heads), batch):
        chunk = heads[start : start + batch]

        def work(runs: RunRepository, chunk: list[ArchivableRunRow] = chunk) -> Deletion:
            return RunArchives(JournalAccess(runs.transaction, None)).delete(chunk, now)

        done = transactions.write(work)
        total.runs += done.runs
        total.events += done.events
        total.gone += done.gone
        total.kept += done.kept
        if progress is not None:
            progress(ArchiveProgress("delete", start + len(chunk), len(heads)))
    return total


__all__ = ["DEFAULT_ARCHIVE_BATCH", "PARTIAL_SUFFIX", "archive"]
