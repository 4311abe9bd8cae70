"""The transparency tree over the journal feed: RFC 9162 (RFC 6962) Merkle hashing, roots,
inclusion and consistency proofs, and their checks.

Leaf `i` (0-based) is the feed item at position `i + 1`; its data is the UTF-8 of the
canonical JSON `{"eventHash", "runId", "sequence"}`. Leaf hash `SHA-256(0x00 || data)`,
node hash `SHA-256(0x01 || left || right)`, a tree of `n` leaves split at the largest power
of two below `n`. Hashes are 32-byte `bytes`.

Proofs read the tree through a `NodeSource`: the hashes of whole (perfect, aligned)
subtrees, asked for in one call per proof, so a store can serve them from stored subtree
hashes in one query without reading every leaf. `MemoryTree` is the in-memory source;
`CompactRange` extends a tree leaf by leaf in O(log n) memory and names each subtree it
completes, which is what a store records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from ..errors import CheckpointError, InvalidInputError
from .canonical import canonical_json

HASH_SIZE: Final = 32
# RFC 9162 §2.1.1: the hash of an empty tree is the hash of the empty string
EMPTY_ROOT: Final = hashlib.sha256(b"").digest()
MAX_TREE_SIZE: Final = 2**63 - 1  # a BIGINT position

INVALID_TREE_SIZE: Final = "invalid-tree-size"
INVALID_MERKLE_HASH: Final = "invalid-merkle-hash"
INVALID_MERKLE_PROOF: Final = "invalid-merkle-proof"


@dataclass(frozen=True, slots=True)
class NodeId:
    """A perfect subtree: the `2**level` leaves from `index * 2**level` on."""

    level: int
    index: int


class NodeSource(Protocol):
    """Where proofs and roots read the tree."""

    def node_hashes(self, nodes: Sequence[NodeId]) -> Sequence[bytes]:
        """The hash of each node (each wholly inside the tree), in the order asked."""
        ...


def feed_leaf_data(run_id: str, sequence: int, event_hash: str) -> bytes:
    """A feed item's leaf data: the UTF-8 of the canonical JSON of its three fields."""
    if not isinstance(run_id, str) or not isinstance(event_hash, str):
        raise InvalidInputError("invalid-merkle-leaf", "run id and event hash are strings")
    if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 1:
        raise InvalidInputError("invalid-merkle-leaf", "a sequence is an int >= 1")
    document = {"eventHash": event_hash, "runId": run_id, "sequence": sequence}
    return canonical_json(document).encode("utf-8")


def leaf_hash(data: bytes) -> bytes:
    """RFC 9162 §2.1.1: `SHA-256(0x00 || data)`."""
    if not isinstance(data, bytes):
        raise InvalidInputError("invalid-merkle-leaf", "leaf data is bytes")
    return hashlib.sha256(b"\x00" + data).digest()


def feed_leaf_hash(run_id: str, sequence: int, event_hash: str) -> bytes:
    """The leaf hash of a feed item."""
    return leaf_hash(feed_leaf_data(run_id, sequence, event_hash))


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 §2.1.1: `SHA-256(0x01 || left || right)`."""
    if not isinstance(left, bytes) or not isinstance(right, bytes):
        raise InvalidInputError(INVALID_MERKLE_HASH, "a node's children are bytes")
    return _join(left, right)


def _join(left: bytes, right: bytes) -> bytes:
    """`node_hash` of hashes already checked (the inner loops)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


class CompactRange:
    """The first `size` leaves of a tree as the roots of its perfect subtrees, one per
    1-bit of `size`, largest first: O(log n) state that extends by a leaf and gives the
    root. `visit(node, hash)` is told each subtree above the leaves as it completes.
    `CompactRange(size, peaks)` resumes from a stored size and its peaks."""

    __slots__ = ("_peaks", "_size", "_visit")

    def __init__(
        self,
        size: int = 0,
        peaks: Sequence[bytes] = (),
        *,
        visit: Callable[[NodeId, bytes], None] | None = None,
    ) -> None:
        _check_size(size)
        if _count_of(peaks, "peaks") != size.bit_count():
            raise InvalidInputError(INVALID_TREE_SIZE, "a size has one peak per 1-bit")
        for peak in peaks:
            _check_hash(peak, "a peak")
        self._size = size
        self._peaks = list(peaks)
        self._visit = visit

    @property
    def size(self) -> int:
        """The number of leaves appended (or resumed from)."""
        return self._size

    @property
    def peaks(self) -> tuple[bytes, ...]:
        """The perfect subtrees' hashes, largest (leftmost) first."""
        return tuple(self._peaks)

    def append(self, leaf: bytes) -> None:
        """Add the next leaf hash, merging each subtree it completes."""
        _check_hash(leaf, "a leaf hash")
        if self._size >= MAX_TREE_SIZE:
            raise InvalidInputError(INVALID_TREE_SIZE, "the tree is full")
        merged, level, index = leaf, 0, self._size
        while index & 1:  # a right child: its left sibling is the last peak
            merged = _join(self._peaks.pop(), merged)
            level, index = level + 1, index >> 1
            if self._visit is not None:
                self._visit(NodeId(level, index), merged)
        self._peaks.append(merged)
        self._size += 1

    def extend(self, leaves: Iterable[bytes]) -> None:
        """Append each leaf hash in turn."""
        for leaf in leaves:
            self.append(leaf)

    def root(self) -> bytes:
        """The root of the tree of `size` leaves."""
        return _fold(self._peaks)


def root_of(leaf_hashes: Iterable[bytes]) -> bytes:
    """The root of the tree of these leaf hashes, streamed in O(log n) memory."""
    tree = CompactRange()
    tree.extend(leaf_hashes)
    return tree.root()


def root_at(source: NodeSource, size: int) -> bytes:
    """The root of the first `size` leaves of `source`."""
    _check_size(size)
    return _fold(_read(source, [_range_nodes(0, size)])[0]) if size else EMPTY_ROOT


class MemoryTree:
    """A `NodeSource` that holds every node in memory: for tests, small trees, and the
    model of what a store keeps."""

    __slots__ = ("_levels", "_range")

    def __init__(self, leaf_hashes: Iterable[bytes] = ()) -> None:
        self._levels: list[list[bytes]] = [[]]
        self._range = CompactRange(visit=self._keep)
        self.extend(leaf_hashes)

    def _keep(self, node: NodeId, hash_: bytes) -> None:
        if node.level == len(self._levels):
            self._levels.append([])
        self._levels[node.level].append(hash_)  # nodes complete in index order

    @property
    def size(self) -> int:
        """The number of leaves."""
        return self._range.size

    def append(self, leaf: bytes) -> None:
        """Add the next leaf hash."""
        self._range.append(leaf)
        self._levels[0].append(leaf)

    def extend(self, leaves: Iterable[bytes]) -> None:
        """Append each leaf hash in turn."""
        for leaf in leaves:
            self.append(leaf)

    def root(self) -> bytes:
        """The root of all the leaves."""
        return self._range.root()

    def node_hashes(self, nodes: Sequence[NodeId]) -> list[bytes]:
        """The hash of each node; `invalid-tree-size` for one not wholly in the tree."""
        found = []
        for node in nodes:
            level = self._levels[node.level] if 0 <= node.level < len(self._levels) else []
            if not 0 <= node.index < len(level):
                raise InvalidInputError(INVALID_TREE_SIZE, f"{node} is beyond {self.size} leaves")
            found.append(level[node.index])
        return found


# Proofs: each proof hash is the root of a range of leaves, read as the perfect subtrees
# that make it up (one, or several along the tree's right edge), folded.


def inclusion_nodes(index: int, size: int) -> list[tuple[NodeId, ...]]:
    """The subtrees whose folds are the hashes of leaf `index`'s inclusion proof in the
    tree of `size` leaves (RFC 9162 §2.1.3.1, PATH), nearest the leaf first."""
    _check_size(size)
    _check_index(index, size)
    ranges = []
    start, end = 0, size
    while end - start > 1:
        split = start + _split(end - start)
        if index < split:
            ranges.append((split, end))
            end = split
        else:
            ranges.append((start, split))
            start = split
    return [_range_nodes(*bounds) for bounds in reversed(ranges)]


def consistency_nodes(old_size: int, new_size: int) -> list[tuple[NodeId, ...]]:
    """The subtrees whose folds are the hashes of the consistency proof from the tree of
    `old_size` leaves to that of `new_size` (RFC 9162 §2.1.4.1, SUBPROOF); none when the
    old tree is empty or the sizes are equal."""
    _check_sizes(old_size, new_size)
    if old_size == 0:
        return []  # every tree extends the empty one
    ranges = []
    start, end, old_leaves, whole_old_tree = 0, new_size, old_size, True
    while old_leaves != end - start:
        split = _split(end - start)
        if old_leaves <= split:
            ranges.append((start + split, end))
            end = start + split
        else:
            ranges.append((start, start + split))
            start, old_leaves, whole_old_tree = start + split, old_leaves - split, False
    if not whole_old_tree:  # the verifier knows the old root, not this subtree of it
        ranges.append((start, end))
    return [_range_nodes(*bounds) for bounds in reversed(ranges)]


def inclusion_proof(source: NodeSource, index: int, size: int) -> list[bytes]:
    """Leaf `index`'s inclusion proof in the tree of `size` leaves read from `source`."""
    return [_fold(hashes) for hashes in _read(source, inclusion_nodes(index, size))]


def consistency_proof(source: NodeSource, old_size: int, new_size: int) -> list[bytes]:
    """The proof that the tree of `new_size` leaves of `source` extends that of
    `old_size`."""
    return [_fold(hashes) for hashes in _read(source, consistency_nodes(old_size, new_size))]


def root_from_inclusion_proof(leaf: bytes, index: int, size: int, proof: Sequence[bytes]) -> bytes:
    """The root that `proof` leads to from leaf hash `leaf` at `index` of `size` leaves
    (RFC 9162 §2.1.3.2). A proof of the wrong length is `invalid-merkle-proof`."""
    _check_hash(leaf, "a leaf hash")
    _check_size(size)
    _check_index(index, size)
    inner = (index ^ (size - 1)).bit_length()  # the levels below the right edge
    _check_proof(proof, inner + (index >> inner).bit_count())
    root = leaf
    for sibling, on_the_left in zip(proof, _sides(index, size - 1, len(proof)), strict=True):
        root = _join(sibling, root) if on_the_left else _join(root, sibling)
    return root


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """Raise `checkpoint-mismatch` unless `proof` shows leaf hash `leaf` at `index` in the
    tree of `size` leaves whose root is `root`."""
    _check_hash(root, "a root")
    found = root_from_inclusion_proof(leaf, index, size, proof)
    _compare_roots(found, root, f"the inclusion proof of leaf {index} of {size}")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Raise `checkpoint-mismatch` unless `proof` shows that the tree of `new_size` leaves
    with root `new_root` extends the tree of `old_size` leaves with root `old_root`
    (RFC 9162 §2.1.4.2). A proof of the wrong length is `invalid-merkle-proof`."""
    _check_sizes(old_size, new_size)
    _check_hash(old_root, "the old root")
    _check_hash(new_root, "the new root")
    if old_size in (0, new_size):
        _check_proof(proof, 0)
        expected_old = EMPTY_ROOT if old_size == 0 else new_root
        _compare_roots(old_root, expected_old, f"the tree of {old_size} leaves")
        return
    shift = (old_size & -old_size).bit_length() - 1  # the old tree's lowest full subtree
    inner = ((old_size - 1) ^ (new_size - 1)).bit_length()
    border = ((old_size - 1) >> inner).bit_count()
    whole = old_size == 1 << shift  # the old tree is one subtree: its root is not sent
    _check_proof(proof, (0 if whole else 1) + inner - shift + border)
    path = [old_root, *proof] if whole else list(proof)
    position, last = old_size - 1, new_size - 1
    while position & 1:
        position, last = position >> 1, last >> 1
    old_found = new_found = path[0]
    # the old tree takes only the hashes on the left: those on the right came after it
    for sibling, on_the_left in zip(path[1:], _sides(position, last, len(path) - 1), strict=True):
        if on_the_left:
            old_found = _join(sibling, old_found)
            new_found = _join(sibling, new_found)
        else:
            new_found = _join(new_found, sibling)
    _compare_roots(old_found, old_root, f"the consistency proof to the old {old_size} leaves")
    _compare_roots(new_found, new_root, f"the consistency proof to the new {new_size} leaves")


def _compare_roots(found: bytes, expected: bytes, proof: str) -> None:
    if found != expected:
        raise CheckpointError(
            "checkpoint-mismatch",
            f"{proof} leads to another root",
            expected=expected.hex(),
            actual=found.hex(),
        )


def _sides(position: int, last: int, count: int) -> Iterator[bool]:
    """For each of `count` proof hashes climbing from node `position` of a level whose
    last node is `last`: whether the hash joins from the left (RFC 9162 §2.1.3.2 and
    §2.1.4.2, `LSB(fn) or fn == sn`). The callers' exact proof lengths make `last` reach 0
    with the last hash, as the RFC requires."""
    for _ in range(count):
        if position & 1 or position == last:
            yield True
            while not position & 1 and position:  # a right edge: climb to its parent
                position, last = position >> 1, last >> 1
        else:
            yield False
        position, last = position >> 1, last >> 1


def _split(count: int) -> int:
    """The largest power of two below `count` (>= 2)."""
    return 1 << ((count - 1).bit_length() - 1)


def _range_nodes(start: int, end: int) -> tuple[NodeId, ...]:
    """The perfect subtrees that make up leaves [start, end), largest first; `start` is
    a multiple of a power of two no smaller than `end - start`, as in every proof."""
    nodes = []
    while start < end:
        level = (end - start).bit_length() - 1
        nodes.append(NodeId(level, start >> level))
        start += 1 << level
    return tuple(nodes)


def _read(source: NodeSource, plan: list[tuple[NodeId, ...]]) -> list[list[bytes]]:
    """Every node of `plan` read in one call, grouped as planned."""
    wanted = [node for group in plan for node in group]
    found = list(source.node_hashes(wanted))
    if len(found) != len(wanted):
        raise InvalidInputError(INVALID_MERKLE_HASH, "the source did not give one hash a node")
    for hash_ in found:
        _check_hash(hash_, "a node hash")
    groups, offset = [], 0
    for group in plan:
        groups.append(found[offset : offset + len(group)])
        offset += len(group)
    return groups


def _fold(hashes: Sequence[bytes]) -> bytes:
    """The root over adjacent subtrees, largest first: each joins the fold to its right."""
    if not hashes:
        return EMPTY_ROOT
    root = hashes[-1]
    for left in reversed(hashes[:-1]):
        root = _join(left, root)
    return root


def _check_size(size: object) -> None:
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_TREE_SIZE:
        raise InvalidInputError(
            INVALID_TREE_SIZE, f"a tree size is an int from 0 to {MAX_TREE_SIZE}"
        )


def _check_sizes(old_size: int, new_size: int) -> None:
    _check_size(old_size)
    _check_size(new_size)
    if old_size > new_size:
        raise InvalidInputError(INVALID_TREE_SIZE, "the old size exceeds the new size")


def _check_index(index: object, size: int) -> None:
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
        raise InvalidInputError(
            "invalid-leaf-index", f"a leaf index is an int from 0 to size - 1 ({size - 1})"
        )


def _check_hash(value: object, what: str) -> None:
    if not isinstance(value, bytes) or len(value) != HASH_SIZE:
        raise InvalidInputError(INVALID_MERKLE_HASH, f"{what} is {HASH_SIZE} bytes")


def _count_of(items: object, what: str) -> int:
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise InvalidInputError(INVALID_MERKLE_PROOF, f"{what} are a list of hashes")
    return len(items)


def _check_proof(proof: Sequence[bytes], length: int) -> None:
    if _count_of(proof, "a proof's hashes") != length:
        raise InvalidInputError(
            INVALID_MERKLE_PROOF, f"the proof has {len(proof)} hashes where {length} are due"
        )
    for hash_ in proof:
        _check_hash(hash_, "a proof hash")


__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "MAX_TREE_SIZE",
    "CompactRange",
    "MemoryTree",
    "NodeId",
    "NodeSource",
    "consistency_nodes",
    "consistency_proof",
    "feed_leaf_data",
    "feed_leaf_hash",
    "inclusion_nodes",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root_at",
    "root_from_inclusion_proof",
    "root_of",
    "verify_consistency",
    "verify_inclusion",
]
