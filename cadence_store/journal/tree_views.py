"""What the store's transparency-tree calls return: a signed checkpoint, a verification's
report, inclusion and consistency proofs (their JSON as `cadence-store prove` prints it).
Plain values: no database here."""

from __future__ import annotations

import base64
from dataclasses import dataclass, fields
from typing import Any

from pydantic.alias_generators import to_camel

from .merkle import feed_leaf_hash


def _base64(hashes: tuple[bytes, ...]) -> list[str]:
    return [base64.b64encode(hash_).decode("ascii") for hash_ in hashes]


def camel_case_fields(view: Any) -> dict[str, Any]:
    """A dataclass's fields as a report's JSON has them: by their camelCase names, in the
    order they are declared, their values as they are."""
    return {to_camel(field.name): getattr(view, field.name) for field in fields(view)}


@dataclass(frozen=True)
class SignedCheckpoint:
    """A checkpoint the store signed and recorded: the signed note's text, the tree size
    and root (lowercase hex) it names, and its origin."""

    note: str
    size: int
    root_hash: str
    origin: str


@dataclass(frozen=True)
class CheckpointReport:
    """A checkpoint that verified against the store: its size and root (hex), the store's
    tree size now (at least the checkpoint's), and the runs and events whose chains were
    verified with it."""

    size: int
    root_hash: str
    tree_size: int
    runs_verified: int
    events_verified: int

    def to_json(self) -> dict[str, Any]:
        """The report as `cadence-store verify --checkpoint --json` prints it."""
        return camel_case_fields(self)


@dataclass(frozen=True)
class InclusionProof:
    """An event's leaf in the tree of a recorded checkpoint, and the proof of it: with
    the checkpoint's note and its verifier key alone, anyone can check that the event
    was in the log the checkpoint signed (`journal.merkle.verify_inclusion`)."""

    origin: str
    tree_size: int
    leaf_index: int
    run_id: str
    sequence: int
    event_hash: str
    hashes: tuple[bytes, ...]
    checkpoint: str  # the signed note

    @property
    def leaf_hash(self) -> bytes:
        """The leaf hash of the event (what the proof starts from)."""
        return feed_leaf_hash(self.run_id, self.sequence, self.event_hash)

    def to_json(self) -> dict[str, Any]:
        """`{"origin", "treeSize", "leafIndex", "leaf": {...}, "hashes": [base64...],
        "checkpoint": <note>}`."""
        return {
            "origin": self.origin,
            "treeSize": self.tree_size,
            "leafIndex": self.leaf_index,
            "leaf": {"runId": self.run_id, "sequence": self.sequence, "eventHash": self.event_hash},
            "hashes": _base64(self.hashes),
            "checkpoint": self.checkpoint,
        }


@dataclass(frozen=True)
class ConsistencyProof:
    """The proof that the tree of `new_size` leaves extends the tree of `old_size`
    (`journal.merkle.verify_consistency` checks it against the two roots)."""

    old_size: int
    new_size: int
    hashes: tuple[bytes, ...]

    def to_json(self) -> dict[str, Any]:
        """`{"oldSize", "newSize", "hashes": [base64...]}`."""
        return {"oldSize": self.old_size, "newSize": self.new_size, "hashes": _base64(self.hashes)}


__all__ = [
    "CheckpointReport",
    "ConsistencyProof",
    "InclusionProof",
    "SignedCheckpoint",
    "camel_case_fields",
]
