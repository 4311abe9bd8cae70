"""`verify_archive` and `read_archive` on archives written from real stores (both engines):
an archive verifies with the checkpoint note and verifier key alone, and each way of
damaging it (a payload byte, a dropped or truncated line, a swapped proof, another key, a
checkpoint that cannot vouch for it) is reported with its code and where."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from archive_support import (
    CREATED_AT_MS,
    FINISHED_BEFORE_MS,
    ORIGIN,
    ArchivedStore,
    archive_lines,
    archived_store,
    change_payload_byte,
    seed_runs,
    swap_first_proofs,
)
from tamper_support import rewrite_history

from cadence_store import RunStore
from cadence_store.errors import ArchiveInvalidError, InvalidInputError
from cadence_store.journal.archive_format import parse_leaves
from cadence_store.journal.merkle import feed_leaf_hash, verify_inclusion
from cadence_store.journal.note_keys import generate_signer_key
from cadence_store.journal.notes import Checkpoint, sign_checkpoint, verify_checkpoint
from cadence_store.transfer import check_record, import_store, read_record
from cadence_store.transfer.archive_file import (
    ArchiveFailure,
    ArchiveVerification,
    read_archive,
    run_line,
    verify_archive,
)


@pytest.fixture
def archived(head_copies: set[str], database_url: str, tmp_path: Path) -> ArchivedStore:
    return archived_store(database_url, tmp_path)


def _verify(
    archived: ArchivedStore, lines: list[str] | None = None, **given: str
) -> ArchiveVerification:
    note = given.get("note", archived.note)
    vkey = given.get("vkey", archived.vkey)
    return verify_archive(lines if lines is not None else archived.lines(), note, vkey)


def _failure(report: ArchiveVerification) -> ArchiveFailure:
    assert not report.ok and report.failure is not None
    return report.failure


def test_an_archive_verifies_with_the_note_and_key_alone(archived: ArchivedStore) -> None:
    with archived.archive.open(encoding="utf-8") as handle:
        report = verify_archive(handle, archived.note, archived.vkey)
    head = verify_checkpoint(archived.note, archived.vkey)
    assert report == ArchiveVerification(
        ok=True,
        runs=3,
        events=9,
        broken=0,
        origin=ORIGIN,
        tree_size=head.size,
        root_hash=head.root_hash.hex(),
        later_checkpoint=False,
        failure=None,
    )
    assert head.size == 3 * 3 + 2  # every event of the store, the active run's too


def test_read_archive_gives_back_each_run_and_its_proofs(archived: ArchivedStore) -> None:
    contents = read_archive(archived.lines())
    assert contents.header.note == archived.note
    assert (contents.header.finished_before_ms, contents.header.created_at_ms) == (
        FINISHED_BEFORE_MS,
        CREATED_AT_MS,
    )
    runs = list(contents)
    assert [run.run_id for run in runs] == archived.archived
    assert contents.trailer is not None and contents.trailer.events == 9
    root = contents.header.checkpoint.root_hash
    with RunStore(archived.url) as store:
        for run in runs:
            for leaf, event in zip(run.leaves, run.record["events"], strict=True):
                proof = store.inclusion_proof(
                    run.run_id, leaf.sequence, size=contents.header.tree_size
                )
                assert (leaf.leaf_index, leaf.hashes) == (proof.leaf_index, proof.hashes)
                leaf_hash = feed_leaf_hash(run.run_id, leaf.sequence, event["event_hash"])
                verify_inclusion(
                    leaf_hash, leaf.leaf_index, contents.header.tree_size, list(leaf.hashes), root
                )


def test_one_changed_payload_byte_does_not_verify(archived: ArchivedStore) -> None:
    lines = archived.lines()
    lines[2] = change_payload_byte(lines[2])
    failure = _failure(_verify(archived, lines))
    assert failure.code == "event-integrity-hash-chain"
    assert (failure.run_id, failure.sequence, failure.line) == (archived.archived[1], 1, 3)
    assert _verify(archived, lines).broken == 1


def test_a_run_rewritten_with_its_chain_recomputed_fails_its_proofs(
    archived: ArchivedStore,
) -> None:
    """An owner who rewrites a run consistently (every hash, the projection and receipts
    recomputed: the record verifies on its own) still cannot make its leaves lead to the
    signed root: the archive's events are not the ones the log signed."""
    run_id = archived.archived[0]
    with RunStore(archived.url) as store:
        with store.engine.begin() as connection:
            rewrite_history(connection, run_id, 2, {"code": "rewritten-pause"})
        with store.engine.connect() as connection:
            record = read_record(connection, run_id)
    assert record is not None and check_record(record).ok
    lines = archived.lines()
    value = json.loads(lines[1])
    lines[1] = run_line(record, parse_leaves(value["leaves"], run_id, [1, 2, 3]))
    failure = _failure(_verify(archived, lines))
    assert failure.code == "checkpoint-mismatch"
    assert (failure.run_id, failure.sequence) == (run_id, 2)


def test_a_dropped_run_line_is_a_truncated_archive(archived: ArchivedStore) -> None:
    lines = archived.lines()
    del lines[2]
    failure = _failure(_verify(archived, lines))
    assert failure.code == "archive-invalid" and "trailer counts 3 run(s)" in failure.detail


@pytest.mark.parametrize("cut", ["trailer", "mid-line", "header-only", "empty"])
def test_a_truncated_file_does_not_verify(archived: ArchivedStore, cut: str) -> None:
    lines = archived.lines()
    kept = {
        "trailer": lines[:-1],
        "mid-line": [*lines[:2], lines[2][: len(lines[2]) // 2]],
        "header-only": lines[:1],
        "empty": [],
    }[cut]
    report = _verify(archived, kept)
    assert _failure(report).code == "archive-invalid"
    with pytest.raises(ArchiveInvalidError):
        list(read_archive(kept))


def test_a_line_after_the_trailer_is_refused(archived: ArchivedStore) -> None:
    lines = archived.lines()
    failure = _failure(_verify(archived, [*lines, lines[1]]))
    assert failure.code == "archive-invalid" and "after the trailer" in failure.detail


def test_a_swapped_proof_does_not_lead_to_the_root(archived: ArchivedStore) -> None:
    lines = archived.lines()
    lines[1] = swap_first_proofs(lines[1])
    failure = _failure(_verify(archived, lines))
    assert failure.code == "checkpoint-mismatch"
    assert (failure.run_id, failure.sequence) == (archived.archived[0], 1)


def test_another_key_does_not_verify(archived: ArchivedStore) -> None:
    other = generate_signer_key(ORIGIN)
    failure = _failure(_verify(archived, vkey=other.verifier().encode()))
    assert failure.code == "checkpoint-signature-invalid"
    assert failure.detail.startswith("the checkpoint given")
    # the auditor's note signed by the other key, the archive's by the store's key
    head = verify_checkpoint(archived.note, archived.vkey)
    forged = sign_checkpoint(head, other)
    failure = _failure(_verify(archived, note=forged, vkey=other.verifier().encode()))
    assert failure.code == "checkpoint-signature-invalid"
    assert failure.detail.startswith("the archive's checkpoint")


def test_a_later_checkpoint_of_the_same_log_vouches_for_the_archive(
    archived: ArchivedStore,
) -> None:
    with RunStore(archived.url, root_hash="cd" * 32) as store:
        seed_runs(store, "later", 1, 0)
        later = store.checkpoint(archived.signer, origin=ORIGIN)
    report = _verify(archived, note=later.note)
    assert report.ok and report.later_checkpoint
    assert later.size > (report.tree_size or 0)


def test_a_checkpoint_that_cannot_vouch_for_the_archive_is_a_mismatch(
    archived: ArchivedStore,
) -> None:
    head = verify_checkpoint(archived.note, archived.vkey)
    older = sign_checkpoint(Checkpoint(ORIGIN, head.size - 1, b"\x01" * 32), archived.signer)
    forked = sign_checkpoint(Checkpoint(ORIGIN, head.size, b"\x01" * 32), archived.signer)
    other_log = sign_checkpoint(
        Checkpoint("cadence.test/other", head.size + 1, b"\x01" * 32), archived.signer
    )
    for note, words in ((older, "older"), (forked, "forked"), (other_log, "of log")):
        failure = _failure(_verify(archived, note=note))
        assert failure.code == "checkpoint-mismatch" and words in failure.detail


def test_an_export_file_is_not_an_archive(archived: ArchivedStore) -> None:
    lines = archived.lines()[1:-1]
    failure = _failure(_verify(archived, lines))
    assert failure.code == "archive-invalid" and "not an archive" in failure.detail


def test_an_archive_of_a_store_with_no_finished_run_holds_no_run(
    head_copies: set[str], database_url: str
) -> None:
    signer = generate_signer_key(ORIGIN)
    with RunStore(database_url, root_hash="cd" * 32) as store:
        seed_runs(store, "open", 0, 1)
        note, lines = archive_lines(store, [], signer)
    report = verify_archive(lines, note, signer.verifier().encode())
    assert report.ok and (report.runs, report.events) == (0, 0)


def test_a_hostile_line_is_refused_unread(archived: ArchivedStore) -> None:
    """A line nested too deep to decode is refused as in an export (exit 2), never read."""
    lines = archived.lines()
    deep = "[" * 5000 + "]" * 5000 + "\n"
    with pytest.raises(InvalidInputError) as caught:
        _verify(archived, [lines[0], deep, *lines[1:]])
    assert caught.value.code == "export-record-too-deep"
    with pytest.raises(InvalidInputError):
        import_store(archived.url, [lines[0], deep, *lines[1:]])
