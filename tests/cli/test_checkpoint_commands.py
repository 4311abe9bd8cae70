"""`keygen`, `checkpoint`, `verify --checkpoint --vkey` and `prove`: their output, exit
codes and refusals, and that the signer key is never printed."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from support import signer_seed

from cadence_store import RunStore, upgrade
from cadence_store.journal.merkle import verify_inclusion
from cadence_store.journal.notes import (
    Checkpoint,
    parse_signer_key,
    parse_verifier_key,
    sign_checkpoint,
    verify_checkpoint,
)
from cadence_store.storage.feed_notifier import flush_notifiers


@pytest.fixture
def store_url(database_url: str) -> str:
    """A store at head with three runs (five events)."""
    upgrade(database_url)
    with RunStore(database_url, root_hash="ab" * 32) as store:
        for i in range(3):
            run = store.start_run("abel-implement", change=f"cli-{i}", operation_id=f"s-{i}")
        store.transition(run.run_id, "validating-delivery", operation_id="t-1")
        store.transition(run.run_id, "paused", operation_id="t-2")
    flush_notifiers()
    return database_url


@pytest.fixture
def keys(cli: Any, tmp_path: Path) -> tuple[Path, str]:
    """A signer key file made by `keygen`, and the verifier key it printed."""
    key_file = tmp_path / "runs.key"
    made = cli("keygen", "example.com/runs", "--out", str(key_file))
    assert made.exit_code == 0, made.output
    return key_file, made.stdout.strip()


def test_keygen_writes_a_private_key_file_and_prints_only_the_verifier_key(
    cli: Any, keys: tuple[Path, str]
) -> None:
    key_file, vkey = keys
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    signer = parse_signer_key(key_file.read_text(encoding="utf-8").strip())
    assert signer.verifier() == parse_verifier_key(vkey)
    secret = signer_seed(signer.encode())
    again = cli("keygen", "example.com/runs", "--out", str(key_file))
    assert again.exit_code == 2
    assert "key-file-exists" in again.stderr
    assert (
        parse_signer_key(key_file.read_text(encoding="utf-8").strip()).encode() == signer.encode()
    )
    assert secret not in again.output and vkey not in again.stdout


def test_keygen_refuses_a_name_the_encoding_cannot_carry(cli: Any, tmp_path: Path) -> None:
    refused = cli("keygen", "two words", "--out", str(tmp_path / "k"))
    assert refused.exit_code == 2
    assert "checkpoint-key-invalid" in refused.stderr
    assert not (tmp_path / "k").exists()


def test_checkpoint_verify_and_prove(
    cli: Any, store_url: str, keys: tuple[Path, str], tmp_path: Path
) -> None:
    key_file, vkey = keys
    secret = signer_seed(key_file.read_text(encoding="utf-8").strip())
    signed = cli("checkpoint", "--key", str(key_file), "--url", store_url)
    assert signed.exit_code == 0, signed.output
    assert secret not in signed.output
    head = verify_checkpoint(signed.stdout, vkey)
    assert (head.origin, head.size) == ("example.com/runs", 5)
    note_file = tmp_path / "head.txt"
    note_file.write_text(signed.stdout, encoding="utf-8")
    vkey_file = tmp_path / "runs.vkey"
    vkey_file.write_text(vkey + "\n", encoding="utf-8")
    for given in (vkey, str(vkey_file)):
        checked = cli("verify", "--checkpoint", str(note_file), "--vkey", given, "--url", store_url)
        assert checked.exit_code == 0, checked.output
        assert "5 event(s) verified" in checked.stdout
    report = cli(
        "verify", "--checkpoint", str(note_file), "--vkey", vkey, "--url", store_url, "--json"
    )
    assert json.loads(report.stdout) == {
        "size": 5,
        "rootHash": head.root_hash.hex(),
        "treeSize": 5,
        "runsVerified": 3,
        "eventsVerified": 5,
    }
    with RunStore(store_url) as store:
        run_id = store.run_ids()[0]
    proved = cli("prove", run_id, "--checkpoint", str(note_file), "--url", store_url)
    assert proved.exit_code == 0, proved.output
    proof = json.loads(proved.stdout)
    assert set(proof) == {"origin", "treeSize", "leafIndex", "leaf", "hashes", "checkpoint"}
    assert proof["checkpoint"] == signed.stdout and proof["treeSize"] == 5
    with RunStore(store_url) as store:
        leaf = store.inclusion_proof(run_id, size=5)
    verify_inclusion(leaf.leaf_hash, proof["leafIndex"], 5, list(leaf.hashes), head.root_hash)


def test_the_signing_key_file_may_come_from_the_environment(
    cli: Any, store_url: str, keys: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file, vkey = keys
    monkeypatch.setenv("CADENCE_STORE_SIGNING_KEY_FILE", str(key_file))
    signed = cli("checkpoint", "--origin", "runs.example.com/log", "--url", store_url)
    assert signed.exit_code == 0, signed.output
    assert verify_checkpoint(signed.stdout, vkey).origin == "runs.example.com/log"


def test_a_bad_key_file_is_refused_without_showing_it(
    cli: Any, store_url: str, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.key"
    bad.write_text("PRIVATE+KEY+example.com+00000000+c2VjcmV0LXNlZWQtdGV4dA==\n", encoding="utf-8")
    for path in (bad, tmp_path / "missing.key"):
        refused = cli("checkpoint", "--key", str(path), "--url", store_url)
        assert refused.exit_code == 2, refused.output
        assert "checkpoint-key-invalid" in refused.stderr
        assert "c2VjcmV0" not in refused.output
    with RunStore(store_url) as store, pytest.raises(Exception) as none:
        store.inclusion_proof(store.run_ids()[0])
    assert getattr(none.value, "code", None) == "checkpoint-not-found"  # nothing recorded


def test_verification_failures_exit_1_with_their_code(
    cli: Any, store_url: str, keys: tuple[Path, str], tmp_path: Path
) -> None:
    key_file, vkey = keys
    note_file = tmp_path / "head.txt"
    note_file.write_text(cli("checkpoint", "--key", str(key_file), "--url", store_url).stdout)
    other = cli("keygen", "example.com/runs", "--out", str(tmp_path / "other.key")).stdout.strip()
    wrong = cli("verify", "--checkpoint", str(note_file), "--vkey", other, "--url", store_url)
    assert wrong.exit_code == 1
    assert "checkpoint-signature-invalid" in wrong.stderr
    engine = create_engine(store_url)
    try:
        with engine.begin() as connection:  # history rewritten: another event hash
            connection.execute(
                text("UPDATE events SET event_hash = :h WHERE feed_position = 1"), {"h": "c" * 64}
            )
    finally:
        engine.dispose()
    broken = cli("verify", "--checkpoint", str(note_file), "--vkey", vkey, "--url", store_url)
    assert broken.exit_code == 1
    assert "checkpoint-mismatch" in broken.stderr
    alone = cli("verify", "--checkpoint", str(note_file), "--url", store_url)
    assert alone.exit_code == 2  # --checkpoint needs --vkey
    missing = cli(
        "verify", "--checkpoint", str(tmp_path / "none.txt"), "--vkey", vkey, "--url", store_url
    )
    assert missing.exit_code == 2
    assert "checkpoint-file-unreadable" in missing.stderr


def test_prove_refuses_a_note_the_store_cannot_prove_against(
    cli: Any, store_url: str, keys: tuple[Path, str], tmp_path: Path
) -> None:
    key_file, _ = keys
    signer = parse_signer_key(key_file.read_text(encoding="utf-8").strip())
    cli("checkpoint", "--key", str(key_file), "--url", store_url)
    with RunStore(store_url) as store:
        run_id = store.run_ids()[0]
    forged = tmp_path / "forged.txt"  # the recorded size, another root
    forged.write_text(sign_checkpoint(Checkpoint("example.com/runs", 5, bytes(32)), signer))
    mismatch = cli("prove", run_id, "--checkpoint", str(forged), "--url", store_url)
    assert mismatch.exit_code == 1
    assert "checkpoint-mismatch" in mismatch.stderr
    unrecorded = tmp_path / "unrecorded.txt"
    unrecorded.write_text(sign_checkpoint(Checkpoint("example.com/runs", 4, bytes(32)), signer))
    unknown = cli("prove", run_id, "--checkpoint", str(unrecorded), "--url", store_url)
    assert unknown.exit_code == 2
    assert "checkpoint-not-found" in unknown.stderr
