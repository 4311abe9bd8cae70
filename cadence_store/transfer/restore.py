"""Restoring an archive file's runs into a store (`import_store` of an archive).

Each run of the archive is checked before anything is written: its chain (as any import),
and its leaves' inclusion proofs against the root of the archive's own checkpoint (the
signature is `verify --archive`'s to check: an import is given no key). Then, in the
run's own transaction:

- in the store that archived it, the run's leaves must be the leaves the store kept
  (`kept_leaves`: same position, run, sequence and event hash, one per event), and its
  row what `archived_runs` kept of it (its keys, state, head, last event's time: columns
  no hash covers, so an altered lookup key or time is refused too). The
  events go back to those positions, and the kept leaves and the run's `archived_runs`
  and `archived_operations` rows are removed, so the tree, and every checkpoint signed
  over it, is exactly what it was. A run that differs is refused whole
  (`checkpoint-mismatch`).
- in a store that never held it, it is imported as an export record would be: its events
  are numbered in that store's own feed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection, Engine, delete, select

from ..errors import CadenceStoreError, CheckpointError
from ..storage.models import archived_operations, archived_runs, kept_leaves
from ..storage.schema import store_schema
from ..store.unit_of_work import UnitOfWork
from .archive_file import check_proofs, read_archive
from .movement import TransferReport, insert_record, plan_writes, raise_conflicts
from .record import Record, decode_line

# a run's leaf in a store: (feed position, sequence, event hash)
Leaf = tuple[int, int, str]


@dataclass(frozen=True)
class ArchivedRecord:
    """A run read from an archive, checked: its record and each event's feed position
    in the store that archived it (leaf index + 1), in sequence order."""

    record: Record
    positions: tuple[int, ...]

    @property
    def run_id(self) -> str:
        """The run's id."""
        run_id: str = self.record["run"]["run_id"]
        return run_id


def is_archive(first_line: str) -> bool:
    """Whether a file's first line is an archive header (else it is read as an export)."""
    try:
        value = decode_line(first_line)
    except CadenceStoreError:
        return False
    return isinstance(value, dict) and "archive" in value


def checked_archive_runs(lines: Iterable[str]) -> Iterator[tuple[int, ArchivedRecord]]:
    """Each run of an archive with its line, once its leaves' proofs lead to the root of
    the archive's checkpoint (`read_archive` checks the header, the shapes and, at the
    end, the trailer). The chain is the caller's to check, as for any import."""
    contents = read_archive(lines)
    head = contents.header.checkpoint
    for run in contents:
        check_proofs(run, head.root_hash, contents.header.tree_size)
        positions = tuple(leaf.leaf_index + 1 for leaf in run.leaves)
        yield run.line, ArchivedRecord(run.record, positions)


def _kept_leaves(connection: Connection, run_ids: Sequence[str]) -> dict[str, list[Leaf]]:
    rows = connection.execute(
        select(
            kept_leaves.c.run_id,
            kept_leaves.c.feed_position,
            kept_leaves.c.sequence,
            kept_leaves.c.event_hash,
        )
        .where(kept_leaves.c.run_id.in_(run_ids))
        .order_by(kept_leaves.c.run_id, kept_leaves.c.sequence)
    )
    found: dict[str, list[Leaf]] = {}
    for run_id, position, sequence, event_hash in rows:
        found.setdefault(run_id, []).append((position, sequence, event_hash))
    return found


# what `archived_runs` keeps of a run, as the run's record says it: (column, its value)
_ARCHIVED_COLUMNS: Final = ("root_hash", "stage", "lookup_key", "state", "event_hash")


def _archived(connection: Connection, run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The `archived_runs` row of each of the runs the store archived."""
    query = select(archived_runs).where(archived_runs.c.run_id.in_(run_ids))
    return {row.run_id: dict(row._mapping) for row in connection.execute(query)}


def _kept_run_difference(record: Record, archived: dict[str, Any]) -> str | None:
    """How the run's row in the archive differs from what the store kept of it when it
    archived it (its keys, state, head and last event's time: no hash covers those)."""
    run = record["run"]
    recorded = record["events"][-1]["recorded_at"] if record["events"] else None
    expected = {
        **{name: run[name] for name in _ARCHIVED_COLUMNS},
        "event_count": run["sequence"],
        "last_event_at": run["updated_at"] if recorded is None else recorded,
    }
    for name, value in expected.items():
        if archived[name] != value:
            return f"runs.{name}: the store kept {archived[name]!r}, the archive holds {value!r}"
    return None


def _difference(
    item: ArchivedRecord, kept: list[Leaf], archived: dict[str, Any] | None
) -> str | None:
    """How the archive's run differs from what the store kept of it: its leaves (each
    position, sequence and event hash) and its `archived_runs` row (None: alike, or a
    run this store never archived)."""
    if archived is not None:
        difference = _kept_run_difference(item.record, archived)
        if difference is not None:
            return difference
    if not kept:
        return None if archived is None else "the store kept none of the run's leaves"
    events = item.record["events"]
    if len(kept) != len(events):
        return f"the store kept {len(kept)} leaves of the run, the archive holds {len(events)}"
    for (position, sequence, event_hash), event, at in zip(
        kept, events, item.positions, strict=True
    ):
        if (sequence, event_hash, position) != (event["sequence"], event["event_hash"], at):
            return (
                f"sequence {event['sequence']}: the store kept the leaf (position {position}, "
                f"sequence {sequence}, event hash {event_hash}), the archive's is (position "
                f"{at}, event hash {event['event_hash']})"
            )
    return None


def _mismatch(run_id: str, difference: str) -> CheckpointError:
    return CheckpointError(
        "checkpoint-mismatch",
        f"run {run_id} is not the run this store archived: {difference}; nothing of it "
        "was restored",
        run_id=run_id,
    )


def check_kept_leaves(connection: Connection, items: Sequence[ArchivedRecord]) -> None:
    """Refuse (`checkpoint-mismatch`) when a run in the archive differs from what the
    store kept of it: its leaves, or its `archived_runs` row."""
    if not items:
        return
    ids = [item.run_id for item in items]
    kept = _kept_leaves(connection, ids)
    archived = _archived(connection, ids)
    for item in items:
        difference = _difference(item, kept.get(item.run_id, []), archived.get(item.run_id))
        if difference is not None:
            raise _mismatch(item.run_id, difference)


def restore_run(
    engine: Engine, item: ArchivedRecord, report: TransferReport, batch_size: int
) -> None:
    """Write one archived run back in its own transaction: at its kept positions, its
    archived rows removed, in the store that archived it; numbered anew in another. A
    run already present and identical is skipped."""
    run_id = item.run_id
    with UnitOfWork(engine, schema=store_schema(engine)) as uow:
        connection = uow.session.connection()
        to_write, skipped, conflicts = plan_writes(connection, [item.record])
        raise_conflicts(conflicts)
        if skipped:
            report.skipped.append(run_id)
            return
        kept = _kept_leaves(connection, [run_id]).get(run_id, [])
        difference = _difference(item, kept, _archived(connection, [run_id]).get(run_id))
        if difference is not None:
            raise _mismatch(run_id, difference)
        positions = item.positions if kept else None
        count = sum(insert_record(connection, record, batch_size, positions) for record in to_write)
        for table in (kept_leaves, archived_operations, archived_runs):
            connection.execute(delete(table).where(table.c.run_id == run_id))
        uow.runs.verify_integrity(run_id)
    report.written.append(run_id)
    report.events_written += count


__all__ = [
    "ArchivedRecord",
    "check_kept_leaves",
    "checked_archive_runs",
    "is_archive",
    "restore_run",
]
