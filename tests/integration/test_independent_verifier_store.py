"""A store's checkpoints and proofs, as `cadence-store checkpoint` and `prove` print them,
checked by the independent Go checker (tests/independent/tlogcheck) on SQLite and
PostgreSQL: every event's inclusion proof, the consistency proof between two checkpoints,
and a tampered proof or note refused. tests/unit/test_independent_verifier.py checks the
same checker against the pure layer."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from support import ROOT_HASH, FakeClock
from tamper_support import (
    ORIGIN,
    advance,
    build_tlogcheck,
    encode_hashes,
    flip_signature_byte,
    start_runs,
    tlogcheck,
)

from cadence_store import AsyncRunStore, RunStore
from cadence_store.async_store import async_database_url
from cadence_store.cli import main
from cadence_store.journal.note_keys import SignerKey, generate_signer_key, parse_signer_key
from cadence_store.storage.feed_notifier import flush_notifiers


@pytest.fixture(scope="module")
def checker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tlogcheck(tmp_path_factory.mktemp("tlogcheck"))


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "signer.key"
    result = cli("keygen", ORIGIN, "--out", str(path))
    assert result.exit_code == 0, result.output
    return path


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def signer_of(key_file: Path) -> SignerKey:
    return parse_signer_key(key_file.read_text(encoding="utf-8").strip())


def checkpoint_file(url: str, key_file: Path, path: Path) -> str:
    result = cli("checkpoint", "--key", str(key_file), "--url", url)
    assert result.exit_code == 0, result.output
    path.write_text(result.stdout, encoding="utf-8")
    return result.stdout


def populated(url: str) -> dict[str, str]:
    with RunStore(url, root_hash=ROOT_HASH, clock=FakeClock()) as store:
        ids = start_runs(store)
        advance(store, ids, range(3))
        flush_notifiers()
    return ids


def test_every_prove_output_verifies_under_the_go_checker(
    store_url: str, key_file: Path, checker: Path, tmp_path: Path
) -> None:
    ids = populated(store_url)
    note_path = tmp_path / "head.txt"
    checkpoint_file(store_url, key_file, note_path)
    vkey = str(signer_of(key_file).verifier())
    result = tlogcheck(checker, "checkpoint", "--vkey", vkey, str(note_path))
    assert result.returncode == 0, result.stderr
    size = json.loads(result.stdout)["size"]
    seen = set()
    with RunStore(store_url, root_hash=ROOT_HASH) as store:
        events = {run_id: len(store.list_events(run_id)) for run_id in ids.values()}
    assert sum(events.values()) == size
    proof_path = tmp_path / "proof.json"
    for run_id, count in events.items():
        for sequence in range(1, count + 1):
            proved = cli(
                "prove", run_id, "--sequence", str(sequence), "--checkpoint", str(note_path),
                "--url", store_url,
            )  # fmt: skip
            assert proved.exit_code == 0, proved.output
            proof_path.write_text(proved.stdout, encoding="utf-8")
            checked = tlogcheck(checker, "inclusion", "--vkey", vkey, str(proof_path))
            assert checked.returncode == 0, (run_id, sequence, checked.stderr)
            seen.add(json.loads(proved.stdout)["leafIndex"])
    assert seen == set(range(size))  # every leaf proved once


def test_a_tampered_prove_output_fails_under_the_go_checker(
    store_url: str, key_file: Path, checker: Path, tmp_path: Path
) -> None:
    ids = populated(store_url)
    note_path = tmp_path / "head.txt"
    note = checkpoint_file(store_url, key_file, note_path)
    vkey = str(signer_of(key_file).verifier())
    proved = cli("prove", ids["long"], "--checkpoint", str(note_path), "--url", store_url)
    assert proved.exit_code == 0, proved.output
    good = json.loads(proved.stdout)
    leaf = good["leaf"]
    cases = {
        "another event hash": ({**good, "leaf": {**leaf, "eventHash": "0" * 64}}, "mismatch"),
        "another run": ({**good, "leaf": {**leaf, "runId": ids["short"]}}, "mismatch"),
        "another index": ({**good, "leafIndex": good["leafIndex"] - 1}, "mismatch"),
        "a hash dropped": ({**good, "hashes": good["hashes"][1:]}, "mismatch"),
        "a flipped signature": ({**good, "checkpoint": flip_signature_byte(note)}, "signature"),
    }  # fmt: skip
    path = tmp_path / "bad.json"
    for name, (document, reason) in cases.items():
        path.write_text(json.dumps(document), encoding="utf-8")
        result = tlogcheck(checker, "inclusion", "--vkey", vkey, str(path))
        assert result.returncode == 1, name
        assert reason in result.stderr, (name, result.stderr)


def test_consistency_between_two_checkpoints_under_the_go_checker(
    store_url: str, key_file: Path, checker: Path, tmp_path: Path
) -> None:
    ids = populated(store_url)
    old_path, new_path = tmp_path / "old.txt", tmp_path / "new.txt"
    checkpoint_file(store_url, key_file, old_path)
    with RunStore(store_url, root_hash=ROOT_HASH, clock=FakeClock()) as store:
        advance(store, ids, range(3, 6))
        flush_notifiers()
    checkpoint_file(store_url, key_file, new_path)
    vkey = str(signer_of(key_file).verifier())
    sizes = [
        json.loads(tlogcheck(checker, "checkpoint", "--vkey", vkey, str(p)).stdout)["size"]
        for p in (old_path, new_path)
    ]
    assert sizes[0] < sizes[1]
    with RunStore(store_url, root_hash=ROOT_HASH) as store:
        proof = store.consistency_proof(sizes[0], sizes[1])
    proof_path = tmp_path / "consistency.json"
    proof_path.write_text(json.dumps(proof.to_json()), encoding="utf-8")
    arguments = ["--vkey", vkey, "--old", str(old_path), "--new", str(new_path)]
    result = tlogcheck(checker, "consistency", *arguments, str(proof_path))
    assert result.returncode == 0, result.stderr
    # the async store gives the same proof
    assert asyncio.run(_async_consistency(store_url, sizes)) == proof.to_json()
    # one hash flipped: refused
    document = proof.to_json()
    flipped = bytearray(base64.b64decode(document["hashes"][0]))
    flipped[0] ^= 1
    document["hashes"][0] = encode_hashes([bytes(flipped)])[0]
    proof_path.write_text(json.dumps(document), encoding="utf-8")
    result = tlogcheck(checker, "consistency", *arguments, str(proof_path))
    assert result.returncode == 1 and "mismatch" in result.stderr


async def _async_consistency(url: str, sizes: list[int]) -> Any:
    async with AsyncRunStore(async_database_url(url), root_hash=ROOT_HASH) as store:
        proof = await store.consistency_proof(sizes[0], sizes[1])
    return proof.to_json()


def test_a_note_the_go_checker_signs_verifies_against_the_store(
    store_url: str, checker: Path, tmp_path: Path
) -> None:
    """The auditor's side can sign too: a head the Go program signs over the store's size
    and root verifies with `verify --checkpoint` under the Go program's verifier key."""
    populated(store_url)
    signer = generate_signer_key(ORIGIN)
    with RunStore(store_url, root_hash=ROOT_HASH) as store:
        head = store.checkpoint(signer, origin=ORIGIN)
    key_path = tmp_path / "go.key"
    key_path.write_text(signer.encode(), encoding="utf-8")
    text = head.note.split("\n\n", maxsplit=1)[0] + "\n"
    signed = tlogcheck(checker, "sign", "--key", str(key_path), "-", stdin=text)
    assert signed.returncode == 0, signed.stderr
    vkey = tlogcheck(checker, "vkey", "--key", str(key_path)).stdout.strip()
    note_path = tmp_path / "go-signed.txt"
    note_path.write_text(signed.stdout, encoding="utf-8")
    result = cli("verify", "--checkpoint", str(note_path), "--vkey", vkey, "--url", store_url)
    assert result.exit_code == 0, result.output
