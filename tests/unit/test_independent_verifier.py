"""The independent checker (tests/independent/tlogcheck, Go's standard library only,
written from RFC 9162 and the C2SP specifications) against the pure layer: what
`cadence_store.journal` signs and proves, the Go program accepts; what the Go program
signs, `cadence_store.journal.notes` accepts; and a tampered note or proof fails under
both. Two implementations agreeing on every proof of every small tree, and on published
notes, is the evidence that an auditor without Python can check a store's checkpoints.

The store's own proofs (`cadence-store prove`) are checked the same way in
tests/integration/test_independent_verifier_store.py.

Known answers: golang.org/x/mod sumdb/note/note_test.go (the PeterNeumann keys and
signed note of TestSign); sigsum-go's TestGoSumDBCheckpoint (a checkpoint signed by
sum.golang.org's production key, the key from golang/go's modfetch/key.go).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from tamper_support import build_tlogcheck, encode_hashes, flip_signature_byte, tlogcheck
from unit.test_notes import (  # the published vectors
    PETER_SIG,
    PETER_SIGNER,
    PETER_VERIFIER,
    SUMDB_CHECKPOINT,
    SUMDB_VERIFIER,
    TEXT,
)

from cadence_store.errors import CheckpointError, InvalidInputError
from cadence_store.journal import merkle
from cadence_store.journal.merkle import MemoryTree, feed_leaf_hash
from cadence_store.journal.note_keys import generate_signer_key
from cadence_store.journal.notes import (
    Checkpoint,
    format_checkpoint,
    sign_checkpoint,
    sign_note,
    verify_checkpoint,
)

PETER_NOTE = f"{TEXT}\n{PETER_SIG}"
ORIGIN = "cadence.test/independent"
SIZES = [*range(1, 18), 31, 32, 33]
# run ids that take every branch of the canonical string rule
ODD_RUN_IDS = ['quote"and\\slash', "tab\tnew\nline", "ctl\x01\x1f", "é-ü-😀", "<&>\u2028"]


@pytest.fixture(scope="module")
def checker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tlogcheck(tmp_path_factory.mktemp("tlogcheck"))


@pytest.fixture(scope="module")
def signer() -> Any:
    return generate_signer_key(ORIGIN)


def leaves(count: int) -> list[dict[str, Any]]:
    return [
        {"runId": f"run-{i % 3}", "sequence": i // 3 + 1, "eventHash": f"{i:064x}"}
        for i in range(count)
    ]


def tree_of(items: list[dict[str, Any]]) -> MemoryTree:
    return MemoryTree(feed_leaf_hash(i["runId"], i["sequence"], i["eventHash"]) for i in items)


def signed_head(tree: MemoryTree, size: int, signer: Any) -> str:
    root = merkle.root_at(tree, size)
    return sign_checkpoint(Checkpoint(ORIGIN, size, root), signer)


def inclusion_document(items: list[dict[str, Any]], index: int, size: int, note: str) -> str:
    """An inclusion proof in the JSON `cadence-store prove` prints."""
    tree = tree_of(items)
    return json.dumps(
        {
            "origin": ORIGIN,
            "treeSize": size,
            "leafIndex": index,
            "leaf": items[index],
            "hashes": encode_hashes(merkle.inclusion_proof(tree, index, size)),
            "checkpoint": note,
        }
    )


def go_inclusion(checker: Path, tmp_path: Path, document: str, vkey: str) -> Any:
    proof = tmp_path / "proof.json"
    proof.write_text(document, encoding="utf-8")
    return tlogcheck(checker, "inclusion", "--vkey", vkey, str(proof))


def go_consistency(
    checker: Path, tmp_path: Path, old: str, new: str, proof: list[bytes], vkey: str
) -> Any:
    files = {}
    for name, content in (("old", old), ("new", new), ("proof", json.dumps(encode_hashes(proof)))):
        files[name] = tmp_path / f"{name}.txt"
        files[name].write_text(content, encoding="utf-8")
    return tlogcheck(
        checker,
        "consistency",
        "--vkey",
        vkey,
        "--old",
        str(files["old"]),
        "--new",
        str(files["new"]),
        str(files["proof"]),
    )


# -- notes and keys ----------------------------------------------------------------------


def test_published_notes_verify_under_the_go_checker(checker: Path, tmp_path: Path) -> None:
    note = tmp_path / "sumdb.note"
    note.write_text(SUMDB_CHECKPOINT, encoding="utf-8")
    result = tlogcheck(checker, "checkpoint", "--vkey", SUMDB_VERIFIER, str(note))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["size"] == 30055305
    key = tmp_path / "peter.key"
    key.write_text(PETER_SIGNER, encoding="utf-8")
    assert tlogcheck(checker, "vkey", "--key", str(key)).stdout.strip() == PETER_VERIFIER
    signed = tlogcheck(
        checker,
        "sign",
        "--key",
        str(key),
        "-",
        stdin=PETER_NOTE.split("\n\n", maxsplit=1)[0] + "\n",
    )
    assert signed.stdout == PETER_NOTE, signed.stderr


def test_project_checkpoints_verify_under_the_go_checker(
    checker: Path, signer: Any, tmp_path: Path
) -> None:
    tree = tree_of(leaves(33))
    for size in (0, 1, 7, 33):
        note = tmp_path / f"{size}.note"
        note.write_text(signed_head(tree, size, signer), encoding="utf-8")
        result = tlogcheck(checker, "checkpoint", "--vkey", str(signer.verifier()), str(note))
        assert result.returncode == 0, result.stderr
        found = json.loads(result.stdout)
        assert (found["origin"], found["size"]) == (ORIGIN, size)
        assert found["rootHash"] == merkle.root_at(tree, size).hex()


def test_go_signed_checkpoints_verify_under_the_project(
    checker: Path, signer: Any, tmp_path: Path
) -> None:
    key = tmp_path / "signer.key"
    key.write_text(signer.encode(), encoding="utf-8")
    vkey = tlogcheck(checker, "vkey", "--key", str(key)).stdout.strip()
    assert vkey == str(signer.verifier())
    checkpoint = Checkpoint(ORIGIN, 33, merkle.root_at(tree_of(leaves(33)), 33))
    signed = tlogcheck(checker, "sign", "--key", str(key), "-", stdin=format_checkpoint(checkpoint))
    assert signed.returncode == 0, signed.stderr
    assert verify_checkpoint(signed.stdout, vkey) == checkpoint
    # Ed25519 is deterministic: both sign the same bytes
    assert signed.stdout == sign_checkpoint(checkpoint, signer)


def _write(path: Path, content: str) -> Path:
    path.write_text(content, encoding="utf-8")
    return path


def test_a_tampered_note_fails_under_both(checker: Path, signer: Any, tmp_path: Path) -> None:
    note = signed_head(tree_of(leaves(9)), 9, signer)
    other = generate_signer_key(ORIGIN)  # the same name, another key
    cases = {
        "flipped signature": (flip_signature_byte(note), str(signer.verifier())),
        "another key": (note, str(other.verifier())),
        "edited size": (note.replace("\n9\n", "\n8\n", 1), str(signer.verifier())),
    }
    for name, (message, vkey) in cases.items():
        path = _write(tmp_path / "note", message)
        result = tlogcheck(checker, "checkpoint", "--vkey", vkey, str(path))
        assert result.returncode == 1, (name, result.stdout)
        assert "signature invalid" in result.stderr, (name, result.stderr)
        with pytest.raises(CheckpointError) as info:
            verify_checkpoint(message, vkey)
        assert info.value.code == "checkpoint-signature-invalid", name
    # a signature line by a key the verifier does not know is ignored by both
    text = note.split("\n\n")[0] + "\n"
    cosigned = note + sign_note(text, other).removeprefix(text + "\n")
    path = _write(tmp_path / "cosigned", cosigned)
    for key in (signer, other):
        result = tlogcheck(checker, "checkpoint", "--vkey", str(key.verifier()), str(path))
        assert result.returncode == 0, result.stderr
        assert verify_checkpoint(cosigned, key.verifier()).size == 9


# -- proofs ------------------------------------------------------------------------------


def test_every_inclusion_proof_of_small_trees_verifies_under_go(
    checker: Path, signer: Any, tmp_path: Path
) -> None:
    items = leaves(max(SIZES))
    tree = tree_of(items)
    for size in SIZES:
        note = signed_head(tree, size, signer)
        for index in range(size):
            result = go_inclusion(
                checker,
                tmp_path,
                inclusion_document(items, index, size, note),
                str(signer.verifier()),
            )
            assert result.returncode == 0, (size, index, result.stderr)
            expected = feed_leaf_hash(**_leaf_args(items[index])).hex()
            assert json.loads(result.stdout)["leafHash"] == expected


def _leaf_args(item: dict[str, Any]) -> dict[str, Any]:
    return {"run_id": item["runId"], "sequence": item["sequence"], "event_hash": item["eventHash"]}


def test_leaf_data_agrees_on_strings_that_need_escaping(
    checker: Path, signer: Any, tmp_path: Path
) -> None:
    items = [
        {"runId": run_id, "sequence": n + 1, "eventHash": f"{n:064x}"}
        for n, run_id in enumerate(ODD_RUN_IDS)
    ]
    tree = tree_of(items)
    note = signed_head(tree, len(items), signer)
    for index in range(len(items)):
        document = inclusion_document(items, index, len(items), note)
        result = go_inclusion(checker, tmp_path, document, str(signer.verifier()))
        assert result.returncode == 0, (items[index], result.stderr)


def test_every_consistency_proof_of_small_trees_verifies_under_go(
    checker: Path, signer: Any, tmp_path: Path
) -> None:
    tree = tree_of(leaves(max(SIZES)))
    for new in SIZES:
        new_note = signed_head(tree, new, signer)
        for old in range(new + 1):
            proof = merkle.consistency_proof(tree, old, new)
            result = go_consistency(
                checker,
                tmp_path,
                signed_head(tree, old, signer),
                new_note,
                proof,
                str(signer.verifier()),
            )
            assert result.returncode == 0, (old, new, result.stderr)


def test_a_tampered_inclusion_proof_fails_under_both(
    checker: Path, signer: Any, tmp_path: Path
) -> None:
    items = leaves(13)
    tree = tree_of(items)
    note = signed_head(tree, 13, signer)
    good = json.loads(inclusion_document(items, 5, 13, note))
    flipped = base64.b64decode(good["hashes"][1])
    flipped = bytes([flipped[0] ^ 1]) + flipped[1:]
    cases = {
        "a proof hash flipped": {"hashes": [good["hashes"][0], _b64(flipped), *good["hashes"][2:]]},
        "another event hash": {"leaf": {**good["leaf"], "eventHash": "f" * 64}},
        "another sequence": {"leaf": {**good["leaf"], "sequence": 99}},
        "another index": {"leafIndex": 4},
        "a hash dropped": {"hashes": good["hashes"][:-1]},
        "a hash added": {"hashes": [*good["hashes"], good["hashes"][0]]},
    }
    root = merkle.root_at(tree, 13)
    for name, change in cases.items():
        document = {**good, **change}
        result = go_inclusion(checker, tmp_path, json.dumps(document), str(signer.verifier()))
        assert result.returncode == 1, name
        assert "mismatch" in result.stderr, (name, result.stderr)
        leaf = feed_leaf_hash(**_leaf_args(document["leaf"]))
        proof = [base64.b64decode(h) for h in document["hashes"]]
        with pytest.raises((CheckpointError, InvalidInputError)) as info:
            merkle.verify_inclusion(leaf, document["leafIndex"], 13, proof, root)
        assert info.value.code in {"checkpoint-mismatch", "invalid-merkle-proof"}, name
    # a proof checked against a checkpoint of another size is refused, not re-sized
    other_note = signed_head(tree, 12, signer)
    result = go_inclusion(
        checker, tmp_path, json.dumps({**good, "checkpoint": other_note}), str(signer.verifier())
    )
    assert result.returncode == 1 and "mismatch" in result.stderr


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def test_a_tampered_consistency_proof_fails_under_both(
    checker: Path, signer: Any, tmp_path: Path
) -> None:
    tree = tree_of(leaves(17))
    old_note, new_note = signed_head(tree, 6, signer), signed_head(tree, 17, signer)
    proof = merkle.consistency_proof(tree, 6, 17)
    old_root, new_root = merkle.root_at(tree, 6), merkle.root_at(tree, 17)
    for position in range(len(proof)):
        bad = list(proof)
        bad[position] = bytes([bad[position][0] ^ 1]) + bad[position][1:]
        result = go_consistency(checker, tmp_path, old_note, new_note, bad, str(signer.verifier()))
        assert result.returncode == 1 and "mismatch" in result.stderr, position
        with pytest.raises(CheckpointError) as info:
            merkle.verify_consistency(6, 17, old_root, new_root, bad)
        assert info.value.code == "checkpoint-mismatch"
    # a fork: another tree of 17 leaves that shares no history with the old head
    forked = tree_of(leaves(18)[1:])
    forked_note = signed_head(forked, 17, signer)
    fork_proof = merkle.consistency_proof(forked, 6, 17)
    result = go_consistency(
        checker, tmp_path, old_note, forked_note, fork_proof, str(signer.verifier())
    )
    assert result.returncode == 1 and "mismatch" in result.stderr
    with pytest.raises(CheckpointError):
        merkle.verify_consistency(6, 17, old_root, merkle.root_at(forked, 17), fork_proof)
