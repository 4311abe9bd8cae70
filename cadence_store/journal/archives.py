"""What `RunStore.archive` returns. A plain value: no database here."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .tree_views import SignedCheckpoint


@dataclass(frozen=True)
class ArchiveReport:
    """An archive's outcome.

    `path`: the archive file; `checkpoint`: the signed checkpoint its inclusion proofs
    lead to (the one it took, or the file's when it resumed); `runs_written` and
    `events_written`: what the file holds; `runs_archived` and `events_archived`: what
    this call deleted from the store (each run with its leaves kept); `resumed`: the file
    existed already (an archive interrupted after it was made durable) and this call
    finished deleting its runs; `already_archived`: runs of the file an earlier call
    deleted; `kept`: runs of the file left whole in the store because they changed since
    it was written (an event appended), or were not numbered into its tree."""

    path: str
    checkpoint: SignedCheckpoint
    runs_written: int
    events_written: int
    runs_archived: int
    events_archived: int
    resumed: bool = False
    already_archived: int = 0
    kept: int = 0


@dataclass(frozen=True)
class ArchiveProgress:
    """An archive's progress: `phase` "archive" (runs written to the file, `run_id` the
    last) or "delete" (runs whose deleting transaction committed)."""

    phase: str
    done: int
    total: int
    run_id: str | None = None


ArchiveProgressCallback = Callable[[ArchiveProgress], None]


def record_digest(record: Mapping[str, Any]) -> str:
    """A digest of a run's export record (its rows as JSON values): an archive deletes a
    run only while the store still holds exactly the rows its file holds."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


@dataclass(frozen=True, slots=True)
class WrittenRun:
    """A run as an archive file holds it: its head, when its last event was recorded,
    and the digest of its record."""

    run_id: str
    sequence: int
    event_hash: str
    last_event_at: int | None
    digest: str


__all__ = [
    "ArchiveProgress",
    "ArchiveProgressCallback",
    "ArchiveReport",
    "WrittenRun",
    "record_digest",
]
