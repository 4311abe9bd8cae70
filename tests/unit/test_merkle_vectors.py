"""cadence_store.journal.merkle against published RFC 6962 / RFC 9162 test vectors.

Every expected value below is copied from github.com/transparency-dev/merkle (the Go
library behind Trillian and the C2SP tlog ecosystem):
- rfc6962/rfc6962_test.go, TestRFC6962Hasher: the empty root, leaf and node hashes;
- proof/verify_test.go: the eight RFC 6962 reference leaves (`leaves`), the roots of their
  first 1..8 (`roots`), the inclusion proofs (`inclusionProofs`, whose leaf numbers are
  1-based there: `leafHash(leaves[p.leaf-1])` at index `p.leaf-1`), the consistency
  proofs (`consistencyProofs`), and the corruptions every proof must fail under
  (`corruptInclusionProof`, `corruptConsistencyProof`);
- proof/proof_test.go, TestInclusion and TestConsistency: which stored nodes make up each
  proof (`id(level, index)`; `rehash(begin, end, ...)` marks the ids hashed into one proof
  hash, listed there bottom-up).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cadence_store.errors import CheckpointError, InvalidInputError
from cadence_store.journal.merkle import (
    EMPTY_ROOT,
    MemoryTree,
    NodeId,
    consistency_nodes,
    consistency_proof,
    inclusion_nodes,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root_at,
    root_from_inclusion_proof,
    root_of,
    verify_consistency,
    verify_inclusion,
)

LEAVES = [
    bytes.fromhex(data)
    for data in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
ROOTS = [
    bytes.fromhex(root)
    for root in (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    )
]
LEAF_HASHES = [leaf_hash(data) for data in LEAVES]
TREE = MemoryTree(LEAF_HASHES)

_P1 = "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"
_P2 = "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"
_P3 = "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"
_Q1 = "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"
_Q2 = "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"
_Q3 = "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"
_R1 = "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"
# (index (0-based), size, proof)
INCLUSION = [
    (0, 1, []),
    (0, 8, [_P1, _P2, _P3]),
    (5, 8, [_Q1, _Q2, _Q3]),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (1, 5, ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d", _P2, _Q1]),
]
# (old size, new size, proof)
CONSISTENCY = [
    (1, 1, []),
    (1, 8, [_P1, _P2, _P3]),
    (6, 8, [_R1, _Q2, _Q3]),
    (2, 5, [_P2, _Q1]),
    (6, 7, [_R1, "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f", _Q3]),
]
# transparency-dev's sha256SomeHash: a 32-byte hash of no tree
SOME_HASH = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")


def _hashes(proof: list[str]) -> list[bytes]:
    return [bytes.fromhex(value) for value in proof]


def test_the_hasher_vectors() -> None:
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert leaf_hash(b"").hex() == (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    )
    assert leaf_hash(b"L123456").hex() == (
        "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56"
    )
    assert node_hash(b"N123", b"N456").hex() == (
        "aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb"
    )


@pytest.mark.parametrize("size", range(1, 9))
def test_the_roots_of_the_reference_leaves(size: int) -> None:
    assert root_of(LEAF_HASHES[:size]) == ROOTS[size - 1]
    assert root_at(TREE, size) == ROOTS[size - 1]


def test_an_empty_tree_has_the_empty_root() -> None:
    assert root_of([]) == EMPTY_ROOT == root_at(TREE, 0) == MemoryTree().root()


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION)
def test_the_published_inclusion_proofs(index: int, size: int, proof: list[str]) -> None:
    assert inclusion_proof(TREE, index, size) == _hashes(proof)
    verify_inclusion(LEAF_HASHES[index], index, size, _hashes(proof), ROOTS[size - 1])


@pytest.mark.parametrize(("old", "new", "proof"), CONSISTENCY)
def test_the_published_consistency_proofs(old: int, new: int, proof: list[str]) -> None:
    assert consistency_proof(TREE, old, new) == _hashes(proof)
    verify_consistency(old, new, ROOTS[old - 1], ROOTS[new - 1], _hashes(proof))


def refused(check: object, *args: object) -> bool:
    try:
        check(*args)  # type: ignore[operator]
    except (CheckpointError, InvalidInputError):
        return True
    return False


def _inclusion_corruptions(
    index: int, size: int, proof: list[bytes], root: bytes, leaf: bytes
) -> dict[str, tuple[object, ...]]:
    """transparency-dev's corruptInclusionProof: each probe must fail."""
    probes: dict[str, tuple[object, ...]] = {
        "leafIndex - 1": (leaf, index - 1, size, proof, root),
        "leafIndex + 1": (leaf, index + 1, size, proof, root),
        "leafIndex ^ 2": (leaf, index ^ 2, size, proof, root),
        "treeSize * 2": (leaf, index, size * 2, proof, root),
        "treeSize / 2": (leaf, index, size // 2, proof, root),
        "wrong leaf": (b"WrongLeaf", index, size, proof, root),
        "empty root": (leaf, index, size, proof, EMPTY_ROOT),
        "random root": (leaf, index, size, proof, SOME_HASH),
        "trailing garbage": (leaf, index, size, [*proof, b""], root),
        "trailing root": (leaf, index, size, [*proof, root], root),
        "preceding garbage": (leaf, index, size, [b"", *proof], root),
        "preceding root": (leaf, index, size, [root, *proof], root),
    }
    for position in range(len(proof)):
        flipped = list(proof)
        flipped[position] = bytes([flipped[position][0] ^ 8]) + flipped[position][1:]
        probes[f"modified proof[{position}] bit 3"] = (leaf, index, size, flipped, root)
    if proof:
        probes["removed component"] = (leaf, index, size, proof[:-1], root)
    if len(proof) > 1:
        probes["inserted component"] = (leaf, index, size, [proof[0], SOME_HASH, *proof[1:]], root)
    return probes


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION[1:])  # [0] has no proof to spoil
def test_every_published_inclusion_corruption_fails(
    index: int, size: int, proof: list[str]
) -> None:
    probes = _inclusion_corruptions(
        index, size, _hashes(proof), ROOTS[size - 1], LEAF_HASHES[index]
    )
    accepted = [name for name, args in probes.items() if not refused(verify_inclusion, *args)]
    assert accepted == []


def _consistency_corruptions(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: list[bytes]
) -> dict[str, tuple[object, ...]]:
    """transparency-dev's corruptConsistencyProof: each probe must fail."""
    probes: dict[str, tuple[object, ...]] = {
        "size1 - 1": (old - 1, new, old_root, new_root, proof),
        "size1 + 1": (old + 1, new, old_root, new_root, proof),
        "size1 ^ 2": (old ^ 2, new, old_root, new_root, proof),
        "size2 * 2": (old, new * 2, old_root, new_root, proof),
        "size2 / 2": (old, new // 2, old_root, new_root, proof),
        "wrong root1": (old, new, b"WrongRoot", new_root, proof),
        "wrong root2": (old, new, old_root, b"WrongRoot", proof),
        "swapped roots": (old, new, new_root, old_root, proof),
        "empty proof": (old, new, old_root, new_root, []),
        "trailing garbage": (old, new, old_root, new_root, [*proof, b""]),
        "trailing root1": (old, new, old_root, new_root, [*proof, old_root]),
        "trailing root2": (old, new, old_root, new_root, [*proof, new_root]),
        "preceding garbage": (old, new, old_root, new_root, [b"", *proof]),
        "preceding root1": (old, new, old_root, new_root, [old_root, *proof]),
        "preceding root2": (old, new, old_root, new_root, [new_root, *proof]),
        "preceding proof[0]": (old, new, old_root, new_root, [proof[0], *proof]),
        "truncated proof": (old, new, old_root, new_root, proof[:-1]),
    }
    for position in range(len(proof)):
        flipped = list(proof)
        flipped[position] = bytes([flipped[position][0] ^ 16]) + flipped[position][1:]
        probes[f"modified proof[{position}] bit 4"] = (old, new, old_root, new_root, flipped)
    return probes


@pytest.mark.parametrize(("old", "new", "proof"), CONSISTENCY[1:])  # [0] has no proof to spoil
def test_every_published_consistency_corruption_fails(old: int, new: int, proof: list[str]) -> None:
    probes = _consistency_corruptions(old, new, ROOTS[old - 1], ROOTS[new - 1], _hashes(proof))
    accepted = [name for name, args in probes.items() if not refused(verify_consistency, *args)]
    assert accepted == []


def test_the_published_always_consistent_sizes() -> None:
    """TestVerifyConsistency: an empty tree precedes every tree; equal sizes, equal roots."""
    verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [])
    verify_consistency(0, 1, EMPTY_ROOT, ROOTS[0], [])
    verify_consistency(1, 1, ROOTS[0], ROOTS[0], [])
    with pytest.raises(CheckpointError, match="checkpoint-mismatch"):
        verify_consistency(1, 1, ROOTS[0], ROOTS[1], [])
    with pytest.raises(InvalidInputError, match="invalid-merkle-proof"):
        verify_consistency(1, 1, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT])
    with pytest.raises(InvalidInputError, match="invalid-tree-size"):
        verify_consistency(2, 1, ROOTS[1], ROOTS[0], [])  # time travel to the past


def test_a_single_leaf_is_its_own_root() -> None:
    """TestVerifyInclusionSingleEntry."""
    leaf = leaf_hash(b"data")
    verify_inclusion(leaf, 0, 1, [], leaf)
    assert root_from_inclusion_proof(leaf, 0, 1, []) == leaf
    with pytest.raises(InvalidInputError, match="invalid-merkle-hash"):
        verify_inclusion(b"", 0, 1, [], leaf)


def _nodes(text: str) -> list[tuple[NodeId, ...]]:
    """`"0:1 1:2+0:6"`: a proof hash per space, its subtrees `level:index` joined by `+`."""
    return [
        tuple(NodeId(*map(int, node.split(":"))) for node in group.split("+"))
        for group in text.split()
    ]


# proof_test.go's node lists, one group per proof hash; a `rehash` group is written here
# left to right (largest subtree first), as it is folded
INCLUSION_NODES = [
    (1, 0, ""),
    (2, 0, "0:1"),
    (2, 1, "0:0"),
    (3, 1, "0:0 0:2"),
    (7, 0, "0:1 1:1 1:2+0:6"),
    (7, 1, "0:0 1:1 1:2+0:6"),
    (7, 2, "0:3 1:0 1:2+0:6"),
    (7, 3, "0:2 1:0 1:2+0:6"),
    (7, 4, "0:5 0:6 2:0"),
    (7, 5, "0:4 0:6 2:0"),
    (7, 6, "1:2 2:0"),
    (4, 2, "0:3 1:0"),
    (5, 3, "0:2 1:0 0:4"),
    (6, 3, "0:2 1:0 1:2"),
    (6, 4, "0:5 2:0"),
    (15, 10, "0:11 1:4 1:6+0:14 3:0"),
    (31, 24, "0:25 1:13 1:14+0:30 3:2 4:0"),
    (95, 81, "0:80 1:41 2:21 2:22+1:46+0:94 4:4 6:0"),
]
CONSISTENCY_NODES = [
    (1, 2, "0:1"),
    (1, 4, "0:1 1:1"),
    (1, 6, "0:1 1:1 1:2"),
    (2, 3, "0:2"),
    (2, 8, "1:1 2:1"),
    (3, 7, "0:2 0:3 1:0 1:2+0:6"),
    (4, 7, "1:2+0:6"),
    (5, 7, "0:4 0:5 0:6 2:0"),
    (6, 7, "1:2 0:6 2:0"),
    (7, 8, "0:6 0:7 1:2 2:0"),
    (5, 5, ""),
    (8, 8, ""),
    (3, 6, "0:2 0:3 1:0 1:2"),
    (4, 6, "1:2"),
    (2, 4, "1:1"),
    (3, 5, "0:2 0:3 1:0 0:4"),
    (1, 7, "0:1 1:1 1:2+0:6"),
    (10, 15, "1:4 1:5 1:6+0:14 3:0"),
    (24, 31, "3:2 2:6+1:14+0:30 4:0"),
    (81, 95, "0:80 0:81 1:41 2:21 2:22+1:46+0:94 4:4 6:0"),
]
# (size, index) and (old size, new size) that TestInclusion and TestConsistency refuse
BAD_INCLUSION = [(0, 0), (0, 1), (1, 2), (0, 3), (7, 8)]
BAD_CONSISTENCY = [(5, 0), (9, 8)]


@pytest.mark.parametrize(
    ("plan", "sizes", "nodes"),
    [(inclusion_nodes, (index, size), nodes) for size, index, nodes in INCLUSION_NODES]
    + [(consistency_nodes, (old, new), nodes) for old, new, nodes in CONSISTENCY_NODES],
)
def test_a_proof_reads_the_published_nodes(
    plan: Callable[[int, int], list[tuple[NodeId, ...]]], sizes: tuple[int, int], nodes: str
) -> None:
    assert plan(*sizes) == _nodes(nodes)


@pytest.mark.parametrize(
    ("plan", "sizes", "code"),
    [(inclusion_nodes, (index, size), "invalid-leaf-index") for size, index in BAD_INCLUSION]
    + [(consistency_nodes, sizes, "invalid-tree-size") for sizes in BAD_CONSISTENCY],
)
def test_the_published_bad_parameters(
    plan: Callable[[int, int], object], sizes: tuple[int, int], code: str
) -> None:
    with pytest.raises(InvalidInputError) as raised:
        plan(*sizes)
    assert raised.value.code == code
