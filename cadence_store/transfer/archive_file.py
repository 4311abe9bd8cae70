"""Archive files (`cadence-store-archive/1`): the runs `RunStore.archive` deleted from a
store, each with the inclusion proofs of its events' leaves in a signed checkpoint's tree.

The lines themselves are `journal.archive_format`'s (pure, so the store writes them too);
here they are read back (`read_archive`) and checked with no database at all
(`verify_archive`): the checkpoint's signature, every run's chain (the rule of
`verify --file`), every leaf's inclusion proof against the checkpoint's root, and the
trailer's counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import (
    ArchiveInvalidError,
    CadenceStoreError,
    CheckpointError,
    InvalidInputError,
    JournalIntegrityError,
)
from ..journal.archive_format import (
    ARCHIVE_FORMAT,
    ARCHIVE_INVALID,
    ArchivedLeaf,
    ArchiveHeader,
    ArchiveTrailer,
    header_line,
    is_trailer,
    parse_header,
    parse_leaves,
    parse_trailer,
    run_line,
    trailer_line,
)
from ..journal.merkle import feed_leaf_hash, verify_inclusion
from ..journal.note_keys import VerifierKey, parse_verifier_key
from ..journal.notes import Checkpoint, verify_checkpoint
from ..journal.tree_views import camel_case_fields
from .offline import check_record, numbered_lines
from .record import HOSTILE_CODES, Record, decode_line, record_of


@dataclass(frozen=True)
class ArchivedRun:
    """One run line of an archive: the export record and one leaf per event."""

    line: int
    record: Record
    leaves: tuple[ArchivedLeaf, ...]

    @property
    def run_id(self) -> str:
        """The run's id."""
        run_id: str = self.record["run"]["run_id"]
        return run_id


def _as_archive_error(error: InvalidInputError) -> CadenceStoreError:
    """A record that does not parse, inside an archive, makes the file no archive; a
    hostile line (nested too deep, out of range, not UTF-8) is refused as it is."""
    if error.code in HOSTILE_CODES:
        return error
    return ArchiveInvalidError(ARCHIVE_INVALID, error.detail)


class ArchiveContents:
    """An archive being read, in one pass: `header` is read when it is opened; iterating
    yields each run line, checked for shape (not verified), and ends by checking the
    trailer (`archive-invalid` when it is missing, counts otherwise, or is followed by
    another line). `trailer` is set once the runs are read to the end."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = numbered_lines(lines)
        self.trailer: ArchiveTrailer | None = None
        self.runs_read = 0
        self.events_read = 0
        first = next(self._lines, None)
        if first is None:
            raise ArchiveInvalidError(ARCHIVE_INVALID, "not an archive: the file is empty")
        number, text = first
        self.header: ArchiveHeader = parse_header(self._decode(text, number), number)

    @staticmethod
    def _decode(text: str, number: int) -> Any:
        try:
            return decode_line(text, number)
        except InvalidInputError as error:
            raise _as_archive_error(error) from None

    def _run(self, value: Any, number: int) -> ArchivedRun:
        if not isinstance(value, dict) or "leaves" not in value:
            raise ArchiveInvalidError(
                ARCHIVE_INVALID, f"line {number}: a run line is an export record with leaves"
            )
        leaves = value.pop("leaves")
        try:
            record = record_of(value, number)
        except InvalidInputError as error:
            raise _as_archive_error(error) from None
        run_id = record["run"]["run_id"]
        sequences = [event["sequence"] for event in record["events"]]
        return ArchivedRun(number, record, parse_leaves(leaves, run_id, sequences, number))

    def __iter__(self) -> Iterator[ArchivedRun]:
        """Each run line in file order, then the trailer's check."""
        seen: set[str] = set()
        for number, text in self._lines:
            value = self._decode(text, number)
            if is_trailer(value):
                self._end(parse_trailer(value, number), number)
                return
            run = self._run(value, number)
            if run.run_id in seen:
                raise ArchiveInvalidError(
                    ARCHIVE_INVALID, f"line {number}: run {run.run_id} appears twice"
                )
            seen.add(run.run_id)
            self.runs_read += 1
            self.events_read += len(run.leaves)
            yield run
        raise ArchiveInvalidError(
            ARCHIVE_INVALID,
            f"no trailer after {self.runs_read} run(s): the archive is truncated",
        )

    def _end(self, trailer: ArchiveTrailer, number: int) -> None:
        held = ArchiveTrailer(self.runs_read, self.events_read)
        if trailer != held:
            raise ArchiveInvalidError(
                ARCHIVE_INVALID,
                f"line {number}: the trailer counts {trailer.runs} run(s) and "
                f"{trailer.events} event(s), the file holds {held.runs} and {held.events}: "
                "truncated or altered",
            )
        extra = next(self._lines, None)
        if extra is not None:
            raise ArchiveInvalidError(ARCHIVE_INVALID, f"line {extra[0]}: a line after the trailer")
        self.trailer = trailer


def read_archive(lines: Iterable[str]) -> ArchiveContents:
    """Open an archive (an open text file, or any iterable of its lines): its header is
    read now (`archive-invalid` when the file is not an archive); iterate the result for
    its runs, once."""
    return ArchiveContents(lines)


# -- verification -------------------------------------------------------------------------


@dataclass(frozen=True)
class ArchiveFailure:
    """The first thing in an archive that does not verify: its code, what differs, and
    where (line, run, sequence) when it is known."""

    code: str
    detail: str
    line: int | None = None
    run_id: str | None = None
    sequence: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The failure as `verify --archive --json` prints it (known fields only)."""
        return {key: value for key, value in camel_case_fields(self).items() if value is not None}


@dataclass(frozen=True)
class ArchiveVerification:
    """What `verify_archive` found: `ok` when everything verified; the runs and events
    read, the runs that did not verify, the archive's checkpoint (origin, size, root as
    hex) and whether the checkpoint given was a later one than the archive's (then the
    two are consistent only if a store's tree has both roots: `verify --checkpoint`)."""

    ok: bool
    runs: int
    events: int
    broken: int
    origin: str | None
    tree_size: int | None
    root_hash: str | None
    later_checkpoint: bool
    failure: ArchiveFailure | None

    def to_json(self) -> dict[str, Any]:
        """The report as `verify --archive --json` prints it."""
        failure = None if self.failure is None else self.failure.to_json()
        return {**camel_case_fields(self), "failure": failure}


def _failure(error: CadenceStoreError, **where: Any) -> ArchiveFailure:
    fields = {name: getattr(error, name, None) for name in ("run_id", "sequence")}
    fields.update({name: value for name, value in where.items() if value is not None})
    return ArchiveFailure(error.code, error.detail or error.code, **fields)


def _is_later(header: ArchiveHeader, given: Checkpoint, given_note: str) -> bool:
    """Whether `given` (the auditor's checkpoint) is later than the archive's; raises
    `checkpoint-mismatch` when it is neither the archive's own nor a later one of its log."""
    own = header.checkpoint
    if given_note == header.note or given == own:
        return False
    if given.origin != own.origin:
        detail = f"the checkpoint given is of log {given.origin!r}, the archive's of {own.origin!r}"
    elif given.size < own.size:
        detail = (
            f"the checkpoint given ({given.size} leaves) is older than the archive's "
            f"({own.size}): give the archive's own checkpoint or a later one"
        )
    elif given.size == own.size:
        detail = f"two signed trees of {own.size} leaves with different roots: the log forked"
    else:
        return True
    raise CheckpointError("checkpoint-mismatch", detail)


def _signed(note: str, key: VerifierKey, whose: str) -> Checkpoint:
    """The checkpoint of `note` once its signature by `key` verifies (`whose` names the
    note in the error: the auditor's or the archive's)."""
    try:
        return verify_checkpoint(note, key)
    except CheckpointError as error:
        raise CheckpointError(error.code, f"{whose}: {error.detail}") from None


def check_proofs(run: ArchivedRun, root_hash: bytes, size: int) -> None:
    """Raise unless each event's leaf is, by its proof, in the tree of `size` leaves whose
    root is `root_hash`: `checkpoint-mismatch` when a proof leads to another root,
    `archive-invalid` when it cannot be a proof there (its length, an index outside the
    tree). Either names the run and the sequence."""
    for leaf, event in zip(run.leaves, run.record["events"], strict=True):
        leaf_hash = feed_leaf_hash(run.run_id, leaf.sequence, event["event_hash"])
        where = f"run {run.run_id}: sequence {leaf.sequence}"
        try:
            verify_inclusion(leaf_hash, leaf.leaf_index, size, list(leaf.hashes), root_hash)
        except CheckpointError as error:
            raise CheckpointError(
                error.code,
                f"{where}: {error.detail}",
                run_id=run.run_id,
                sequence=leaf.sequence,
                expected=error.expected,
                actual=error.actual,
            ) from None
        except InvalidInputError as error:
            raise ArchiveInvalidError(
                ARCHIVE_INVALID,
                f"line {run.line}: {where}: {error.detail}",
                run_id=run.run_id,
                sequence=leaf.sequence,
            ) from None


def _run_failure(run: ArchivedRun, root_hash: bytes, size: int) -> ArchiveFailure | None:
    check = check_record(run.record, run.line)
    if not check.ok:
        detail = f"run {run.run_id}: {check.description}"
        code = check.code or ARCHIVE_INVALID
        return ArchiveFailure(code, detail, run.line, run.run_id, check.sequence)
    try:
        check_proofs(run, root_hash, size)
    except JournalIntegrityError as error:
        return _failure(error, line=run.line)
    return None


def verify_archive(
    lines: Iterable[str], checkpoint_note: str, vkey: VerifierKey | str
) -> ArchiveVerification:
    """Check an archive with no database: the archive's checkpoint is signed by `vkey`,
    `checkpoint_note` (the checkpoint the auditor trusts, signed by `vkey`) is the
    archive's own or a later one of the same log, every run's chain verifies (as
    `verify --file`), every event's leaf is in the archive's checkpoint's tree by its
    proof, and the trailer counts the runs and events. Reports the first failure; a
    verifier key that is not one is `checkpoint-key-invalid` (raised)."""
    key = vkey if isinstance(vkey, VerifierKey) else parse_verifier_key(vkey)
    runs = events = broken = 0
    failure: ArchiveFailure | None = None
    header: ArchiveHeader | None = None
    later = False
    head: Checkpoint | None = None
    try:
        given = _signed(checkpoint_note, key, "the checkpoint given")
        contents = read_archive(lines)
        header = contents.header
        head = _signed(header.note, key, "the archive's checkpoint")
        later = _is_later(header, given, checkpoint_note)
        for run in contents:
            runs += 1
            events += len(run.leaves)
            found = _run_failure(run, head.root_hash, header.tree_size)
            if found is not None:
                broken += 1
                failure = failure or found
    except CadenceStoreError as error:
        if isinstance(error, InvalidInputError) and error.code in HOSTILE_CODES:
            raise
        failure = failure or _failure(error, line=None)
    return ArchiveVerification(
        ok=failure is None,
        runs=runs,
        events=events,
        broken=broken,
        origin=None if head is None else head.origin,
        tree_size=None if header is None else header.tree_size,
        root_hash=None if head is None else head.root_hash.hex(),
        later_checkpoint=later,
        failure=failure,
    )


__all__ = [
    "ARCHIVE_FORMAT",
    "ARCHIVE_INVALID",
    "ArchiveContents",
    "ArchiveFailure",
    "ArchiveHeader",
    "ArchiveTrailer",
    "ArchiveVerification",
    "ArchivedLeaf",
    "ArchivedRun",
    "check_proofs",
    "header_line",
    "read_archive",
    "run_line",
    "trailer_line",
    "verify_archive",
]
