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

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from sqlalchemy.orm import Session

from ..errors import ArchiveInvalidError, CadenceStoreError, InvalidInputError
from ..journal import ChainVerifier
from ..journal.archive_format import (
    ARCHIVE_INVALID,
    ArchivedLeaf,
    ArchiveHeader,
    header_line,
    is_trailer,
    parse_header,
    parse_leaves,
    parse_trailer,
    run_line,
    trailer_line,
)
from ..journal.archives import (
    ArchiveProgress,
    ArchiveProgressCallback,
    ArchiveReport,
    WrittenRun,
    record_digest,
)
from ..journal.merkle import feed_leaf_hash, verify_inclusion
from ..journal.note_keys import VerifierKey
from ..journal.notes import Checkpoint, verify_checkpoint
from ..journal.tree_views import SignedCheckpoint
from ..journal.validation import is_safe_integer
from ..repository.core import Clock, JournalAccess, system_clock
from ..repository.retention import Deletion, RunArchives
from ..repository.run_repository import RunRepository
from ..repository.transaction import JournalTransaction
from ..storage.engine import read_snapshot
from ..storage.rows import ArchivableRunRow
from ..storage.run_records import RECORD_KEYS
from . import checkpoints
from .transactions import Transactions

DEFAULT_ARCHIVE_BATCH: Final = 1000
PARTIAL_SUFFIX: Final = ".partial"
_PAGE: Final = 1000  # runs selected per page
DELETE_BUDGET_S: Final = 0.05  # the longest a deleting transaction goes on taking runs
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
def _snapshot(transactions: Transactions) -> Iterator[RunArchives]:
    """The retention reads (records, proofs) in one read snapshot on the primary (never a
    standby: the tree the proofs lead into was signed there)."""
    transactions.assert_open()
    with transactions.engine.connect() as connection, read_snapshot(connection):
        transaction = JournalTransaction.on_connection(
            connection, transactions.schema, Session, host_statements=False
        )
        try:
            yield RunArchives(JournalAccess(transaction, None))
        finally:
            transaction.close()


def _write_archive(
    transactions: Transactions,
    request: ArchiveRequest,
    signed: SignedCheckpoint,
    now: int,
    progress: ArchiveProgressCallback | None,
) -> tuple[list[WrittenRun], int]:
    """The archive file, durable: the runs it holds (as written) and their events."""
    partial = request.path.with_name(request.path.name + PARTIAL_SUFFIX)
    written: list[WrittenRun] = []
    events = 0
    with _snapshot(transactions) as archives:
        candidates = list(_archivable(archives, request.finished_before_ms))
        with partial.open("w", encoding="utf-8", newline="\n") as out:
            out.write(header_line(signed.note, signed.size, request.finished_before_ms, now))
            for head in candidates:
                found = _run_line(archives, head, signed.size)
                if found is None:
                    continue  # an event of it is newer than the checkpoint: left whole
                text, run = found
                out.write(text)
                written.append(run)
                events += run.sequence
                if progress is not None:
                    progress(ArchiveProgress("archive", len(written), len(candidates), run.run_id))
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
    archives: RunArchives, head: ArchivableRunRow, tree_size: int
) -> tuple[str, WrittenRun] | None:
    record = archives.record(head.run_id)
    proofs = archives.leaf_proofs(head.run_id, tree_size)
    if record is None or proofs is None:
        return None
    leaves = [ArchivedLeaf(proof.sequence, proof.leaf_index, proof.hashes) for proof in proofs]
    run = WrittenRun(
        head.run_id, head.sequence, head.event_hash, head.last_event_at, record_digest(record)
    )
    return run_line(record, leaves), run


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
    """Finish an archive whose file exists: its checkpoint signed by this key, every
    leaf's proof leading to its root, its trailer whole; then delete its runs still in
    the store exactly as it holds them (their records' digests), and nothing else."""
    with request.path.open("r", encoding="utf-8", newline="\n") as stream:
        header, checkpoint, runs = _read_own_archive(stream, vkey)
    deletion = _delete(transactions, request.batch, runs, now, progress)
    signed = SignedCheckpoint(
        note=header.note,
        size=checkpoint.size,
        root_hash=checkpoint.root_hash.hex(),
        origin=checkpoint.origin,
    )
    return ArchiveReport(
        path=str(request.path),
        checkpoint=signed,
        runs_written=len(runs),
        events_written=sum(run.sequence for run in runs),
        runs_archived=deletion.runs,
        events_archived=deletion.events,
        resumed=True,
        already_archived=deletion.gone,
        kept=deletion.kept,
    )


def _decoded(text: str, number: int) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise ArchiveInvalidError(ARCHIVE_INVALID, f"line {number} is not JSON") from None


def _read_own_archive(
    stream: Iterable[str], vkey: VerifierKey
) -> tuple[ArchiveHeader, Checkpoint, list[WrittenRun]]:
    """An archive this store wrote with `vkey`'s key: its header, its signed checkpoint,
    and each run as it holds it (its proofs checked against the checkpoint's root)."""
    lines = iter(enumerate(stream, start=1))
    first = next(lines, None)
    if first is None:
        raise ArchiveInvalidError(ARCHIVE_INVALID, "not an archive: the file is empty")
    header = parse_header(_decoded(first[1], 1))
    checkpoint = verify_checkpoint(header.note, vkey)
    runs: list[WrittenRun] = []
    for number, text in lines:
        value = _decoded(text, number)
        if is_trailer(value):
            trailer = parse_trailer(value, number)
            if (trailer.runs, trailer.events) != (len(runs), sum(r.sequence for r in runs)):
                raise ArchiveInvalidError(ARCHIVE_INVALID, f"line {number}: other counts")
            return header, checkpoint, runs
        runs.append(_checked_run(value, number, checkpoint))
    raise ArchiveInvalidError(ARCHIVE_INVALID, "no trailer: the archive is truncated")


def _checked_run(value: Any, number: int, checkpoint: Checkpoint) -> WrittenRun:
    if not isinstance(value, dict) or set(value) != {*RECORD_KEYS, "leaves"}:
        raise ArchiveInvalidError(ARCHIVE_INVALID, f"line {number} is not a run line")
    leaves_value = value.pop("leaves")
    try:
        run, events = value["run"], value["events"]
        run_id = str(run["run_id"])
        sequences = [event["sequence"] for event in events]
        leaves = parse_leaves(leaves_value, run_id, sequences, number)
        chain = ChainVerifier()  # the events are the ones their hashes name
        for event, leaf in zip(events, leaves, strict=True):
            chain.feed_json(
                event["sequence"],
                event["type"],
                event["payload_json"],
                event["event_hash"],
                event["prior_hash"],
            )
            leaf_hash = feed_leaf_hash(run_id, leaf.sequence, event["event_hash"])
            verify_inclusion(
                leaf_hash, leaf.leaf_index, checkpoint.size, list(leaf.hashes), checkpoint.root_hash
            )
        head = WrittenRun(
            run_id,
            int(run["sequence"]),
            str(run["event_hash"]),
            _last_event_at(run, events),
            record_digest(value),
        )
    except (KeyError, TypeError, ValueError, CadenceStoreError) as error:
        if isinstance(error, ArchiveInvalidError):
            raise
        raise ArchiveInvalidError(
            ARCHIVE_INVALID, f"line {number}: the run does not verify ({error})"
        ) from None
    if head.sequence != len(events):
        raise ArchiveInvalidError(ARCHIVE_INVALID, f"line {number}: the run lacks events")
    return head


def _last_event_at(run: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> int | None:
    recorded = events[-1].get("recorded_at") if events else None
    return run.get("updated_at") if recorded is None else recorded


# -- deleting ------------------------------------------------------------------------------


def _delete(
    transactions: Transactions,
    batch: int,
    heads: list[WrittenRun],
    now: int,
    progress: ArchiveProgressCallback | None,
) -> Deletion:
    """`heads` deleted in transactions of at most `batch` runs, each also ending once it
    has held its locks for `DELETE_BUDGET_S` (SQLite's one writer lock, PostgreSQL's row
    locks): a writer waits at most about that long."""
    total = Deletion()
    start = 0
    while start < len(heads):
        chunk = heads[start : start + batch]

        def work(runs: RunRepository, chunk: list[WrittenRun] = chunk) -> Deletion:
            archives = RunArchives(JournalAccess(runs.transaction, None))
            return archives.delete(chunk, now, DELETE_BUDGET_S)

        done = transactions.write(work)
        start += done.settled
        total.runs += done.runs
        total.events += done.events
        total.gone += done.gone
        total.kept += done.kept
        total.settled += done.settled
        if progress is not None:
            progress(ArchiveProgress("delete", start, len(heads)))
    return total


__all__ = ["DEFAULT_ARCHIVE_BATCH", "PARTIAL_SUFFIX", "archive"]
