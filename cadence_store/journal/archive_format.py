"""The lines of an archive file (`cadence-store-archive/1`): written and read without a
database, so the store that archives runs and the auditor who checks the file share them.

An archive is UTF-8 text, JSON Lines: each line one compact JSON object ending in `\\n`::

    {"archive":"cadence-store-archive/1","checkpoint":<signed note>,"treeSize":N,
     "finishedBeforeMs":T,"createdAtMs":C}                           # line 1, the header
    {"run":{...},"events":[...],"operations":[...],"deliveryBindings":[...],
     "leaves":[{"sequence":1,"leafIndex":I,"hashes":["<hex>",...]},...]}   # one per run
    {"end":{"runs":R,"events":E}}                                     # the last line

A run line is the run's export record (`transfer.record`: every column, stored TEXT
verbatim) with one more key, `leaves`: for each event, in sequence order, its leaf's index
in the transparency tree (its feed position - 1) and the RFC 9162 inclusion proof of its
leaf (`merkle.feed_leaf_hash`) in the tree of `treeSize` leaves, whose root the header's
signed checkpoint names. The trailer's counts tell a whole file from a truncated one.

Anything that is not such a line is `archive-invalid` (`ArchiveInvalidError`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..errors import ArchiveInvalidError, CadenceStoreError
from .merkle import HASH_SIZE, MAX_TREE_SIZE
from .notes import Checkpoint, parse_checkpoint, parse_note
from .tree_views import InclusionProof

ARCHIVE_FORMAT: Final = "cadence-store-archive/1"
ARCHIVE_INVALID: Final = "archive-invalid"
HEADER_KEYS: Final = ("archive", "checkpoint", "treeSize", "finishedBeforeMs", "createdAtMs")
LEAF_KEYS: Final = ("sequence", "leafIndex", "hashes")
TRAILER_KEY: Final = "end"
_HEX_HASH: Final = re.compile(rf"[0-9a-f]{{{2 * HASH_SIZE}}}")


@dataclass(frozen=True)
class ArchivedLeaf:
    """One archived event's leaf: its sequence in its run, its leaf index in the tree
    (feed position - 1) and the inclusion proof's hashes (32 bytes each, leaf upwards)."""

    sequence: int
    leaf_index: int
    hashes: tuple[bytes, ...]

    @classmethod
    def from_proof(cls, proof: InclusionProof) -> ArchivedLeaf:
        """The leaf of a store's inclusion proof (`RunStore.inclusion_proof`)."""
        return cls(proof.sequence, proof.leaf_index, tuple(proof.hashes))

    def to_json(self) -> dict[str, Any]:
        """`{"sequence", "leafIndex", "hashes": [lowercase hex...]}`, as a run line holds it."""
        return {
            "sequence": self.sequence,
            "leafIndex": self.leaf_index,
            "hashes": [hash_.hex() for hash_ in self.hashes],
        }


@dataclass(frozen=True)
class ArchiveHeader:
    """An archive's first line: the signed checkpoint note the proofs lead to (exactly as
    the store signed it), its tree size, the bound the archived runs finished before and
    when the archive was made (milliseconds by the store's clock)."""

    note: str
    tree_size: int
    finished_before_ms: int
    created_at_ms: int

    @property
    def checkpoint(self) -> Checkpoint:
        """The note's checkpoint (origin, size, root), read but not verified."""
        return parse_checkpoint(parse_note(self.note).text)


@dataclass(frozen=True)
class ArchiveTrailer:
    """An archive's last line: how many runs and events the lines before it hold."""

    runs: int
    events: int


def _dumps(value: object) -> str:
    """One line's JSON, compact and ASCII-only like an export record (`dump_record`)."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def _invalid(detail: str, line: int | None = None, **fields: Any) -> ArchiveInvalidError:
    where = f"line {line}: " if line is not None else ""
    return ArchiveInvalidError(ARCHIVE_INVALID, where + detail, **fields)


def _is_count(value: object, limit: int = MAX_TREE_SIZE) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limit


# -- writing --------------------------------------------------------------------------------


def header_line(note: str, tree_size: int, finished_before_ms: int, created_at_ms: int) -> str:
    """The header line (with its newline) of an archive whose proofs lead to the root of
    `note`, a signed checkpoint of `tree_size` leaves (`SignedCheckpoint.note`, verbatim).
    `archive-invalid` when the note is not a checkpoint of that size."""
    header = ArchiveHeader(note, tree_size, finished_before_ms, created_at_ms)
    _check_header(header)
    values = (ARCHIVE_FORMAT, note, tree_size, finished_before_ms, created_at_ms)
    return _dumps(dict(zip(HEADER_KEYS, values, strict=True))) + "\n"


def run_line(record: Mapping[str, Any], leaves: Sequence[ArchivedLeaf]) -> str:
    """A run's line (with its newline): its export record (`transfer.record.Record`, as
    `read_record` gives it) and `leaves`, one per event in sequence order.
    `archive-invalid` when the leaves do not name the record's events."""
    events = record.get("events")
    run = record.get("run")
    run_id = run.get("run_id") if isinstance(run, Mapping) else None
    if not isinstance(events, Sequence):
        raise _invalid("a run's record has a list of events", run_id=run_id)
    if len(leaves) != len(events):
        raise _invalid(f"{len(leaves)} leaves for {len(events)} events", run_id=run_id)
    for leaf, event in zip(leaves, events, strict=True):
        if not isinstance(leaf, ArchivedLeaf) or leaf.sequence != event["sequence"]:
            raise _invalid(
                "the leaves follow the events in sequence order",
                run_id=run_id,
                sequence=event["sequence"],
            )
    return _dumps({**record, "leaves": [leaf.to_json() for leaf in leaves]}) + "\n"


def trailer_line(runs: int, events: int) -> str:
    """The last line (with its newline): the number of run lines and of their events."""
    if not _is_count(runs) or not _is_count(events):
        raise _invalid("a trailer counts runs and events with ints >= 0")
    return _dumps({TRAILER_KEY: {"runs": runs, "events": events}}) + "\n"


# -- reading --------------------------------------------------------------------------------


def _check_header(header: ArchiveHeader, line: int | None = None) -> None:
    if not isinstance(header.note, str):
        raise _invalid("the header's checkpoint is a signed note's text", line)
    for name in ("tree_size", "finished_before_ms", "created_at_ms"):
        if not _is_count(getattr(header, name), 2**63 - 1):
            raise _invalid(f"the header's {name} is an int >= 0", line)
    try:
        size = header.checkpoint.size
    except CadenceStoreError as error:
        detail = f"the header's checkpoint is not a signed checkpoint ({error})"
        raise _invalid(detail, line) from None
    if size != header.tree_size:
        raise _invalid(
            f"the header's treeSize {header.tree_size} is not its checkpoint's {size}", line
        )


def parse_header(value: object, line: int = 1) -> ArchiveHeader:
    """The header of a decoded first line; `archive-invalid` if it is not one (an export
    file, another format, a damaged header)."""
    if not isinstance(value, dict) or "archive" not in value:
        raise _invalid("not an archive: the first line is not an archive header", line)
    if value["archive"] != ARCHIVE_FORMAT:
        raise _invalid(f"not a {ARCHIVE_FORMAT} archive ({value['archive']!r})", line)
    if set(value) != set(HEADER_KEYS):
        raise _invalid(f"the header's keys are {list(HEADER_KEYS)}", line)
    header = ArchiveHeader(
        value["checkpoint"], value["treeSize"], value["finishedBeforeMs"], value["createdAtMs"]
    )
    _check_header(header, line)
    return header


def is_trailer(value: object) -> bool:
    """Whether a decoded line is meant as the trailer (`parse_trailer` checks it)."""
    return isinstance(value, dict) and TRAILER_KEY in value


def parse_trailer(value: object, line: int | None = None) -> ArchiveTrailer:
    """The trailer of a decoded line; `archive-invalid` if it is not one."""
    if not isinstance(value, dict) or set(value) != {TRAILER_KEY}:
        raise _invalid('the trailer is {"end": {"runs", "events"}}', line)
    counts = value[TRAILER_KEY]
    if (
        not isinstance(counts, dict)
        or set(counts) != {"runs", "events"}
        or not _is_count(counts["runs"])
        or not _is_count(counts["events"])
    ):
        raise _invalid("the trailer counts runs and events with ints >= 0", line)
    return ArchiveTrailer(counts["runs"], counts["events"])


def parse_leaves(
    value: object, run_id: str, sequences: Sequence[int], line: int | None = None
) -> tuple[ArchivedLeaf, ...]:
    """A run line's decoded `leaves` for a run whose events have `sequences` (in order);
    `archive-invalid` unless there is one well-formed leaf per event, in that order."""
    if not isinstance(value, list):
        raise _invalid("a run's leaves are a list", line, run_id=run_id)
    if len(value) != len(sequences):
        raise _invalid(f"{len(value)} leaves for {len(sequences)} events", line, run_id=run_id)
    leaves = []
    for item, sequence in zip(value, sequences, strict=True):
        if not isinstance(item, dict) or set(item) != set(LEAF_KEYS):
            raise _invalid(f"a leaf's keys are {list(LEAF_KEYS)}", line, run_id=run_id)
        if item["sequence"] != sequence or isinstance(item["sequence"], bool):
            raise _invalid(
                "the leaves follow the events in sequence order",
                line,
                run_id=run_id,
                sequence=sequence,
            )
        index, hashes = item["leafIndex"], item["hashes"]
        if not _is_count(index, MAX_TREE_SIZE - 1):
            raise _invalid("a leafIndex is an int >= 0", line, run_id=run_id, sequence=sequence)
        if not isinstance(hashes, list) or not all(
            isinstance(hash_, str) and _HEX_HASH.fullmatch(hash_) for hash_ in hashes
        ):
            raise _invalid(
                f"a leaf's hashes are lowercase hex of {HASH_SIZE} bytes",
                line,
                run_id=run_id,
                sequence=sequence,
            )
        leaves.append(ArchivedLeaf(sequence, index, tuple(bytes.fromhex(h) for h in hashes)))
    return tuple(leaves)


__all__ = [
    "ARCHIVE_FORMAT",
    "ARCHIVE_INVALID",
    "HEADER_KEYS",
    "LEAF_KEYS",
    "TRAILER_KEY",
    "ArchiveHeader",
    "ArchiveTrailer",
    "ArchivedLeaf",
    "header_line",
    "is_trailer",
    "parse_header",
    "parse_leaves",
    "parse_trailer",
    "run_line",
    "trailer_line",
]
