"""The transparency tree's statements: leaves in feed order, tiles, recorded checkpoints.

A leaf is read from `events` (its position and the fields of its leaf data); the tree's
stored hashes are rows of `tree_tiles` (`models.TreeTileRow`), read one tile at a time
(a proof asks for its O(log n) tiles together) or a level's range in order (a
verification streams them beside the leaves), and written by an upsert that rewrites a
right-edge tile as it fills.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

from sqlalchemy import Select, and_, bindparam, func, select, union_all
from sqlalchemy.sql import ClauseElement

from .backends import Backend
from .models import checkpoints, events, kept_leaves, runs, tree_tiles
from .positions import highest_position
from .rows import (
    CheckpointRow,
    EventPlaceRow,
    LeafRow,
    LockedRow,
    NewestSequenceRow,
    TreeSizeRow,
    TreeTileRow,
)
from .statements import Query, Write, bound

# the checkpoint transactions' pg_advisory_xact_lock key (one checkpoint at a time),
# hashed like the feed's from a text no run key can be
CHECKPOINT_LOCK_KEY: Final = int.from_bytes(
    hashlib.sha256(b"cadence_store.checkpoint").digest()[:8], "big", signed=True
)
_TILE_COLUMNS: Final = (
    tree_tiles.c.tile_level,
    tree_tiles.c.tile_index,
    tree_tiles.c.width,
    tree_tiles.c.hashes,
)
_CHECKPOINT_COLUMNS: Final = (
    checkpoints.c.checkpoint_id,
    checkpoints.c.tree_size,
    checkpoints.c.origin,
    checkpoints.c.root_hash,
    checkpoints.c.note,
    checkpoints.c.recorded_at,
)


def _upsert_tile(backend: Backend) -> ClauseElement:
    statement = backend.upsert_insert(tree_tiles).values(
        **bound("tile_level", "tile_index", "width", "hashes")
    )
    return statement.on_conflict_do_update(
        index_elements=[tree_tiles.c.tile_level, tree_tiles.c.tile_index],
        set_={"width": statement.excluded.width, "hashes": statement.excluded.hashes},
    )


CHECKPOINT_LOCK: Final = Query(
    "checkpoint_lock",
    lambda _: select(func.pg_advisory_xact_lock(bindparam("key"))),
    LockedRow,
)
# the tree's size: positions are gap-free from 1, so the highest one numbered (an
# archived event's leaf is kept in `kept_leaves`)
TREE_SIZE: Final = Query("tree_size", lambda _: highest_position(), TreeSizeRow)


def _leaf_page() -> Select[Any]:
    """Leaves `after + 1 ..` up to position `through`, in position order (a page of
    `limit`): the events', and the leaves an archive kept of the events it deleted. Each
    side is an index range of at most `limit` rows, merged."""
    sides = []
    for table in (events, kept_leaves):
        side = (
            select(table.c.feed_position, table.c.run_id, table.c.sequence, table.c.event_hash)
            .where(
                and_(
                    table.c.feed_position > bindparam("after"),
                    table.c.feed_position <= bindparam("through"),
                )
            )
            .order_by(table.c.feed_position)
            .limit(bindparam("limit"))
            .subquery()
        )
        sides.append(select(*side.c))
    merged = union_all(*sides).subquery("leaves")
    return select(*merged.c).order_by(merged.c.feed_position).limit(bindparam("limit"))


LEAF_PAGE: Final = Query("leaf_page", lambda _: _leaf_page(), LeafRow)
EVENT_PLACE: Final = Query(
    "event_place",
    lambda _: select(events.c.feed_position, events.c.event_hash).where(
        and_(events.c.run_id == bindparam("run_id"), events.c.sequence == bindparam("sequence"))
    ),
    EventPlaceRow,
)
NEWEST_SEQUENCE: Final = Query(
    "newest_sequence",
    lambda _: select(runs.c.sequence).where(runs.c.run_id == bindparam("run_id")),
    NewestSequenceRow,
)
TILE: Final = Query(
    "tile",
    lambda _: select(*_TILE_COLUMNS).where(
        and_(
            tree_tiles.c.tile_level == bindparam("tile_level"),
            tree_tiles.c.tile_index == bindparam("tile_index"),
        )
    ),
    TreeTileRow,
)
# a level's tiles from `first` on, in order (a verification's page)
TILE_PAGE: Final = Query(
    "tile_page",
    lambda _: (
        select(*_TILE_COLUMNS)
        .where(
            and_(
                tree_tiles.c.tile_level == bindparam("tile_level"),
                tree_tiles.c.tile_index >= bindparam("first"),
            )
        )
        .order_by(tree_tiles.c.tile_index)
        .limit(bindparam("limit"))
    ),
    TreeTileRow,
)
UPSERT_TILE: Final = Write("upsert_tile", _upsert_tile)
NEWEST_CHECKPOINT: Final = Query(
    "newest_checkpoint",
    lambda _: select(*_CHECKPOINT_COLUMNS).order_by(checkpoints.c.checkpoint_id.desc()).limit(1),
    CheckpointRow,
)
CHECKPOINT_OF_SIZE: Final = Query(
    "checkpoint_of_size",
    lambda _: (
        select(*_CHECKPOINT_COLUMNS)
        .where(checkpoints.c.tree_size == bindparam("tree_size"))
        .order_by(checkpoints.c.checkpoint_id.desc())
        .limit(1)
    ),
    CheckpointRow,
)
INSERT_CHECKPOINT: Final = Write(
    "insert_checkpoint",
    lambda _: checkpoints.insert().values(
        **bound("checkpoint_id", "tree_size", "origin", "root_hash", "note", "recorded_at")
    ),
)
