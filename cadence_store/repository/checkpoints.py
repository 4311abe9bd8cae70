"""The transparency tree on a transaction: signing checkpoints, checking the tree against
the events, proofs.

`checkpoint` extends the stored tiles by the leaves since the last recorded checkpoint
(only those are read and hashed), signs the new tree head and records it, in one write
transaction that holds the checkpoint lock (PostgreSQL: an advisory lock; SQLite: the
write lock), so two checkpoints never write tiles twice or record diverging heads.
`verify_tree` recomputes the root from the events themselves, streamed in position
order, and compares each leaf with the stored tiles, so that it can name the first event
that departs from what was signed.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..errors import CheckpointError, InvalidInputError, RunNotFoundError
from ..journal import merkle
from ..journal.merkle import CompactRange
from ..journal.notes import Checkpoint, SignerKey, sign_checkpoint
from ..journal.tiles import TILE_WIDTH, split_hashes
from ..journal.tree_views import ConsistencyProof, InclusionProof, SignedCheckpoint
from ..journal.validation import require_run_id_text
from ..storage.retention_statements import KEPT_LEAF_PAGE
from ..storage.rows import CheckpointRow, LeafRow
from ..storage.statements import Statements
from ..storage.tree_statements import (
    CHECKPOINT_LOCK,
    CHECKPOINT_LOCK_KEY,
    CHECKPOINT_OF_SIZE,
    EVENT_PLACE,
    INSERT_CHECKPOINT,
    NEWEST_CHECKPOINT,
    NEWEST_SEQUENCE,
    TILE_PAGE,
    TREE_SIZE,
)
from .archived import missing_run
from .core import JournalAccess
from .tree_tiles import LEAF_BATCH, StoredNodeCheck, StoredTree, extend, leaf_hash_of, leaves

CHECKPOINT_NOT_FOUND = "checkpoint-not-found"
LEAF_NOT_IN_TREE = "leaf-not-in-tree"
_TILE_PAGE = 16  # level-0 tiles per page a verification reads (4096 leaves)


class TreeCheckpoints:
    """The checkpoint calls, in `access`'s transaction."""

    __slots__ = ("_access",)

    def __init__(self, access: JournalAccess) -> None:
        self._access = access

    # -- signing -------------------------------------------------------------------------

    def checkpoint(self, signer: SignerKey, origin: str) -> SignedCheckpoint:
        """Extend the tree to every numbered event, sign its head and record it. Refused
        (nothing written) when the stored tree no longer holds the last recorded head:
        `checkpoint-rollback` when the store has fewer leaves, `checkpoint-mismatch` when
        the stored hashes or the last stored leaves differ from what it signed."""
        sql = self._access.write_statements()
        if self._access.transaction.profile.advisory_locks:
            sql.one(CHECKPOINT_LOCK, key=CHECKPOINT_LOCK_KEY)
        newest = sql.one(NEWEST_CHECKPOINT)
        size = _tree_size(sql)
        tree = StoredTree(sql)
        stored = 0
        if newest is not None:
            stored = int(newest.tree_size)
            _check_still_signed(sql, tree, newest, size)
        compact = extend(sql, tree, stored, size)
        root = compact.root()
        note = sign_checkpoint(Checkpoint(origin, size, root), signer)
        sql.write(
            INSERT_CHECKPOINT,
            checkpoint_id=1 if newest is None else int(newest.checkpoint_id) + 1,
            tree_size=size,
            origin=origin,
            root_hash=root.hex(),
            note=note,
            recorded_at=self._access.now(),
        )
        return SignedCheckpoint(note=note, size=size, root_hash=root.hex(), origin=origin)

    # -- verification ------------------------------------------------------------------

    def verify_tree(self, checkpoint: Checkpoint) -> int:
        """Check that the first `checkpoint.size` leaves, read from the events, have its
        root, and that every stored leaf hash is its event's; the store's tree size.
        `checkpoint-rollback` when it holds fewer leaves; `checkpoint-mismatch` naming the
        first event whose leaf departs from the stored tree, when one does."""
        sql = self._access.read_statements()
        size = _tree_size(sql)
        if size < checkpoint.size:
            raise CheckpointError(
                "checkpoint-rollback",
                f"the store holds {size} leaves, fewer than the checkpoint's {checkpoint.size}",
                expected=checkpoint.size,
                actual=size,
            )
        newest = sql.one(NEWEST_CHECKPOINT)
        stored = 0 if newest is None else min(int(newest.tree_size), size)
        nodes = StoredNodeCheck(StoredTree(sql), stored)
        compact = CompactRange(visit=nodes.node)
        departed: LeafRow | None = None  # the first leaf that differs from the tiles
        kept = _stored_leaf_hashes(sql)
        for row in leaves(sql, 0, max(checkpoint.size, stored)):
            hash_ = leaf_hash_of(row)
            if departed is None and compact.size < stored and next(kept, None) != hash_:
                departed = row
            compact.append(hash_)
            if compact.size == checkpoint.size and compact.root() != checkpoint.root_hash:
                raise _mismatch(departed, checkpoint, compact.root())
        if checkpoint.size == 0 and checkpoint.root_hash != merkle.EMPTY_ROOT:
            raise _mismatch(None, checkpoint, merkle.EMPTY_ROOT)
        if departed is not None:
            raise _leaf_departs(departed, "the stored tree")
        if nodes.departed is not None:
            raise CheckpointError(
                "checkpoint-mismatch",
                f"the stored tree's hash of {nodes.departed} is not the events'",
            )
        return size

    def verify_kept_leaves(self) -> int:
        """Check each leaf an archive kept against the stored tree (its hash is the tile's
        at its position, within the newest recorded checkpoint); how many there are.
        `checkpoint-mismatch` naming the first that departs."""
        sql = self._access.read_statements()
        newest = sql.one(NEWEST_CHECKPOINT)
        stored = 0 if newest is None else int(newest.tree_size)
        tree = StoredTree(sql)
        tile_index, hashes = -1, []
        count = after = 0
        while rows := sql.all(KEPT_LEAF_PAGE, after=after, limit=LEAF_BATCH):
            for row in rows:
                after = int(row.position)
                index = int(row.position) - 1
                if index // TILE_WIDTH != tile_index:
                    tile_index = index // TILE_WIDTH
                    hashes = tree.leaf_hashes(tile_index)
                offset = index % TILE_WIDTH
                if index >= stored or offset >= len(hashes) or hashes[offset] != leaf_hash_of(row):
                    raise _leaf_departs(row, "the stored tree")
                count += 1
        return count

    # -- proofs ------------------------------------------------------------------------

    def inclusion_proof(
        self, run_id: str, sequence: int | None, size: int | None
    ) -> InclusionProof:
        """The event's inclusion proof in the tree of a recorded checkpoint."""
        require_run_id_text(run_id)
        sql = self._access.read_statements()
        run = sql.one(NEWEST_SEQUENCE, run_id=run_id)
        if run is None:
            error = missing_run(sql, run_id)
            raise (
                error
                if error.code != "run-not-found"
                else RunNotFoundError("run-not-found", f"no run {run_id!r}")
            )
        if sequence is None:
            sequence = int(run.sequence)
        if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 1:
            raise InvalidInputError("invalid-merkle-leaf", "a sequence is an int >= 1")
        recorded = self._recorded(sql, size)
        place = sql.one(EVENT_PLACE, run_id=run_id, sequence=sequence)
        if place is None:
            raise InvalidInputError(LEAF_NOT_IN_TREE, f"{run_id} has no event {sequence}")
        tree_size = int(recorded.tree_size)
        if place.position is None or place.position > tree_size:
            raise InvalidInputError(
                LEAF_NOT_IN_TREE,
                f"event {sequence} of {run_id} is not in the tree of {tree_size} leaves",
            )
        index = int(place.position) - 1
        hashes = merkle.inclusion_proof(StoredTree(sql), index, tree_size)
        return InclusionProof(
            origin=recorded.origin,
            tree_size=tree_size,
            leaf_index=index,
            run_id=run_id,
            sequence=sequence,
            event_hash=place.event_hash,
            hashes=tuple(hashes),
            checkpoint=recorded.note,
        )

    def consistency_proof(self, old_size: int, new_size: int) -> ConsistencyProof:
        """The proof that the tree of `new_size` leaves extends that of `old_size`, both
        within the newest recorded checkpoint's tree."""
        sql = self._access.read_statements()
        newest = sql.one(NEWEST_CHECKPOINT)
        stored = 0 if newest is None else int(newest.tree_size)
        if isinstance(new_size, int) and not isinstance(new_size, bool) and new_size > stored:
            raise InvalidInputError(
                "invalid-tree-size",
                f"size {new_size} is beyond the newest recorded checkpoint's {stored}",
            )
        hashes = merkle.consistency_proof(StoredTree(sql), old_size, new_size)
        return ConsistencyProof(old_size=old_size, new_size=new_size, hashes=tuple(hashes))

    def recorded_checkpoint(self, size: int | None) -> CheckpointRow:
        """The newest checkpoint recorded at `size` (None: the newest of all)."""
        return self._recorded(self._access.read_statements(), size)

    def _recorded(self, sql: Statements, size: int | None) -> CheckpointRow:
        if size is None:
            row = sql.one(NEWEST_CHECKPOINT)
            if row is None:
                raise InvalidInputError(
                    CHECKPOINT_NOT_FOUND, "the store has recorded no checkpoint"
                )
            return row
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidInputError("invalid-tree-size", "a tree size is an int >= 0")
        row = sql.one(CHECKPOINT_OF_SIZE, tree_size=size)
        if row is None:
            raise InvalidInputError(
                CHECKPOINT_NOT_FOUND, f"no checkpoint of size {size} is recorded"
            )
        return row


def _tree_size(sql: Statements) -> int:
    row = sql.one(TREE_SIZE)
    return 0 if row is None else int(row.tree_size)


def _check_still_signed(
    sql: Statements, tree: StoredTree, newest: CheckpointRow, size: int
) -> None:
    """Refuse to sign again when the store no longer holds the last head it signed: fewer
    leaves, stored hashes with another root, or one of the leaves of its right-edge tile
    (the last up to 255, re-read from the events) changed. Older leaves are checked by
    `verify_tree`, which reads them all."""
    stored = int(newest.tree_size)
    if size < stored:
        raise CheckpointError(
            "checkpoint-rollback",
            f"the store holds {size} leaves, fewer than the {stored} it last signed",
            expected=stored,
            actual=size,
        )
    root = merkle.root_at(tree, stored)
    if root.hex() != newest.root_hash:
        raise CheckpointError(
            "checkpoint-mismatch",
            f"the stored tree of {stored} leaves has another root than the one signed",
            expected=newest.root_hash,
            actual=root.hex(),
        )
    first = stored - stored % TILE_WIDTH
    kept = tree.leaf_hashes(first // TILE_WIDTH)
    for row in leaves(sql, first, stored):
        offset = row.position - 1 - first
        if offset >= len(kept) or kept[offset] != leaf_hash_of(row):
            raise _leaf_departs(row, "the leaf it signed")


def _leaf_departs(row: LeafRow, what: str) -> CheckpointError:
    """`checkpoint-mismatch` naming the event whose leaf differs from `what`."""
    return CheckpointError(
        "checkpoint-mismatch",
        f"leaf {row.position - 1} ({row.run_id} sequence {row.sequence}) differs from {what}",
        run_id=row.run_id,
        sequence=int(row.sequence),
    )


def _stored_leaf_hashes(sql: Statements) -> Iterator[bytes]:
    """The stored leaf hashes in order, read a page of tiles at a time, until a tile is
    missing."""
    index = 0
    while True:
        rows = sql.all(TILE_PAGE, tile_level=0, first=index, limit=_TILE_PAGE)
        for row in rows:
            if row.tile_index != index:
                return
            yield from split_hashes(bytes(row.hashes))
            if row.width < TILE_WIDTH:
                return
            index += 1
        if len(rows) < _TILE_PAGE:
            return


def _mismatch(departed: LeafRow | None, checkpoint: Checkpoint, root: bytes) -> CheckpointError:
    where = ""
    if departed is not None:
        where = (
            f"; the first leaf that departs is {departed.position - 1}"
            f" ({departed.run_id} sequence {departed.sequence})"
        )
    return CheckpointError(
        "checkpoint-mismatch",
        f"the store's first {checkpoint.size} leaves have another root than the checkpoint{where}",
        run_id=None if departed is None else departed.run_id,
        sequence=None if departed is None else int(departed.sequence),
        expected=checkpoint.root_hash.hex(),
        actual=root.hex(),
    )


__all__ = ["CHECKPOINT_NOT_FOUND", "LEAF_NOT_IN_TREE", "TreeCheckpoints"]
