"""The layout of a transparency tree's stored hashes in tiles (C2SP tlog-tiles): pure
arithmetic over node ids and concatenated hashes, no database.

Tile `(L, N)` holds up to 256 hashes of tree level `8 * L`, nodes `256 * N` on, as one
byte string; a right-edge tile holds fewer, and is rewritten as it fills. A node of level
`8 * L + r` (r < 8) is the root of `2**r` adjacent hashes of one tile of level L.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from .merkle import HASH_SIZE, NodeId, root_of

TILE_HEIGHT: Final = 8
TILE_WIDTH: Final = 1 << TILE_HEIGHT

TileKey = tuple[int, int]  # (tile level, tile index)


@dataclass(frozen=True, slots=True)
class NodePlace:
    """Where a node's hashes are: its tile, the first hash's offset in it, how many."""

    tile: TileKey
    first: int
    count: int


def node_place(node: NodeId) -> NodePlace:
    """The tile and hashes a node's hash is the root of."""
    level, rest = divmod(node.level, TILE_HEIGHT)
    first = node.index << rest
    return NodePlace((level, first >> TILE_HEIGHT), first & (TILE_WIDTH - 1), 1 << rest)


def split_hashes(hashes: bytes) -> list[bytes]:
    """A tile's hashes, one by one."""
    return [hashes[at : at + HASH_SIZE] for at in range(0, len(hashes), HASH_SIZE)]


def node_from_tile(hashes: bytes, place: NodePlace) -> bytes | None:
    """The node's hash from its tile's hashes (None: the tile does not hold them all)."""
    wanted = split_hashes(hashes)[place.first : place.first + place.count]
    return root_of(wanted) if len(wanted) == place.count else None


def peak_nodes(size: int) -> list[NodeId]:
    """The perfect subtrees of the first `size` leaves, largest first (a `CompactRange`'s
    peaks)."""
    nodes, start = [], 0
    for level in reversed(range(size.bit_length())):
        if size >> level & 1:
            nodes.append(NodeId(level, start >> level))
            start += 1 << level
    return nodes


def partial_tiles(size: int) -> list[tuple[TileKey, int]]:
    """The right edge's partial tiles of a tree of `size` leaves and how many hashes each
    holds: the ones a tree that grows rewrites first."""
    found = []
    level = 0
    while complete := size >> (TILE_HEIGHT * level):  # the level's complete nodes
        width = complete & (TILE_WIDTH - 1)
        if width:
            found.append(((level, complete >> TILE_HEIGHT), width))
        level += 1
    return found


@dataclass
class OpenTile:
    """A tile being filled."""

    index: int
    hashes: bytearray = field(default_factory=bytearray)

    @property
    def full(self) -> bool:
        return len(self.hashes) == TILE_WIDTH * HASH_SIZE

    @property
    def width(self) -> int:
        return len(self.hashes) // HASH_SIZE


class TileBuffers:
    """The tiles a growing tree fills, one open tile per level: `add` gives back each
    tile it fills; `drain` the partial ones left."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[int, OpenTile] = {}

    def resume(self, key: TileKey, hashes: bytes, width: int) -> None:
        """Continue a stored partial tile from its first `width` hashes."""
        level, index = key
        self._open[level] = OpenTile(index, bytearray(hashes[: width * HASH_SIZE]))

    def add(self, level: int, node_index: int, hash_: bytes) -> tuple[int, OpenTile] | None:
        """Node `node_index` of tree level `8 * level`; the tile it fills, if it does."""
        index = node_index >> TILE_HEIGHT
        tile = self._open.get(level)
        if tile is None or tile.index != index:
            tile = self._open[level] = OpenTile(index)
        tile.hashes.extend(hash_)
        if not tile.full:
            return None
        del self._open[level]
        return level, tile

    def drain(self) -> list[tuple[int, OpenTile]]:
        """The partial tiles, by level; the buffers are left empty."""
        left = sorted(self._open.items(), key=lambda item: item[0])
        self._open.clear()
        return left


__all__ = [
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "NodePlace",
    "OpenTile",
    "TileBuffers",
    "TileKey",
    "node_from_tile",
    "node_place",
    "partial_tiles",
    "peak_nodes",
    "split_hashes",
]
