"""Retention on a transaction: the finished runs an archive takes, their leaves' inclusion
proofs, and the deletion of archived runs, each run whole in one transaction with its
leaves and ids kept (`storage/retention_statements.py`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..journal import merkle
from ..journal.archives import WrittenRun, record_digest
from ..journal.merkle import NodeId, node_hash
from ..journal.tiles import TILE_HEIGHT, TileKey
from ..storage.retention_statements import (
    ARCHIVABLE_PAGE,
    ARCHIVED_COUNT,
    ARCHIVED_HEAD_FOR_UPDATE,
    ARCHIVED_RUN,
    DELETE_BINDINGS,
    DELETE_EVENTS,
    DELETE_OPERATIONS,
    DELETE_RUN,
    EVENT_POSITIONS,
    KEEP_LEAVES,
    KEEP_OPERATIONS,
    KEEP_RUN,
    RUN_SCOPE,
)
from ..storage.rows import ArchivableRunRow
from ..storage.run_records import record_in
from ..storage.statements import Statements
from .core import JournalAccess
from .tree_tiles import StoredTree

_CACHED_NODES = 65_536  # node hashes a proof reader keeps
_CACHED_TILES = 1024  # and tiles


class CachedTree(StoredTree):
    """`StoredTree` for many proofs at once (an archive's): the tiles it read and the node
    hashes it gave are kept (a bounded number), and a node between two tile levels is
    hashed from its two children, so that the proofs of neighbouring leaves, which share
    most of their nodes, hash each node once."""

    __slots__ = ("_nodes", "_tiles")

    def __init__(self, sql: Statements) -> None:
        super().__init__(sql)
        self._nodes: dict[NodeId, bytes] = {}
        self._tiles: dict[TileKey, bytes] = {}

    def tiles(self, keys: Sequence[TileKey]) -> dict[TileKey, bytes]:
        wanted = [key for key in dict.fromkeys(keys) if key not in self._tiles]
        if wanted:
            if len(self._tiles) + len(wanted) > _CACHED_TILES:
                self._tiles.clear()
            self._tiles.update(super().tiles(wanted))
        return {key: self._tiles[key] for key in keys if key in self._tiles}

    def node_hashes(self, nodes: Sequence[NodeId]) -> list[bytes]:
        if len(self._nodes) > _CACHED_NODES:
            self._nodes.clear()
        on_tiles = [
            node
            for node in dict.fromkeys(nodes)
            if node not in self._nodes and node.level % TILE_HEIGHT == 0
        ]
        if on_tiles:
            self._nodes.update(zip(on_tiles, super().node_hashes(on_tiles), strict=True))
        return [self._node(node) for node in nodes]

    def _node(self, node: NodeId) -> bytes:
        found = self._nodes.get(node)
        if found is None:
            if node.level % TILE_HEIGHT == 0:
                (found,) = super().node_hashes([node])
            else:
                below = node.level - 1
                found = node_hash(
                    self._node(NodeId(below, 2 * node.index)),
                    self._node(NodeId(below, 2 * node.index + 1)),
                )
            self._nodes[node] = found
        return found


@dataclass(frozen=True, slots=True)
class LeafProof:
    """One event's leaf place and inclusion proof."""

    sequence: int
    leaf_index: int
    hashes: tuple[bytes, ...]


@dataclass(slots=True)
class Deletion:
    """What one deleting transaction did."""

    runs: int = 0
    events: int = 0
    gone: int = 0  # deleted already (an earlier archive)
    kept: int = 0  # changed since the archive was written: left whole
    settled: int = 0  # the heads dealt with, in order (the rest: the next transaction's)


class RunArchives:
    """The retention calls, in `access`'s transaction."""

    __slots__ = ("_access", "_tree")

    def __init__(self, access: JournalAccess) -> None:
        self._access = access
        self._tree: CachedTree | None = None

    def archivable(self, before: int, after: str, limit: int) -> list[ArchivableRunRow]:
        """Finished runs whose last event was recorded before `before`, after run id
        `after`, in run id order (a page of `limit`)."""
        sql = self._access.read_statements()
        return sql.all(ARCHIVABLE_PAGE, before=before, after=after, limit=limit)

    def archived_count(self) -> int:
        row = self._access.read_statements().one(ARCHIVED_COUNT)
        return 0 if row is None else int(row.archived)

    def leaf_proofs(self, run_id: str, tree_size: int) -> list[LeafProof] | None:
        """Each event's inclusion proof in the tree of `tree_size` leaves, in sequence
        order; None when one of them is not in that tree (numbered after it)."""
        sql = self._access.read_statements()
        if self._tree is None:
            self._tree = CachedTree(sql)
        proofs = []
        for row in sql.all(EVENT_POSITIONS, run_id=run_id):
            if row.position is None or row.position > tree_size:
                return None
            index = int(row.position) - 1
            hashes = merkle.inclusion_proof(self._tree, index, tree_size)
            proofs.append(LeafProof(int(row.sequence), index, tuple(hashes)))
        return proofs

    def record(self, run_id: str) -> dict[str, Any] | None:
        """The run's export record (`storage/run_records.py`), None when it is absent."""
        return record_in(self._access.read_statements(), run_id)

    def delete(
        self, heads: Sequence[WrittenRun], archived_at: int, budget_s: float | None = None
    ) -> Deletion:
        """Delete each run, still exactly the one an archive file holds (`heads`: as
        written, with its record's digest), keeping its leaves and ids; one run's rows
        all go in this transaction. A run deleted already is counted `gone`; one that
        changed since (an event, a lease, a receipt) is left whole, `kept`. `budget_s`:
        stop after the run that used it up (`settled` says how many were dealt with),
        so that the transaction holds its locks no longer than writers can wait."""
        access = self._access
        deadline = None if budget_s is None else time.monotonic() + budget_s
        sql = access.write_statements()
        done = Deletion()
        for head in heads:
            if deadline is not None and done.settled and time.monotonic() > deadline:
                break
            done.settled += 1
            values = {"run_id": head.run_id}
            scope = sql.one(RUN_SCOPE, **values)
            if scope is not None:
                # as a start takes them: the run's lookup key first, then its row. A start
                # under this key touches this run's row alone, never one locked before
                # it here, so taking the keys run by run cannot deadlock with one.
                key = f"{scope.root_hash}\x00{scope.stage}\x00{scope.lookup_key}"
                access.advisory_locks(sql, [key])
            locked = sql.one(
                ARCHIVED_HEAD_FOR_UPDATE,
                run_id=head.run_id,
                sequence=head.sequence,
                event_hash=head.event_hash,
            )
            if locked is None:
                if sql.one(ARCHIVED_RUN, run_id=head.run_id) is not None:
                    done.gone += 1
                else:
                    done.kept += 1
                continue
            record = record_in(sql, head.run_id)
            if record is None or record_digest(record) != head.digest:
                done.kept += 1
                continue
            sql.write(KEEP_LEAVES, **values)
            sql.write(KEEP_RUN, archived_at=archived_at, last_event_at=head.last_event_at, **values)
            sql.write(KEEP_OPERATIONS, **values)
            sql.write(DELETE_BINDINGS, **values)
            sql.write(DELETE_OPERATIONS, **values)
            done.events += sql.write(DELETE_EVENTS, **values)
            sql.write(DELETE_RUN, **values)
            access.forget_head(head.run_id)
            done.runs += 1
        return done


__all__ = [
    "CachedTree",
    "Deletion",
    "LeafProof",
    "RunArchives",
]
