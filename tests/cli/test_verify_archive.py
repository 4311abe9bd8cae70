"""`cadence-store verify --archive FILE --checkpoint FILE --vkey KEY`: an archive checked
with no database at all (no URL, no embedded store created), exit 0 when it verifies and 1
with the code and the first failure when not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from archive_support import ArchivedStore, archived_store, change_payload_byte


@pytest.fixture
def archived(head_copies: set[str], database_url: str, tmp_path: Path) -> ArchivedStore:
    return archived_store(database_url, tmp_path)


def _files(archived: ArchivedStore, tmp_path: Path) -> tuple[str, str, str]:
    note = tmp_path / "head.txt"
    note.write_text(archived.note, encoding="utf-8")
    vkey = tmp_path / "runs.vkey"
    vkey.write_text(archived.vkey + "\n", encoding="utf-8")
    return str(archived.archive), str(note), str(vkey)


def test_an_archive_verifies_without_a_database(
    cli: Any, archived: ArchivedStore, tmp_path: Path, isolated: Any
) -> None:
    archive, note, vkey = _files(archived, tmp_path)
    checked = cli("verify", "--archive", archive, "--checkpoint", note, "--vkey", vkey)
    assert checked.exit_code == 0, checked.output
    assert f"archive {archive} verified: 3 run(s), 9 event(s)" in checked.stdout
    assert list(isolated.state.iterdir()) == []  # no embedded store was opened or made
    report = cli(
        "verify", "--archive", archive, "--checkpoint", note, "--vkey", archived.vkey, "--json"
    )
    assert report.exit_code == 0
    document = json.loads(report.stdout)
    assert document["ok"] is True and document["failure"] is None
    assert (document["archive"], document["runs"], document["events"]) == (archive, 3, 9)


def test_a_changed_payload_byte_exits_1_naming_the_run(
    cli: Any, archived: ArchivedStore, tmp_path: Path
) -> None:
    lines = archived.lines()
    lines[1] = change_payload_byte(lines[1])
    archived.write_lines(lines)
    archive, note, vkey = _files(archived, tmp_path)
    checked = cli("verify", "--archive", archive, "--checkpoint", note, "--vkey", vkey)
    assert checked.exit_code == 1
    assert f"BROKEN archive {archive}: run {archived.archived[0]}: sequence 1: " in checked.stdout
    assert "(event-integrity-hash-chain)" in checked.stdout
    assert "1 run(s) broken" in checked.stdout
    report = cli("verify", "--archive", archive, "--checkpoint", note, "--vkey", vkey, "--json")
    assert report.exit_code == 1
    failure = json.loads(report.stdout)["failure"]
    assert failure["code"] == "event-integrity-hash-chain"
    assert (failure["runId"], failure["sequence"], failure["line"]) == (archived.archived[0], 1, 2)


@pytest.mark.parametrize("damage", ["dropped-line", "truncated", "another-key"])
def test_a_damaged_archive_or_another_key_exits_1(
    cli: Any, archived: ArchivedStore, tmp_path: Path, damage: str
) -> None:
    lines = archived.lines()
    if damage == "dropped-line":
        archived.write_lines([*lines[:1], *lines[2:]])
    elif damage == "truncated":
        archived.write_lines(lines[:-1])
    archive, note, vkey = _files(archived, tmp_path)
    if damage == "another-key":
        made = cli("keygen", "cadence.test/archive", "--out", str(tmp_path / "other.key"))
        vkey = made.stdout.strip()
    checked = cli("verify", "--archive", archive, "--checkpoint", note, "--vkey", vkey)
    assert checked.exit_code == 1
    code = "checkpoint-signature-invalid" if damage == "another-key" else "archive-invalid"
    assert f"({code})" in checked.stdout


def test_archive_needs_its_checkpoint_and_key(
    cli: Any, archived: ArchivedStore, tmp_path: Path
) -> None:
    archive, note, vkey = _files(archived, tmp_path)
    for args in (("--checkpoint", note), ("--vkey", vkey), ("--checkpoint", note, "--vkey", vkey)):
        extra = ("--file", archive) if len(args) == 4 else ()
        refused = cli("verify", "--archive", archive, *args, *extra)
        assert refused.exit_code == 2, refused.output
    missing = cli(
        "verify", "--archive", str(tmp_path / "absent"), "--checkpoint", note, "--vkey", vkey
    )
    assert missing.exit_code == 2 and "export-file-unreadable" in missing.stderr
