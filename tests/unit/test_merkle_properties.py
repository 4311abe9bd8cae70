"""cadence_store.journal.merkle over random trees: the RFC 9162 definitions written out
literally agree with the streaming and node-reading code, every proof verifies, and any
changed hash, index or size fails. Plus the feed's leaf data and bad input."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_merkle_vectors import refused

from cadence_store.errors import CheckpointError, InvalidInputError
from cadence_store.journal import merkle
from cadence_store.journal.canonical import canonical_json


def _largest_power_below(count: int) -> int:
    power = 1
    while power * 2 < count:
        power *= 2
    return power


def reference_root(leaves: list[bytes]) -> bytes:
    """RFC 9162 §2.1.1 MTH, as written."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = _largest_power_below(len(leaves))
    return merkle.node_hash(reference_root(leaves[:k]), reference_root(leaves[k:]))


def reference_path(index: int, leaves: list[bytes]) -> list[bytes]:
    """RFC 9162 §2.1.3.1 PATH, as written."""
    if len(leaves) == 1:
        return []
    k = _largest_power_below(len(leaves))
    if index < k:
        return [*reference_path(index, leaves[:k]), reference_root(leaves[k:])]
    return [*reference_path(index - k, leaves[k:]), reference_root(leaves[:k])]


def reference_subproof(old: int, leaves: list[bytes], whole: bool) -> list[bytes]:
    """RFC 9162 §2.1.4.1 SUBPROOF, as written."""
    if old == len(leaves):
        return [] if whole else [reference_root(leaves)]
    k = _largest_power_below(len(leaves))
    if old <= k:
        return [*reference_subproof(old, leaves[:k], whole), reference_root(leaves[k:])]
    return [*reference_subproof(old - k, leaves[k:], False), reference_root(leaves[:k])]


def _leaves(count: int) -> list[bytes]:
    return [merkle.leaf_hash(index.to_bytes(4, "big")) for index in range(count)]


sizes = st.integers(min_value=1, max_value=160)


@settings(max_examples=150, deadline=None)
@given(size=sizes)
def test_the_streamed_root_and_the_read_root_are_the_rfcs(size: int) -> None:
    leaves = _leaves(size)
    tree = merkle.MemoryTree(leaves)
    expected = reference_root(leaves)
    assert merkle.root_of(leaves) == expected == tree.root() == merkle.root_at(tree, size)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), size=sizes)
def test_every_inclusion_proof_is_the_rfcs_and_verifies(data: st.DataObject, size: int) -> None:
    leaves = _leaves(size)
    tree = merkle.MemoryTree(leaves)
    index = data.draw(st.integers(min_value=0, max_value=size - 1))
    tree_size = data.draw(st.integers(min_value=index + 1, max_value=size))
    proof = merkle.inclusion_proof(tree, index, tree_size)
    assert proof == reference_path(index, leaves[:tree_size])
    root = merkle.root_at(tree, tree_size)
    merkle.verify_inclusion(leaves[index], index, tree_size, proof, root)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), size=sizes)
def test_every_consistency_proof_is_the_rfcs_and_verifies(data: st.DataObject, size: int) -> None:
    leaves = _leaves(size)
    tree = merkle.MemoryTree(leaves)
    old = data.draw(st.integers(min_value=1, max_value=size))
    proof = merkle.consistency_proof(tree, old, size)
    assert proof == reference_subproof(old, leaves, True)
    merkle.verify_consistency(
        old, size, merkle.root_at(tree, old), merkle.root_at(tree, size), proof
    )


def _flip(value: bytes, bit: int) -> bytes:
    position = bit // 8 % len(value)
    return value[:position] + bytes([value[position] ^ 1 << bit % 8]) + value[position + 1 :]


def _tree_and_bit(data: st.DataObject, size: int) -> tuple[list[bytes], merkle.MemoryTree, int]:
    """Leaves, their tree, and a bit to flip in a hash."""
    leaves = _leaves(size)
    return leaves, merkle.MemoryTree(leaves), data.draw(st.integers(min_value=0, max_value=255))


def _spoiled(data: st.DataObject, proof: list[bytes], bit: int) -> list[bytes]:
    """`proof` with one bit of one of its hashes flipped."""
    position = data.draw(st.integers(min_value=0, max_value=len(proof) - 1))
    return [*proof[:position], _flip(proof[position], bit), *proof[position + 1 :]]


@settings(max_examples=150, deadline=None)
@given(data=st.data(), size=st.integers(min_value=2, max_value=160))
def test_a_changed_inclusion_inputrefused(data: st.DataObject, size: int) -> None:
    leaves, tree, bit = _tree_and_bit(data, size)
    index = data.draw(st.integers(min_value=0, max_value=size - 1))
    proof, root = merkle.inclusion_proof(tree, index, size), tree.root()
    other_index = data.draw(st.integers(min_value=0, max_value=size).filter(lambda i: i != index))
    # other sizes as transparency-dev probes them: a root does not commit to its size (leaf 0
    # has one proof in 17 leaves and in 18), which is why a checkpoint signs both
    other_size = data.draw(st.sampled_from([size * 2, size // 2]))
    assert refused(merkle.verify_inclusion, _flip(leaves[index], bit), index, size, proof, root)
    assert refused(merkle.verify_inclusion, leaves[index], index, size, proof, _flip(root, bit))
    assert refused(merkle.verify_inclusion, leaves[index], other_index, size, proof, root)
    assert refused(merkle.verify_inclusion, leaves[index], index, other_size, proof, root)
    if proof:
        spoiled = _spoiled(data, proof, bit)
        assert refused(merkle.verify_inclusion, leaves[index], index, size, spoiled, root)
        assert refused(merkle.verify_inclusion, leaves[index], index, size, proof[:-1], root)
    assert refused(merkle.verify_inclusion, leaves[index], index, size, [*proof, root], root)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), size=st.integers(min_value=2, max_value=160))
def test_a_changed_consistency_inputrefused(data: st.DataObject, size: int) -> None:
    leaves, tree, bit = _tree_and_bit(data, size)
    old = data.draw(st.integers(min_value=1, max_value=size - 1))
    proof = merkle.consistency_proof(tree, old, size)
    old_root, new_root = merkle.root_at(tree, old), tree.root()
    other_old = data.draw(st.sampled_from([old - 1, old + 1, old ^ 2]).filter(lambda s: s != old))
    other_new = data.draw(st.sampled_from([size * 2, size // 2]))  # as for inclusion
    spoiled = _spoiled(data, proof, bit)
    assert refused(merkle.verify_consistency, old, size, old_root, new_root, spoiled)
    assert refused(merkle.verify_consistency, old, size, _flip(old_root, bit), new_root, proof)
    assert refused(merkle.verify_consistency, old, size, old_root, _flip(new_root, bit), proof)
    assert refused(merkle.verify_consistency, other_old, size, old_root, new_root, proof)
    assert refused(merkle.verify_consistency, old, other_new, old_root, new_root, proof)
    assert refused(merkle.verify_consistency, old, size, old_root, new_root, proof[:-1])


def test_a_changed_leaf_changes_the_root_and_the_proof_says_where() -> None:
    """The store's verification case: one leaf rewritten in a tree of 1000."""
    leaves = _leaves(1000)
    tree = merkle.MemoryTree(leaves)
    rewritten = [*leaves[:617], merkle.leaf_hash(b"rewritten"), *leaves[618:]]
    assert merkle.root_of(rewritten) != tree.root()
    proof = merkle.inclusion_proof(tree, 617, 1000)
    with pytest.raises(CheckpointError) as raised:
        merkle.verify_inclusion(rewritten[617], 617, 1000, proof, tree.root())
    assert raised.value.code == "checkpoint-mismatch"
    assert raised.value.expected == tree.root().hex()


@settings(max_examples=100, deadline=None)
@given(old=st.integers(min_value=0, max_value=300), added=st.integers(min_value=0, max_value=300))
def test_a_resumed_compact_range_is_the_whole_one(old: int, added: int) -> None:
    """A store keeps the old size's peaks and extends from them, never rereading leaves;
    the subtrees it is told of are every node above the leaves, each once."""
    leaves = _leaves(old + added)
    tree = merkle.MemoryTree(leaves)
    first = merkle.CompactRange()
    first.extend(leaves[:old])
    completed: list[merkle.NodeId] = []
    resumed = merkle.CompactRange(
        old, first.peaks, visit=lambda node, _hash: completed.append(node)
    )
    resumed.extend(leaves[old:])
    assert resumed.size == old + added
    assert resumed.root() == merkle.root_of(leaves)
    for node in completed:
        assert (node.index + 1) << node.level <= old + added
        assert (node.index + 1) << node.level > old  # completed by the new leaves
    assert len(completed) == len(set(completed))
    assert tree.node_hashes(completed) == [
        merkle.root_of(leaves[node.index << node.level : (node.index + 1) << node.level])
        for node in completed
    ]


def test_the_feed_leaf_data_is_the_canonical_json_of_the_three_fields() -> None:
    event_hash = "ab" * 32
    data = merkle.feed_leaf_data("run-1", 3, event_hash)
    assert data == canonical_json(
        {"sequence": 3, "runId": "run-1", "eventHash": event_hash}
    ).encode("utf-8")
    assert data == ('{"eventHash":"' + event_hash + '","runId":"run-1","sequence":3}').encode()
    assert merkle.feed_leaf_hash("run-1", 3, event_hash) == hashlib.sha256(b"\x00" + data).digest()
    unicode = f'{{"eventHash":"{event_hash}","runId":"rün","sequence":1}}'
    assert merkle.feed_leaf_data("rün", 1, event_hash) == unicode.encode(
        "utf-8"
    )  # UTF-8, unescaped


@pytest.mark.parametrize(
    ("run_id", "sequence", "event_hash"),
    [(1, 1, "ab"), ("r", 0, "ab"), ("r", True, "ab"), ("r", 1.0, "ab"), ("r", 1, None)],
)
def test_a_feed_leaf_of_the_wrong_types_is_refused(
    run_id: object, sequence: object, event_hash: object
) -> None:
    with pytest.raises(InvalidInputError) as raised:
        merkle.feed_leaf_data(run_id, sequence, event_hash)  # type: ignore[arg-type]
    assert raised.value.code == "invalid-merkle-leaf"


TREE = merkle.MemoryTree(_leaves(8))
ROOT = TREE.root()
LEAF = _leaves(8)[3]


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda: merkle.inclusion_proof(TREE, 8, 8), "invalid-leaf-index"),
        (lambda: merkle.inclusion_proof(TREE, -1, 8), "invalid-leaf-index"),
        (lambda: merkle.inclusion_proof(TREE, True, 8), "invalid-leaf-index"),
        (lambda: merkle.inclusion_proof(TREE, 0, 9), "invalid-tree-size"),  # beyond the source
        (lambda: merkle.inclusion_proof(TREE, 0, -1), "invalid-tree-size"),
        (lambda: merkle.inclusion_proof(TREE, 0, 2**63), "invalid-tree-size"),
        (lambda: merkle.consistency_proof(TREE, 3, 2), "invalid-tree-size"),
        (lambda: merkle.consistency_proof(TREE, 3, 9), "invalid-tree-size"),
        (lambda: merkle.root_at(TREE, 9), "invalid-tree-size"),
        (lambda: merkle.root_at(TREE, "8"), "invalid-tree-size"),
        (lambda: merkle.verify_inclusion(LEAF, 3, 8, [], ROOT), "invalid-merkle-proof"),
        (lambda: merkle.verify_inclusion(LEAF, 3, 8, b"x" * 96, ROOT), "invalid-merkle-proof"),
        (lambda: merkle.verify_inclusion(LEAF, 3, 8, [b"x"] * 3, ROOT), "invalid-merkle-hash"),
        (lambda: merkle.verify_inclusion(LEAF.hex(), 3, 8, [], ROOT), "invalid-merkle-hash"),
        (lambda: merkle.verify_inclusion(LEAF, 3, 8, [], ROOT[:31]), "invalid-merkle-hash"),
        (lambda: merkle.verify_inclusion(LEAF, 8, 8, [], ROOT), "invalid-leaf-index"),
        (lambda: merkle.root_from_inclusion_proof(LEAF, 0, 0, []), "invalid-leaf-index"),
        (
            lambda: merkle.verify_consistency(0, 8, merkle.EMPTY_ROOT, ROOT, [ROOT]),
            "invalid-merkle-proof",
        ),
        (lambda: merkle.verify_consistency(3, 8, ROOT, ROOT, None), "invalid-merkle-proof"),
        (lambda: merkle.verify_consistency(3, 8, ROOT, "x", []), "invalid-merkle-hash"),
        (lambda: merkle.CompactRange(3, [ROOT]), "invalid-tree-size"),
        (lambda: merkle.CompactRange(1, [ROOT[:1]]), "invalid-merkle-hash"),
        (lambda: merkle.CompactRange().append(b""), "invalid-merkle-hash"),
        (lambda: merkle.MemoryTree().node_hashes([merkle.NodeId(0, 0)]), "invalid-tree-size"),
        (lambda: merkle.leaf_hash("text"), "invalid-merkle-leaf"),
        (lambda: merkle.node_hash(LEAF, LEAF.hex()), "invalid-merkle-hash"),
    ],
)
def test_bad_input_is_a_coded_error(call: object, code: str) -> None:
    with pytest.raises(InvalidInputError) as raised:
        call()  # type: ignore[operator]
    assert raised.value.code == code


def test_an_empty_old_tree_must_have_the_empty_root() -> None:
    merkle.verify_consistency(0, 8, merkle.EMPTY_ROOT, ROOT, [])
    with pytest.raises(CheckpointError, match="checkpoint-mismatch"):
        merkle.verify_consistency(0, 8, ROOT, ROOT, [])


class _ShortSource:
    """A source that answers fewer hashes than asked (a store's bug, or a bad table)."""

    def node_hashes(self, nodes: object) -> list[bytes]:
        return []


def test_a_source_that_answers_short_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="invalid-merkle-hash"):
        merkle.inclusion_proof(_ShortSource(), 0, 8)
