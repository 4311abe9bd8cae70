"""The transparency tree as the store keeps it: its tiles (`journal.tiles`), read as a
`NodeSource` for roots and proofs and extended leaf by leaf, and the leaves read from
the events in feed order. Any node wholly inside the stored tree comes from one tile
row, so a proof reads O(log n) rows."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from ..errors import CheckpointError
from ..journal.merkle import CompactRange, NodeId, feed_leaf_hash
from ..journal.tiles import (
    TILE_HEIGHT,
    OpenTile,
    TileBuffers,
    TileKey,
    node_from_tile,
    node_place,
    partial_tiles,
    peak_nodes,
    split_hashes,
)
from ..storage.rows import LeafRow, TreeTileRow
from ..storage.statements import Statements
from ..storage.tree_statements import LEAF_PAGE, TILE, UPSERT_TILE

LEAF_BATCH: Final = 1000  # leaves per page read
MISMATCH: Final = "checkpoint-mismatch"


class StoredTree:
    """A `NodeSource` over the stored tiles (one query per tile, sent together)."""

    __slots__ = ("_sql",)

    def __init__(self, sql: Statements) -> None:
        self._sql = sql

    def tiles(self, keys: Sequence[TileKey]) -> dict[TileKey, bytes]:
        """The hashes of each tile `(level, index)` that is stored."""
        wanted = sorted(set(keys))
        found = self._sql.raw_rows_of_each(
            [(TILE, {"tile_level": level, "tile_index": index}) for level, index in wanted]
        )
        tiles = {}
        for key, rows in zip(wanted, found, strict=True):
            for columns in rows:  # one row, or none
                tiles[key] = bytes(TreeTileRow(*columns).hashes)
        return tiles

    def node_hashes(self, nodes: Sequence[NodeId]) -> list[bytes]:
        """Each node's hash from its tile; a node the tiles do not hold is
        `checkpoint-mismatch` (the stored tree is shorter than asked, or altered)."""
        places = [node_place(node) for node in nodes]
        tiles = self.tiles([place.tile for place in places])
        found = []
        for node, place in zip(nodes, places, strict=True):
            hash_ = node_from_tile(tiles.get(place.tile, b""), place)
            if hash_ is None:
                raise CheckpointError(MISMATCH, f"the stored tree has no hash of {node}")
            found.append(hash_)
        return found

    def leaf_hashes(self, tile_index: int) -> list[bytes]:
        """The stored leaf hashes of one tile of leaves (none when it is not stored)."""
        return split_hashes(self.tiles([(0, tile_index)]).get((0, tile_index), b""))


class TileWriter:
    """Extends the stored tiles from a tree of `size` leaves: `leaf` for each new leaf
    hash, `node` as a `CompactRange` visitor; each tile is written once it fills, and
    the right edge's partial tiles at `flush`. Memory: one tile per level."""

    __slots__ = ("_buffers", "_sql", "tiles_written")

    def __init__(self, sql: Statements, tree: StoredTree, size: int) -> None:
        self._sql = sql
        self.tiles_written = 0
        self._buffers = TileBuffers()
        partial = partial_tiles(size)
        stored = tree.tiles([key for key, _ in partial])
        for key, width in partial:
            hashes = split_hashes(stored.get(key, b""))
            if len(hashes) < width:
                raise CheckpointError(MISMATCH, f"the stored tree's tile {key} is short")
            self._buffers.resume(key, b"".join(hashes), width)

    def leaf(self, hash_: bytes, position: int) -> None:
        """Leaf hash of feed position `position` (leaf `position - 1`)."""
        self._written(self._buffers.add(0, position - 1, hash_))

    def node(self, node: NodeId, hash_: bytes) -> None:
        """A completed subtree (`CompactRange`'s visitor): kept on every eighth level."""
        level, rest = divmod(node.level, TILE_HEIGHT)
        if rest == 0:
            self._written(self._buffers.add(level, node.index, hash_))

    def flush(self) -> None:
        """Write the partial tiles of the right edge."""
        for level, tile in self._buffers.drain():
            self._write(level, tile)

    def _written(self, filled: tuple[int, OpenTile] | None) -> None:
        if filled is not None:
            self._write(*filled)

    def _write(self, level: int, tile: OpenTile) -> None:
        self._sql.write(
            UPSERT_TILE,
            tile_level=level,
            tile_index=tile.index,
            width=tile.width,
            hashes=bytes(tile.hashes),
        )
        self.tiles_written += 1


class StoredNodeCheck:
    """A `CompactRange` visitor for a verification: each subtree completed on a tile level
    above the leaves (8, 16, ...) within the first `stored` leaves is compared with the
    stored tiles, read one tile at a time; `departed` is the first that differs."""

    __slots__ = ("_hashes", "_open", "_stored", "_tree", "departed")

    def __init__(self, tree: StoredTree, stored: int) -> None:
        self._tree = tree
        self._stored = stored
        self._open: dict[int, TileKey] = {}  # per tile level: the tile read last
        self._hashes: dict[int, list[bytes]] = {}
        self.departed: NodeId | None = None

    def node(self, node: NodeId, hash_: bytes) -> None:
        level, rest = divmod(node.level, TILE_HEIGHT)
        if rest or self.departed is not None or (node.index + 1) << node.level > self._stored:
            return
        key = (level, node.index >> TILE_HEIGHT)
        if self._open.get(level) != key:
            self._open[level] = key
            self._hashes[level] = split_hashes(self._tree.tiles([key]).get(key, b""))
        kept = self._hashes[level]
        offset = node.index & ((1 << TILE_HEIGHT) - 1)
        if offset >= len(kept) or kept[offset] != hash_:
            self.departed = node


def leaves(sql: Statements, after: int, through: int) -> Iterator[LeafRow]:
    """The leaves at positions `after + 1 ..= through`, in order, read in pages;
    `checkpoint-mismatch` at a missing position (the feed is gap-free from 1, so a gap is
    an event deleted or renumbered) and `checkpoint-rollback` when the feed ends early."""
    expected = after + 1
    while expected <= through:
        rows = sql.all(LEAF_PAGE, after=expected - 1, through=through, limit=LEAF_BATCH)
        if not rows:
            raise CheckpointError(
                "checkpoint-rollback",
                f"the store holds {expected - 1} leaves, fewer than {through}",
                expected=through,
                actual=expected - 1,
            )
        for row in rows:
            if row.position != expected:
                raise CheckpointError(
                    MISMATCH,
                    f"feed position {expected} is missing (the next is {row.position})",
                    run_id=row.run_id,
                    sequence=row.sequence,
                    expected=expected,
                    actual=row.position,
                )
            yield row
            expected += 1


def leaf_hash_of(row: LeafRow) -> bytes:
    """The leaf hash of a feed item."""
    return feed_leaf_hash(row.run_id, int(row.sequence), row.event_hash)


def extend(sql: Statements, tree: StoredTree, size: int, new_size: int) -> CompactRange:
    """The stored tiles extended from `size` leaves to `new_size`, reading only the
    leaves in between; the tree's compact range at `new_size`."""
    writer = TileWriter(sql, tree, size)
    peaks = tree.node_hashes(peak_nodes(size)) if size else []
    compact = CompactRange(size, peaks, visit=writer.node)
    for row in leaves(sql, size, new_size):
        hash_ = leaf_hash_of(row)
        writer.leaf(hash_, row.position)
        compact.append(hash_)
    writer.flush()
    return compact


__all__ = [
    "LEAF_BATCH",
    "StoredNodeCheck",
    "StoredTree",
    "TileWriter",
    "extend",
    "leaf_hash_of",
    "leaves",
]
